#include "common/backend/cuda/cuda_ipc.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/backend/cuda/kernels.h"

namespace specd::cuda_ipc {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kHandleBytes);

absl::Status CudaStatus(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return absl::OkStatus();
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

}  // namespace

absl::StatusOr<ExportedBuffer> Create(size_t bytes, int device) {
  if (bytes == 0) return absl::InvalidArgumentError("cannot export an empty buffer");
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  ExportedBuffer b;
  b.bytes = bytes;
  b.device = device;
  // Plain cudaMalloc: IPC handles cannot be taken of virtual-memory or managed allocations.
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaMalloc(&b.ptr, bytes), "allocating an exchange buffer"));
  cudaIpcMemHandle_t h;
  const cudaError_t e = cudaIpcGetMemHandle(&h, b.ptr);
  if (e != cudaSuccess) {
    cudaFree(b.ptr);
    return CudaStatus(e, "cudaIpcGetMemHandle");
  }
  b.handle.assign(reinterpret_cast<const char*>(&h), sizeof(h));
  return b;
}

absl::Status Destroy(ExportedBuffer* buf) {
  if (!buf->ptr) return absl::OkStatus();
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(buf->device), "cudaSetDevice"));
  const cudaError_t e = cudaFree(buf->ptr);
  buf->ptr = nullptr;
  buf->handle.clear();
  return CudaStatus(e, "freeing an exchange buffer");
}

absl::StatusOr<void*> Open(const std::string& handle, int device) {
  if (handle.size() != kHandleBytes)
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA IPC handle has ", handle.size(), " bytes, expected ", kHandleBytes));
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle.data(), sizeof(h));
  void* ptr = nullptr;
  SPECD_RETURN_IF_ERROR(
      CudaStatus(cudaIpcOpenMemHandle(&ptr, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle"));
  return ptr;
}

absl::Status Close(void* ptr) {
  if (!ptr) return absl::OkStatus();
  return CudaStatus(cudaIpcCloseMemHandle(ptr), "cudaIpcCloseMemHandle");
}

absl::StatusOr<AcceptResult> VerifyOnDevice(const float* p, const float* q, const int32_t* proposals, int k, int vocab,
                                            uint64_t seed, int64_t pos0, void* stream) {
  if (k < 0 || vocab < 1) return absl::InvalidArgumentError("VerifyOnDevice: need k >= 0 and vocab >= 1");
  auto s = static_cast<cudaStream_t>(stream);
  int32_t* out = nullptr;
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaMallocAsync(reinterpret_cast<void**>(&out), 3 * sizeof(int32_t), s),
                                   "allocating the acceptance result"));
  int32_t host[3] = {0, -1, 0};
  cudaError_t e = cuda::LaunchAccept(p, q, proposals, k, vocab, seed, pos0, out, s);
  if (e == cudaSuccess) e = cudaMemcpyAsync(host, out, sizeof(host), cudaMemcpyDeviceToHost, s);
  const cudaError_t fe = cudaFreeAsync(out, s);
  if (e == cudaSuccess) e = fe;
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  SPECD_RETURN_IF_ERROR(CudaStatus(e, "device acceptance"));
  AcceptResult r;
  r.n_accepted = host[0];
  r.next_token = host[1];
  r.bonus = host[2] != 0;
  return r;
}

// ---------------------------------------------------------------- RowsExport

namespace {

// The last retired export (see ~RowsExport): freed when the next one retires.
std::mutex g_retired_mu;
std::optional<ExportedBuffer> g_retired;

void Retire(ExportedBuffer b) {
  std::optional<ExportedBuffer> old;
  {
    std::lock_guard<std::mutex> l(g_retired_mu);
    old = std::move(g_retired);
    g_retired = std::move(b);
  }
  if (old) Destroy(&*old).IgnoreError();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RowsExport>> RowsExport::Create(void* host, size_t host_bytes, size_t device_bytes,
                                                               int device) {
  std::unique_ptr<RowsExport> x(new RowsExport());
  SPECD_ASSIGN_OR_RETURN(x->buf_, cuda_ipc::Create(device_bytes, device));
  // Zeroed like the host rows, so that nothing uninitialized is ever read.
  if (const cudaError_t e = cudaMemset(x->buf_.ptr, 0, device_bytes); e != cudaSuccess) {
    Destroy(&x->buf_).IgnoreError();
    return CudaStatus(e, "preparing the exchange buffer's device rows");
  }
  // Pinning the shared-memory mapping in place makes copies to the host rows
  // DMA; when the driver refuses, cudaMemcpyAsync stages pageable memory
  // itself. The mapping covers whole pages: register all of them.
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  host_bytes = (host_bytes + page - 1) / page * page;
  if (host && host_bytes && cudaHostRegister(host, host_bytes, cudaHostRegisterDefault) == cudaSuccess) {
    x->host_ = host;
    x->pinned_ = true;
  } else {
    (void)cudaGetLastError();  // clear the (non-sticky) registration error
  }
  return x;
}

RowsExport::~RowsExport() {
  cudaSetDevice(buf_.device);
  if (pinned_) cudaHostUnregister(host_);
  if (buf_.ptr) Retire(buf_);
}

// ---------------------------------------------------------------- RowsImport

absl::StatusOr<std::unique_ptr<RowsImport>> RowsImport::Open(const std::string& handle, int device, size_t bytes,
                                                             int64_t owner_pid, uint64_t owner_ptr) {
  std::unique_ptr<RowsImport> x(new RowsImport());
  x->device_ = device;
  x->bytes_ = bytes;
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  if (owner_pid == static_cast<int64_t>(getpid())) {
    x->rows_ = reinterpret_cast<const float*>(static_cast<uintptr_t>(owner_ptr));
  } else {
    SPECD_ASSIGN_OR_RETURN(void* p, cuda_ipc::Open(handle, device));
    x->rows_ = static_cast<const float*>(p);
    x->opened_ = true;
  }
  return x;
}

RowsImport::~RowsImport() {
  cudaSetDevice(device_);
  if (opened_) cuda_ipc::Close(const_cast<float*>(rows_)).IgnoreError();
}

}  // namespace specd::cuda_ipc
