// Soak: the three real processes on loopback (CPU backend, generated model
// pair) under many concurrent requests from the load generator — mixed
// prompt lengths, greedy, stop strings, client cancellations and short
// deadlines. Checks that no request is lost, every completed output equals
// its target-only greedy reference (an early end: a prefix of it), the
// service's counters add up, and both workers release all KV at the end.
// Also runs `specd tune --quick` and starts the services from the config
// files it writes. Bounded: a thousand requests on tiny models (about 20 s
// on 2 cores), every call with its own timeout.
#include "cli/loadgen_lib.h"

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/match.h"
#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

using loadgen::LoadReport;
using loadgen::LoadSpec;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Soak, ManyMixedRequestsNoneLostAllLossless) {
  TestModels models;
  ASSERT_TRUE(models.Make().ok());
  TempDir dir;
  ServiceOptions o;
  o.target_model = models.target;
  o.draft_model = models.draft;
  o.max_seqs = 8;  // phase 1: = concurrency (admission never waits); phase 2: twice as many requests in flight
  o.max_seq_len = 512;
  Service svc(dir.path(), o);
  const absl::Status st = svc.Start();
  ASSERT_TRUE(st.ok()) << st << "\n" << svc.Logs();
  auto before = svc.client->GetStats();
  ASSERT_TRUE(before.ok()) << before.status();

  LoadSpec s;
  s.coordinator = svc.coordinator_address;
  s.concurrency = 8;
  s.requests = 1000;
  s.duration_s = 150;  // a bound only: the request count ends it first (in about 20 s here)
  s.prompt_tokens = {2, 200};
  s.max_tokens = {1, 96};
  s.distinct_prompts = 24;
  s.seed = 7;
  // Fixed k from 1 to 8, adaptive, the coordinator's default and target-only
  // requests share the batches.
  ASSERT_TRUE(loadgen::ParseSpecMix("k1,k3,k5,k8,a8,default,off", &s).ok());
  s.stop = {"th", "ing"};  // common enough in the generated vocabulary that many stop-carrying requests stop
  s.stop_fraction = 0.3;
  s.cancel_fraction = 0.08;
  s.cancel_after_chunks = {1, 3};
  s.deadline_fraction = 0.06;
  s.deadline_ms = {5, 150};  // some end before their first token, some mid-stream, some complete
  s.request_timeout_ms = 60000;
  s.warmup_requests = 4;
  s.verify_greedy = true;
  s.keep_records = true;
  auto r = loadgen::RunLoad(s);
  ASSERT_TRUE(r.ok()) << r.status() << "\n" << svc.Logs();
  const LoadReport& rep = *r;
  std::cerr << loadgen::FormatReport(rep);

  // No request lost: every one came back with a final status.
  EXPECT_EQ(rep.sent, s.requests);
  EXPECT_EQ(rep.finished, rep.sent);
  EXPECT_EQ(rep.lost, 0);
  ASSERT_EQ(static_cast<int64_t>(rep.records.size()), rep.sent);
  EXPECT_EQ(rep.failed, 0) << (rep.failure_examples.empty() ? "" : rep.failure_examples[0]);
  EXPECT_EQ(rep.reference_failures, 0);
  int64_t with_status = 0;
  for (const auto& [code, n] : rep.by_code) with_status += n;
  EXPECT_EQ(with_status, rep.sent);

  // Every output checked against its reference, and equal to it.
  EXPECT_EQ(rep.verify_mismatches, 0) << (rep.mismatch_examples.empty() ? "" : rep.mismatch_examples[0]);
  int complete = 0, early = 0, planned_cancel = 0, planned_deadline = 0, deadline_hit = 0, deadline_no_token = 0;
  for (const auto& rec : rep.records) {
    planned_cancel += rec.cancel_planned;
    planned_deadline += rec.deadline_planned;
    if (rec.deadline_planned && (rec.code == "DEADLINE_EXCEEDED" || rec.finish_reason == "deadline")) {
      ++deadline_hit;
      deadline_no_token += rec.output_tokens == 0;
    }
    EXPECT_TRUE(rec.expected) << "request " << rec.index << ": " << rec.code << " " << rec.error;
    if (rec.code == "OK") {
      EXPECT_TRUE(rec.finish_reason == "eos" || rec.finish_reason == "length" || rec.finish_reason == "stop" ||
                  (rec.deadline_planned && rec.finish_reason == "deadline"))
          << "request " << rec.index << ": finish " << rec.finish_reason;
    }
    if (rec.code == "OK" && rec.finish_reason != "deadline") ++complete;
    else ++early;
    EXPECT_EQ(rec.verify, 1) << "request " << rec.index << " (" << rec.code << ", " << rec.finish_reason
                             << ") was not checked or differs";
  }
  EXPECT_EQ(rep.verify_checked, rep.sent);
  // The mix really happened.
  EXPECT_GT(rep.by_finish.count("stop") ? rep.by_finish.at("stop") : 0, 0);
  EXPECT_GT(planned_cancel, 0);
  EXPECT_GT(rep.cancelled_planned, 0);
  EXPECT_GT(planned_deadline, 0);
  EXPECT_GT(deadline_hit, 0);
  EXPECT_GT(complete, s.requests / 2);
  EXPECT_GT(rep.spec_steps, rep.steps / 4);  // speculation really ran
  EXPECT_GT(rep.accepted, 0);
  ASSERT_GE(rep.k_histogram.size(), 9u);  // proposals of 8 drafts were verified
  EXPECT_GT(rep.k_histogram[8], 0);

  // The service's references are the engine's: spot-check a few templates
  // against in-process greedy target-only decoding.
  int checked = 0;
  for (const auto& t : rep.templates) {
    if (checked >= 3 || !t.reference_ok || !t.stop.empty()) continue;
    const std::vector<int32_t> ref = ReferenceGreedy(models.target, t.prompt, t.max_tokens);
    ASSERT_LE(t.reference.size(), ref.size());
    EXPECT_TRUE(std::equal(t.reference.begin(), t.reference.end(), ref.begin()))
        << "service target-only output differs from the engine's";
    ++checked;
  }
  EXPECT_EQ(checked, 3);

  // The counters add up: every Generate call was counted once (one whose
  // deadline passed before its first step may end before the coordinator
  // counts it, or be counted as failed), nothing is still running, and all
  // KV is released on both workers.
  EXPECT_TRUE(svc.WaitNoSequences(std::chrono::seconds(15))) << svc.Logs();
  auto after = svc.client->GetStats();
  ASSERT_TRUE(after.ok()) << after.status();
  const int64_t counted = after->requests_total - before->requests_total;
  EXPECT_LE(counted, rep.rpcs);
  EXPECT_GE(counted, rep.rpcs - deadline_no_token);
  EXPECT_LE(after->requests_failed - before->requests_failed, deadline_no_token);
  EXPECT_EQ(after->requests_active, 0);
  EXPECT_GE(after->proposed - before->proposed, rep.proposed);  // the server may run a step past a cancel
  EXPECT_EQ(after->target.active_sequences, 0);
  EXPECT_EQ(after->target.kv_used_blocks, 0);
  EXPECT_EQ(after->draft.active_sequences, 0);
  EXPECT_EQ(after->draft.kv_used_blocks, 0);
  EXPECT_TRUE(svc.target.Alive() && svc.draft.Alive() && svc.coordinator.Alive());

  // Phase 2: more requests in flight than sequence slots (they queue for
  // admission), cancellations, no deadlines — so the counters add up exactly.
  LoadSpec q = s;
  q.concurrency = 16;
  q.requests = 400;
  q.seed = 8;
  q.deadline_fraction = 0;
  q.cancel_fraction = 0.05;
  q.warmup_requests = 0;
  auto r2 = loadgen::RunLoad(q);
  ASSERT_TRUE(r2.ok()) << r2.status() << "\n" << svc.Logs();
  std::cerr << loadgen::FormatReport(*r2);
  EXPECT_EQ(r2->sent, q.requests);
  EXPECT_EQ(r2->lost, 0);
  EXPECT_EQ(r2->failed, 0) << (r2->failure_examples.empty() ? "" : r2->failure_examples[0]);
  EXPECT_EQ(r2->ok + r2->cancelled_planned, q.requests);
  EXPECT_EQ(r2->verify_checked, q.requests);
  EXPECT_EQ(r2->verify_mismatches, 0) << (r2->mismatch_examples.empty() ? "" : r2->mismatch_examples[0]);
  EXPECT_TRUE(svc.WaitNoSequences(std::chrono::seconds(15))) << svc.Logs();
  auto end = svc.client->GetStats();
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->requests_total - after->requests_total, r2->rpcs);
  EXPECT_EQ(end->requests_failed - after->requests_failed, 0);
  EXPECT_EQ(end->requests_active, 0);
  EXPECT_EQ(end->target.active_sequences, 0);
  EXPECT_EQ(end->target.kv_used_blocks, 0);
  EXPECT_EQ(end->draft.active_sequences, 0);
  EXPECT_EQ(end->draft.kv_used_blocks, 0);
  if (HasFailure()) std::cerr << svc.Logs() << "\n";
}

