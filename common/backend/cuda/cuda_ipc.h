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

// The draft's side: device rows exported for other processes, written by the
// draft's sampler in place. The exchange buffer's host mapping is pinned in
// place (cudaHostRegister, when the driver allows it) so that copies of the
// rows to the host rows, when a reader asks for them, are DMA.
class RowsExport {
 public:
  // Allocates `device_bytes` (zeroed) on `device` and pins [host, host + host_bytes).
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

 private:
  RowsExport() = default;
  ExportedBuffer buf_;
  void* host_ = nullptr;
  bool pinned_ = false;
};

// The target's side: another process's device rows, mapped once per attach;
// the target's acceptance kernel reads them in place.
class RowsImport {
 public:
  // Maps the rows (`bytes` long) named by `handle`; when `owner_pid` is this
  // process (in-process draft and target), uses `owner_ptr` directly, since
  // a process cannot open its own IPC handle.
  static absl::StatusOr<std::unique_ptr<RowsImport>> Open(const std::string& handle, int device, size_t bytes,
                                                          int64_t owner_pid, uint64_t owner_ptr);
  ~RowsImport();  // unmaps (cudaIpcCloseMemHandle)
  RowsImport(const RowsImport&) = delete;
  RowsImport& operator=(const RowsImport&) = delete;

  const float* rows() const { return rows_; }
  size_t bytes() const { return bytes_; }
  bool in_process() const { return !opened_; }

 private:
  RowsImport() = default;
  int device_ = 0;
  size_t bytes_ = 0;
  const float* rows_ = nullptr;
  bool opened_ = false;  // rows_ came from cudaIpcOpenMemHandle
};

}  // namespace specd::cuda_ipc
