// The `specd` operator CLI: one binary, one subcommand per file.
#pragma once
#include <string>
#include <vector>

namespace specd::cli {

// Each returns the process exit code. args excludes the program and subcommand.
int MakeModel(const std::vector<std::string>& args);
int Inspect(const std::vector<std::string>& args);
int Generate(const std::vector<std::string>& args);  // in-process, or --coordinator ADDR
int Chat(const std::vector<std::string>& args);
int Stats(const std::vector<std::string>& args);
int SwapDraft(const std::vector<std::string>& args);
int Bench(const std::vector<std::string>& args);
int BenchSpec(const std::vector<std::string>& args);  // target-only vs fixed k vs adaptive, in process
int Plan(const std::vector<std::string>& args);
int Loadgen(const std::vector<std::string>& args);  // needs the coordinator client
int Tune(const std::vector<std::string>& args);     // starts the services itself

}  // namespace specd::cli