// A model pair with head dimension 32, so that q8_0 KV is possible.
struct TuneModels {
  TempDir dir;
  std::string target, draft;
  absl::Status Make() {
    GenOptions g;
    SPECD_ASSIGN_OR_RETURN(g.shape, PresetShape("tiny"));
    g.shape.n_heads = 2;
    g.shape.n_kv_heads = 2;  // head_dim 64 / 2 = 32
    g.seed = 3;
    g.name = "tune-target";
    target = dir.File("target.gguf");
    SPECD_RETURN_IF_ERROR(GenerateModel(g, target));
    DeriveOptions d;
    d.layers = 1;
    d.name = "tune-draft";
    draft = dir.File("draft.gguf");
    return DeriveDraft(target, d, draft);
  }
};

std::string SpecdCmd() { return ShellQuote(BinaryPath("cli/specd")); }

TEST(Tune, QuickWritesConfigsTheServicesAccept) {
  if (access(BinaryPath("cli/specd").c_str(), X_OK) != 0) GTEST_FAIL() << "not built: " << BinaryPath("cli/specd");
  TuneModels m;
  ASSERT_TRUE(m.Make().ok());
  TempDir out;
  const std::string cmd = "timeout 240 " + SpecdCmd() + " tune --quick --threads 1 --vram-budget 1G --target " +
                          ShellQuote(m.target) + " --draft " + ShellQuote(m.draft) + " --out-dir " +
                          ShellQuote(out.path()) + " 2>&1";
  std::string text;
  const int rc = RunCommand(cmd, &text);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_TRUE(absl::StrContains(text, "config check: the services started from the written files")) << text;
  for (const char* f : {"target.conf", "draft.conf", "coordinator.conf", "trials.md", "trials.json"})
    EXPECT_FALSE(Slurp(out.File(f)).empty()) << f;
  // Three trials: the baseline and k=4 for each KV type; all ran.
  const std::string json = Slurp(out.File("trials.json"));
  int ok = 0;
  for (size_t p = 0; (p = json.find("\"status\": \"ok\"", p)) != std::string::npos; ++p) ++ok;
  EXPECT_EQ(ok, 3) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"best\": true")) << json;
  const std::string md = Slurp(out.File("trials.md"));
  EXPECT_TRUE(absl::StrContains(md, "**best**")) << md;
  EXPECT_TRUE(absl::StrContains(md, "| q8_0 |")) << md;

  // The files start the services exactly as written (flags add only the
  // loopback addresses of this test; unknown keys would be refused).
  const std::string tconf = Slurp(out.File("target.conf"));
  EXPECT_TRUE(absl::StrContains(tconf, "kv-type = ")) << tconf;
  EXPECT_TRUE(absl::StrContains(tconf, "vram-budget = ")) << tconf;
  EXPECT_TRUE(absl::StrContains(Slurp(out.File("coordinator.conf")), "speculation = ")) << tconf;
  TempDir logs;
  const std::string ta = "127.0.0.1:" + std::to_string(FreeLoopbackPort()), da = "127.0.0.1:" + std::to_string(FreeLoopbackPort()),
                    ca = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
  Process target, draft, coordinator;
  ASSERT_TRUE(target.Start({BinaryPath("target_worker/specd-target-worker"), "--config", out.File("target.conf"),
                            "--listen", ta}, logs.File("target.log")));
  ASSERT_TRUE(draft.Start({BinaryPath("draft_worker/specd-draft-worker"), "--config", out.File("draft.conf"),
                           "--listen", da}, logs.File("draft.log")));
  ASSERT_TRUE(coordinator.Start({BinaryPath("coordinator/specd-coordinator"), "--config", out.File("coordinator.conf"),
                                 "--listen", ca, "--target", ta, "--draft", da, "--probe-interval-ms", "100"},
                                logs.File("coordinator.log")));
  auto cl = client::Client::Connect(ca);
  ASSERT_TRUE(cl.ok());
  const absl::Status serving = (*cl)->WaitServing(std::chrono::seconds(60), true);
  ASSERT_TRUE(serving.ok()) << serving << "\n" << target.LogTail() << draft.LogTail() << coordinator.LogTail();
  api::Request p;
  p.prompt = "once upon a time";
  p.max_tokens = 8;
  auto g = (*cl)->Generate(p);
  EXPECT_TRUE(g.ok()) << g.status();
  for (Process* pr : {&coordinator, &draft, &target}) pr->Kill(SIGTERM);
}

