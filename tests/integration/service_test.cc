// The three real processes (coordinator, draft worker, target worker) on
// loopback with generated models: streaming, lossless output, figures,
// bad requests, cancellation, deadlines, batching, admin settings.
#include <atomic>
#include <thread>

#include "common/engine/spec_local.h"
#include "common/spec/loop.h"
#include "proto/rpc/security.h"
#include "proto/specd.grpc.pb.h"
#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

const TestModels* g_models = nullptr;
Service* g_service = nullptr;
TempDir* g_dir = nullptr;

class ServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_models = &SharedTestModels();
    g_dir = new TempDir();
    ServiceOptions o;
    o.target_model = g_models->target;
    o.draft_model = g_models->draft;
    g_service = new Service(g_dir->path(), o);
    const absl::Status st = g_service->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << g_service->Logs();
  }
  static void TearDownTestSuite() {
    delete g_service;
    delete g_dir;
  }
  void SetUp() override {
    if (!g_service || !g_service->client) GTEST_SKIP() << "service did not start";
  }
  void TearDown() override {
    if (HasFailure() && g_service) std::cerr << g_service->Logs() << "\n";
  }
  client::Client& c() { return *g_service->client; }

  std::vector<int32_t> Tokens(const std::string& text) {
    auto t = c().Tokenize(text, true, false);
    EXPECT_TRUE(t.ok()) << t.status();
    return t.ok() ? *t : std::vector<int32_t>{};
  }
};

// Straight to a worker (the target's or the draft's stub): a call's deadline, Open and Release.
void Within60s(grpc::ClientContext* ctx) {
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
}

template <typename Stub>
void OpenOn(Stub& stub, int32_t seq, const std::vector<int32_t>& tokens) {
  v1::OpenRequest req;
  req.set_seq(seq);
  req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  v1::OpenResponse resp;
  grpc::ClientContext ctx;
  Within60s(&ctx);
  ASSERT_TRUE(stub.Open(&ctx, req, &resp).ok());
}

template <typename Stub>
void ReleaseOn(Stub& stub, int32_t seq) {
  v1::ReleaseRequest req;
  req.set_seq(seq);
  v1::ReleaseResponse resp;
  grpc::ClientContext ctx;
  Within60s(&ctx);
  EXPECT_TRUE(stub.Release(&ctx, req, &resp).ok());
}

const char* kPrompts[] = {"Hello world", "def main():\n    return 0", "The quick brown fox", "a",
                          "import numpy as np", "Once upon a time"};

TEST_F(ServiceTest, HealthReportsBothWorkers) {
  auto h = c().GetHealth();
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_TRUE(h->serving);
  EXPECT_TRUE(h->target_ready);
  EXPECT_TRUE(h->draft_ready);
  EXPECT_EQ(h->target_model, "test-target");
  EXPECT_EQ(h->draft_model, "test-draft");
  EXPECT_EQ(h->k, 4);
}

