// The "cuda" exchange kind without a GPU: the device-rows descriptor in the
// exchange header, and the LocalDraft / LocalTarget wiring of the CUDA IPC
// path against a stand-in device (host memory behind fake handles): path
// selection and its log, rows written where the target reads them (none for
// greedy), in-place reads that detect a rewrite, the host-rows request and
// fallback, re-attach after a swap. The real CUDA implementation is
// exercised by tests/gpu/ipc_device_check.sh and gpu_check on a GPU.
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "common/engine/exchange_device.h"
#include "common/engine/spec_local.h"
#include "common/spec/loop.h"
#include "common/modelgen/modelgen.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using testing::FixedRequest;
using testing::MakeTestEngine;
using testing::SharedTestModels;
using testing::TestModels;

// ---------------------------------------------------------------- header

std::string Handle(const std::string& tag) {
  std::string h(ExchangeBuffer::kDeviceHandleBytes, '\0');
  std::memcpy(h.data(), tag.data(), std::min(tag.size(), h.size()));
  return h;
}

TEST(ExchangeDeviceRows, HeaderRoundTripsAndMakesTheKindCuda) {
  auto w = ExchangeBuffer::Create("posix", 3, 4, 50, "digest");
  ASSERT_TRUE(w.ok()) << w.status();
  ExchangeBuffer& x = **w;
  EXPECT_EQ(x.kind(), "posix");
  EXPECT_EQ(x.device_rows(), nullptr);
  EXPECT_EQ(x.DeviceRowsBytes(), 3u * 4 * 50 * sizeof(float));
  EXPECT_EQ(x.DeviceSlotOffset(2), 2u * 4 * 50 * sizeof(float));
  // Naming a host-only buffer as kind cuda is refused.
  EXPECT_EQ(ExchangeBuffer::Attach("cuda", x.name()).status().code(), absl::StatusCode::kInvalidArgument);

  ExchangeDeviceRows d;
  d.handle = "short";
  d.bytes = x.DeviceRowsBytes();
  d.owner_pid = getpid();
  EXPECT_EQ(x.SetDeviceRows(d).code(), absl::StatusCode::kInvalidArgument);
  d.handle = Handle("h1");
  d.bytes = x.DeviceRowsBytes() + 4;
  EXPECT_EQ(x.SetDeviceRows(d).code(), absl::StatusCode::kInvalidArgument);
  d.bytes = x.DeviceRowsBytes();
  d.device = 3;
  d.owner_ptr = 0x7f0012340000ull;
  ASSERT_TRUE(x.SetDeviceRows(d).ok());
  EXPECT_EQ(x.kind(), "cuda");
  EXPECT_EQ(x.SetDeviceRows(d).code(), absl::StatusCode::kFailedPrecondition);  // once

  for (const char* kind : {"cuda", "posix"}) {
    auto r = ExchangeBuffer::Attach(kind, x.name());
    ASSERT_TRUE(r.ok()) << kind << ": " << r.status();
    ASSERT_NE((*r)->device_rows(), nullptr);
    EXPECT_EQ((*r)->kind(), "cuda");
    EXPECT_EQ((*r)->device_rows()->handle, d.handle);
    EXPECT_EQ((*r)->device_rows()->device, 3);
    EXPECT_EQ((*r)->device_rows()->bytes, d.bytes);
    EXPECT_EQ((*r)->device_rows()->owner_pid, d.owner_pid);
    EXPECT_EQ((*r)->device_rows()->owner_ptr, d.owner_ptr);
    // Only the creator records device rows.
    EXPECT_EQ((*r)->SetDeviceRows(d).code(), absl::StatusCode::kFailedPrecondition);
  }
}

