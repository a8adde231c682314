// SharedBuffer (POSIX shm) and the exchange-buffer protocol: what the draft
// publishes is exactly what the target reads, and stale or mismatched
// references are refused.
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <set>
#include <thread>

#include "common/shm/exchange.h"
#include "common/shm/posix_shared_buffer.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

TEST(PosixSharedBuffer, CreateOpenShareAndUnlink) {
  auto a = PosixSharedBuffer::Create(4096);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE((*a)->owner());
  EXPECT_TRUE(PosixSharedBuffer::ValidName((*a)->Name()));
  std::memcpy((*a)->data(), "hello", 6);
  auto b = PosixSharedBuffer::Open((*a)->Name(), /*writable=*/false);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_FALSE((*b)->owner());
  EXPECT_FALSE((*b)->writable());
  EXPECT_EQ((*b)->size(), 4096u);
  EXPECT_STREQ(static_cast<const char*>((*b)->data()), "hello");
  const std::string name = (*a)->Name();
  a->reset();  // the owner unlinks the name; the reader's mapping stays valid
  EXPECT_STREQ(static_cast<const char*>((*b)->data()), "hello");
  auto c = PosixSharedBuffer::Open(name, false);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kNotFound);
}

TEST(PosixSharedBuffer, NamesAreUnique) {
  std::set<std::string> names;
  std::vector<std::unique_ptr<PosixSharedBuffer>> keep;
  for (int i = 0; i < 20; ++i) {
    auto b = PosixSharedBuffer::Create(64);
    ASSERT_TRUE(b.ok());
    names.insert((*b)->Name());
    keep.push_back(std::move(*b));
  }
  EXPECT_EQ(names.size(), 20u);
}

TEST(PosixSharedBuffer, BadInputIsAnErrorNotACrash) {
  EXPECT_FALSE(PosixSharedBuffer::Create(0).ok());
  for (const char* bad : {"", "/", "noslash", "/a/b", "/../etc/passwd", "/x y", "/.."}) {
    auto b = PosixSharedBuffer::Open(bad, false);
    EXPECT_EQ(b.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  EXPECT_EQ(PosixSharedBuffer::Open("/specd-xb-does-not-exist", false).status().code(), absl::StatusCode::kNotFound);
  EXPECT_FALSE(CreateSharedBuffer("nope", 64).ok());
  EXPECT_FALSE(OpenSharedBuffer("nope", "/x", false).ok());
}

class ExchangeTest : public ::testing::Test {
 protected:
  static constexpr int kSlots = 3, kK = 5, kVocab = 37;
  void SetUp() override {
    auto w = ExchangeBuffer::Create("posix", kSlots, kK, kVocab, "digest-abc");
    ASSERT_TRUE(w.ok()) << w.status();
    writer_ = std::move(*w);
    auto r = ExchangeBuffer::Attach("posix", writer_->name());
    ASSERT_TRUE(r.ok()) << r.status();
    reader_ = std::move(*r);
  }
  // Publishes `tokens` for `seq` in `slot` with probabilities derived from `salt`.
  ExchangeRef Write(int slot, int32_t seq, const std::vector<int32_t>& tokens, float salt) {
    float* q = writer_->BeginWrite(slot);
    EXPECT_NE(q, nullptr);
    for (size_t i = 0; i < tokens.size() * kVocab; ++i) q[i] = salt + static_cast<float>(i) * 0.001f;
    return ExchangeRef{slot, writer_->Publish(slot, seq, tokens, ExchangeBuffer::kRowsHost)};
  }
  std::unique_ptr<ExchangeBuffer> writer_, reader_;
};

TEST_F(ExchangeTest, HeaderRoundTrips) {
  EXPECT_EQ(reader_->n_slots(), kSlots);
  EXPECT_EQ(reader_->k_max(), kK);
  EXPECT_EQ(reader_->vocab(), kVocab);
  EXPECT_EQ(reader_->vocab_digest(), "digest-abc");
  EXPECT_EQ(reader_->bytes(), ExchangeBuffer::BytesFor(kSlots, kK, kVocab));
  EXPECT_EQ(ExchangeBuffer::BytesFor(0, kK, kVocab), 0u);
  EXPECT_EQ(ExchangeBuffer::BytesFor(1, ExchangeBuffer::kMaxK + 1, kVocab), 0u);
}

TEST_F(ExchangeTest, ReadGetsExactlyWhatWasPublished) {
  const std::vector<int32_t> toks = {4, 8, 15};
  const ExchangeRef ref = Write(1, 42, toks, 0.25f);
  EXPECT_EQ(ref.generation % 2, 0u);
  std::vector<float> q;
  ASSERT_TRUE(reader_->Read(ref, 42, toks, &q).ok());
  ASSERT_EQ(q.size(), toks.size() * kVocab);
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], 0.25f + static_cast<float>(i) * 0.001f) << i;
  // Other slots are independent.
  const ExchangeRef other = Write(2, 7, {1}, 9.0f);
  ASSERT_TRUE(reader_->Read(ref, 42, toks, &q).ok());
  EXPECT_EQ(q[0], 0.25f);
  ASSERT_TRUE(reader_->Read(other, 7, std::vector<int32_t>{1}, &q).ok());
  EXPECT_EQ(q[0], 9.0f);
}

