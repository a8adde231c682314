// The speculative acceptance rule on the device: one block walks the k
// proposals with the shared SPECD_HD primitives (AcceptProposal,
// ResidualWeight) and the counter-based RNG, so its decisions are those of
// VerifyProposals on the host.
#include <cuda_runtime.h>

#include <algorithm>

#include "common/backend/cuda/k_common.cuh"
#include "common/sampler/rng.h"
#include "common/spec/acceptance.h"

namespace specd::cuda {
namespace {

constexpr int kAcceptThreads = 1024;

// Weight of token j in the distribution being drawn from: the residual
// max(0, p - q) after a rejection, or p itself.
__device__ __forceinline__ float DrawWeight(const float* p, const float* q, int j, bool residual) {
  return residual ? ResidualWeight(p[j], q[j]) : p[j];
}

// Inverse-CDF draw over `vocab` weights in id order (SampleDist's rule):
// the first id whose running sum exceeds u * total; else the last nonzero id.
__device__ int32_t Draw(const float* p, const float* q, int vocab, bool residual, double u, double* part,
                        int* found) {
  const int tid = threadIdx.x;
  const int chunk = (vocab + kAcceptThreads - 1) / kAcceptThreads;
  const int j0 = min(vocab, tid * chunk), j1 = min(vocab, j0 + chunk);
  double s = 0;
  int last_nz = -1;
  for (int j = j0; j < j1; ++j) {
    const float w = DrawWeight(p, q, j, residual);
    if (w > 0) {
      s += w;
      last_nz = j;
    }
  }
  part[tid] = s;
  if (tid == 0) *found = -1;
  __syncthreads();
  __shared__ double prefix_before;
  __shared__ int owner;
  if (tid == 0) {
    double total = 0;
    for (int i = 0; i < kAcceptThreads; ++i) total += part[i];
    const double target = u * total;
    double acc = 0;
    owner = -1;
    for (int i = 0; i < kAcceptThreads; ++i) {
      if (target < acc + part[i]) {
        owner = i;
        prefix_before = acc;
        break;
      }
      acc += part[i];
    }
    part[kAcceptThreads] = target;
  }
  __syncthreads();
  if (tid == owner) {
    double acc = prefix_before;
    const double target = part[kAcceptThreads];
    for (int j = j0; j < j1; ++j) {
      const float w = DrawWeight(p, q, j, residual);
      if (w > 0) {
        acc += w;
        if (target < acc) {
          *found = j;
          break;
        }
      }
    }
  }
  __syncthreads();
  const bool none = *found < 0;
  __syncthreads();
  // Rounding left a sliver at the top: the last token with nonzero mass.
  if (none && last_nz >= 0) atomicMax(found, last_nz);
  __syncthreads();
  const int r = *found;
  __syncthreads();
  return r < 0 ? 0 : r;
}

__global__ void __launch_bounds__(kAcceptThreads) AcceptKernel(const float* p, const float* q,
                                                               const int32_t* proposals, int k, int vocab,
                                                               uint64_t seed, int64_t pos0, int32_t* out) {
  __shared__ double part[kAcceptThreads + 1];
  __shared__ int found;
  for (int i = 0; i < k; ++i) {
    const int32_t x = proposals[i];
    const float* pi = p + static_cast<size_t>(i) * vocab;
    const float* qi = q + static_cast<size_t>(i) * vocab;
    const bool in = x >= 0 && x < vocab;
    const float px = in ? pi[x] : 0.0f, qx = in ? qi[x] : 0.0f;
    const uint64_t ctr = static_cast<uint64_t>(pos0 + i);
    if (AcceptProposal(px, qx, Uniform01(seed, kRngAccept, ctr))) continue;
    // Rejected: residual over p's support; if empty (p == q), p itself.
    double s = 0;
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
      const float w = ResidualWeight(pi[j], qi[j]);
      if (w > 0) s += w;
    }
    part[threadIdx.x] = s;
    __syncthreads();
    __shared__ int any;
    if (threadIdx.x == 0) {
      double t = 0;
      for (int j = 0; j < kAcceptThreads; ++j) t += part[j];
      any = t > 0;
    }
    __syncthreads();
    const int32_t tok = Draw(pi, qi, vocab, any != 0, Uniform01(seed, kRngResidual, ctr), part, &found);
    if (threadIdx.x == 0) {
      out[0] = i;
      out[1] = tok;
      out[2] = 0;
    }
    return;
  }
  const float* pk = p + static_cast<size_t>(k) * vocab;
  const int32_t tok = Draw(pk, pk, vocab, false, Uniform01(seed, kRngResidual, static_cast<uint64_t>(pos0 + k)), part,
                           &found);
  if (threadIdx.x == 0) {
    out[0] = k;
    out[1] = tok;
    out[2] = 1;
  }
}

// Densifies sparse rows: p[r][ids[j]] = probs[j] for j in [offsets[r],
// offsets[r + 1]); p is zeroed beforehand. One grid row per p row.
__global__ void ScatterRowsKernel(const int32_t* offsets, const int32_t* ids, const float* probs, int vocab,
                                  float* p) {
  const int r = blockIdx.y;
  const int j0 = offsets[r], j1 = offsets[r + 1];
  float* row = p + static_cast<size_t>(r) * vocab;
  for (int j = j0 + static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x); j < j1;
       j += static_cast<int>(gridDim.x * blockDim.x)) {
    const int32_t id = ids[j];
    if (id >= 0 && id < vocab) row[id] = probs[j];
  }
}

}  // namespace

// Declared in cuda_ipc.cc (its only caller).
cudaError_t LaunchScatterRows(const int32_t* offsets, const int32_t* ids, const float* probs, int rows,
                              int max_row_entries, int vocab, float* p, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int bx = std::max(1, std::min(64, (max_row_entries + kThreads - 1) / kThreads));
  ScatterRowsKernel<<<dim3(bx, rows), kThreads, 0, s>>>(offsets, ids, probs, vocab, p);
  return cudaGetLastError();
}

cudaError_t LaunchAccept(const float* p, const float* q, const int32_t* proposals, int k, int vocab, uint64_t seed,
                         int64_t pos0, int32_t* out_dev, cudaStream_t s) {
  AcceptKernel<<<1, kAcceptThreads, 0, s>>>(p, q, proposals, k, vocab, seed, pos0, out_dev);
  return cudaGetLastError();
}

}  // namespace specd::cuda