TEST(ExchangeDeviceRows, CheckAndCurrentFollowTheGeneration) {
  auto w = ExchangeBuffer::Create("posix", 2, 3, 10, "digest");
  ASSERT_TRUE(w.ok());
  ExchangeBuffer& x = **w;
  float* rows = x.BeginWrite(1);
  ASSERT_NE(rows, nullptr);
  EXPECT_EQ(x.HostRows(1), rows);
  EXPECT_EQ(x.HostRows(2), nullptr);
  rows[0] = 0.5f;
  const std::vector<int32_t> toks = {4, 5};
  const ExchangeRef ref{1, x.Publish(1, 7, toks, ExchangeBuffer::kRowsHost)};
  auto r = ExchangeBuffer::Attach("posix", x.name());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE((*r)->Check(ref, 7, toks).ok());
  EXPECT_TRUE((*r)->Current(ref));
  EXPECT_EQ((*r)->Check(ref, 8, toks).status().code(), absl::StatusCode::kFailedPrecondition);
  const std::vector<int32_t> fewer = {4};
  EXPECT_EQ((*r)->Check(ref, 7, fewer).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_FALSE((*r)->Current(ExchangeRef{1, ref.generation + 2}));
  EXPECT_FALSE((*r)->Current(ExchangeRef{9, ref.generation}));
  x.BeginWrite(1);  // the draft starts rewriting
  EXPECT_FALSE((*r)->Current(ref));
  EXPECT_EQ((*r)->Check(ref, 7, toks).status().code(), absl::StatusCode::kFailedPrecondition);
}

// ---------------------------------------------------------------- stand-in device

// Host memory behind fake handles; counts what the workers do with it.
struct FakeDevice {
  std::mutex mu;
  std::map<std::string, std::shared_ptr<std::vector<float>>> mem;
  int exports = 0, opens = 0, reads = 0;
  bool fail_export = false, fail_open = false, fail_read = false;
  std::function<void()> during_read;  // runs while the target reads the rows in place
};
FakeDevice* g_dev = nullptr;

class FakeExport final : public DeviceRowsExport {
 public:
  FakeExport(ExchangeBuffer* xb, std::shared_ptr<std::vector<float>> mem) : xb_(xb), mem_(std::move(mem)) {}
  float* Rows(int slot) override { return mem_->data() + xb_->DeviceSlotOffset(slot) / sizeof(float); }
  std::string Describe() const override { return "fake device rows"; }

 private:
  ExchangeBuffer* xb_;
  std::shared_ptr<std::vector<float>> mem_;
};

class FakeImport final : public DeviceRowsImport {
 public:
  FakeImport(const ExchangeBuffer& xb, std::shared_ptr<std::vector<float>> mem) : xb_(xb), mem_(std::move(mem)) {}
  absl::StatusOr<const float*> Rows(int slot) override {
    if (g_dev->fail_read) return absl::InternalError("fake device fault");
    if (g_dev->during_read) g_dev->during_read();
    ++g_dev->reads;
    return mem_->data() + xb_.DeviceSlotOffset(slot) / sizeof(float);
  }
  std::string Describe() const override { return "fake acceptance"; }

 private:
  const ExchangeBuffer& xb_;
  std::shared_ptr<std::vector<float>> mem_;
};

DeviceExchangeHooks FakeHooks() {
  DeviceExchangeHooks h;
  h.export_rows = [](const Engine&, ExchangeBuffer* xb) -> absl::StatusOr<std::unique_ptr<DeviceRowsExport>> {
    std::lock_guard<std::mutex> l(g_dev->mu);
    if (g_dev->fail_export) return absl::InternalError("fake export fault");
    auto mem = std::make_shared<std::vector<float>>(xb->DeviceRowsBytes() / sizeof(float), 0.0f);
    ExchangeDeviceRows d;
    d.handle = Handle(absl::StrCat("fake-", ++g_dev->exports));
    d.bytes = xb->DeviceRowsBytes();
    d.owner_pid = getpid();
    SPECD_RETURN_IF_ERROR(xb->SetDeviceRows(d));
    g_dev->mem[d.handle] = mem;
    return std::unique_ptr<DeviceRowsExport>(new FakeExport(xb, mem));
  };
  h.open_rows = [](const Engine&, const ExchangeBuffer& xb) -> absl::StatusOr<std::unique_ptr<DeviceRowsImport>> {
    std::lock_guard<std::mutex> l(g_dev->mu);
    if (g_dev->fail_open) return absl::UnavailableError("fake open fault");
    auto it = g_dev->mem.find(xb.device_rows()->handle);
    if (it == g_dev->mem.end()) return absl::NotFoundError("unknown fake handle");
    ++g_dev->opens;
    return std::unique_ptr<DeviceRowsImport>(new FakeImport(xb, it->second));
  };
  return h;
}

// ---------------------------------------------------------------- engines

const TestModels* g_models = nullptr;

class ExchangeDeviceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    g_models = &SharedTestModels();
  }

  void SetUp() override {
    g_dev = &dev_;
    SetDeviceExchangeHooksForTesting(FakeHooks());
    target_engine_ = MakeTestEngine(g_models->target);
    draft_engine_ = MakeTestEngine(g_models->draft);
    ref_engine_ = MakeTestEngine(g_models->target, 1);
    ASSERT_TRUE(target_engine_ && draft_engine_ && ref_engine_);
    target_ = std::make_unique<LocalTarget>(target_engine_.get());
    auto d = LocalDraft::Create(draft_engine_.get(), 8, "auto");
    ASSERT_TRUE(d.ok()) << d.status();
    draft_ = std::move(*d);
    ASSERT_TRUE(target_->Attach(draft_->exchange().kind(), draft_->exchange().name()).ok());
  }
  void TearDown() override {
    target_.reset();
    draft_.reset();
    SetDeviceExchangeHooksForTesting(std::nullopt);
    g_dev = nullptr;
  }

  const Tokenizer& tok() const { return target_engine_->tokenizer(); }

  std::vector<int32_t> ReferenceGreedy(const std::vector<int32_t>& prompt, int n) {
    Engine& e = *ref_engine_;
    EXPECT_TRUE(e.NewSequence(99).ok());
    std::vector<int32_t> out;
    std::vector<float> logits;
    Engine::Feed f{99, prompt, 1};
    for (int i = 0; i < n; ++i) {
      logits.clear();
      EXPECT_TRUE(e.Run({f}, &logits).ok());
      const int32_t t = Argmax(logits.data(), e.vocab_size());
      out.push_back(t);
      f.tokens = {t};
    }
    e.Release(99);
    return out;
  }

  SpecResult Run(LocalTarget& target, const SpecRequest& req, Proposer* draft) {
    return RunSpeculative(req, tok(), target, draft, [](const StepEvent&) { return true; });
  }

  FakeDevice dev_;
  std::unique_ptr<Engine> target_engine_, draft_engine_, ref_engine_;
  std::unique_ptr<LocalTarget> target_;
  std::unique_ptr<LocalDraft> draft_;
};

