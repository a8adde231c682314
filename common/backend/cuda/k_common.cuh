// Device helpers shared by the kernels: warp reductions in a fixed order,
// byte reads from shared memory at any alignment, the integer tensor-core
// MMA, cp.async. Only included by .cu files.
#pragma once
#include <cstdint>
#include <utility>

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "common/backend/cuda/kernels.h"
#include "common/quant/mmv_tiles.h"
#include "common/util/fp16.h"

namespace specd::cuda {

constexpr unsigned kFull = 0xffffffffu;

// Butterfly reductions: every lane ends with the same value, and the order of
// operations is fixed, so results never depend on which rows/columns share a warp.
__device__ __forceinline__ float WarpSum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __fadd_rn(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ double WarpSumD(double v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = __dadd_rn(v, __shfl_xor_sync(kFull, v, o));
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
  return v;
}

// 4 bytes at any byte address `a` of shared memory (the word after the one
// holding `a` must be readable).
__device__ __forceinline__ uint32_t Lds32u(const uint8_t* a) {
  const uintptr_t p = reinterpret_cast<uintptr_t>(a);
  const uint32_t* w = reinterpret_cast<const uint32_t*>(p & ~uintptr_t{3});
  return __funnelshift_r(w[0], w[1], static_cast<uint32_t>(p & 3) * 8);
}
__device__ __forceinline__ uint16_t Lds16u(const uint8_t* a) {
  return static_cast<uint16_t>(Lds32u(a) & 0xffffu);
}

// Integer tensor-core MMA, m16n8k32 and m16n8k16, s8 x s8 -> s32, D = A*B + C.
__device__ __forceinline__ void MmaK32(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                      uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaK16(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t b0) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%0,%1,%2,%3};\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
      : "r"(a0), "r"(a1), "r"(b0));
}

__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem));
}
// 4- or 8-byte pieces (through L1: .cg takes only 16).
template <int N>
__device__ __forceinline__ void CpAsyncCa(void* smem, const void* gmem) {
  static_assert(N == 4 || N == 8 || N == 16, "cp.async moves 4, 8 or 16 bytes");
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(s), "l"(gmem), "n"(N));
}
// Asks for a line to be brought into L2 (no register or shared memory held).
__device__ __forceinline__ void PrefetchL2(const void* gmem) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(gmem));
}
__device__ __forceinline__ void CpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void CpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Exact half -> float in one instruction (same value as HalfToFloat).
__device__ __forceinline__ float H2F(uint16_t h) { return __half2float(__ushort_as_half(h)); }

// Bytes 0, 1 (hi: 2, 3) of w, element 0 lowest, as a half2 less a bias,
// exactly: each byte q becomes the low mantissa bits of 1024 + q, and bias2
// (1024 + b in both halves) is subtracted, giving q - b for any b that keeps
// the results integers below 2048 in magnitude (a few instructions for two
// where I2F takes one each).
__device__ __forceinline__ uint32_t BytesToHalf2(uint32_t w, bool hi, uint32_t bias2) {
  uint32_t h;
  asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(h) : "r"(__byte_perm(w, 0x64646464u, hi ? 0x4342 : 0x4140)), "r"(bias2));
  return h;
}

// ---- quantized activations (layout: mmv::xq in common/quant/mmv_tiles.h) ----
// A group's unit sums, scale and limbs from one warp, lane L < 16 holding the
// sum of 16-unit L (mine16; 0 on the others): the tail of both quantizers.
__device__ __forceinline__ void WriteGroupSums(uint8_t* rec, int g, int mine16, float am) {
  const int lane = threadIdx.x & 31;
  const int mine32 = __shfl_sync(kFull, mine16, (2 * lane) & 31) + __shfl_sync(kFull, mine16, (2 * lane + 1) & 31);
  int q16[4], q32[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    q16[i] = __shfl_sync(kFull, mine16, 4 * (lane & 3) + i);
    q32[i] = __shfl_sync(kFull, mine32, 4 * (lane & 1) + i);
  }
  auto limbs = [](const int (&q)[4]) {
    uint4 w;
    uint32_t* ws = &w.x;
#pragma unroll
    for (int limb = 0; limb < 3; ++limb)
      ws[limb] = mmv::XqLimbByte(q[0], limb) | (mmv::XqLimbByte(q[1], limb) << 8) |
                 (mmv::XqLimbByte(q[2], limb) << 16) | (mmv::XqLimbByte(q[3], limb) << 24);
    w.w = 0;
    return w;
  };
  if (lane < 4) *reinterpret_cast<uint4*>(rec + mmv::xq::kLimb16 + 16 * (4 * g + lane)) = limbs(q16);
  else if (lane < 6) *reinterpret_cast<uint4*>(rec + mmv::xq::kLimb32 + 16 * (4 * g + lane - 4)) = limbs(q32);
  if (lane < 8) reinterpret_cast<int32_t*>(rec + mmv::xq::kSum32)[8 * g + lane] = mine32;
  if (lane == 8) reinterpret_cast<float*>(rec + mmv::xq::kScale)[g] = mmv::XqScale(am);
}

