// Host-side bookkeeping of the paged KV pool: which pool blocks each sequence
// owns (its block table) and how many positions are valid. The pool's storage
// lives in the backend; this class only hands out block ids.
//
// Truncation (speculative rollback) frees the blocks past the new length: cost
// is O(blocks touched), nothing is copied.
#pragma once
#include <cstdint>
#include <map>
#include <vector>

#include "common/util/status.h"

namespace specd {

class KvBlockManager {
 public:
  KvBlockManager(int n_blocks, int block_size);

  int block_size() const { return block_size_; }
  int n_blocks() const { return n_blocks_; }
  int free_blocks() const { return static_cast<int>(free_.size()); }
  int used_blocks() const { return n_blocks_ - free_blocks(); }
  int BlocksFor(int64_t positions) const {
    return static_cast<int>((positions + block_size_ - 1) / block_size_);
  }

  // Creates an empty sequence; error if the id exists.
  absl::Status Create(int32_t seq);
  bool Exists(int32_t seq) const { return seqs_.count(seq) != 0; }
  // Ensures blocks for `len` positions (the length after the next write).
  // RESOURCE_EXHAUSTED, with nothing changed, when the pool is short.
  absl::Status Reserve(int32_t seq, int64_t len);
  // Sets the valid length; frees blocks beyond it. len may not exceed length().
  absl::Status Truncate(int32_t seq, int64_t len);
  // Records that positions [0, len) are now valid (after a forward pass).
  absl::Status SetLength(int32_t seq, int64_t len);
  void Release(int32_t seq);
  int64_t Length(int32_t seq) const;
  const std::vector<int32_t>& Blocks(int32_t seq) const;
  std::vector<int32_t> Sequences() const;

 private:
  struct Seq {
    int64_t len = 0;
    std::vector<int32_t> blocks;
  };
  int n_blocks_, block_size_;
  std::vector<int32_t> free_;  // stack of free block ids
  std::map<int32_t, Seq> seqs_;
};

}  // namespace specd