TEST_F(ExchangeDeviceTest, BothSidesChooseTheDevicePath) {
  EXPECT_EQ(draft_->exchange().kind(), "cuda");
  EXPECT_EQ(draft_->exchange_path().rfind("device", 0), 0u) << draft_->exchange_path();
  EXPECT_EQ(target_->exchange()->kind(), "cuda");
  EXPECT_EQ(target_->exchange_path().rfind("device", 0), 0u) << target_->exchange_path();
  EXPECT_EQ(dev_.exports, 1);
  EXPECT_EQ(dev_.opens, 1);
}

TEST_F(ExchangeDeviceTest, GreedyOnTheDevicePathEqualsGreedyTargetOnly) {
  const int n = 24;
  for (const char* text : {"Hello world", "def main():\n    return 0", "The quick brown fox", "1, 2, 3,"}) {
    const std::vector<int32_t> prompt = tok().Encode(text, true, false);
    const std::vector<int32_t> ref = ReferenceGreedy(prompt, n);
    for (int k : {1, 3, 6, 8}) {
      const SpecResult r = Run(*target_, FixedRequest(1, prompt, n, k), draft_.get());
      ASSERT_TRUE(r.status.ok()) << r.status;
      ASSERT_EQ(r.tokens, ref) << "k=" << k << " prompt '" << text << "'";
      EXPECT_EQ(r.stats.draft_failures, 0);
      EXPECT_GT(r.stats.speculative_steps, 0);
    }
  }
  // Greedy proposals carry no rows (q is one-hot at the tokens): nothing was read.
  EXPECT_GT(target_->path_counts().one_hot, 0);
  EXPECT_EQ(target_->path_counts().device, 0);
  EXPECT_EQ(target_->path_counts().host, 0);
  EXPECT_EQ(target_->path_counts().device_failures, 0);
  EXPECT_EQ(dev_.reads, 0);
}