// Element `lane` of unit u of a group (column g of the record rec), given
// the group's amax and XqInv(amax): its two levels into the lane's fragment
// bytes and the K-major copy; returns 254 hi + lo, the element's share of its
// unit's sums.
__device__ __forceinline__ int QuantizeElem(uint8_t* rec, int g, int u, int lane, float v, float am, float inv) {
  int hi = 0, lo = 0;
  if (am > 0.0f) mmv::XqHiLo(v, inv, &hi, &lo);
  uint8_t* f = rec + mmv::xq::kFrag + 512 * u + mmv::XqFragByte(g, lane);
  f[0] = static_cast<uint8_t>(static_cast<int8_t>(hi));
  f[8] = static_cast<uint8_t>(static_cast<int8_t>(lo));
  rec[mmv::XqWideByte(g, u, 0, lane)] = f[0];
  rec[mmv::XqWideByte(g, u, 1, lane)] = f[8];
  return 254 * hi + lo;
}

// Quantizes group `group` of column `col` into the activation records at xq
// (`groups` per column): one warp, v[u] = element 32 u + lane of the group
// (0 past the row's end). Shared by the standalone pass and the attention,
// so that they write identical bytes.
__device__ __forceinline__ void QuantizeGroupWarp(const float (&v)[8], int col, int64_t group, int64_t groups,
                                                  uint8_t* xq) {
  const int lane = threadIdx.x & 31;
  float am = 0.0f;
#pragma unroll
  for (int u = 0; u < 8; ++u) am = fmaxf(am, fabsf(v[u]));
  am = WarpMax(am);
  const float inv = mmv::XqInv(am);
  uint8_t* rec = xq + mmv::XqRecordOffset(groups, col, group);
  const int g = col & 7;
  // The eight units' levels first, then their half-warp sums butterfly by
  // butterfly across the units (exact integers, as QuantizeGroupBlock's): a
  // chain four shuffles deep instead of 8 x 4.
  int sum[8];
#pragma unroll
  for (int u = 0; u < 8; ++u)
    sum[u] = QuantizeElem(rec, g, u, lane, v[u], am, inv);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1)
#pragma unroll
    for (int u = 0; u < 8; ++u) sum[u] += __shfl_xor_sync(kFull, sum[u], o);
  // Lane L < 16 takes the sum of 16-unit L: unit L / 2's first (lane 0's) or second (lane 16's) half.
  int mine16 = 0;
#pragma unroll
  for (int u = 0; u < 8; ++u) {
    const int s_lo = __shfl_sync(kFull, sum[u], 0), s_hi = __shfl_sync(kFull, sum[u], 16);
    if (lane == 2 * u) mine16 = s_lo;
    if (lane == 2 * u + 1) mine16 = s_hi;
  }
  WriteGroupSums(rec, g, mine16, am);
}

// The same bytes from 8 warps, warp u (threadIdx.x / 32 % 8) holding element
// 32 u + lane in v: the group's chain is one element per lane deep instead of
// eight (a warp-per-group quantizer issues ~450 dependent instructions: 9-11
// us per launch in isolation, round 15). Every thread of the block calls it
// (two __syncthreads); each run of 8 warps quantizes its own group with its
// own 8 + 16 words of shared memory (s_am, s_sum).
__device__ __forceinline__ void QuantizeGroupBlock(float v, int col, int64_t group, int64_t groups, uint8_t* xq,
                                                   float* s_am, int* s_sum) {
  const int lane = threadIdx.x & 31, u = (threadIdx.x >> 5) & 7;
  float am = WarpMax(fmaxf(0.0f, fabsf(v)));
  if (lane == 0) s_am[u] = am;
  __syncthreads();
  am = s_am[0];
#pragma unroll
  for (int i = 1; i < 8; ++i) am = fmaxf(am, s_am[i]);  // a maximum: the same in any order
  const float inv = mmv::XqInv(am);
  uint8_t* rec = xq + mmv::XqRecordOffset(groups, col, group);
  const int g = col & 7;
  // The half warp's sum (lanes 0-15: the unit's first 16 elements, 16-31 its second).
  int sum = QuantizeElem(rec, g, u, lane, v, am, inv);
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
  if (lane == 0) s_sum[2 * u] = sum;
  if (lane == 16) s_sum[2 * u + 1] = sum;
  __syncthreads();
  if (u == 0) WriteGroupSums(rec, g, lane < 16 ? s_sum[lane] : 0, am);
}

