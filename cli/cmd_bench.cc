// specd bench: speed of prefill, decode (batch 1..16) and verify (k = 1..8).
#include "cli/cli_util.h"
#include "cli/commands.h"

namespace specd::cli {

int Bench(const std::vector<std::string>& args) { return Fail("specd bench: not built yet"); }

}  // namespace specd::cli