TEST_F(ExchangeDeviceTest, SampledDevicePathDecidesAsTheHostRowsDo) {
  // The same request through the device rows and through the host rows: the
  // draft's sampler wrote the device rows and copied them to the host rows
  // (the host target asked for them at attach), so every decision is the same.
  LocalTarget host(target_engine_.get());
  host.set_prefer_host(true);
  ASSERT_TRUE(host.Attach(draft_->exchange().kind(), draft_->exchange().name()).ok());
  EXPECT_EQ(host.exchange_path().rfind("host", 0), 0u) << host.exchange_path();
  EXPECT_TRUE(draft_->exchange().host_rows_requested());
  const std::vector<int32_t> prompt = tok().Encode("Once upon a time", true, false);
  int64_t accepted = 0, proposed = 0;
  for (int variant = 0; variant < 3; ++variant) {
    SpecRequest req = FixedRequest(2, prompt, 40, 4);
    req.sampling.temperature = variant == 0 ? 1.0f : 0.8f;  // full support, then sparse supports
    req.sampling.top_k = variant == 1 ? 8 : 0;
    req.sampling.top_p = variant == 2 ? 0.9f : 1.0f;
    for (uint64_t seed = 1; seed <= 4; ++seed) {
      req.sampling.seed = seed;
      const SpecResult on_device = Run(*target_, req, draft_.get());
      const SpecResult on_host = Run(host, req, draft_.get());
      ASSERT_TRUE(on_device.status.ok() && on_host.status.ok()) << on_device.status << " / " << on_host.status;
      EXPECT_EQ(on_device.tokens, on_host.tokens) << "variant " << variant << " seed " << seed;
      EXPECT_EQ(on_device.stats.accepted, on_host.stats.accepted);
      accepted += on_device.stats.accepted;
      proposed += on_device.stats.proposed;
    }
  }
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, proposed);  // real rejections (residual draws) happened
  EXPECT_GT(target_->path_counts().device, 0);
  EXPECT_EQ(target_->path_counts().host, 0);
  EXPECT_EQ(dev_.reads, target_->path_counts().device);
  EXPECT_EQ(host.path_counts().device, 0);
  EXPECT_GT(host.path_counts().host, 0);
}

TEST_F(ExchangeDeviceTest, SampledRowsOnTheDeviceAreTheDraftsDistributions) {
  SamplingParams sp;
  sp.temperature = 0.8f;
  sp.seed = 3;
  const std::vector<int32_t> prompt = tok().Encode("Hello world", true, false);
  ASSERT_TRUE(draft_->OpenSeq(7, prompt, sp).ok());
  auto p = draft_->Propose({7, static_cast<int64_t>(prompt.size()), {}, 3, 0.0f}, kNoDeadline);
  ASSERT_TRUE(p.ok()) << p.status();
  const int V = draft_->exchange().vocab();
  const float* rows = dev_.mem.begin()->second->data() + draft_->exchange().DeviceSlotOffset(p->ref.slot) / sizeof(float);
  for (size_t i = 0; i < p->tokens.size(); ++i) {
    double sum = 0;
    for (int t = 0; t < V; ++t) sum += rows[i * V + t];
    EXPECT_NEAR(sum, 1.0, 1e-4) << "row " << i;
    EXPECT_GT(rows[i * V + p->tokens[i]], 0.0f) << "x_" << i + 1 << " was drawn from q_" << i + 1;
  }
  draft_->ReleaseSeq(7);
}

