// The sampler on the device (Backend::Sample): one block turns one logits row
// into a token by the rule of common/sampler/sampler.cc (ProcessLogits, then
// SampleDist with the same counter-based random number), without sorting:
// top-k and top-p are thresholds in the sampler's order found by the radix
// select of common/sampler/select.h. The rule is the same; only sums are
// taken in another order (double weights, float probabilities), so a draw
// can differ from the CPU's only where u lands within rounding of a token
// boundary. Also the feed of sampled tokens into the next batch
// (Batch::fed): the draft's k steps need no host round trip.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>

#include "common/backend/cuda/k_sample.cuh"
#include "common/sampler/rng.h"

namespace specd::cuda {
namespace {

__device__ __forceinline__ float Val(const float* l, int j) {
  const float v = l[j];
  return isnan(v) ? -INFINITY : v;
}

// The largest key of any value >= c (select.h's cutoffs as keys).
__device__ __forceinline__ uint64_t CutKey(float c) {
  return (static_cast<uint64_t>(OrderBits(c)) << 32) | 0xffffffffull;
}

__global__ void __launch_bounds__(kRowThreads) SampleRowsKernel(float* logits, int V, const SampleRowDev* rows,
                                                                const int32_t* meta) {
  const SampleRowDev r = rows[blockIdx.x];
  float* l = logits + static_cast<size_t>(r.row) * V;
  const int tid = threadIdx.x;
  __shared__ double scratch[kRowWarps];
  __shared__ float vs[kRowWarps];
  __shared__ int js[kRowWarps];
  __shared__ int ints[2];
  __shared__ SelectShared sel;

  // Repetition penalty, in place, once per distinct token of the window (the
  // last rep_window of the meta tokens then the device tokens).
  if (r.rep_penalty != 1.0f && r.rep_window > 0) {
    const int n = r.n_recent + r.n_recent_dev;
    const int first = n - min(n, r.rep_window);
    const auto* dev = reinterpret_cast<const int32_t*>(r.recent_dev);
    auto at = [&](int i) { return i < r.n_recent ? meta[r.recent_off + i] : dev[i - r.n_recent]; };
    for (int e = first + tid; e < n; e += kRowThreads) {
      const int32_t id = at(e);
      if (id < 0 || id >= V) continue;
      bool seen = false;
      for (int f = first; f < e && !seen; ++f) seen = at(f) == id;
      if (seen) continue;
      const float v = l[id];
      l[id] = v > 0 ? v / r.rep_penalty : v * r.rep_penalty;
    }
    __syncthreads();
  }

  // The top logit and the argmax (NaN as -inf, the lowest id on ties).
  float top = -INFINITY;
  int best = INT_MAX;
  for (int j = tid; j < V; j += kRowThreads) {
    const float v = Val(l, j);
    if (Better(v, j, top, best)) {
      top = v;
      best = j;
    }
  }
  BlockArgmax(&top, &best, vs, js);

  int32_t token = best;
  float conf = 1.0f;
  bool one_hot = true;
  if (r.greedy) {
    if (r.confidence) {  // the softmax's top probability at temperature 1
      double z = 0;
      for (int j = tid; j < V; j += kRowThreads) {
        const float v = Val(l, j);
        if (isfinite(v)) z += expf(v - top);
      }
      z = BlockSumD(z, scratch);
      conf = isfinite(top) && z > 0 ? static_cast<float>(1.0 / z) : 0.0f;
    }
  } else if (top > 0 && !isfinite(top)) {
    // A +inf logit: the first one, with probability 1 (the CPU's Argmax).
  } else if (!isfinite(top)) {
    // Everything -inf: the first token that is not NaN, with probability 1.
    if (tid == 0) ints[0] = INT_MAX;
    __syncthreads();
    for (int j = tid; j < V; j += kRowThreads) {
      if (!isnan(l[j])) {
        atomicMin(&ints[0], j);
        break;
      }
    }
    __syncthreads();
    token = ints[0] == INT_MAX ? 0 : ints[0];
    __syncthreads();
  } else {
    one_hot = false;
    const double inv_t = 1.0 / static_cast<double>(r.temperature), dtop = top;
    auto weight = [&](float v) -> double { return isfinite(v) ? exp((static_cast<double>(v) - dtop) * inv_t) : 0.0; };
    const bool top_k = r.top_k > 0 && r.top_k < V, top_p = r.top_p < 1.0f;
    uint64_t thr = kSelectAll;
    if (top_k) {
      int cnt[kSelectCuts] = {};
      for (int j = tid; j < V; j += kRowThreads) {
        const float v = Val(l, j);
#pragma unroll
        for (int c = 0; c < kSelectCuts; ++c) cnt[c] += v >= SelectCut(top, c);
      }
      uint64_t within = kSelectAll;
      for (int c = 0; c < kSelectCuts; ++c) {
        const double n = BlockSumD(static_cast<double>(cnt[c]), scratch);
        if (within == kSelectAll && n >= r.top_k) within = CutKey(SelectCut(top, c));
      }
      thr = BlockSelect(
          V, [&](int j) { return OrderKey(Val(l, j), j); }, [](int) { return 1.0; }, /*counting=*/true,
          static_cast<double>(r.top_k), within, &sel);
    }
    auto in = [&](float v, int j) { return thr == kSelectAll || OrderKey(v, j) <= thr; };
    double sum = 0, mass[kSelectCuts] = {};
    for (int j = tid; j < V; j += kRowThreads) {
      const float v = Val(l, j);
      if (!in(v, j)) continue;
      const double w = weight(v);
      sum += w;
#pragma unroll
      for (int c = 0; c < kSelectCuts; ++c) mass[c] += v >= SelectCut(top, c) ? w : 0.0;
    }
    sum = BlockSumD(sum, scratch);
    if (top_p) {
      const double target = static_cast<double>(r.top_p) * sum;
      uint64_t within = thr;
      bool cut = false;
      for (int c = 0; c < kSelectCuts; ++c) {
        const double m = BlockSumD(mass[c], scratch);
        if (!cut && m >= target) {
          const uint64_t k = CutKey(SelectCut(top, c));
          within = k < thr ? k : thr;
          cut = true;
        }
      }
      thr = BlockSelect(
          V, [&](int j) { return OrderKey(Val(l, j), j); }, [&](int j) { return weight(Val(l, j)); },
          /*counting=*/false, target, within, &sel);
    }
    // min-p: tokens under min_p x the top probability out (the top has weight 1).
    const double min_w = r.min_p;
    auto kept_w = [&](int j) -> double {
      const float v = Val(l, j);
      if (!in(v, j)) return 0.0;
      const double w = weight(v);
      return w >= min_w && w > 0 ? w : 0.0;
    };
    double kept = 0;
    for (int j = tid; j < V; j += kRowThreads) kept += kept_w(j);
    kept = BlockSumD(kept, scratch);
    auto prob = [&](int j) -> float {
      const double w = kept_w(j);
      return w > 0 ? static_cast<float>(w / kept) : 0.0f;
    };
    conf = static_cast<float>(1.0 / kept);  // the top token's probability: its weight is 1
    if (r.probs) {
      auto* probs = reinterpret_cast<float*>(r.probs);
      for (int j = tid; j < V; j += kRowThreads) probs[j] = prob(j);
    }
    if (r.token) {
      token = BlockDraw(
          V, Uniform01(r.seed, r.stream, r.counter), [&](int j) { return static_cast<double>(prob(j)); }, scratch,
          ints);
    }
  }
  if (one_hot && r.probs) {
    auto* probs = reinterpret_cast<float*>(r.probs);
    for (int j = tid; j < V; j += kRowThreads) probs[j] = j == token ? 1.0f : 0.0f;
  }
  if (tid == 0) {
    if (r.token) *reinterpret_cast<int32_t*>(r.token) = token;
    if (r.confidence) *reinterpret_cast<float*>(r.confidence) = conf;
  }
}

__global__ void FeedKernel(int32_t* tokens, const FeedDev* feeds, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) tokens[feeds[i].index] = *reinterpret_cast<const int32_t*>(feeds[i].src);
}

}  // namespace

cudaError_t LaunchSampleRows(float* logits, int vocab, const SampleRowDev* rows, int n_rows, const int32_t* meta,
                             cudaStream_t s) {
  if (n_rows <= 0) return cudaSuccess;
  SampleRowsKernel<<<n_rows, kRowThreads, 0, s>>>(logits, vocab, rows, meta);
  return cudaGetLastError();
}

cudaError_t LaunchFeed(int32_t* tokens, const FeedDev* feeds, int n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 128;
  FeedKernel<<<(n + kThreads - 1) / kThreads, kThreads, 0, s>>>(tokens, feeds, n);
  return cudaGetLastError();
}

}  // namespace specd::cuda
