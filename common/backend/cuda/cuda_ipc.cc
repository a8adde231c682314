#include "common/backend/cuda/cuda_ipc.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <optional>

#include "common/backend/cuda/kernels.h"

namespace specd::cuda {
// k_accept.cu: densifies sparse rows (offsets: rows + 1 entries) into zeroed p.
cudaError_t LaunchScatterRows(const int32_t* offsets, const int32_t* ids, const float* probs, int rows,
                              int max_row_entries, int vocab, float* p, cudaStream_t s);
}  // namespace specd::cuda

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

constexpr size_t kStageAlign = 64;
size_t AlignUp(size_t n) { return (n + kStageAlign - 1) / kStageAlign * kStageAlign; }

}  // namespace

absl::StatusOr<std::unique_ptr<RowsExport>> RowsExport::Create(void* host, size_t host_bytes, size_t device_bytes,
                                                               int device) {
  std::unique_ptr<RowsExport> x(new RowsExport());
  SPECD_ASSIGN_OR_RETURN(x->buf_, cuda_ipc::Create(device_bytes, device));
  // Zeroed like the host rows, so that nothing uninitialized is ever read.
  cudaError_t e = cudaMemset(x->buf_.ptr, 0, device_bytes);
  cudaStream_t s = nullptr;
  if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  if (e != cudaSuccess) {
    Destroy(&x->buf_).IgnoreError();
    return CudaStatus(e, "preparing the exchange buffer's device rows");
  }
  x->stream_ = s;
  // Pinning the shared-memory mapping in place makes the copies DMA; when
  // the driver refuses, cudaMemcpyAsync stages pageable memory itself.
  // The mapping covers whole pages: register all of them.
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
  if (stream_) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  if (pinned_) cudaHostUnregister(host_);
  if (buf_.ptr) Retire(buf_);
}

absl::Status RowsExport::Enqueue(const void* src, size_t dst_offset, size_t bytes) {
  if (dst_offset > buf_.bytes || bytes > buf_.bytes - dst_offset)
    return absl::OutOfRangeError(absl::StrCat("device-row copy of ", bytes, " bytes at ", dst_offset,
                                              " exceeds the exchange buffer's ", buf_.bytes, " device bytes"));
  if (bytes == 0) return absl::OkStatus();
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(buf_.device), "cudaSetDevice"));
  return CudaStatus(cudaMemcpyAsync(static_cast<uint8_t*>(buf_.ptr) + dst_offset, src, bytes, cudaMemcpyHostToDevice,
                                    static_cast<cudaStream_t>(stream_)),
                    "copying draft probabilities to the device");
}

absl::Status RowsExport::Wait() {
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(buf_.device), "cudaSetDevice"));
  return CudaStatus(cudaStreamSynchronize(static_cast<cudaStream_t>(stream_)),
                    "copying draft probabilities to the device");
}

// ---------------------------------------------------------------- RowsImport

// Host staging layout: [out: 4 x i32][proposals: max_rows x i32] (aligned),
// then the main area of max_rows x vocab floats holding either the dense p
// rows or, for sparse p, [offsets: rows + 1][ids: nnz][probs: nnz] (4-byte
// words). The device mirrors the main area in sparse_dev_.
absl::StatusOr<std::unique_ptr<RowsImport>> RowsImport::Open(const std::string& handle, int device, size_t bytes,
                                                             int64_t owner_pid, uint64_t owner_ptr, int max_rows,
                                                             int vocab) {
  if (max_rows < 1 || vocab < 1) return absl::InvalidArgumentError("RowsImport: need max_rows >= 1 and vocab >= 1");
  std::unique_ptr<RowsImport> x(new RowsImport());
  x->device_ = device;
  x->vocab_ = vocab;
  x->max_rows_ = max_rows;
  x->bytes_ = bytes;
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device), "cudaSetDevice"));
  if (owner_pid == static_cast<int64_t>(getpid())) {
    x->rows_ = reinterpret_cast<const float*>(static_cast<uintptr_t>(owner_ptr));
  } else {
    SPECD_ASSIGN_OR_RETURN(void* p, cuda_ipc::Open(handle, device));
    x->rows_ = static_cast<const float*>(p);
    x->opened_ = true;
  }
  const size_t head = AlignUp(sizeof(int32_t) * (4 + static_cast<size_t>(max_rows)));
  const size_t main = sizeof(float) * static_cast<size_t>(max_rows) * static_cast<size_t>(vocab);
  cudaStream_t s = nullptr;
  cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  x->stream_ = s;
  if (e == cudaSuccess) e = cudaMallocHost(&x->host_stage_, head + main);
  if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void**>(&x->p_dev_), main);
  if (e == cudaSuccess) e = cudaMalloc(&x->sparse_dev_, main);
  if (e == cudaSuccess) e = cudaMalloc(reinterpret_cast<void**>(&x->props_dev_), head);
  if (e != cudaSuccess) return CudaStatus(e, "allocating the device acceptance staging");  // ~RowsImport frees
  x->out_dev_ = x->props_dev_ + max_rows;
  x->staging_bytes_ = 2 * main + head;
  return x;
}

RowsImport::~RowsImport() {
  cudaSetDevice(device_);
  if (stream_) {
    cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
    cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
  }
  if (opened_) cuda_ipc::Close(const_cast<float*>(rows_)).IgnoreError();
  if (host_stage_) cudaFreeHost(host_stage_);
  if (p_dev_) cudaFree(p_dev_);
  if (sparse_dev_) cudaFree(sparse_dev_);
  if (props_dev_) cudaFree(props_dev_);
}

