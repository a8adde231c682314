// Subcommands that talk to a running coordinator. Wired to the gRPC client
// library when it is built (coordinator/client).
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"

namespace specd::cli {

#if !defined(SPECD_HAVE_CLIENT)
int GenerateRemote(const Config&) { return Fail("this build has no coordinator client"); }
int Chat(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
int Stats(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
int SwapDraft(const std::vector<std::string>&) { return Fail("this build has no coordinator client"); }
#endif

}  // namespace specd::cli