TEST(Tune, TrialsThatDoNotFitAreRecorded) {
  if (access(BinaryPath("cli/specd").c_str(), X_OK) != 0) GTEST_FAIL() << "not built: " << BinaryPath("cli/specd");
  TuneModels m;
  ASSERT_TRUE(m.Make().ok());
  TempDir out;
  // 64 KiB holds neither model: the workers refuse to start, tune records it
  // and, with nothing that ran, writes no config (exit 1).
  const std::string cmd = "timeout 120 " + SpecdCmd() + " tune --quick --threads 1 --vram-budget 64K --kv-types f16 " +
                          "--target " + ShellQuote(m.target) + " --draft " + ShellQuote(m.draft) + " --out-dir " +
                          ShellQuote(out.path()) + " 2>&1";
  std::string text;
  const int rc = RunCommand(cmd, &text);
  EXPECT_EQ(rc, 1) << text;
  const std::string json = Slurp(out.File("trials.json"));
  EXPECT_TRUE(absl::StrContains(json, "\"status\": \"does not fit\"")) << json << text;
  EXPECT_FALSE(absl::StrContains(json, "\"status\": \"ok\"")) << json;
  EXPECT_TRUE(Slurp(out.File("target.conf")).empty());
}

}  // namespace
}  // namespace specd::testing