TEST_F(ExchangeDeviceTest, StaleAndRewrittenSlotsAreRefusedAndTheSequenceKept) {
  SamplingParams sp;  // sampled: the rows are read in place, so a rewrite during the read matters
  sp.temperature = 0.8f;
  sp.seed = 5;
  const std::vector<int32_t> prompt = tok().Encode("import numpy as np", true, false);
  const int64_t len = static_cast<int64_t>(prompt.size());
  ASSERT_TRUE(draft_->OpenSeq(6, prompt, sp).ok());
  ASSERT_TRUE(target_->OpenSeq(6, prompt, sp).ok());
  auto first = draft_->Propose({6, len, {}, 4, 0.0f}, kNoDeadline);
  auto second = draft_->Propose({6, len, {}, 4, 0.0f}, kNoDeadline);
  ASSERT_TRUE(first.ok() && second.ok());
  // Stale before the forward.
  auto stale = target_->Verify(6, first->tokens, first->ref, {}, kNoDeadline);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition) << stale.status();
  EXPECT_EQ(target_->core().CommittedLength(6), len);
  // Rewritten while the device reads the rows in place: caught after the read.
  dev_.during_read = [&] { ASSERT_TRUE(draft_->Propose({6, len, {}, 4, 0.0f}, kNoDeadline).ok()); };
  auto raced = target_->Verify(6, second->tokens, second->ref, {}, kNoDeadline);
  dev_.during_read = nullptr;
  EXPECT_EQ(raced.status().code(), absl::StatusCode::kFailedPrecondition) << raced.status();
  EXPECT_NE(raced.status().message().find("rewrote"), std::string::npos) << raced.status();
  EXPECT_EQ(target_->core().CommittedLength(6), len);    // nothing committed
  EXPECT_EQ(target_engine_->Length(6), len - 1);         // the step's KV dropped again
  // The sequence goes on normally.
  auto third = draft_->Propose({6, len, {}, 4, 0.0f}, kNoDeadline);
  ASSERT_TRUE(third.ok());
  auto ok = target_->Verify(6, third->tokens, third->ref, {}, kNoDeadline);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(target_->core().CommittedLength(6), len + static_cast<int64_t>(ok->appended.size()));
  target_->ReleaseSeq(6);
  draft_->ReleaseSeq(6);
}

TEST_F(ExchangeDeviceTest, ADeviceFaultMovesToTheHostRowsAndStaysThere) {
  const std::vector<int32_t> prompt = tok().Encode("The quick brown fox", true, false);
  dev_.fail_read = true;
  SpecRequest req = FixedRequest(3, prompt, 20, 4);
  req.sampling.temperature = 0.8f;
  req.sampling.seed = 9;
  req.draft_retry = std::chrono::milliseconds(0);
  const SpecResult r = Run(*target_, req, draft_.get());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens.size(), 20u);
  // The proposal in flight had device rows only: refused (that step ran
  // target-only), the draft asked for host rows, and the rest ran on them.
  EXPECT_EQ(r.stats.draft_failures, 1);
  EXPECT_TRUE(draft_->exchange().host_rows_requested());
  EXPECT_EQ(target_->path_counts().device_failures, 1);
  EXPECT_EQ(target_->path_counts().device, 0);
  EXPECT_GT(target_->path_counts().host, 0);
  EXPECT_EQ(target_->exchange_path().rfind("host", 0), 0u) << target_->exchange_path();
  // A re-attach tries the device again.
  dev_.fail_read = false;
  ASSERT_TRUE(target_->Attach(draft_->exchange().kind(), draft_->exchange().name()).ok());
  EXPECT_EQ(target_->exchange_path().rfind("device", 0), 0u);
}

TEST_F(ExchangeDeviceTest, OpenFailureAttachesOnTheHostPath) {
  dev_.fail_open = true;
  LocalTarget t(target_engine_.get());
  ASSERT_TRUE(t.Attach(draft_->exchange().kind(), draft_->exchange().name()).ok());
  EXPECT_EQ(t.exchange_path().rfind("host", 0), 0u);
  EXPECT_NE(t.exchange_path().find("fake open fault"), std::string::npos) << t.exchange_path();
  EXPECT_TRUE(draft_->exchange().host_rows_requested());
  const std::vector<int32_t> prompt = tok().Encode("a", true, false);
  const SpecResult r = Run(t, FixedRequest(4, prompt, 12, 3), draft_.get());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, ReferenceGreedy(prompt, 12));
  SpecRequest sampled = FixedRequest(4, prompt, 12, 3);
  sampled.sampling.temperature = 1.0f;
  const SpecResult rs = Run(t, sampled, draft_.get());
  ASSERT_TRUE(rs.status.ok()) << rs.status;
  EXPECT_EQ(rs.stats.draft_failures, 0);
  EXPECT_GT(t.path_counts().host, 0);
  EXPECT_EQ(t.path_counts().device, 0);
}

