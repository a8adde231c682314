// One budget for one device, and weights shared between the workers, with
// the real processes on the CPU backend: both workers record what they hold
// in one device registry (--device-registry), the second to start plans
// against what the first holds and is refused when the pair would not fit;
// in the tests' file mode (SPECD_TEST_WEIGHT_SHARING=file: the protocol of
// the CUDA IPC path, the region being the target's file mapping) a derived
// draft maps all its tensors from the target, computes the same as with an
// own copy, unloads itself when that target process dies and maps the
// restarted one's, and a swap maps again.
#include <signal.h>
#include <stdlib.h>

#include <fstream>
#include <future>

#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

class DeviceMemoryTest : public ::testing::Test {
 protected:
  void TearDown() override {
    if (HasFailure() && svc_) std::cerr << svc_->Logs() << "\n";
    svc_.reset();
    unsetenv("SPECD_TEST_WEIGHT_SHARING");
  }

  void StartService(const std::vector<std::string>& worker_flags, bool file_sharing) {
    if (file_sharing) setenv("SPECD_TEST_WEIGHT_SHARING", "file", 1);  // inherited by the workers
    ServiceOptions o;
    o.target_model = SharedTestModels().target;
    o.draft_model = SharedTestModels().draft;
    o.max_seqs = 4;
    o.max_seq_len = 1024;
    o.worker_flags = {"--device-registry", dir_.File("registry")};
    o.worker_flags.insert(o.worker_flags.end(), worker_flags.begin(), worker_flags.end());
    svc_ = std::make_unique<Service>(dir_.path(), o);
    if (!file_sharing) {
      const absl::Status st = svc_->Start();
      ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
      return;
    }
    // A draft maps only weights already exported: the target first (as the
    // systemd units order them), then the draft and the coordinator.
    ASSERT_TRUE(svc_->StartTarget());
    ASSERT_TRUE(WaitLog("target.log", "msg=serving")) << svc_->Logs();
    ASSERT_TRUE(svc_->StartDraft() && svc_->StartCoordinator());
    auto c = client::Client::Connect(svc_->coordinator_address);
    ASSERT_TRUE(c.ok()) << c.status();
    svc_->client = std::move(*c);
    const absl::Status st = svc_->client->WaitServing(std::chrono::seconds(60), true);
    ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
  }

