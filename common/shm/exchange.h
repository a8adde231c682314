// The exchange buffer: where the draft leaves its proposals for the target.
//
// The draft worker allocates one at start (and a fresh one after a model
// swap), with a slot per sequence it can hold. Layout (little-endian, every
// part 64-byte aligned):
//
//   header   magic "SPXB", version, n_slots, k_max, vocab, vocab digest,
//            device rows (below), u32 host-rows request (atomic)
//   slot i   u64 generation (atomic), i32 seq, i32 k, u32 rows,
//            i32 tokens[k_max],
//            f32 probs[k_max][vocab]   (the draft's processed distributions)
//
// A slot's `rows` says where its q rows are: kRowsHost (the probs above),
// kRowsDevice (the device rows below), both, or neither: then q_i is one-hot
// at x_i (a draft decoding greedily writes no rows at all).
//
// Device rows (kind "cuda"): when the draft runs on the CUDA backend it also
// keeps a copy of every slot's k_max x vocab rows in device memory exported
// with cudaIpcGetMemHandle, and records that handle, the device, the size and
// its own pid and device address in the header (so gRPC still carries only
// the shm name). The host rows above are written as before (they are the
// staging buffer of the copy), so a target that cannot use the device rows
// (CPU backend, IPC unavailable) reads the host rows: the same proposals.
// Such a reader sets the header's host-rows request, and from then on the
// draft copies the rows it writes on the device to the host rows too (a
// proposal published before that has device rows only, and is refused by
// that reader with FAILED_PRECONDITION). Device slot s starts at
// s * k_max * vocab floats.
//
// Writing a slot is a seqlock: the generation is odd while the draft writes
// and is bumped to the next even value when the proposal is published
// (waking, through a shared futex on its low 32 bits, a reader that waits
// for it: WaitForChange). A
// Verify names (slot, generation); the reader refuses, with
// FAILED_PRECONDITION, a slot whose generation moved on (stale), a slot being
// written, or one holding another sequence's or other tokens. Each buffer
// starts its generations at a random base, so a reference into a previous
// buffer (before a swap) does not match by accident.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
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

// The device half of a "cuda" exchange buffer, as its header records it.
struct ExchangeDeviceRows {
  std::string handle;      // opaque IPC handle (kDeviceHandleBytes bytes)
  int32_t device = 0;      // device ordinal in the creating process
  uint64_t bytes = 0;      // n_slots * k_max * vocab floats
  int64_t owner_pid = 0;   // the creating process
  uint64_t owner_ptr = 0;  // the rows' device address in that process
};

class ExchangeBuffer {
 public:
  static constexpr uint32_t kMagic = 0x42585053;  // "SPXB"
  static constexpr uint32_t kVersion = 2;
  // Where a slot's q rows are (bit flags; none: one-hot at the tokens).
  static constexpr uint32_t kRowsHost = 1;
  static constexpr uint32_t kRowsDevice = 2;
  static constexpr int kMaxSlots = 1 << 16;
  static constexpr int kMaxK = 256;
  static constexpr int kMaxVocab = 1 << 24;
  static constexpr size_t kDeviceHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

  // Bytes a buffer of this shape takes; 0 when a dimension is out of range.
  static size_t BytesFor(int n_slots, int k_max, int vocab);
  // The draft side: allocates a zeroed buffer.
  static absl::StatusOr<std::unique_ptr<ExchangeBuffer>> Create(const std::string& kind, int n_slots, int k_max,
                                                                int vocab, const std::string& vocab_digest);
  // The target side: maps another process's buffer read-only and validates
  // its header against the mapping's size. Kind "cuda" maps the POSIX part
  // by `name` and requires device rows in the header.
  static absl::StatusOr<std::unique_ptr<ExchangeBuffer>> Attach(const std::string& kind, const std::string& name);

  // "cuda" once device rows are recorded, else the shared buffer's kind.
  std::string kind() const { return device_ ? "cuda" : buf_->Kind(); }
  const std::string& name() const { return buf_->Name(); }
  size_t bytes() const { return buf_->size(); }
  int n_slots() const { return n_slots_; }
  int k_max() const { return k_max_; }
  int vocab() const { return vocab_; }
  const std::string& vocab_digest() const { return digest_; }
  // The device rows recorded in the header (nullptr: host rows only).
  const ExchangeDeviceRows* device_rows() const { return device_ ? &*device_ : nullptr; }
  // Bytes of device rows this shape needs, and where slot `slot` starts in them.
  size_t DeviceRowsBytes() const;
  size_t DeviceSlotOffset(int slot) const;
  // The whole mapping (the writer pins it for device copies).
  void* mapping() const { return const_cast<void*>(buf_->data()); }
  // The slot's k_max x vocab host rows (what BeginWrite returns; nullptr for a bad slot).
  const float* HostRows(int slot) const;

  // ---- writer (the draft) ----
  // Marks the slot as being written and returns its k_max x vocab rows.
  float* BeginWrite(int slot);
  // Records the proposal and where its rows are (kRows* flags; 0: one-hot)
  // and publishes it; returns its generation.
  uint64_t Publish(int slot, int32_t seq, std::span<const int32_t> tokens, uint32_t rows);
  // Whether a reader asked for host rows (RequestHostRows).
  bool host_rows_requested() const;
  // Records device rows in the header (once, before any reader attaches);
  // kind() becomes "cuda".
  absl::Status SetDeviceRows(const ExchangeDeviceRows& rows);

  // ---- reader (the target) ----
  // Copies the proposal's k x vocab probabilities into `q` after checking
  // that `ref` is current and holds exactly `tokens` of sequence `seq`, with
  // host rows (FAILED_PRECONDITION otherwise; q is cleared for one-hot rows).
  absl::Status Read(const ExchangeRef& ref, int32_t seq, std::span<const int32_t> tokens, std::vector<float>* q) const;
  // Read's checks without the copy, for readers that use the rows in place
  // and then confirm with Current() after using them; returns the slot's
  // kRows* flags.
  absl::StatusOr<uint32_t> Check(const ExchangeRef& ref, int32_t seq, std::span<const int32_t> tokens) const;
  // Whether the slot still holds generation ref.generation, published.
  bool Current(const ExchangeRef& ref) const;
  // Asks the draft to write host rows for every proposal from now on (a
  // reader that cannot use the device rows). False when this mapping is
  // read-only (another user's buffer).
  bool RequestHostRows();

  // ---- reader, pipelined (the target takes a proposal from the buffer
  // before the coordinator has it back) ----
  struct Published {
    ExchangeRef ref;
    std::vector<int32_t> tokens;
  };
  // The slot's proposal when it is published, holds `seq` and is newer than
  // generation `after` (nullopt: not yet: being written, older, or another
  // sequence's).
  std::optional<Published> PublishedAfter(int slot, int32_t seq, uint64_t after) const;
  // The slot's generation now (0 for a bad slot).
  uint64_t Generation(int slot) const;
  // Sleeps until the slot's generation is no longer `seen` (Publish wakes
  // it) or `timeout` passes; may return early.
  void WaitForChange(int slot, uint64_t seen, std::chrono::microseconds timeout) const;

 private:
  ExchangeBuffer() = default;
  uint8_t* Slot(int slot) const;
  std::unique_ptr<SharedBuffer> buf_;
  int n_slots_ = 0, k_max_ = 0, vocab_ = 0;
  size_t slot_stride_ = 0, probs_offset_ = 0;
  std::string digest_;
  std::optional<ExchangeDeviceRows> device_;
};

}  // namespace specd
