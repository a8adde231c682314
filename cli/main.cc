// specd: the operator CLI (make-model, inspect, generate, stats, swap-draft, bench, loadgen, tune, ...).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "common/util/log.h"

namespace {
struct Cmd {
  const char* name;
  int (*fn)(const std::vector<std::string>&);
  const char* help;
};
const Cmd kCmds[] = {
    {"make-model", specd::cli::MakeModel, "write a generated target/draft GGUF model (or pair)"},
    {"inspect", specd::cli::Inspect, "show a GGUF file: metadata, tensors, parameters, memory needs"},
    {"generate", specd::cli::Generate, "generate text (in-process, or through a coordinator with --coordinator)"},
    {"chat", specd::cli::Chat, "one chat turn through a coordinator (model's chat template)"},
    {"stats", specd::cli::Stats, "show a coordinator's statistics"},
    {"swap-draft", specd::cli::SwapDraft, "replace the draft model of a running service"},
    {"bench", specd::cli::Bench, "measure prefill/decode/verify speed of a model or a named shape"},
    {"bench-spec", specd::cli::BenchSpec, "compare target-only, fixed k and adaptive speculation on a workload"},
    {"plan", specd::cli::Plan, "memory ledger of a target + draft deployment against a budget"},
    {"loadgen", specd::cli::Loadgen, "load a coordinator with concurrent requests; throughput and latency percentiles"},
    {"tune", specd::cli::Tune, "sweep service settings for a workload; write the best as config files"},
};

void Usage(FILE* f) {
  std::fprintf(f, "usage: specd <command> [--flags]   (specd <command> --help for its flags)\n\ncommands:\n");
  for (const auto& c : kCmds) std::fprintf(f, "  %-12s %s\n", c.name, c.help);
}
}  // namespace

int main(int argc, char** argv) {
  specd::SetLogComponent("specd");
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    Usage(argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  std::vector<std::string> args(argv + 2, argv + argc);
  for (const auto& c : kCmds) {
    if (std::strcmp(argv[1], c.name) == 0) return c.fn(args);
  }
  std::fprintf(stderr, "specd: unknown command '%s'\n", argv[1]);
  Usage(stderr);
  return 2;
}