TEST_F(ServiceTest, StreamsGreedyOutputEqualToTargetOnly) {
  const int n = 48;
  for (const char* text : kPrompts) {
    const std::vector<int32_t> prompt = Tokens(text);
    const std::vector<int32_t> ref = ReferenceGreedy(g_models->target, prompt, n);
    for (std::optional<int> k : {std::optional<int>(), std::optional<int>(1), std::optional<int>(8)}) {
      api::Request p;
      p.prompt = text;
      p.max_tokens = n;
      p.ignore_eos = true;
      p.k = k;
      int chunks = 0;
      std::string streamed;
      auto s = c().Generate(p, [&](const api::Event& ch) {
        ++chunks;
        streamed += ch.text;
        return true;
      });
      ASSERT_TRUE(s.ok()) << s.status();
      EXPECT_EQ(s->tokens, ref) << "prompt '" << text << "' k=" << (k ? *k : 4);
      EXPECT_EQ(s->finish_reason, FinishReason::kLength);
      EXPECT_EQ(s->completion_tokens, n);
      EXPECT_EQ(s->prompt_tokens, static_cast<int>(prompt.size()));
      EXPECT_GT(chunks, 1) << "streamed in steps";
      EXPECT_EQ(streamed, s->text);
      // Unset k: the adaptive default, which may decline the draft when it does not pay.
      if (k) {
        EXPECT_GT(s->speculative_steps, 0);
        // Pipelined verifies (--pipeline-verify, the default): every
        // speculative step after the first took its proposal straight from
        // the exchange buffer.
        EXPECT_GE(s->pipelined_steps, s->speculative_steps - 1) << "k=" << *k;
        EXPECT_LE(s->pipelined_steps, s->steps);
      }
      EXPECT_EQ(s->adaptive, !k.has_value());
      int64_t steps = 0;
      for (int64_t c : s->k_histogram) steps += c;
      EXPECT_EQ(steps, s->steps);
      EXPECT_EQ(s->draft_failures, 0);
    }
    api::Request off;
    off.prompt = text;
    off.max_tokens = n;
    off.ignore_eos = true;
    off.disable_speculation = true;
    auto s = c().Generate(off);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->tokens, ref);
    EXPECT_EQ(s->speculative_steps, 0);
    EXPECT_EQ(s->steps, n);
  }
}

TEST_F(ServiceTest, SampledOutputEqualsTheInProcessLoop) {
  // The coordinator runs the same loop as in-process clients, and random
  // numbers depend only on seed and position: with the same seed and k the
  // sampled output is identical (its distribution is tested in spec_loop_test).
  EngineOptions o;
  o.backend.threads = 1;
  o.max_seqs = 2;
  o.max_seq_len = 1024;
  o.kv_type = GgmlType::F32;
  o.model_path = g_models->target;
  auto te = Engine::Create(o);
  o.model_path = g_models->draft;
  auto de = Engine::Create(o);
  ASSERT_TRUE(te.ok() && de.ok());
  LocalTarget target(te->get());
  auto draft = LocalDraft::Create(de->get(), 8);
  ASSERT_TRUE(draft.ok());
  ASSERT_TRUE(target.Attach((*draft)->exchange().kind(), (*draft)->exchange().name()).ok());
  for (uint64_t seed : {1u, 2u, 3u, 42u}) {
    SamplingParams sp;
    sp.temperature = 0.9f;
    sp.top_k = 40;
    sp.top_p = 0.95f;
    sp.seed = seed;
    SpecRequest req;
    req.seq = 1;
    req.prompt = Tokens("Once upon a time");
    req.sampling = sp;
    req.max_tokens = 40;
    req.ignore_eos = true;
    req.k = 3;
    const SpecResult local = RunSpeculative(req, (*te)->tokenizer(), target, draft->get(), {});
    ASSERT_TRUE(local.status.ok());
    api::Request p;
    p.prompt = "Once upon a time";
    p.sampling = sp;
    p.max_tokens = 40;
    p.ignore_eos = true;
    p.k = 3;
    auto s = c().Generate(p);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->tokens, local.tokens) << "seed " << seed;
    EXPECT_EQ(s->accepted, local.stats.accepted);
  }
}

