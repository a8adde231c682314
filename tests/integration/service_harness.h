// Runs the three real service processes on loopback for integration tests:
// free ports (or unix sockets), logs in the test's temp dir, bounded waits,
// and every process killed when the harness goes (also if the test binary
// dies: children get SIGKILL with their parent).
#pragma once
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/engine.h"
#include "common/modelgen/modelgen.h"
#include "common/sampler/sampler.h"
#include "common/util/net.h"
#include "common/util/subprocess.h"
#include "coordinator/client/client.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"
#include "tests/support/test_util.h"

namespace specd::testing {

// A service process (common/util/subprocess.h) with the tests' defaults:
// Kill() sends SIGKILL unless told otherwise.
class Process : public Subprocess {
 public:
  ~Process() { Kill(); }
  bool Start(const std::vector<std::string>& argv, const std::string& log) { return Subprocess::Start(argv, log).ok(); }
  // Sends `sig` and reaps the process (bounded: SIGKILL after 5 s).
  void Kill(int sig = SIGKILL) { Stop(sig, std::chrono::seconds(5)); }
};

struct ServiceOptions {
  std::string target_model;
  std::string draft_model;  // empty: no draft
  int max_seqs = 8;
  int max_seq_len = 1024;
  bool unix_sockets = false;
  std::vector<std::string> coordinator_flags;
  std::vector<std::string> worker_flags;  // both workers (e.g. --prefill-chunk)
  client::ConnectOptions connect;         // how `client` reaches the coordinator
};

class Service {
 public:
  Service(const std::string& dir, ServiceOptions o) : dir_(dir), o_(std::move(o)) { PickAddresses(); }
  // SIGTERM: the draft unlinks its shared-memory buffer on the way out.
  ~Service() {
    coordinator.Kill(SIGTERM);
    draft.Kill(SIGTERM);
    target.Kill(SIGTERM);
  }

  static std::string Bin(const std::string& rel) { return BinaryPath(rel); }

  std::vector<std::string> WorkerArgs(const std::string& bin, const std::string& model, const std::string& listen) {
    std::vector<std::string> a = {Bin(bin), "--model", model, "--listen", listen, "--threads", "1", "--max-seqs",
                                  std::to_string(o_.max_seqs), "--max-seq-len", std::to_string(o_.max_seq_len),
                                  "--kv-type", "f32"};
    a.insert(a.end(), o_.worker_flags.begin(), o_.worker_flags.end());
    return a;
  }
  bool StartTarget() {
    return target.Start(WorkerArgs("target_worker/specd-target-worker", o_.target_model, target_address),
                        dir_ + "/target.log");
  }
  bool StartDraft(const std::string& model = "") {
    return draft.Start(WorkerArgs("draft_worker/specd-draft-worker", model.empty() ? o_.draft_model : model,
                                  draft_address),
                       dir_ + "/draft.log");
  }
  bool StartCoordinator() {
    std::vector<std::string> a = {Bin("coordinator/specd-coordinator"), "--listen", coordinator_address, "--target",
                                  target_address, "--draft", draft_address, "--probe-interval-ms", "100",
                                  "--draft-timeout-ms", "20000", "--target-wait-ms", "20000", "--log-level", "debug"};
    a.insert(a.end(), o_.coordinator_flags.begin(), o_.coordinator_flags.end());
    return coordinator.Start(a, dir_ + "/coordinator.log");
  }

  // Starts all three and waits until requests are served (with the draft
  // when there is one). A port taken between FreeLoopbackPort and the bind (tests
  // run in parallel) makes a process exit: then it tries other ports.
  absl::Status Start() {
    for (const char* b : {"target_worker/specd-target-worker", "draft_worker/specd-draft-worker",
                          "coordinator/specd-coordinator"}) {
      if (access(Bin(b).c_str(), X_OK) != 0) return absl::NotFoundError("not built: " + Bin(b));
    }
    absl::Status st;
    for (int attempt = 0; attempt < 3; ++attempt) {
      if (attempt > 0) {
        coordinator.Kill();
        draft.Kill();
        target.Kill();
        PickAddresses();
      }
      if (!StartTarget() || (!o_.draft_model.empty() && !StartDraft()) || !StartCoordinator())
        return absl::InternalError("fork failed");
      auto c = client::Client::Connect(coordinator_address, o_.connect);
      if (!c.ok()) return c.status();
      client = std::move(*c);
      st = client->WaitServing(std::chrono::seconds(60), !o_.draft_model.empty());
      if (st.ok()) return st;
      if (target.Alive() && coordinator.Alive() && (o_.draft_model.empty() || draft.Alive())) return st;
    }
    return st;
  }

  std::string Logs() const {
    return "--- target.log\n" + target.LogTail() + "\n--- draft.log\n" + draft.LogTail() + "\n--- coordinator.log\n" +
           coordinator.LogTail();
  }

  // Figures of one worker, from the coordinator's Stats.
  client::Stats Stats() {
    auto s = client->GetStats();
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? *s : client::Stats{};
  }

  // Polls until both workers hold no sequence (bounded).
  bool WaitNoSequences(std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto s = client->GetStats();
      if (s.ok() && s->target.reachable && s->target.active_sequences == 0 && s->target.kv_used_blocks == 0 &&
          (o_.draft_model.empty() || !s->draft.reachable ||
           (s->draft.active_sequences == 0 && s->draft.kv_used_blocks == 0)))
        return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string target_address, draft_address, coordinator_address;
  Process target, draft, coordinator;
  std::unique_ptr<client::Client> client;

 private:
  void PickAddresses() {
    auto addr = [&](const char* name) {
      return o_.unix_sockets ? "unix:" + dir_ + "/" + name + ".sock" : "127.0.0.1:" + std::to_string(FreeLoopbackPort());
    };
    target_address = addr("target");
    draft_address = o_.draft_model.empty() ? "" : addr("draft");
    coordinator_address = addr("coordinator");
  }

  std::string dir_;
  ServiceOptions o_;
};

// Greedy target-only decoding on an in-process Engine: the reference output.
inline std::vector<int32_t> ReferenceGreedy(const std::string& model, const std::vector<int32_t>& prompt, int n) {
  EngineOptions o;
  o.model_path = model;
  o.backend.threads = 1;
  o.max_seqs = 1;
  o.max_seq_len = 4096;
  o.kv_type = GgmlType::F32;
  auto e = Engine::Create(o);
  EXPECT_TRUE(e.ok()) << e.status();
  if (!e.ok()) return {};
  EXPECT_TRUE((*e)->NewSequence(1).ok());
  std::vector<int32_t> out;
  std::vector<float> logits;
  Engine::Feed f{1, prompt, 1};
  for (int i = 0; i < n; ++i) {
    logits.clear();
    EXPECT_TRUE((*e)->Run({f}, &logits).ok());
    out.push_back(Argmax(logits.data(), (*e)->vocab_size()));
    f.tokens = {out.back()};
  }
  return out;
}

}  // namespace specd::testing
