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
#include <string>

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

}  // namespace specd::cuda_ipc