// The target's side of a pipelined Verify, talked to directly: a wait for a
// proposal that never comes ends at await_ms, or at once when abandoned
// (before or after the Verify arrives), and leaves the sequence unchanged.
TEST_F(ServiceTest, PipelinedVerifyWaitEndsWhenAbandonedOrOutOfTime) {
  auto ch = rpc::MakeChannel(g_service->target_address, {});
  ASSERT_TRUE(ch.ok()) << ch.status();
  auto stub = v1::TargetWorker::NewStub(*ch);
  constexpr int32_t kSeq = 900;  // a sequence no draft proposes for
  const std::vector<int32_t> prompt = Tokens("The quick brown fox");
  OpenOn(*stub, kSeq, prompt);
  if (HasFatalFailure()) return;
  auto await_verify = [&](uint64_t after, uint32_t await_ms) {
    v1::VerifyRequest req;
    req.set_seq(kSeq);
    req.set_slot(0);
    req.set_await_proposal(true);
    req.set_after_generation(after);
    req.set_await_k(4);
    req.set_await_ms(await_ms);
    v1::VerifyResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    return stub->Verify(&ctx, req, &resp);
  };
  auto abandon = [&](uint64_t after) {
    v1::AbandonVerifyRequest req;
    req.set_seq(kSeq);
    req.set_after_generation(after);
    v1::AbandonVerifyResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    EXPECT_TRUE(stub->AbandonVerify(&ctx, req, &resp).ok());
    return resp.abandoned();
  };
  auto since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  // Nothing published for the sequence: ABORTED after await_ms.
  auto t0 = std::chrono::steady_clock::now();
  grpc::Status st = await_verify(1, 200);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED) << st.error_message();
  EXPECT_NE(st.error_message().find("no proposal"), std::string::npos) << st.error_message();
  EXPECT_GE(since(t0), 0.15);
  // Abandoned while it waits: ends long before its 20 s.
  t0 = std::chrono::steady_clock::now();
  std::thread waiter([&] { st = await_verify(7, 20000); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(abandon(7));
  waiter.join();
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED) << st.error_message();
  EXPECT_LT(since(t0), 10.0);
  // Abandoned before it arrives: ends at once.
  EXPECT_TRUE(abandon(9));
  t0 = std::chrono::steady_clock::now();
  st = await_verify(9, 20000);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::ABORTED) << st.error_message();
  EXPECT_LT(since(t0), 10.0);
  // The sequence is as opened: a target-only step appends one token to the prompt.
  {
    v1::VerifyRequest req;
    req.set_seq(kSeq);
    req.set_slot(-1);
    v1::VerifyResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    ASSERT_TRUE(stub->Verify(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.length(), static_cast<int64_t>(prompt.size()) + 1);
    EXPECT_EQ(resp.appended_size(), 1);
    // Its forward, as the coordinator's cost cells read it: this sequence alone, one token.
    EXPECT_EQ(resp.batch_seqs(), 1);
    EXPECT_EQ(resp.batch_tokens(), 1);
    EXPECT_FALSE(resp.cold_forward());  // the CPU backend has no graphs to prepare
  }
  ReleaseOn(*stub, kSeq);
}