TEST_F(ExchangeDeviceTest, ReattachAfterASwapMapsTheNewRows) {
  auto other_engine = MakeTestEngine(g_models->other);
  auto other = LocalDraft::Create(other_engine.get(), 6, "cuda");
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_EQ((*other)->exchange().kind(), "cuda");
  ASSERT_TRUE(target_->Attach((*other)->exchange().kind(), (*other)->exchange().name()).ok());
  EXPECT_EQ(dev_.opens, 2);
  EXPECT_EQ(target_->exchange()->name(), (*other)->exchange().name());
  const std::vector<int32_t> prompt = tok().Encode("<html>", true, false);
  const SpecResult r = Run(*target_, FixedRequest(5, prompt, 16, 6), other->get());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, ReferenceGreedy(prompt, 16));
  SpecRequest sampled = FixedRequest(5, prompt, 16, 6);
  sampled.sampling.temperature = 0.9f;
  const SpecResult rs = Run(*target_, sampled, other->get());
  ASSERT_TRUE(rs.status.ok()) << rs.status;
  EXPECT_GT(target_->path_counts().device, 0);
  EXPECT_EQ(rs.stats.draft_failures, 0);
  // A proposal of the old draft names a buffer that is no longer attached.
  const int64_t len = static_cast<int64_t>(prompt.size());
  ASSERT_TRUE(draft_->OpenSeq(8, prompt, SamplingParams{}).ok());
  ASSERT_TRUE(target_->OpenSeq(8, prompt, SamplingParams{}).ok());
  auto old = draft_->Propose({8, len, {}, 4, 0.0f}, kNoDeadline);
  ASSERT_TRUE(old.ok());
  EXPECT_FALSE(target_->Verify(8, old->tokens, old->ref, {}, kNoDeadline).ok());
  EXPECT_EQ(target_->core().CommittedLength(8), len);
  target_->ReleaseSeq(8);
  draft_->ReleaseSeq(8);
  target_.reset();  // before the draft whose rows it maps
}

// ---------------------------------------------------------------- without a device

TEST_F(ExchangeDeviceTest, WithoutADeviceTheHostPathIsChosenOrCudaRefused) {
  SetDeviceExchangeHooksForTesting(std::nullopt);  // the real implementation, on CPU engines
  EXPECT_FALSE(DeviceExchangeSupport(*draft_engine_).ok());
  auto cuda = LocalDraft::Create(draft_engine_.get(), 4, "cuda");
  EXPECT_EQ(cuda.status().code(), absl::StatusCode::kFailedPrecondition) << cuda.status();
  auto bad = LocalDraft::Create(draft_engine_.get(), 4, "rdma");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument) << bad.status();
  auto autod = LocalDraft::Create(draft_engine_.get(), 4, "auto");
  ASSERT_TRUE(autod.ok()) << autod.status();
  EXPECT_EQ((*autod)->exchange().kind(), "posix");
  EXPECT_EQ((*autod)->exchange_path().rfind("host", 0), 0u) << (*autod)->exchange_path();
  LocalTarget t(target_engine_.get());
  ASSERT_TRUE(t.Attach((*autod)->exchange().kind(), (*autod)->exchange().name()).ok());
  EXPECT_EQ(t.exchange_path().rfind("host", 0), 0u);
  // A draft buffer with device rows, attached by a CPU target: the host rows serve.
  ASSERT_TRUE(t.Attach(draft_->exchange().kind(), draft_->exchange().name()).ok());
  EXPECT_EQ(t.exchange()->kind(), "cuda");
  EXPECT_EQ(t.exchange_path().rfind("host", 0), 0u) << t.exchange_path();
  const std::vector<int32_t> prompt = tok().Encode("Hello world", true, false);
  const SpecResult r = Run(t, FixedRequest(9, prompt, 16, 4), draft_.get());
  ASSERT_TRUE(r.status.ok()) << r.status;
  EXPECT_EQ(r.tokens, ReferenceGreedy(prompt, 16));
  SpecRequest sampled = FixedRequest(9, prompt, 16, 4);
  sampled.sampling.temperature = 1.0f;
  const SpecResult rs = Run(t, sampled, draft_.get());
  ASSERT_TRUE(rs.status.ok()) << rs.status;
  EXPECT_EQ(rs.stats.draft_failures, 0);
  EXPECT_GT(t.path_counts().host, 0);
  EXPECT_EQ(t.path_counts().device, 0);
}

}  // namespace
}  // namespace specd
