// The exchange buffer: where the draft leaves its proposals for the target.
//
// The draft worker allocates one at start (and a fresh one after a model
// swap), with a slot per sequence it can hold. Layout (little-endian, every
// part 64-byte aligned):
//
//   header   magic "SPXB", version, n_slots, k_max, vocab, vocab digest
//   slot i   u64 generation (atomic), i32 seq, i32 k, i32 tokens[k_max],
//            f32 probs[k_max][vocab]   (the draft's processed distributions)
//
// Writing a slot is a seqlock: the generation is odd while the draft writes
// and is bumped to the next even value when the proposal is published. A
// Verify names (slot, generation); the reader refuses, with
// FAILED_PRECONDITION, a slot whose generation moved on (stale), a slot being
// written, or one holding another sequence's or other tokens. Each buffer
// starts its generations at a random base, so a reference into a previous
// buffer (before a swap) does not match by accident.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "common/shm/shared_buffer.h"

namespace specd {

// Names one published proposal.
struct ExchangeRef {
  int32_t slot = -1;
  uint64_t generation = 0;
};

class ExchangeBuffer {
 public:
  static constexpr uint32_t kMagic = 0x42585053;  // "SPXB"
  static constexpr uint32_t kVersion = 1;
  static constexpr int kMaxSlots = 1 << 16;
  static constexpr int kMaxK = 256;
  static constexpr int kMaxVocab = 1 << 24;

  // Bytes a buffer of this shape takes; 0 when a dimension is out of range.
  static size_t BytesFor(int n_slots, int k_max, int vocab);
  // The draft side: allocates a zeroed buffer.
  static absl::StatusOr<std::unique_ptr<ExchangeBuffer>> Create(const std::string& kind, int n_slots, int k_max,
                                                                int vocab, const std::string& vocab_digest);
  // The target side: maps another process's buffer read-only and validates
  // its header against the mapping's size.
  static absl::StatusOr<std::unique_ptr<ExchangeBuffer>> Attach(const std::string& kind, const std::string& name);

  std::string kind() const { return buf_->Kind(); }
  const std::string& name() const { return buf_->Name(); }
  size_t bytes() const { return buf_->size(); }
  int n_slots() const { return n_slots_; }
  int k_max() const { return k_max_; }
  int vocab() const { return vocab_; }
  const std::string& vocab_digest() const { return digest_; }

  // ---- writer (the draft) ----
  // Marks the slot as being written and returns its k_max x vocab rows.
  float* BeginWrite(int slot);
  // Records the proposal and publishes it; returns its generation.
  uint64_t Publish(int slot, int32_t seq, std::span<const int32_t> tokens);

  // ---- reader (the target) ----
  // Copies the proposal's k x vocab probabilities into `q` after checking
  // that `ref` is current and holds exactly `tokens` of sequence `seq`.
  absl::Status Read(const ExchangeRef& ref, int32_t seq, std::span<const int32_t> tokens, std::vector<float>* q) const;

 private:
  ExchangeBuffer() = default;
  uint8_t* Slot(int slot) const;
  std::unique_ptr<SharedBuffer> buf_;
  int n_slots_ = 0, k_max_ = 0, vocab_ = 0;
  size_t slot_stride_ = 0, probs_offset_ = 0;
  std::string digest_;
};

}  // namespace specd
