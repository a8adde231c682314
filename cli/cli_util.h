// Small helpers shared by the CLI subcommands.
#pragma once
#include <string>
#include <vector>

#include "common/util/config.h"
#include "common/util/status.h"

namespace specd::cli {

// Parses flags; on --help prints usage and returns 0, on error prints it and
// returns 2; returns -1 to continue.
int ParseOrExit(Config& c, const std::vector<std::string>& args);
int Fail(const absl::Status& st);
int Fail(const std::string& msg);

}  // namespace specd::cli