// The draft worker reports each proposal's batch (the coordinator's draft
// cost cells read it): this sequence alone, its own forwards.
TEST_F(ServiceTest, ProposalReportsItsBatch) {
  auto ch = rpc::MakeChannel(g_service->draft_address, {});
  ASSERT_TRUE(ch.ok()) << ch.status();
  auto stub = v1::DraftWorker::NewStub(*ch);
  constexpr int32_t kSeq = 901;
  const std::vector<int32_t> prompt = Tokens("Once upon a time");
  OpenOn(*stub, kSeq, prompt);
  if (HasFatalFailure()) return;
  {
    v1::ProposeRequest req;
    req.set_seq(kSeq);
    req.set_base_len(static_cast<int64_t>(prompt.size()));
    req.set_k(3);
    v1::ProposeResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    ASSERT_TRUE(stub->Propose(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.tokens_size(), 3);
    EXPECT_EQ(resp.forwards(), 3);
    EXPECT_EQ(resp.batch_seqs(), 1);
    EXPECT_EQ(resp.batch_forwards(), 3);
    EXPECT_FALSE(resp.cold_forward());
  }
  ReleaseOn(*stub, kSeq);
}

// A cohort's calls in one message: each answered as its own call would be
// (an unknown sequence, an abandoned pipelined verify: their own errors),
// the others in one forward.
TEST_F(ServiceTest, BatchMessagesAnswerEachCallAndShareAForward) {
  auto tch = rpc::MakeChannel(g_service->target_address, {});
  auto dch = rpc::MakeChannel(g_service->draft_address, {});
  ASSERT_TRUE(tch.ok() && dch.ok());
  auto target = v1::TargetWorker::NewStub(*tch);
  auto draft = v1::DraftWorker::NewStub(*dch);
  const std::vector<int32_t> prompt = Tokens("import numpy as np");
  constexpr int32_t kA = 910, kB = 911, kC = 912, kUnknown = 919;
  for (int32_t seq : {kA, kB, kC}) OpenOn(*target, seq, prompt);
  for (int32_t seq : {kA, kB}) OpenOn(*draft, seq, prompt);
  if (HasFatalFailure()) return;
  {
    grpc::ClientContext ctx;
    Within60s(&ctx);
    v1::InfoResponse info;
    ASSERT_TRUE(target->Info(&ctx, v1::InfoRequest{}, &info).ok());
    EXPECT_TRUE(info.batch_calls());
  }
  {
    v1::ProposeBatchRequest req;
    for (int32_t seq : {kA, kUnknown, kB}) {
      v1::ProposeRequest* c = req.add_calls();
      c->set_seq(seq);
      c->set_base_len(static_cast<int64_t>(prompt.size()));
      c->set_k(3);
    }
    v1::ProposeBatchResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    ASSERT_TRUE(draft->ProposeBatch(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.status_size(), 3);
    ASSERT_EQ(resp.replies_size(), 3);
    EXPECT_EQ(resp.status(0).code(), 0) << resp.status(0).message();
    EXPECT_EQ(resp.status(1).code(), grpc::StatusCode::NOT_FOUND) << resp.status(1).message();
    EXPECT_EQ(resp.status(2).code(), 0) << resp.status(2).message();
    EXPECT_EQ(resp.replies(0).tokens_size(), 3);
    EXPECT_EQ(std::vector<int32_t>(resp.replies(0).tokens().begin(), resp.replies(0).tokens().end()),
              std::vector<int32_t>(resp.replies(2).tokens().begin(), resp.replies(2).tokens().end()));
    EXPECT_EQ(resp.replies(0).batch_seqs(), 2);
  }
  {
    // C's pipelined verify was abandoned before it came: ABORTED, C unchanged.
    v1::AbandonVerifyRequest ab;
    ab.set_seq(kC);
    ab.set_after_generation(5);
    v1::AbandonVerifyResponse abr;
    grpc::ClientContext actx;
    Within60s(&actx);
    ASSERT_TRUE(target->AbandonVerify(&actx, ab, &abr).ok());
    v1::VerifyBatchRequest req;
    for (int32_t seq : {kA, kUnknown, kC, kB}) {
      v1::VerifyRequest* c = req.add_calls();
      c->set_seq(seq);
      c->set_slot(-1);
      if (seq == kC) {
        c->set_slot(0);
        c->set_await_proposal(true);
        c->set_after_generation(5);
        c->set_await_k(4);
        c->set_await_ms(20000);
      }
    }
    v1::VerifyBatchResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    ASSERT_TRUE(target->VerifyBatch(&ctx, req, &resp).ok());
    ASSERT_EQ(resp.status_size(), 4);
    ASSERT_EQ(resp.replies_size(), 4);
    EXPECT_EQ(resp.status(0).code(), 0) << resp.status(0).message();
    EXPECT_EQ(resp.status(1).code(), grpc::StatusCode::NOT_FOUND) << resp.status(1).message();
    EXPECT_EQ(resp.status(2).code(), grpc::StatusCode::ABORTED) << resp.status(2).message();
    EXPECT_EQ(resp.status(3).code(), 0) << resp.status(3).message();
    EXPECT_EQ(resp.replies(0).appended_size(), 1);
    EXPECT_EQ(resp.replies(0).appended(0), resp.replies(3).appended(0));
    EXPECT_EQ(resp.replies(0).length(), static_cast<int64_t>(prompt.size()) + 1);
    EXPECT_EQ(resp.replies(0).batch_seqs(), 2);
    EXPECT_EQ(resp.replies(3).batch_tokens(), 2);
  }
  {
    // C is as opened: a step alone appends the same token A's did.
    v1::VerifyRequest req;
    req.set_seq(kC);
    req.set_slot(-1);
    v1::VerifyResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    ASSERT_TRUE(target->Verify(&ctx, req, &resp).ok());
    EXPECT_EQ(resp.length(), static_cast<int64_t>(prompt.size()) + 1);
  }
  {
    // More calls than the worker has sequences: a malformed message, refused whole.
    v1::VerifyBatchRequest req;
    for (int i = 0; i < 100; ++i) req.add_calls()->set_seq(kA);
    v1::VerifyBatchResponse resp;
    grpc::ClientContext ctx;
    Within60s(&ctx);
    const grpc::Status st = target->VerifyBatch(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << st.error_message();
    EXPECT_NE(st.error_message().find("at most"), std::string::npos) << st.error_message();
  }
  for (int32_t seq : {kA, kB, kC}) ReleaseOn(*target, seq);
  for (int32_t seq : {kA, kB}) ReleaseOn(*draft, seq);
}

TEST_F(ServiceTest, AcceptanceFiguresAddUp) {
  const client::Stats before = g_service->Stats();
  api::Request p;
  p.prompt = "The quick brown fox";
  p.max_tokens = 64;
  p.ignore_eos = true;
  p.k = 4;
  int64_t proposed = 0, accepted = 0, appended = 0, emitted = 0, spec_steps = 0, steps = 0;
  std::vector<int32_t> ids;
  auto s = c().Generate(p, [&](const api::Event& ch) {
    ++steps;
    proposed += ch.proposed;
    accepted += ch.accepted;
    appended += ch.appended;
    emitted += ch.emitted;
    spec_steps += ch.draft_used;
    EXPECT_LE(ch.accepted, ch.proposed);
    EXPECT_EQ(ch.appended, ch.accepted + 1);
    EXPECT_EQ(ch.emitted, static_cast<int>(ch.token_ids.size()));
    ids.insert(ids.end(), ch.token_ids.begin(), ch.token_ids.end());
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(steps, s->steps);
  EXPECT_EQ(spec_steps, s->speculative_steps);
  EXPECT_EQ(proposed, s->proposed);
  EXPECT_EQ(accepted, s->accepted);
  EXPECT_EQ(emitted, s->completion_tokens);
  EXPECT_EQ(ids, s->tokens);
  EXPECT_GE(appended, emitted);  // the last step may be trimmed
  EXPECT_NEAR(s->acceptance_rate, static_cast<double>(accepted) / proposed, 1e-9);
  EXPECT_NEAR(s->mean_accepted_length, static_cast<double>(accepted + spec_steps) / spec_steps, 1e-9);
  const client::Stats after = g_service->Stats();
  EXPECT_EQ(after.requests_total - before.requests_total, 1);
  EXPECT_EQ(after.completion_tokens - before.completion_tokens, s->completion_tokens);
  EXPECT_EQ(after.proposed - before.proposed, proposed);
  EXPECT_EQ(after.accepted - before.accepted, accepted);
  EXPECT_EQ(after.steps - before.steps, steps);
}

// Text that repeats itself, where n-gram lookup proposes.
const char* kRepeating[] = {"1, 2, 3, 1, 2, 3, 1, 2,", "the cat sat on the mat. the cat sat on the"};

// Greedy requests with n-gram proposals (alone, and before the draft) equal target-only output.
void ExpectNgramLossless(client::Client& c, const std::string& target_model, bool with_draft) {
  const int n = 40;
  std::vector<std::string> texts(std::begin(kRepeating), std::end(kRepeating));
  texts.push_back(kPrompts[1]);
  int64_t accepted = 0;
  for (const std::string& text : texts) {
    auto prompt = c.Tokenize(text, true, false);
    ASSERT_TRUE(prompt.ok()) << prompt.status();
    const std::vector<int32_t> ref = ReferenceGreedy(target_model, *prompt, n);
    for (api::ProposerKind kind : {api::ProposerKind::kNgram, api::ProposerKind::kNgramDraft}) {
      for (std::optional<int> k : {std::optional<int>(), std::optional<int>(6)}) {
        api::Request p;
        p.prompt = text;
        p.max_tokens = n;
        p.ignore_eos = true;
        p.k = k;
        p.proposer = kind;
        auto s = c.Generate(p);
        ASSERT_TRUE(s.ok()) << s.status();
        EXPECT_EQ(s->tokens, ref) << api::ProposerName(kind) << " '" << text << "' k=" << (k ? *k : -1);
        EXPECT_EQ(s->draft_failures, 0);
        if (kind == api::ProposerKind::kNgram || !with_draft) accepted += s->accepted;
      }
    }
  }
  EXPECT_GT(accepted, 0) << "n-gram proposals were accepted";
}

TEST_F(ServiceTest, NgramProposalsAreLossless) { ExpectNgramLossless(c(), g_models->target, true); }

TEST(ServiceWithoutDraft, NgramProposalsWorkWithoutADraftWorker) {
  // A coordinator with no draft worker, n-gram proposals by default.
  const TestModels& models = SharedTestModels();
  TempDir dir;
  ServiceOptions o;
  o.target_model = models.target;
  o.coordinator_flags = {"--proposer", "ngram", "--adaptive=false", "--k", "5"};
  Service svc(dir.path(), o);
  const absl::Status st = svc.Start();
  ASSERT_TRUE(st.ok()) << st << "\n" << svc.Logs();
  ExpectNgramLossless(*svc.client, models.target, false);
  // The service's default (no proposer in the request) is n-gram lookup too.
  api::Request p;
  p.prompt = kRepeating[0];
  p.max_tokens = 30;
  p.ignore_eos = true;
  auto s = svc.client->Generate(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_GT(s->speculative_steps, 0) << svc.Logs();
  EXPECT_EQ(s->tokens, ReferenceGreedy(models.target, *svc.client->Tokenize(p.prompt, true, false), 30));
  // A draft-only request here runs target-only.
  p.proposer = api::ProposerKind::kDraft;
  s = svc.client->Generate(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->speculative_steps, 0);
  EXPECT_NE(svc.coordinator.LogTail(1 << 20).find("proposer=ngram"), std::string::npos) << "the effective config is logged";
}

TEST_F(ServiceTest, StopStringsEndTheStreamBeforeTheStop) {
  api::Request p;
  p.prompt = "Hello world";
  p.max_tokens = 40;
  p.ignore_eos = true;
  auto full = c().Generate(p);
  ASSERT_TRUE(full.ok());
  ASSERT_GT(full->text.size(), 10u);
  const std::string stop = full->text.substr(full->text.size() / 2, 2);
  p.stop = {stop};
  auto s = c().Generate(p);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->finish_reason, FinishReason::kStop);
  EXPECT_EQ(s->stop, stop);
  EXPECT_EQ(s->text, full->text.substr(0, full->text.find(stop)));
}

TEST_F(ServiceTest, BadRequestsAreInvalidArgument) {
  auto expect_invalid = [&](api::Request p, const char* what) {
    auto s = c().Generate(p);
    EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument) << what << ": " << s.status();
    EXPECT_FALSE(s.status().message().empty()) << what;
  };
  api::Request ok;
  ok.prompt = "Hello";
  ok.max_tokens = 4;
  api::Request p = ok;
  p.prompt = "";
  expect_invalid(p, "empty prompt");
  p = ok;
  p.max_tokens = -1;
  expect_invalid(p, "negative max_tokens");
  p.max_tokens = 1 << 24;
  expect_invalid(p, "huge max_tokens");
  p = ok;
  p.prompt.clear();
  p.prompt_tokens.assign(2000, 300);  // the context is 1024
  expect_invalid(p, "prompt longer than the context");
  p.prompt_tokens = {1, 100000};
  expect_invalid(p, "token id out of range");
  p = ok;
  p.sampling.top_p = 2.0f;
  expect_invalid(p, "top_p");
  p = ok;
  p.sampling.temperature = -1.0f;
  expect_invalid(p, "temperature");
  p = ok;
  p.k = 1000;
  expect_invalid(p, "k");
  p = ok;
  p.stop = {""};
  expect_invalid(p, "empty stop string");
  p = ok;
  p.messages = {};
  p.prompt = "";
  expect_invalid(p, "no prompt at all");
  auto sp = c().SetSpeculation(0, std::nullopt);
  EXPECT_EQ(sp.status().code(), absl::StatusCode::kInvalidArgument);
  // The service is unaffected.
  EXPECT_TRUE(c().Generate(ok).ok());
}

TEST_F(ServiceTest, CancellationFreesKvInBothWorkers) {
  api::Request p;
  p.prompt = "Once upon a time";
  p.max_tokens = 900;
  p.ignore_eos = true;
  int chunks = 0;
  auto s = c().Generate(p, [&](const api::Event&) { return ++chunks < 3; });
  EXPECT_EQ(s.status().code(), absl::StatusCode::kCancelled) << s.status();
  EXPECT_TRUE(g_service->WaitNoSequences()) << "sequences still held after a cancel";
}

TEST_F(ServiceTest, DeadlineEndsTheRequestAndFreesKv) {
  api::Request p;
  p.prompt = "Once upon a time";
  p.max_tokens = 900;  // the context allows it; 1 ms does not
  p.ignore_eos = true;
  p.deadline = api::After(std::chrono::milliseconds(1));
  auto s = c().Generate(p);
  if (s.ok()) {
    EXPECT_EQ(s->finish_reason, FinishReason::kDeadline);
  } else {
    EXPECT_EQ(s.status().code(), absl::StatusCode::kDeadlineExceeded) << s.status();
  }
  // A deadline mid-generation. It must expire well before the 1024-token
  // context would end the request: a fast CI machine decodes this tiny model at
  // ~3.5 tokens/ms, so 300 ms once ended with "length" instead.
  p.deadline = api::After(std::chrono::milliseconds(20));
  p.max_tokens = 8000;
  auto t = c().Generate(p);
  EXPECT_TRUE((t.ok() && t->finish_reason == FinishReason::kDeadline) || t.status().code() == absl::StatusCode::kDeadlineExceeded)
      << (t.ok() ? FinishReasonName(t->finish_reason) : t.status().ToString());
  EXPECT_TRUE(g_service->WaitNoSequences());
}

TEST_F(ServiceTest, ConcurrentRequestsAreBatchedAndStayLossless) {
  // Twice as many requests as the prompts, more than the workers' 8 sequence
  // slots: the extra ones queue in the coordinator instead of failing.
  const int n = 120;
  const size_t np = std::size(kPrompts), nreq = 2 * np;
  std::vector<std::vector<int32_t>> refs;
  for (const char* text : kPrompts) refs.push_back(ReferenceGreedy(g_models->target, Tokens(text), n));
  std::vector<std::vector<int32_t>> got(nreq);
  std::vector<absl::Status> status(nreq);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < nreq; ++i) {
    threads.emplace_back([&, i] {
      api::Request p;
      p.prompt = kPrompts[i % np];
      p.max_tokens = n;
      p.ignore_eos = true;
      if (i % 2 == 0) p.k = 4;  // half fixed (the draft is surely used), half adaptive
      auto s = c().Generate(p);
      status[i] = s.status();
      if (s.ok()) got[i] = s->tokens;
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < nreq; ++i) {
    ASSERT_TRUE(status[i].ok()) << status[i];
    EXPECT_EQ(got[i], refs[i % np]) << kPrompts[i % np];
  }
  const client::Stats s = g_service->Stats();
  EXPECT_GE(s.target.max_batch, 2) << "concurrent Verify calls should share a forward";
  EXPECT_GE(s.draft.max_batch, 2) << "concurrent Propose calls should share a forward";
  EXPECT_LE(s.target.max_batch, 8);
  EXPECT_LT(s.target.batches, s.target.batched_requests);
  // The cost cells (which ones depends on how the batches formed: a shared call counts at its batch's
  // length per member, so e.g. verify[0] only from a step alone or a batch of target-only steps).
  EXPECT_NE(s.step_costs.find("verify["), std::string::npos) << s.step_costs;
  EXPECT_NE(s.step_costs.find("draft["), std::string::npos) << s.step_costs;
  // Lockstep (on by default): phases that released several requests together.
  EXPECT_EQ(s.lockstep.rfind("start: ", 0), 0u) << s.lockstep;
  EXPECT_EQ(s.lockstep.find("no shared steps"), std::string::npos) << s.lockstep;
  // The released requests' calls went to each worker as one message (batch_calls on by default).
  EXPECT_NE(s.lockstep.find("; messages: target "), std::string::npos) << s.lockstep;
  EXPECT_EQ(s.lockstep.find("target no messages yet"), std::string::npos) << s.lockstep;
  EXPECT_EQ(s.lockstep.find("draft no messages yet"), std::string::npos) << s.lockstep;
  EXPECT_EQ(s.acceptance_prior.rfind("steps=", 0), 0u) << s.acceptance_prior;
  // The steps taken apart through the services: both workers measured their
  // forwards, the RPCs show as transport, the hand-offs as wait.
  EXPECT_GT(s.step_time.draft_forward, 0);
  EXPECT_GT(s.step_time.verify_forward, 0);
  EXPECT_GT(s.step_time.transport, 0);
  EXPECT_GT(s.step_time.wait, 0);  // the hand-off to the workers' engine threads
  EXPECT_GT(s.step_time.wait_draft, 0);  // of it, the draft worker's
  EXPECT_LT(s.step_time.wait_draft, s.step_time.wait);
  EXPECT_GE(s.step_time.gate, 0);   // the lockstep gate (concurrent requests)
  EXPECT_NE(client::FormatStats(s).find("step time per step: draft forwards"), std::string::npos);
  // Concurrent requests pipeline their verifies too (lockstep and all).
  EXPECT_GT(s.pipelined_steps, 0);
  EXPECT_LE(s.pipelined_steps, s.steps);
  EXPECT_NE(client::FormatStats(s).find("pipelined verify: "), std::string::npos);
  EXPECT_TRUE(g_service->WaitNoSequences());
}

TEST_F(ServiceTest, ChatUsesTheChatTemplate) {
  api::Request p;
  p.messages = {{"system", "You are terse."}, {"user", "Say hi"}};
  p.max_tokens = 16;
  auto s = c().Generate(p);
  ASSERT_TRUE(s.ok()) << s.status();
  // The rendered ChatML prompt is longer than the bare messages.
  EXPECT_GT(s->prompt_tokens, static_cast<int>(Tokens("You are terse. Say hi").size()));
}

TEST_F(ServiceTest, SetSpeculationTurnsTheDraftOffAndOn) {
  auto off = c().SetSpeculation(std::nullopt, false);
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->second);
  api::Request p;
  p.prompt = "Hello world";
  p.max_tokens = 20;
  p.ignore_eos = true;
  auto s = c().Generate(p);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->speculative_steps, 0);
  auto on = c().SetSpeculation(2, true);
  ASSERT_TRUE(on.ok());
  EXPECT_EQ(on->first, 2);
  int max_proposed = 0;
  s = c().Generate(p, [&](const api::Event& ch) {
    max_proposed = std::max(max_proposed, ch.proposed);
    return true;
  });
  ASSERT_TRUE(s.ok());
  EXPECT_GT(s->speculative_steps, 0);
  EXPECT_EQ(max_proposed, 2);
  // Setting k alone selected fixed mode; adaptive comes back on request.
  auto st = c().SetSpeculation(4, true, true, 6);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_TRUE(st->adaptive);
  EXPECT_EQ(st->draft_max, 6);
  EXPECT_EQ(st->k, 4);
  auto h = c().GetHealth();
  ASSERT_TRUE(h.ok());
  EXPECT_TRUE(h->adaptive);
  EXPECT_EQ(h->draft_max, 6);
  s = c().Generate(p, [&](const api::Event& ch) {
    EXPECT_LE(ch.k, 6);
    return true;
  });
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->adaptive);
  EXPECT_EQ(c().SetSpeculation(std::nullopt, std::nullopt, std::nullopt, 0).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(c().SetSpeculation(4, true, true, 8).ok());
}

}  // namespace
}  // namespace specd::testing
