// Block-wide helpers of the sampling and acceptance kernels (k_sample.cu,
// k_accept.cu): one block of kRowThreads threads works on one vocabulary
// row. Reductions use shared scratch of kRowWarps doubles. Only included by
// .cu files.
#pragma once
#include <climits>
#include <cstdint>

#include "common/backend/cuda/k_common.cuh"
#include "common/sampler/select.h"

namespace specd::cuda {

constexpr int kRowThreads = 1024;
constexpr int kRowWarps = kRowThreads / 32;

// Block reductions: a warp pass, then one pass over the kRowWarps warp
// results by every warp (shuffles), so every thread gets the result. Not a
// serial loop over the shared results: CUDA 13.0's ptxas unrolled that loop
// in SampleRowsKernel with wrong shared-memory offsets, skipping warps 25-27
// (docs/runs/round7/argmax.md).
static_assert(kRowWarps == 32, "the second pass gives each lane one warp's result");

// The sum of v over the block (warp totals added in butterfly order: the
// same order on every run).
__device__ __forceinline__ double BlockSumD(double v, double* scratch) {
  v = WarpSumD(v);
  __syncthreads();  // scratch may still be read by a previous call
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  return WarpSumD(scratch[threadIdx.x & 31]);
}

// Exclusive prefix sum of v over the threads in order; *total gets the sum.
__device__ __forceinline__ double BlockExclusiveScanD(double v, double* scratch, double* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  double x = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(kFull, x, o);
    if (lane >= o) x += y;
  }
  double excl = __shfl_up_sync(kFull, x, 1);
  if (lane == 0) excl = 0;
  __syncthreads();
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  // Lane i scans the warp totals: inclusive prefix up to warp i.
  double s = scratch[lane];
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const double y = __shfl_up_sync(kFull, s, o);
    if (lane >= o) s += y;
  }
  *total = __shfl_sync(kFull, s, 31);
  double before = __shfl_up_sync(kFull, s, 1);  // exclusive: the warps before lane i's
  if (lane == 0) before = 0;
  return __shfl_sync(kFull, before, warp) + excl;
}

// The sampler's order: the larger value, then the lower id.
__device__ __forceinline__ bool Better(float v, int j, float bv, int bj) { return v > bv || (v == bv && j < bj); }

// The warp's best (v, j) in the sampler's order; every lane gets it.
__device__ __forceinline__ void WarpArgmax(float* v, int* j) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(kFull, *v, o);
    const int oj = __shfl_xor_sync(kFull, *j, o);
    if (Better(ov, oj, *v, *j)) {
      *v = ov;
      *j = oj;
    }
  }
}

// Argmax over the block's candidates (v, j) in the sampler's order; every
// thread gets the winner. vs/js: kRowWarps floats / ints of shared scratch.
__device__ __forceinline__ void BlockArgmax(float* v, int* j, float* vs, int* js) {
  WarpArgmax(v, j);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    vs[threadIdx.x >> 5] = *v;
    js[threadIdx.x >> 5] = *j;
  }
  __syncthreads();
  *v = vs[threadIdx.x & 31];
  *j = js[threadIdx.x & 31];
  WarpArgmax(v, j);
}

// Inverse-CDF draw in id order over weights w(i), i < n (SampleDist's rule):
// the first i whose running sum exceeds u * total, else the last i with a
// nonzero weight (rounding left a sliver), else -1. Each thread takes a
// contiguous chunk of ids; chunk sums are scanned in order. ints: 2 shared ints.
template <class Weight>
__device__ int32_t BlockDraw(int n, double u, const Weight& w, double* scratch, int* ints) {
  const int chunk = (n + kRowThreads - 1) / kRowThreads;
  const int i0 = min(n, static_cast<int>(threadIdx.x) * chunk), i1 = min(n, i0 + chunk);
  double s = 0;
  int last_nz = -1;
  for (int i = i0; i < i1; ++i) {
    const double x = w(i);
    if (x > 0) {
      s += x;
      last_nz = i;
    }
  }
  double total = 0;
  const double before = BlockExclusiveScanD(s, scratch, &total);
  if (threadIdx.x == 0) {
    ints[0] = INT_MAX;
    ints[1] = -1;
  }
  __syncthreads();
  const double target = u * total;
  if (s > 0 && target < before + s) {
    double acc = before;
    for (int i = i0; i < i1; ++i) {
      const double x = w(i);
      if (x > 0) {
        acc += x;
        if (target < acc) {
          atomicMin(&ints[0], i);
          break;
        }
      }
    }
  }
  if (last_nz >= 0) atomicMax(&ints[1], last_nz);
  __syncthreads();
  const int r = ints[0] != INT_MAX ? ints[0] : ints[1];
  __syncthreads();
  return r;
}

// A RadixSelect (common/sampler/select.h) run by the block: each pass
// builds the digit histogram of the keys in the domain (key(i) <= within),
// warp-aggregated (the keys of a row crowd into few buckets), then thread 0
// advances. weight(i) is only asked of the keys a pass counts.
struct SelectShared {
  double weight[kSelectBuckets];
  uint32_t count[kSelectBuckets];
  RadixSelect s;
};

template <class Key, class Weight>
__device__ uint64_t BlockSelect(int n, const Key& key_of, const Weight& weight_of, bool counting, double target,
                                uint64_t within, SelectShared* sh) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) sh->s = RadixSelect::Start();
  __syncthreads();
  while (true) {
    if (tid < kSelectBuckets) {
      sh->weight[tid] = 0;
      sh->count[tid] = 0;
    }
    __syncthreads();
    const RadixSelect s = sh->s;
    for (int base = 0; base < n; base += kRowThreads) {
      const int i = base + tid;
      int d = -1;
      double w = 0;
      if (i < n) {
        const uint64_t key = key_of(i);
        if (key <= within && s.Matches(key)) {
          d = s.Digit(key);
          w = counting ? 1.0 : weight_of(i);
        }
      }
      if (__all_sync(kFull, d < 0)) continue;
      const unsigned peers = __match_any_sync(kFull, d);
      double group = 0;
      if (!counting) {
        for (int src = 0; src < 32; ++src) {
          const double v = __shfl_sync(kFull, w, src);
          if ((peers >> src) & 1u) group += v;
        }
      }
      if (d >= 0 && lane == __ffs(peers) - 1) {
        atomicAdd(&sh->count[d], static_cast<uint32_t>(__popc(peers)));
        if (!counting) atomicAdd(&sh->weight[d], group);
      }
    }
    __syncthreads();
    if (tid == 0) {
      if (counting) {
        for (int d = 0; d < kSelectBuckets; ++d) sh->weight[d] = static_cast<double>(sh->count[d]);
      }
      sh->s.Advance(sh->weight, sh->count, target, counting);
    }
    __syncthreads();
    if (sh->s.done()) {
      const uint64_t t = sh->s.threshold;
      __syncthreads();
      return t < within ? t : within;
    }
  }
}

}  // namespace specd::cuda