  bool WaitLog(const std::string& log, const std::string& what, std::chrono::seconds timeout = std::chrono::seconds(60)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      if (ReadFile(dir_.File(log)).find(what) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  api::Request Request(int max_tokens, float temperature = 0.0f) {
    api::Request p;
    p.prompt = "Once upon a time";
    p.max_tokens = max_tokens;
    p.ignore_eos = true;
    p.k = 4;  // fixed: these tests exercise the draft's path
    p.adaptive = false;
    p.sampling.temperature = temperature;
    p.sampling.seed = 11;
    p.deadline = api::After(std::chrono::seconds(120));
    return p;
  }
  // A request's tokens (from its events) and its summary.
  struct Result {
    std::vector<int32_t> tokens;
    int speculative_steps = 0;
  };
  absl::StatusOr<Result> Generate(const api::Request& req) {
    Result r;
    auto s = svc_->client->Generate(req, [&](const api::Event& ev) {
      r.tokens.insert(r.tokens.end(), ev.token_ids.begin(), ev.token_ids.end());
      return true;
    });
    if (!s.ok()) return s.status();
    r.speculative_steps = s->speculative_steps;
    return r;
  }

  std::vector<int32_t> Reference(int n) {
    auto t = svc_->client->Tokenize("Once upon a time", true, false);
    EXPECT_TRUE(t.ok());
    return ReferenceGreedy(SharedTestModels().target, t.ok() ? *t : std::vector<int32_t>{}, n);
  }

  // Waits until the coordinator sees a usable draft whose figures satisfy `pred`.
  bool WaitDraft(const std::function<bool(const client::WorkerStats&)>& pred,
                 std::chrono::seconds timeout = std::chrono::seconds(30)) {
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      auto s = svc_->client->GetStats();
      if (s.ok() && s->draft_ready && s->draft.reachable && pred(s->draft)) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return false;
  }

  static std::string ReadFile(const std::string& path) {
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  TempDir dir_;
  std::unique_ptr<Service> svc_;
};

TEST_F(DeviceMemoryTest, TheTwoWorkersShareOneBudgetAndTheSecondIsRefusedWhenThePairDoesNotFit) {
  StartService({"--vram-budget", "1GiB"}, /*file_sharing=*/false);
  const client::Stats s = svc_->Stats();
  ASSERT_TRUE(s.target.reachable && s.draft.reachable);
  // Whichever registered second planned against what the first holds.
  EXPECT_GT(s.target.memory_others + s.draft.memory_others, 0u);
  EXPECT_LE(s.target.memory_total + s.draft.memory_total, 1ull << 30);
  EXPECT_EQ(s.draft.memory_shared, 0u);
  EXPECT_EQ(s.draft.weight_sharing.rfind("own copy: cpu backend", 0), 0u) << s.draft.weight_sharing;
  const std::string report = client::FormatStats(s);
  EXPECT_NE(report.find("runtime"), std::string::npos) << report;
  EXPECT_NE(report.find("weights: own copy"), std::string::npos) << report;

  // A draft whose budget leaves too little next to the target is refused at start, saying why;
  // the service goes on target-only.
  const uint64_t tight = s.target.memory_total + s.draft.memory_total / 2;
  svc_->draft.Kill(SIGTERM);
  Process refused;
  std::vector<std::string> args = svc_->WorkerArgs("draft_worker/specd-draft-worker", SharedTestModels().draft,
                                                   svc_->draft_address);
  args.insert(args.end(), {"--vram-budget", std::to_string(tight)});
  ASSERT_TRUE(refused.Start(args, dir_.File("refused.log")));
  for (int i = 0; i < 300 && refused.Alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_FALSE(refused.Alive()) << "the draft should refuse to start";
  const std::string log = ReadFile(dir_.File("refused.log"));
  for (const char* want : {"fits the budget alone, but not next to what the other engines", "one budget for the device",
                           "refusing to start", " target "})
    EXPECT_NE(log.find(want), std::string::npos) << want << " missing from:\n" << log;
  auto r = Generate(Request(12));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens, Reference(12));
  EXPECT_EQ(r->speculative_steps, 0);
}

TEST_F(DeviceMemoryTest, ADerivedDraftMapsItsTargetsWeightsFollowsATargetRestartAndASwap) {
  StartService({"--vram-budget", "1GiB"}, /*file_sharing=*/true);
  client::Stats s = svc_->Stats();
  ASSERT_TRUE(s.draft.reachable);
  EXPECT_GT(s.draft.memory_shared, 0u);
  EXPECT_EQ(s.draft.memory_weights, 0u) << "every tensor of a derived draft is the target's";
  EXPECT_EQ(s.draft.memory_shared_from, s.target.pid);
  EXPECT_EQ(s.draft.weight_sharing.rfind("maps ", 0), 0u) << s.draft.weight_sharing;
  EXPECT_EQ(s.target.weight_sharing.rfind("exports ", 0), 0u) << s.target.weight_sharing;
  EXPECT_NE(client::FormatStats(s).find("shared, mapped from pid"), std::string::npos);

  auto greedy = Generate(Request(24));
  ASSERT_TRUE(greedy.ok()) << greedy.status();
  EXPECT_EQ(greedy->tokens, Reference(24));
  EXPECT_GT(greedy->speculative_steps, 0);
  auto sampled = Generate(Request(24, 0.8f));
  ASSERT_TRUE(sampled.ok()) << sampled.status();
  EXPECT_GT(sampled->speculative_steps, 0);

  // The target dies: the draft drops its mapping at once and says why; the
  // restarted target's weights are mapped again and speculation resumes.
  const int64_t old_pid = s.target.pid;
  svc_->target.Kill(SIGKILL);
  ASSERT_TRUE(WaitLog("draft.log", "draft model unloaded")) << "the draft did not unload";
  ASSERT_TRUE(svc_->StartTarget());
  ASSERT_TRUE(WaitDraft([&](const client::WorkerStats& d) {
    return d.memory_shared_from != 0 && d.memory_shared_from != old_pid;
  })) << "the draft did not map the restarted target's weights";
  s = svc_->Stats();
  EXPECT_EQ(s.draft.memory_shared_from, s.target.pid);
  EXPECT_EQ(s.draft.model_loads, 2);
  const std::string dlog = ReadFile(dir_.File("draft.log"));
  EXPECT_NE(dlog.find("has exited; unloading the draft model"), std::string::npos);
  EXPECT_NE(dlog.find("draft model loaded again"), std::string::npos);
  ASSERT_TRUE(svc_->client->WaitServing(std::chrono::seconds(20), true).ok());
  auto again = Generate(Request(24));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->tokens, Reference(24));
  EXPECT_GT(again->speculative_steps, 0);
  auto sampled_again = Generate(Request(24, 0.8f));
  ASSERT_TRUE(sampled_again.ok());
  EXPECT_EQ(sampled_again->tokens, sampled->tokens) << "the same seed, the same weights: the same tokens";

  // A swap under load: the new model maps again; requests finish, unchanged.
  auto running = std::async(std::launch::async, [&] { return Generate(Request(200)); });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto swapped = svc_->client->SwapDraft(SharedTestModels().draft);
  ASSERT_TRUE(swapped.ok()) << swapped.status();
  EXPECT_EQ(swapped->weight_sharing.rfind("maps ", 0), 0u) << swapped->weight_sharing;
  auto done = running.get();
  ASSERT_TRUE(done.ok()) << done.status();
  EXPECT_EQ(done->tokens, Reference(200));

  // Sharing off: the same sampled tokens from an own copy.
  svc_.reset();
  StartService({"--vram-budget", "1GiB", "--share-weights", "off"}, /*file_sharing=*/true);
  s = svc_->Stats();
  EXPECT_EQ(s.draft.memory_shared, 0u);
  EXPECT_GT(s.draft.memory_weights, 0u);
  auto own = Generate(Request(24, 0.8f));
  ASSERT_TRUE(own.ok());
  EXPECT_EQ(own->tokens, sampled->tokens);
}

}  // namespace
}  // namespace specd::testing
