#include "common/spec/ngram.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"

namespace specd {

absl::Status NgramOptions::Validate() const {
  if (min_n < 1 || max_n < min_n || max_n > 16)
    return absl::InvalidArgumentError(
        absl::StrCat("n-gram lookup sizes ", min_n, "..", max_n, " must satisfy 1 <= min <= max <= 16"));
  return absl::OkStatus();
}

std::string NgramOptions::ToString() const { return absl::StrCat("ngram ", min_n, "..", max_n); }

NgramIndex::NgramIndex(const NgramOptions& o) : o_(o), maps_(static_cast<size_t>(o.max_n - o.min_n + 1)) {}

uint64_t NgramIndex::Key(int64_t end, int n) const {
  uint64_t h = static_cast<uint64_t>(n) * 0x9E3779B97F4A7C15ull;
  for (int64_t i = end - n + 1; i <= end; ++i) {
    h ^= static_cast<uint32_t>(tokens_[static_cast<size_t>(i)]);
    h *= 0xBF58476D1CE4E5B9ull;
    h ^= h >> 31;
  }
  return h;
}

bool NgramIndex::Same(int64_t a, int64_t b, int n) const {
  return std::equal(tokens_.begin() + (a - n + 1), tokens_.begin() + (a + 1), tokens_.begin() + (b - n + 1));
}

void NgramIndex::IndexUpTo(int64_t len) {
  // An n-gram ending at `end` is indexed once the token after it exists, so
  // a lookup of the current suffix finds only occurrences with a follower.
  for (; indexed_ < len - 1; ++indexed_) {
    for (int n = o_.min_n; n <= o_.max_n && n <= indexed_ + 1; ++n)
      maps_[static_cast<size_t>(n - o_.min_n)][Key(indexed_, n)] = indexed_;
  }
}

void NgramIndex::Sync(int64_t base_len, const std::vector<int32_t>& more) {
  if (base_len < static_cast<int64_t>(tokens_.size())) {
    // Rolled back (the loop never does; the interface allows it): the maps
    // hold only the latest end of each n-gram, so rebuild them.
    tokens_.resize(static_cast<size_t>(std::max<int64_t>(base_len, 0)));
    for (auto& m : maps_) m.clear();
    indexed_ = 0;
  }
  tokens_.insert(tokens_.end(), more.begin(), more.end());
  IndexUpTo(static_cast<int64_t>(tokens_.size()));
}

std::vector<int32_t> NgramIndex::Lookup(int k) const {
  std::vector<int32_t> out;
  const int64_t len = static_cast<int64_t>(tokens_.size());
  if (k <= 0 || len < 2) return out;
  for (int n = std::min<int64_t>(o_.max_n, len - 1); n >= o_.min_n; --n) {
    const auto& m = maps_[static_cast<size_t>(n - o_.min_n)];
    const auto it = m.find(Key(len - 1, n));
    if (it == m.end() || !Same(it->second, len - 1, n)) continue;  // none, or a hash collision
    // What followed it; past the end of the sequence the proposal repeats
    // itself (a loop of period len - 1 - match).
    const int64_t from = it->second + 1;
    out.reserve(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i) {
      const int64_t p = from + i;
      out.push_back(p < len ? tokens_[static_cast<size_t>(p)] : out[static_cast<size_t>(p - len)]);
    }
    return out;
  }
  return out;
}

absl::Status NgramProposer::Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams&, Deadline) {
  SPECD_RETURN_IF_ERROR(o_.Validate());
  NgramIndex& ix = seqs_.insert_or_assign(seq, NgramIndex(o_)).first->second;
  ix.Sync(0, tokens);
  return absl::OkStatus();
}

absl::StatusOr<Proposal> NgramProposer::Propose(const ProposeRequest& req, Deadline) {
  const auto t0 = std::chrono::steady_clock::now();
  auto it = seqs_.find(req.seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("sequence ", req.seq, " is not open on the n-gram proposer"));
  NgramIndex& ix = it->second;
  if (req.base_len < 0 || req.base_len > static_cast<int64_t>(ix.tokens().size()))
    return absl::OutOfRangeError(
        absl::StrCat("sync base ", req.base_len, " outside the committed length ", ix.tokens().size()));
  ix.Sync(req.base_len, req.new_tokens);
  Proposal p;  // ref.slot < 0: q one-hot at the tokens
  p.tokens = ix.Lookup(req.k);
  // No forwards: the lookup is host work, the step's overhead.
  p.figures.worker_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace specd