TEST_F(ExchangeTest, StaleAndMismatchedReferencesAreRefused) {
  const std::vector<int32_t> toks = {3, 1};
  const ExchangeRef old_ref = Write(0, 5, toks, 1.0f);
  const ExchangeRef new_ref = Write(0, 5, toks, 2.0f);
  EXPECT_NE(old_ref.generation, new_ref.generation);
  std::vector<float> q;
  auto st = reader_->Read(old_ref, 5, toks, &q);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("stale"), std::string::npos) << st;
  ASSERT_TRUE(reader_->Read(new_ref, 5, toks, &q).ok());
  EXPECT_EQ(q[0], 2.0f);
  // Another sequence, other tokens, another count, a bad slot.
  EXPECT_EQ(reader_->Read(new_ref, 6, toks, &q).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader_->Read(new_ref, 5, std::vector<int32_t>{3, 2}, &q).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader_->Read(new_ref, 5, std::vector<int32_t>{3}, &q).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader_->Read({kSlots, new_ref.generation}, 5, toks, &q).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader_->Read({-1, new_ref.generation}, 5, toks, &q).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(reader_->Read(new_ref, 5, std::vector<int32_t>(kK + 1, 0), &q).code(),
            absl::StatusCode::kFailedPrecondition);
  // A slot being rewritten reads as unusable, and the old reference stays stale after.
  writer_->BeginWrite(0);
  EXPECT_EQ(reader_->Read(new_ref, 5, toks, &q).code(), absl::StatusCode::kFailedPrecondition);
  const ExchangeRef third = Write(0, 5, toks, 3.0f);
  EXPECT_EQ(reader_->Read(new_ref, 5, toks, &q).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(reader_->Read(third, 5, toks, &q).ok());
}

TEST_F(ExchangeTest, ReferencesIntoAnotherBufferDoNotMatch) {
  const ExchangeRef ref = Write(0, 1, {2}, 1.0f);
  auto other = ExchangeBuffer::Create("posix", kSlots, kK, kVocab, "digest-abc");
  ASSERT_TRUE(other.ok());
  (*other)->BeginWrite(0);
  const uint64_t g = (*other)->Publish(0, 1, std::vector<int32_t>{2}, ExchangeBuffer::kRowsHost);
  auto reader = ExchangeBuffer::Attach("posix", (*other)->name());
  ASSERT_TRUE(reader.ok());
  std::vector<float> q;
  // Random generation bases: the first buffer's reference misses the second.
  EXPECT_NE(g, ref.generation);
  EXPECT_EQ((*reader)->Read(ref, 1, std::vector<int32_t>{2}, &q).code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(ExchangeTest, PublishedAfterSeesOnlyANewerPublishedProposalOfTheSequence) {
  const ExchangeRef first = Write(1, 42, {4, 8}, 0.5f);
  // Not newer than `after`, another sequence, a bad slot: nothing yet.
  EXPECT_FALSE(reader_->PublishedAfter(1, 42, first.generation).has_value());
  EXPECT_FALSE(reader_->PublishedAfter(1, 43, first.generation - 2).has_value());
  EXPECT_FALSE(reader_->PublishedAfter(kSlots, 42, 0).has_value());
  EXPECT_FALSE(reader_->PublishedAfter(-1, 42, 0).has_value());
  auto p = reader_->PublishedAfter(1, 42, first.generation - 2);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ref.slot, 1);
  EXPECT_EQ(p->ref.generation, first.generation);
  EXPECT_EQ(p->tokens, (std::vector<int32_t>{4, 8}));
  // Being written: not yet, even past `after`.
  writer_->BeginWrite(1);
  EXPECT_EQ(reader_->Generation(1), first.generation + 1);
  EXPECT_FALSE(reader_->PublishedAfter(1, 42, first.generation).has_value());
  const uint64_t g = writer_->Publish(1, 42, std::vector<int32_t>{}, 0);  // an empty proposal is one too
  p = reader_->PublishedAfter(1, 42, first.generation);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->ref.generation, g);
  EXPECT_TRUE(p->tokens.empty());
  // What it names passes Check as it is.
  EXPECT_TRUE(reader_->Check(p->ref, 42, p->tokens).ok());
}

TEST_F(ExchangeTest, WaitForChangeWakesOnPublishAndOtherwiseTimesOut) {
  const ExchangeRef first = Write(2, 7, {1}, 1.0f);
  // Nothing changes: it sleeps about the timeout.
  auto t0 = std::chrono::steady_clock::now();
  reader_->WaitForChange(2, first.generation, std::chrono::milliseconds(30));
  const double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(idle, 0.025);
  EXPECT_LT(idle, 2.0);
  // Already changed: returns at once.
  t0 = std::chrono::steady_clock::now();
  reader_->WaitForChange(2, first.generation - 2, std::chrono::seconds(5));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
  // Another thread (through the writer's own mapping) publishes: the reader
  // wakes well before its timeout and sees the proposal.
  std::thread w([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    Write(2, 7, {3, 4}, 2.0f);
  });
  t0 = std::chrono::steady_clock::now();
  std::optional<ExchangeBuffer::Published> p;
  for (int i = 0; i < 100 && !(p = reader_->PublishedAfter(2, 7, first.generation)); ++i)
    reader_->WaitForChange(2, reader_->Generation(2), std::chrono::seconds(5));
  const double woke = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  w.join();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->tokens, (std::vector<int32_t>{3, 4}));
  EXPECT_LT(woke, 4.0) << "woken by the publication, not by the 5 s timeout";
}

