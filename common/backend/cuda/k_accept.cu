// The speculative acceptance rule on the device (Backend::Accept): one block
// per sequence walks the k proposals with the shared SPECD_HD primitives
// (AcceptProposal, ResidualWeight, OneHot) and the counter-based RNG, so its
// decisions are those of VerifyProposals on the host. The target's rows were
// processed by the sampler kernel first (k_sample.cu): dense p rows, or for
// greedy decoding their argmaxes only (then a proposal is accepted while it
// equals the argmax, whatever q is).
#include <cuda_runtime.h>

#include "common/backend/cuda/k_sample.cuh"
#include "common/sampler/rng.h"
#include "common/spec/acceptance.h"

namespace specd::cuda {
namespace {

// p: k+1 dense rows; q: k dense rows, or null (one-hot at the proposals).
__device__ void AcceptDense(const float* p, const float* q, const int32_t* proposals, int k, int V, uint64_t seed,
                            int64_t pos0, int32_t* out) {
  __shared__ double scratch[kRowWarps];
  __shared__ int ints[2];
  for (int i = 0; i < k; ++i) {
    const int32_t x = proposals[i];
    const float* pi = p + static_cast<size_t>(i) * V;
    const float* qi = q ? q + static_cast<size_t>(i) * V : nullptr;
    auto qv = [&](int j) { return qi ? qi[j] : OneHot(x, j); };
    const bool in = x >= 0 && x < V;
    const float px = in ? pi[x] : 0.0f, qx = in ? qv(x) : 0.0f;
    const uint64_t ctr = static_cast<uint64_t>(pos0 + i);
    if (AcceptProposal(px, qx, Uniform01(seed, kRngAccept, ctr))) continue;
    // Rejected: the residual max(0, p - q); if it is empty (p == q), p itself.
    double s = 0;
    for (int j = threadIdx.x; j < V; j += kRowThreads) s += ResidualWeight(pi[j], qv(j));
    const bool residual = BlockSumD(s, scratch) > 0;
    const int32_t tok = BlockDraw(
        V, Uniform01(seed, kRngResidual, ctr),
        [&](int j) -> double { return residual ? ResidualWeight(pi[j], qv(j)) : pi[j]; }, scratch, ints);
    if (threadIdx.x == 0) {
      out[0] = i;
      out[1] = tok < 0 ? 0 : tok;
      out[2] = 0;
    }
    return;
  }
  const float* pk = p + static_cast<size_t>(k) * V;
  const int32_t tok = BlockDraw(
      V, Uniform01(seed, kRngResidual, static_cast<uint64_t>(pos0 + k)), [&](int j) -> double { return pk[j]; },
      scratch, ints);
  if (threadIdx.x == 0) {
    out[0] = k;
    out[1] = tok < 0 ? 0 : tok;
    out[2] = 1;
  }
}

__global__ void __launch_bounds__(kRowThreads) AcceptKernel(const float* p, const float* q, const int32_t* proposals,
                                                            int k, int vocab, uint64_t seed, int64_t pos0,
                                                            int32_t* out) {
  AcceptDense(p, q, proposals, k, vocab, seed, pos0, out);
}

__global__ void __launch_bounds__(kRowThreads) AcceptSeqsKernel(const AcceptSeqDev* seqs, int vocab,
                                                                const int32_t* meta) {
  const AcceptSeqDev s = seqs[blockIdx.x];
  const int32_t* proposals = meta + s.proposals_off;
  auto* out = reinterpret_cast<int32_t*>(s.out);
  if (s.greedy) {
    if (threadIdx.x != 0) return;
    const auto* argmax = reinterpret_cast<const int32_t*>(s.argmax);
    for (int i = 0; i < s.k; ++i) {
      if (argmax[i] != proposals[i]) {
        out[0] = i;
        out[1] = argmax[i];
        out[2] = 0;
        return;
      }
    }
    out[0] = s.k;
    out[1] = argmax[s.k];
    out[2] = 1;
    return;
  }
  AcceptDense(reinterpret_cast<const float*>(s.p), reinterpret_cast<const float*>(s.q), proposals, s.k, vocab, s.seed,
              s.pos0, out);
}

}  // namespace

cudaError_t LaunchAccept(const float* p, const float* q, const int32_t* proposals, int k, int vocab, uint64_t seed,
                         int64_t pos0, int32_t* out_dev, cudaStream_t s) {
  AcceptKernel<<<1, kRowThreads, 0, s>>>(p, q, proposals, k, vocab, seed, pos0, out_dev);
  return cudaGetLastError();
}

cudaError_t LaunchAcceptSeqs(const AcceptSeqDev* seqs, int n, int vocab, const int32_t* meta, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  AcceptSeqsKernel<<<n, kRowThreads, 0, s>>>(seqs, vocab, meta);
  return cudaGetLastError();
}

}  // namespace specd::cuda
