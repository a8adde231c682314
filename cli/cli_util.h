// Small helpers shared by the CLI subcommands.
#pragma once
#include <string>
#include <vector>

#include "common/util/config.h"
#include "common/util/status.h"
#if defined(SPECD_HAVE_CLIENT)
#include "coordinator/client/client.h"
#endif

namespace specd::cli {

// Parses flags; on --help prints usage and returns 0, on error prints it and
// returns 2; returns -1 to continue.
int ParseOrExit(Config& c, const std::vector<std::string>& args);
int Fail(const absl::Status& st);
int Fail(const std::string& msg);

// --api-key / --api-key-file / --tls-ca: how to reach a secured coordinator.
void AddConnectFlags(Config* c);
#if defined(SPECD_HAVE_CLIENT)
// Connects to --coordinator with the flags above.
absl::StatusOr<std::unique_ptr<client::Client>> ConnectFromFlags(const Config& c);
#endif

}  // namespace specd::cli