TEST_F(ExchangeTest, ReaderCannotWrite) {
  EXPECT_EQ(reader_->BeginWrite(0), nullptr);
  EXPECT_EQ(reader_->Publish(0, 1, std::vector<int32_t>{1}, 0), 0u);
}

TEST(Exchange, AttachRefusesWhatIsNotAnExchangeBuffer) {
  auto junk = PosixSharedBuffer::Create(1 << 16);
  ASSERT_TRUE(junk.ok());
  std::memset((*junk)->data(), 0x5a, (*junk)->size());
  EXPECT_EQ(ExchangeBuffer::Attach("posix", (*junk)->Name()).status().code(), absl::StatusCode::kInvalidArgument);
  auto small = PosixSharedBuffer::Create(16);
  ASSERT_TRUE(small.ok());
  EXPECT_EQ(ExchangeBuffer::Attach("posix", (*small)->Name()).status().code(), absl::StatusCode::kInvalidArgument);
  // A valid header claiming more than the mapping holds.
  auto real = ExchangeBuffer::Create("posix", 2, 2, 1000, "d");
  ASSERT_TRUE(real.ok());
  auto copy = PosixSharedBuffer::Create(512);
  ASSERT_TRUE(copy.ok());
  auto src = PosixSharedBuffer::Open((*real)->name(), false);
  ASSERT_TRUE(src.ok());
  std::memcpy((*copy)->data(), (*src)->data(), 256);
  EXPECT_EQ(ExchangeBuffer::Attach("posix", (*copy)->Name()).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(ExchangeBuffer::Attach("posix", "/specd-xb-missing").ok());
}

}  // namespace
}  // namespace specd
