// n-gram (prompt-lookup) proposals: no model. Where the text repeats itself
// (a rewrite, an edit, code that quotes its context) the tokens that followed
// the latest earlier occurrence of the sequence's last n tokens are a good
// guess of what comes next. The lookup runs over prompt + output, tries the
// longest n first (max_n down to min_n) and proposes up to k tokens that
// followed the match; the proposal is deterministic, so q is one-hot at its
// tokens (no exchange rows) and the acceptance rule stays exact under
// sampling too.
//
// The index is incremental: per n, a hash of each n-gram that has a token
// after it maps to the latest position where it ends, so a step costs
// O(max_n + k) after O(new tokens x n-widths) of indexing (host work: the
// step's overhead).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/spec/proposer.h"

namespace specd {

struct NgramOptions {
  int min_n = 1;  // the shortest suffix looked up (1: any repeated token)
  int max_n = 4;  // the longest (tried first)
  absl::Status Validate() const;
  std::string ToString() const;  // "ngram 1..4"
};

// One sequence's tokens and their n-gram index.
class NgramIndex {
 public:
  explicit NgramIndex(const NgramOptions& o);
  // The sequence becomes tokens[:base_len] + more (base_len <= size()).
  void Sync(int64_t base_len, const std::vector<int32_t>& more);
  // Up to k tokens that followed the latest earlier occurrence of the
  // longest suffix (max_n..min_n) seen before; empty when none.
  std::vector<int32_t> Lookup(int k) const;
  const std::vector<int32_t>& tokens() const { return tokens_; }

 private:
  uint64_t Key(int64_t end, int n) const;  // hash of tokens_[end-n+1..end]
  bool Same(int64_t a, int64_t b, int n) const;  // the n-grams ending at a and b are equal
  void IndexUpTo(int64_t len);                   // n-grams ending before len - 1 (each has a follower)

  NgramOptions o_;
  std::vector<int32_t> tokens_;
  int64_t indexed_ = 0;  // n-grams ending at positions < indexed_ are in maps_
  std::vector<std::unordered_map<uint64_t, int64_t>> maps_;  // [n - min_n]: key -> latest end position
};

// The Proposer: an NgramIndex per open sequence. Not thread-safe (one
// request's proposer, or one thread's, as the loop uses it).
class NgramProposer : public Proposer {
 public:
  explicit NgramProposer(const NgramOptions& o = {}) : o_(o) {}
  absl::Status Open(int32_t seq, const std::vector<int32_t>& tokens, const SamplingParams& sampling,
                    Deadline deadline) override;
  absl::StatusOr<Proposal> Propose(const ProposeRequest& req, Deadline deadline) override;
  void Release(int32_t seq) override { seqs_.erase(seq); }
  // Its Open only indexes the tokens, on the host, in this object.
  bool OpensBesideTheTarget() const override { return true; }
  const NgramOptions& options() const { return o_; }

 private:
  NgramOptions o_;
  std::map<int32_t, NgramIndex> seqs_;
};

}  // namespace specd
