#include "common/shm/exchange.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstring>
#include <ctime>
#include <random>

namespace specd {
namespace {

constexpr size_t kAlign = 64;
constexpr size_t kHeaderBytes = 256;
constexpr size_t kDigestBytes = 64;

// Device kinds of the header's device-rows descriptor (0: host rows only).
constexpr uint32_t kDeviceNone = 0;
constexpr uint32_t kDeviceCudaIpc = 1;

struct Header {
  uint32_t magic, version, n_slots, k_max, vocab, reserved;
  uint64_t slot_stride, probs_offset;
  char digest[kDigestBytes];
  // Device rows ("cuda" kind); all zero in a posix buffer.
  uint32_t dev_kind;
  int32_t dev_ordinal;
  uint64_t dev_bytes;
  int64_t dev_owner_pid;
  uint64_t dev_owner_ptr;
  char dev_handle[ExchangeBuffer::kDeviceHandleBytes];
  uint32_t host_rows_wanted;  // atomic: a reader asked for host rows
};
static_assert(sizeof(Header) <= kHeaderBytes);

// Slot prefix; tokens follow it, then (aligned) the probabilities.
struct SlotHead {
  uint64_t generation;
  int32_t seq;
  int32_t k;
  uint32_t rows;  // ExchangeBuffer::kRows* flags
  uint32_t reserved;
};
static_assert(std::atomic_ref<uint64_t>::is_always_lock_free);

size_t AlignUp(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

bool Shape(int n_slots, int k_max, int vocab, size_t* stride, size_t* probs_offset) {
  if (n_slots < 1 || n_slots > ExchangeBuffer::kMaxSlots || k_max < 1 || k_max > ExchangeBuffer::kMaxK || vocab < 1 ||
      vocab > ExchangeBuffer::kMaxVocab)
    return false;
  *probs_offset = AlignUp(sizeof(SlotHead) + sizeof(int32_t) * static_cast<size_t>(k_max));
  *stride = AlignUp(*probs_offset + sizeof(float) * static_cast<size_t>(k_max) * static_cast<size_t>(vocab));
  return true;
}

std::atomic_ref<uint64_t> Gen(uint8_t* slot) { return std::atomic_ref<uint64_t>(reinterpret_cast<SlotHead*>(slot)->generation); }

// The generation's low 32 bits (little-endian: the word at its address) are
// the futex a pipelined reader sleeps on; shared (not FUTEX_PRIVATE), as the
// writer is another process.
uint32_t* FutexWord(uint8_t* slot) { return reinterpret_cast<uint32_t*>(&reinterpret_cast<SlotHead*>(slot)->generation); }
static_assert(std::endian::native == std::endian::little);

absl::Status Stale(const ExchangeRef& ref, const std::string& why) {
  return absl::FailedPreconditionError(
      absl::StrCat("draft proposal in exchange slot ", ref.slot, " generation ", ref.generation, " is unusable: ", why));
}

}  // namespace

size_t ExchangeBuffer::BytesFor(int n_slots, int k_max, int vocab) {
  size_t stride, off;
  if (!Shape(n_slots, k_max, vocab, &stride, &off)) return 0;
  return kHeaderBytes + stride * static_cast<size_t>(n_slots);
}

absl::StatusOr<std::unique_ptr<ExchangeBuffer>> ExchangeBuffer::Create(const std::string& kind, int n_slots, int k_max,
                                                                       int vocab, const std::string& vocab_digest) {
  const size_t bytes = BytesFor(n_slots, k_max, vocab);
  if (bytes == 0)
    return absl::InvalidArgumentError(absl::StrCat("exchange buffer shape out of range: ", n_slots, " slots, k_max ",
                                                   k_max, ", vocab ", vocab));
  std::unique_ptr<ExchangeBuffer> x(new ExchangeBuffer());
  SPECD_ASSIGN_OR_RETURN(x->buf_, CreateSharedBuffer(kind, bytes));
  Shape(n_slots, k_max, vocab, &x->slot_stride_, &x->probs_offset_);
  x->n_slots_ = n_slots;
  x->k_max_ = k_max;
  x->vocab_ = vocab;
  x->digest_ = vocab_digest.substr(0, kDigestBytes);
  Header h{};
  h.magic = kMagic;
  h.version = kVersion;
  h.n_slots = static_cast<uint32_t>(n_slots);
  h.k_max = static_cast<uint32_t>(k_max);
  h.vocab = static_cast<uint32_t>(vocab);
  h.slot_stride = x->slot_stride_;
  h.probs_offset = x->probs_offset_;
  std::memcpy(h.digest, x->digest_.data(), x->digest_.size());
  std::memcpy(x->buf_->data(), &h, sizeof(h));
  // A random even base per buffer: references into an earlier buffer miss.
  std::random_device rd;
  const uint64_t base = ((static_cast<uint64_t>(rd()) << 32 | rd()) >> 2) & ~uint64_t{1};
  for (int s = 0; s < n_slots; ++s) {
    uint8_t* p = x->Slot(s);
    reinterpret_cast<SlotHead*>(p)->seq = -1;
    Gen(p).store(base, std::memory_order_release);
  }
  return x;
}

absl::StatusOr<std::unique_ptr<ExchangeBuffer>> ExchangeBuffer::Attach(const std::string& kind, const std::string& name) {
  std::unique_ptr<ExchangeBuffer> x(new ExchangeBuffer());
  // A "cuda" buffer's header, tokens and generations are POSIX shared memory.
  // Writable when allowed, for the host-rows request word only.
  const std::string shm_kind = kind == "cuda" ? "posix" : kind;
  auto rw = OpenSharedBuffer(shm_kind, name, /*writable=*/true);
  if (rw.ok()) {
    x->buf_ = std::move(*rw);
  } else {
    SPECD_ASSIGN_OR_RETURN(x->buf_, OpenSharedBuffer(shm_kind, name, /*writable=*/false));
  }
  if (x->buf_->size() < kHeaderBytes)
    return absl::InvalidArgumentError(absl::StrCat("exchange buffer '", name, "' is too small for its header"));
  Header h;
  std::memcpy(&h, x->buf_->data(), sizeof(h));
  if (h.magic != kMagic) return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not an exchange buffer (bad magic)"));
  if (h.version != kVersion)
    return absl::InvalidArgumentError(absl::StrCat("exchange buffer '", name, "' has version ", h.version, ", expected ", kVersion));
  size_t stride, off;
  if (h.n_slots > kMaxSlots || h.k_max > kMaxK || h.vocab > kMaxVocab ||
      !Shape(static_cast<int>(h.n_slots), static_cast<int>(h.k_max), static_cast<int>(h.vocab), &stride, &off) ||
      stride != h.slot_stride || off != h.probs_offset)
    return absl::InvalidArgumentError(absl::StrCat("exchange buffer '", name, "' has an inconsistent header"));
  if (BytesFor(static_cast<int>(h.n_slots), static_cast<int>(h.k_max), static_cast<int>(h.vocab)) > x->buf_->size())
    return absl::InvalidArgumentError(absl::StrCat("exchange buffer '", name, "' is smaller than its header says"));
  x->n_slots_ = static_cast<int>(h.n_slots);
  x->k_max_ = static_cast<int>(h.k_max);
  x->vocab_ = static_cast<int>(h.vocab);
  x->slot_stride_ = stride;
  x->probs_offset_ = off;
  x->digest_.assign(h.digest, strnlen(h.digest, kDigestBytes));
  if (h.dev_kind == kDeviceCudaIpc) {
    if (h.dev_bytes != x->DeviceRowsBytes() || h.dev_ordinal < 0 || h.dev_owner_pid <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("exchange buffer '", name, "' has an inconsistent device-rows descriptor (", h.dev_bytes,
                       " bytes, device ", h.dev_ordinal, "; its shape needs ", x->DeviceRowsBytes(), " bytes)"));
    ExchangeDeviceRows d;
    d.handle.assign(h.dev_handle, kDeviceHandleBytes);
    d.device = h.dev_ordinal;
    d.bytes = h.dev_bytes;
    d.owner_pid = h.dev_owner_pid;
    d.owner_ptr = h.dev_owner_ptr;
    x->device_ = std::move(d);
  } else if (h.dev_kind != kDeviceNone) {
    return absl::InvalidArgumentError(
        absl::StrCat("exchange buffer '", name, "' has device rows of unknown kind ", h.dev_kind));
  }
  if (kind == "cuda" && !x->device_)
    return absl::InvalidArgumentError(
        absl::StrCat("exchange buffer '", name, "' was named as kind cuda but exports no device rows"));
  return x;
}

size_t ExchangeBuffer::DeviceRowsBytes() const {
  return sizeof(float) * static_cast<size_t>(n_slots_) * static_cast<size_t>(k_max_) * static_cast<size_t>(vocab_);
}

size_t ExchangeBuffer::DeviceSlotOffset(int slot) const {
  return sizeof(float) * static_cast<size_t>(slot) * static_cast<size_t>(k_max_) * static_cast<size_t>(vocab_);
}

const float* ExchangeBuffer::HostRows(int slot) const {
  if (slot < 0 || slot >= n_slots_) return nullptr;
  return reinterpret_cast<const float*>(Slot(slot) + probs_offset_);
}

absl::Status ExchangeBuffer::SetDeviceRows(const ExchangeDeviceRows& rows) {
  if (!buf_->writable() || !buf_->owner())
    return absl::FailedPreconditionError("only the buffer's creator records its device rows");
  if (device_) return absl::FailedPreconditionError("the exchange buffer already has device rows");
  if (rows.handle.size() != kDeviceHandleBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("device-rows handle has ", rows.handle.size(), " bytes, expected ", kDeviceHandleBytes));
  if (rows.bytes != DeviceRowsBytes())
    return absl::InvalidArgumentError(
        absl::StrCat("device rows of ", rows.bytes, " bytes; this buffer's shape needs ", DeviceRowsBytes()));
  Header h;
  std::memcpy(&h, buf_->data(), sizeof(h));
  h.dev_kind = kDeviceCudaIpc;
  h.dev_ordinal = rows.device;
  h.dev_bytes = rows.bytes;
  h.dev_owner_pid = rows.owner_pid;
  h.dev_owner_ptr = rows.owner_ptr;
  std::memcpy(h.dev_handle, rows.handle.data(), kDeviceHandleBytes);
  std::memcpy(buf_->data(), &h, sizeof(h));
  std::atomic_thread_fence(std::memory_order_release);
  device_ = rows;
  return absl::OkStatus();
}

uint8_t* ExchangeBuffer::Slot(int slot) const {
  return static_cast<uint8_t*>(const_cast<void*>(buf_->data())) + kHeaderBytes +
         static_cast<size_t>(slot) * slot_stride_;
}

float* ExchangeBuffer::BeginWrite(int slot) {
  if (slot < 0 || slot >= n_slots_ || !buf_->writable() || !buf_->owner()) return nullptr;
  uint8_t* p = Slot(slot);
  auto gen = Gen(p);
  const uint64_t g = gen.load(std::memory_order_relaxed);
  if ((g & 1) == 0) gen.store(g + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  return reinterpret_cast<float*>(p + probs_offset_);
}

uint64_t ExchangeBuffer::Publish(int slot, int32_t seq, std::span<const int32_t> tokens, uint32_t rows) {
  if (slot < 0 || slot >= n_slots_ || !buf_->writable() || !buf_->owner()) return 0;
  uint8_t* p = Slot(slot);
  auto* head = reinterpret_cast<SlotHead*>(p);
  const size_t k = std::min(tokens.size(), static_cast<size_t>(k_max_));
  head->seq = seq;
  head->k = static_cast<int32_t>(k);
  head->rows = rows;
  if (k) std::memcpy(p + sizeof(SlotHead), tokens.data(), k * sizeof(int32_t));
  auto gen = Gen(p);
  const uint64_t next = (gen.load(std::memory_order_relaxed) | 1) + 1;
  gen.store(next, std::memory_order_release);
  // Wakes a target waiting for this proposal (a pipelined Verify); about a
  // microsecond when nobody waits.
  syscall(SYS_futex, FutexWord(p), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  return next;
}

namespace {
std::atomic_ref<uint32_t> HostRowsWord(void* mapping) {
  return std::atomic_ref<uint32_t>(static_cast<Header*>(mapping)->host_rows_wanted);
}
}  // namespace

bool ExchangeBuffer::host_rows_requested() const {
  return HostRowsWord(const_cast<void*>(buf_->data())).load(std::memory_order_relaxed) != 0;
}

bool ExchangeBuffer::RequestHostRows() {
  if (!buf_->writable()) return false;
  HostRowsWord(buf_->data()).store(1, std::memory_order_relaxed);
  return true;
}

absl::StatusOr<uint32_t> ExchangeBuffer::Check(const ExchangeRef& ref, int32_t seq,
                                               std::span<const int32_t> tokens) const {
  if (ref.slot < 0 || ref.slot >= n_slots_)
    return Stale(ref, absl::StrCat("no such slot (the buffer has ", n_slots_, ")"));
  if (tokens.size() > static_cast<size_t>(k_max_))
    return Stale(ref, absl::StrCat(tokens.size(), " tokens exceed the buffer's k_max ", k_max_));
  uint8_t* p = Slot(ref.slot);
  auto gen = Gen(p);
  const uint64_t g1 = gen.load(std::memory_order_acquire);
  if (g1 & 1) return Stale(ref, "the draft is rewriting the slot");
  if (g1 != ref.generation) return Stale(ref, absl::StrCat("stale (the slot is at generation ", g1, ")"));
  const auto* head = reinterpret_cast<const SlotHead*>(p);
  if (head->seq != seq)
    return Stale(ref, absl::StrCat("the slot holds sequence ", head->seq, ", not ", seq));
  if (head->k != static_cast<int32_t>(tokens.size()))
    return Stale(ref, absl::StrCat("the slot holds ", head->k, " tokens, the request names ", tokens.size()));
  if (!tokens.empty() && std::memcmp(p + sizeof(SlotHead), tokens.data(), tokens.size() * sizeof(int32_t)) != 0)
    return Stale(ref, "the slot holds other tokens than the request names");
  const uint32_t rows = head->rows;
  std::atomic_thread_fence(std::memory_order_acquire);
  if (gen.load(std::memory_order_relaxed) != g1) return Stale(ref, "the draft rewrote the slot while it was read");
  return rows;
}

bool ExchangeBuffer::Current(const ExchangeRef& ref) const {
  if (ref.slot < 0 || ref.slot >= n_slots_) return false;
  std::atomic_thread_fence(std::memory_order_acquire);
  return Gen(Slot(ref.slot)).load(std::memory_order_acquire) == ref.generation && (ref.generation & 1) == 0;
}

uint64_t ExchangeBuffer::Generation(int slot) const {
  if (slot < 0 || slot >= n_slots_) return 0;
  return Gen(Slot(slot)).load(std::memory_order_acquire);
}

std::optional<ExchangeBuffer::Published> ExchangeBuffer::PublishedAfter(int slot, int32_t seq, uint64_t after) const {
  if (slot < 0 || slot >= n_slots_) return std::nullopt;
  uint8_t* p = Slot(slot);
  auto gen = Gen(p);
  const uint64_t g1 = gen.load(std::memory_order_acquire);
  if ((g1 & 1) || g1 <= after) return std::nullopt;
  const auto* head = reinterpret_cast<const SlotHead*>(p);
  Published out;
  out.ref = ExchangeRef{slot, g1};
  const int32_t owner = head->seq, k = head->k;
  if (k >= 0 && k <= k_max_) {
    out.tokens.resize(static_cast<size_t>(k));
    if (k) std::memcpy(out.tokens.data(), p + sizeof(SlotHead), static_cast<size_t>(k) * sizeof(int32_t));
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  if (gen.load(std::memory_order_relaxed) != g1 || owner != seq || k < 0 || k > k_max_) return std::nullopt;
  return out;
}

void ExchangeBuffer::WaitForChange(int slot, uint64_t seen, std::chrono::microseconds timeout) const {
  if (slot < 0 || slot >= n_slots_ || timeout.count() <= 0) return;
  const timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
  // Returns at once when the word already differs (EAGAIN); a failing futex
  // (EFAULT, ENOSYS) degrades to a plain sleep.
  if (syscall(SYS_futex, FutexWord(Slot(slot)), FUTEX_WAIT, static_cast<uint32_t>(seen), &ts, nullptr, 0) != 0 &&
      errno != EAGAIN && errno != ETIMEDOUT && errno != EINTR)
    nanosleep(&ts, nullptr);
}

absl::Status ExchangeBuffer::Read(const ExchangeRef& ref, int32_t seq, std::span<const int32_t> tokens,
                                  std::vector<float>* q) const {
  SPECD_ASSIGN_OR_RETURN(const uint32_t rows, Check(ref, seq, tokens));
  if (rows == 0) {  // one-hot: no rows to copy
    q->clear();
    return absl::OkStatus();
  }
  if (!(rows & kRowsHost))
    return Stale(ref, "its rows are on the device only (the draft writes host rows once asked: RequestHostRows)");
  const size_t n = tokens.size() * static_cast<size_t>(vocab_);
  q->resize(n);
  if (n) std::memcpy(q->data(), Slot(ref.slot) + probs_offset_, n * sizeof(float));
  std::atomic_thread_fence(std::memory_order_acquire);
  if (!Current(ref)) return Stale(ref, "the draft rewrote the slot while it was read");
  return absl::OkStatus();
}

}  // namespace specd
