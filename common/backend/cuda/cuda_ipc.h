// CUDA IPC for the exchange buffers (design card: "shared memory, not
// payloads"), and the speculative acceptance rule on the device.
//
// The draft worker allocates its proposal-probability buffer once with
// Create() and sends Handle() bytes (64) to the target over gRPC; the target
// maps it with Open() and reads the draft's probabilities in place. After a
// draft swap the target Close()s and Open()s the new handle. Both processes
// must use the same GPU (cudaIpc* is intra-node, and specd runs on one GPU).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/spec/acceptance.h"
#include "common/util/status.h"

namespace specd::cuda_ipc {

constexpr size_t kHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

// A device buffer that other processes can open.
struct ExportedBuffer {
  void* ptr = nullptr;   // device address in this process
  size_t bytes = 0;
  std::string handle;    // kHandleBytes opaque bytes for Open()
  int device = 0;
};

// cudaMalloc + cudaIpcGetMemHandle on `device`.
absl::StatusOr<ExportedBuffer> Create(size_t bytes, int device = 0);
// Frees a buffer from Create (after every opener closed it).
absl::Status Destroy(ExportedBuffer* buf);

// Maps another process's buffer; returns its device address in this process.
absl::StatusOr<void*> Open(const std::string& handle, int device = 0);
absl::Status Close(void* ptr);

// The acceptance rule of common/spec/acceptance.h applied on the device.
// p: (k+1) x vocab target probabilities (dense, rows sum to 1), q: k x vocab
// draft probabilities, proposals: k token ids; all three device addresses
// (q typically an Open()ed draft buffer). Runs on `stream` (a cudaStream_t,
// nullptr: the default stream) and waits for the result. Same decisions as
// VerifyProposals on the same numbers; the inverse-CDF draw sums in double in
// per-thread chunks, so a draw lying within ~1e-15 of a token boundary could
// pick the neighbour the sequential CPU sum would not.
absl::StatusOr<AcceptResult> VerifyOnDevice(const float* p, const float* q, const int32_t* proposals, int k, int vocab,
                                            uint64_t seed, int64_t pos0, void* stream = nullptr);

// ---- the exchange buffer's device rows (kind "cuda", common/shm/exchange.h) ----

// The draft's side: device rows exported for other processes, filled from
// the exchange buffer's host rows (pinned in place with cudaHostRegister
// when the driver allows it; pageable copies otherwise).
class RowsExport {
 public:
  // Allocates `device_bytes` on `device` and pins [host, host + host_bytes).
  static absl::StatusOr<std::unique_ptr<RowsExport>> Create(void* host, size_t host_bytes, size_t device_bytes,
                                                            int device);
  // Unpins the host range; the device rows are retired, not freed: a target
  // may still be reading them (a verify in flight during a draft swap), so
  // they are freed when the next export is retired (or at exit).
  ~RowsExport();
  RowsExport(const RowsExport&) = delete;
  RowsExport& operator=(const RowsExport&) = delete;

  const ExportedBuffer& buffer() const { return buf_; }
  bool pinned() const { return pinned_; }
  // Enqueues a copy of `bytes` from host `src` to device offset `dst_offset`.
  absl::Status Enqueue(const void* src, size_t dst_offset, size_t bytes);
  // Waits for every enqueued copy (then the rows may be published).
  absl::Status Wait();

 private:
  RowsExport() = default;
  ExportedBuffer buf_;
  void* host_ = nullptr;
  bool pinned_ = false;
  void* stream_ = nullptr;  // cudaStream_t
};

// The target's side: another process's device rows, mapped once per attach,
// and the acceptance rule run against them.
class RowsImport {
 public:
  // Maps the rows (`bytes` long) named by `handle`; when `owner_pid` is this
  // process (in-process draft and target), uses `owner_ptr` directly, since
  // a process cannot open its own IPC handle. Staging for up to `max_rows`
  // target rows of `vocab` floats is allocated here.
  static absl::StatusOr<std::unique_ptr<RowsImport>> Open(const std::string& handle, int device, size_t bytes,
                                                          int64_t owner_pid, uint64_t owner_ptr, int max_rows,
                                                          int vocab);
  ~RowsImport();  // unmaps (cudaIpcCloseMemHandle) and frees the staging
  RowsImport(const RowsImport&) = delete;
  RowsImport& operator=(const RowsImport&) = delete;

  const float* rows() const { return rows_; }
  bool in_process() const { return !opened_; }
  size_t staging_bytes() const { return staging_bytes_; }
  // The acceptance rule on the device: p (k+1 processed target distributions)
  // is densified on the device (from its support when that is smaller than
  // the dense rows, else uploaded dense), q is k rows of the mapped rows from
  // byte offset `q_offset`. Waits for the result.
  absl::StatusOr<AcceptResult> Accept(size_t q_offset, const std::vector<TokenDist>& p, const int32_t* proposals,
                                      int k, uint64_t seed, int64_t pos0);

 private:
  RowsImport() = default;
  int device_ = 0;
  int vocab_ = 0, max_rows_ = 0;
  size_t bytes_ = 0, staging_bytes_ = 0;
  const float* rows_ = nullptr;
  bool opened_ = false;         // rows_ came from cudaIpcOpenMemHandle
  void* stream_ = nullptr;      // cudaStream_t
  void* host_stage_ = nullptr;  // pinned: dense p rows, or ids + probs + row offsets, + proposals
  float* p_dev_ = nullptr;      // max_rows x vocab
  void* sparse_dev_ = nullptr;  // ids + probs + row offsets (as large as p_dev_)
  int32_t* props_dev_ = nullptr;
  int32_t* out_dev_ = nullptr;
};

}  // namespace specd::cuda_ipc
