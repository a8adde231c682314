// Generated models shared by the engine and service tests.
#pragma once
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "common/engine/engine.h"
#include "common/spec/loop.h"
#include "tests/support/test_util.h"

namespace specd::testing {

// A tiny target, a draft derived from it (1 of its layers), an unrelated
// model with the same vocabulary (a second draft), and one with another
// vocabulary; all in a temporary directory.
struct TestModels {
  TempDir dir;
  std::string target, draft, other, foreign;
  absl::Status Make();
};

// The models above, generated once per test binary on first use (removed at
// exit); a generation failure fails the calling test.
const TestModels& SharedTestModels();

// An in-process engine on the CPU backend (1 thread, default KV type):
// `max_seqs` sequences of up to 512 tokens, 64-token batches. Null (and a
// test failure) when it cannot be created.
std::unique_ptr<Engine> MakeTestEngine(const std::string& path, int max_seqs = 4);

// A greedy request for `max_tokens` tokens (eos ignored) with fixed k.
SpecRequest FixedRequest(int32_t seq, const std::vector<int32_t>& prompt, int max_tokens, int k);

}  // namespace specd::testing