absl::StatusOr<AcceptResult> RowsImport::Accept(size_t q_offset, const std::vector<TokenDist>& p,
                                                const int32_t* proposals, int k, uint64_t seed, int64_t pos0) {
  const int rows = k + 1;
  if (k < 0 || rows > max_rows_ || static_cast<int>(p.size()) < rows)
    return absl::InvalidArgumentError(absl::StrCat("device acceptance of ", k, " proposals (", p.size(),
                                                   " target rows; staging for ", max_rows_, ")"));
  const size_t V = static_cast<size_t>(vocab_);
  const size_t q_bytes = sizeof(float) * static_cast<size_t>(k) * V;
  if (q_offset % sizeof(float) != 0 || q_offset > bytes_ || q_bytes > bytes_ - q_offset)
    return absl::OutOfRangeError(absl::StrCat("draft rows at byte ", q_offset, " (", q_bytes,
                                              " bytes) outside the mapped ", bytes_, " bytes"));
  SPECD_RETURN_IF_ERROR(CudaStatus(cudaSetDevice(device_), "cudaSetDevice"));
  auto s = static_cast<cudaStream_t>(stream_);
  auto* stage = static_cast<uint8_t*>(host_stage_);
  auto* out_host = reinterpret_cast<int32_t*>(stage);
  auto* props_host = out_host + 4;
  const size_t head = AlignUp(sizeof(int32_t) * (4 + static_cast<size_t>(max_rows_)));
  uint8_t* main = stage + head;
  const size_t dense_words = static_cast<size_t>(rows) * V;
  size_t nnz = 0, widest = 0;
  for (int r = 0; r < rows; ++r) {
    nnz += p[r].ids.size();
    widest = std::max(widest, p[r].ids.size());
  }
  const size_t sparse_words = static_cast<size_t>(rows) + 1 + 2 * nnz;
  std::memcpy(props_host, proposals, sizeof(int32_t) * static_cast<size_t>(k));
  out_host[0] = 0;
  out_host[1] = -1;
  out_host[2] = 0;
  cudaError_t e = cudaMemcpyAsync(props_dev_, props_host, sizeof(int32_t) * std::max(k, 1), cudaMemcpyHostToDevice, s);
  if (sparse_words < dense_words) {
    // Greedy, top-k, top-p: the support is small; ship it and scatter on the device.
    auto* offsets = reinterpret_cast<int32_t*>(main);
    int32_t* ids = offsets + rows + 1;
    float* probs = reinterpret_cast<float*>(ids + nnz);
    size_t at = 0;
    for (int r = 0; r < rows; ++r) {
      offsets[r] = static_cast<int32_t>(at);
      std::memcpy(ids + at, p[r].ids.data(), sizeof(int32_t) * p[r].ids.size());
      std::memcpy(probs + at, p[r].probs.data(), sizeof(float) * p[r].probs.size());
      at += p[r].ids.size();
    }
    offsets[rows] = static_cast<int32_t>(at);
    auto* d_offsets = static_cast<int32_t*>(sparse_dev_);
    if (e == cudaSuccess) e = cudaMemcpyAsync(sparse_dev_, main, sizeof(int32_t) * sparse_words, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaMemsetAsync(p_dev_, 0, sizeof(float) * dense_words, s);
    if (e == cudaSuccess)
      e = cuda::LaunchScatterRows(d_offsets, d_offsets + rows + 1,
                                  reinterpret_cast<const float*>(d_offsets + rows + 1 + nnz), rows,
                                  static_cast<int>(widest), vocab_, p_dev_, s);
  } else {
    // Full-vocabulary support (temperature only): dense rows in one copy.
    auto* dense = reinterpret_cast<float*>(main);
    std::memset(dense, 0, sizeof(float) * dense_words);
    for (int r = 0; r < rows; ++r) {
      float* row = dense + static_cast<size_t>(r) * V;
      for (size_t j = 0; j < p[r].ids.size(); ++j) {
        const int32_t id = p[r].ids[j];
        if (id >= 0 && static_cast<size_t>(id) < V) row[id] = p[r].probs[j];
      }
    }
    if (e == cudaSuccess) e = cudaMemcpyAsync(p_dev_, dense, sizeof(float) * dense_words, cudaMemcpyHostToDevice, s);
  }
  const float* q = reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(rows_) + q_offset);
  if (e == cudaSuccess) e = cuda::LaunchAccept(p_dev_, q, props_dev_, k, vocab_, seed, pos0, out_dev_, s);
  if (e == cudaSuccess) e = cudaMemcpyAsync(out_host, out_dev_, 3 * sizeof(int32_t), cudaMemcpyDeviceToHost, s);
  if (e == cudaSuccess) e = cudaStreamSynchronize(s);
  SPECD_RETURN_IF_ERROR(CudaStatus(e, "device acceptance"));
  AcceptResult r;
  r.n_accepted = out_host[0];
  r.next_token = out_host[1];
  r.bonus = out_host[2] != 0;
  if (r.n_accepted < 0 || r.n_accepted > k || r.next_token < 0 || r.next_token >= vocab_)
    return absl::InternalError(absl::StrCat("device acceptance returned accepted ", r.n_accepted, ", token ",
                                            r.next_token, " for k ", k));
  return r;
}

}  // namespace specd::cuda_ipc