// ---- paged KV rows ----
__device__ __forceinline__ const uint8_t* KvRow(const uint8_t* base, const KvDev& kv, const int32_t* bt, int pos,
                                                int kvh) {
  const int blk = bt[pos / kv.block_size];
  return base + static_cast<size_t>(blk) * kv.block_bytes +
         (static_cast<size_t>(kvh) * kv.block_size + pos % kv.block_size) * kv.row_bytes;
}
// Element 32 blk + lane of a K/V row, stored by the warp that holds the
// row's 32-element block blk (val: 0 past hd). Q8_0 exactly as the CPU
// quantizer: d = amax / 127, q = round(x / d). The one KV store: the KV-write
// kernel and RoPE (which writes K and V when it can) share it.
__device__ __forceinline__ void StoreKvBlockWarp(uint8_t* row, GgmlType type, int blk, int hd, float val) {
  const int d = 32 * blk + static_cast<int>(threadIdx.x & 31);
  if (type == GgmlType::F32) {
    if (d < hd) reinterpret_cast<float*>(row)[d] = val;
  } else if (type == GgmlType::F16) {
    if (d < hd) reinterpret_cast<uint16_t*>(row)[d] = FloatToHalf(val);
  } else {
    const float amax = WarpMax(fabsf(val));
    const float ds = __fdiv_rn(amax, 127.0f);
    const float id = ds != 0.0f ? __fdiv_rn(1.0f, ds) : 0.0f;
    if (d < hd) {
      uint8_t* b = row + blk * 34;
      if ((d & 31) == 0) {
        const uint16_t hb = FloatToHalf(ds);
        b[0] = static_cast<uint8_t>(hb & 0xff);
        b[1] = static_cast<uint8_t>(hb >> 8);
      }
      b[2 + (d & 31)] = static_cast<uint8_t>(static_cast<int8_t>(roundf(__fmul_rn(val, id))));
    }
  }
}

// ---- the last block of a group of n (counter left at zero) ----
// Every thread of the block calls it after its last global access that the
// last block must see done (its writes, or its reads of what the last block
// then overwrites). The block barrier orders them before thread 0's counter
// update, an acq_rel RMW at device scope that releases them (cumulatively)
// and, in the last block, acquires every other block's; a second barrier
// passes that on to its threads (CUTLASS's semaphore pattern). Two
// __threadfence() calls (fence.sc, MEMBAR.SC.GPU) took 15% of the
// attention's stall samples in round 16's ncu.
__device__ __forceinline__ bool LastBlockArrives(int* counter, int n) {
  __shared__ bool s_last;
  __syncthreads();
  if (threadIdx.x == 0) {
    int old;
    asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;" : "=r"(old) : "l"(counter) : "memory");
    s_last = old == n - 1;
    if (s_last) *counter = 0;  // for the next launch
  }
  __syncthreads();
  return s_last;
}

// ---- programmatic dependent launch (sm_90; no-ops elsewhere) ----
// Wait until the previous kernel in the stream has finished and its writes
// are visible; everything before this may only read data no kernel writes.
__device__ __forceinline__ void GridDepWait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
// Let the next kernel start launching (its prologue overlaps our tail).
__device__ __forceinline__ void GridDepLaunch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// Launches with programmatic stream serialization where the device and the
// tuning allow it (the kernel must call GridDepWait before reading what the
// previous kernel wrote).
template <class... KArgs, class... Args>
cudaError_t LaunchPdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = GetDeviceInfo().cc_major >= 9 && GetTuning().pdl ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}

// The launch error of what was just enqueued (LaunchPdl's cudaLaunchKernelEx
// records its errors there too).
inline cudaError_t LaunchResult() { return cudaGetLastError(); }

inline int CeilDiv(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

}  // namespace specd::cuda
