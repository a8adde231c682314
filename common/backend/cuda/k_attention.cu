// Paged KV writes and causal attention (decode, verify and prefill alike).
//
// Split-K ("flash decoding"): positions are cut into fixed splits of 128; one
// block handles (query tile, KV head, split): the tile's queries are several
// consecutive tokens of one sequence times the query heads of the KV head's
// group, so a k+1-token verify reads each K/V row once. Inside a split the
// block walks 32-position steps with an online softmax; a second kernel
// merges the splits in order. Every query's arithmetic sequence depends only
// on its own position (masked steps leave its state bit-identical), so the
// same token gives the same output in a decode, a verify or a prefill batch.
#include "common/backend/cuda/k_common.cuh"

namespace specd::cuda {
namespace {

constexpr int kAttnThreads = 256;

__device__ __forceinline__ const uint8_t* KvRow(const uint8_t* base, const KvDev& kv, const int32_t* bt, int pos,
                                                int kvh) {
  const int blk = bt[pos / kv.block_size];
  return base + static_cast<size_t>(blk) * kv.block_bytes +
         (static_cast<size_t>(kvh) * kv.block_size + pos % kv.block_size) * kv.row_bytes;
}

__device__ __forceinline__ float KvLoad(const uint8_t* row, GgmlType type, int d) {
  if (type == GgmlType::F16) return H2F(reinterpret_cast<const uint16_t*>(row)[d]);
  if (type == GgmlType::F32) return reinterpret_cast<const float*>(row)[d];
  // Q8_0: d * q, as DequantBlockQ8_0.
  const uint8_t* blk = row + (d >> 5) * 34;
  const float sc = H2F(static_cast<uint16_t>(blk[0] | (blk[1] << 8)));
  return __fmul_rn(static_cast<float>(static_cast<int8_t>(blk[2 + (d & 31)])), sc);
}

// grid (n_tokens, n_kv_heads), block: head_dim rounded up to warps.
__global__ void KvWriteKernel(const float* k, const float* v, int n_kv_heads, int hd, KvDev kv, BatchDev b) {
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int pos = b.pos[t];
  const int32_t* bt = b.blocks + static_cast<size_t>(b.seq[t]) * b.bt_stride;
  const size_t src = (static_cast<size_t>(t) * n_kv_heads + h) * hd;
  for (int which = 0; which < 2; ++which) {
    const float* x = which ? v : k;
    uint8_t* row = const_cast<uint8_t*>(KvRow(which ? kv.v : kv.k, kv, bt, pos, h));
    const float val = d < hd ? x[src + d] : 0.0f;
    if (kv.type == GgmlType::F32) {
      if (d < hd) reinterpret_cast<float*>(row)[d] = val;
    } else if (kv.type == GgmlType::F16) {
      if (d < hd) reinterpret_cast<uint16_t*>(row)[d] = FloatToHalf(val);
    } else {
      // Q8_0 exactly as the CPU quantizer: d = amax / 127, q = round(x / d).
      const float amax = WarpMax(fabsf(val));
      const float ds = __fdiv_rn(amax, 127.0f);
      const float id = ds != 0.0f ? __fdiv_rn(1.0f, ds) : 0.0f;
      if (d < hd) {
        uint8_t* blk = row + (d >> 5) * 34;
        if ((d & 31) == 0) {
          const uint16_t hb = FloatToHalf(ds);
          blk[0] = static_cast<uint8_t>(hb & 0xff);
          blk[1] = static_cast<uint8_t>(hb >> 8);
        }
        blk[2 + (d & 31)] = static_cast<uint8_t>(static_cast<int8_t>(roundf(__fmul_rn(val, id))));
      }
    }
  }
}

struct AttnArgs {
  const float* q;
  KvDev kv;
  int n_heads, n_kv_heads, hd;
  float scale;
  BatchDev b;
  const AttnTile* tiles;
  int tile0, tok0;
  AttnPlan plan;
  float* part;
};

__global__ void __launch_bounds__(kAttnThreads) AttnSplitKernel(AttnArgs a) {
  extern __shared__ __align__(16) float sm[];
  const AttnPlan& pl = a.plan;
  const int tile_i = a.tile0 + blockIdx.x / pl.n_gchunks;
  const int gc = blockIdx.x % pl.n_gchunks;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const AttnTile tile = a.tiles[tile_i];
  const int gh0 = gc * pl.gchunk;
  const int ng = min(pl.gchunk, pl.group - gh0);
  const int R = tile.nt * ng;
  const int hd = a.hd;
  int maxpos = 0;
  for (int i = 0; i < tile.nt; ++i) maxpos = max(maxpos, a.b.pos[tile.t0 + i]);
  const int jb = split * kAttnSplit;
  if (jb > maxpos) return;

  float* Q = sm;                          // [R][hd]
  float* O = Q + pl.rows_max * hd;        // [R][hd]
  float* K = O + pl.rows_max * hd;        // [32][hd+1]
  float* V = K + kAttnSub * (hd + 1);     // [32][hd+1]
  float* S = V + kAttnSub * (hd + 1);     // [R][33]
  float* M = S + pl.rows_max * 33;        // [R]
  float* L = M + pl.rows_max;
  float* A = L + pl.rows_max;
  int* P = reinterpret_cast<int*>(A + pl.rows_max);  // position of each row's token

  const int tid = threadIdx.x;
  for (int idx = tid; idx < R * hd; idx += blockDim.x) {
    const int r = idx / hd, d = idx - (idx / hd) * hd;
    const int t = tile.t0 + r / ng, head = kvh * pl.group + gh0 + r % ng;
    Q[idx] = a.q[(static_cast<size_t>(t) * a.n_heads + head) * hd + d];
    O[idx] = 0.0f;
  }
  for (int r = tid; r < R; r += blockDim.x) {
    M[r] = -INFINITY;
    L[r] = 0.0f;
    P[r] = a.b.pos[tile.t0 + r / ng];
  }
  const int32_t* bt = a.b.blocks + static_cast<size_t>(tile.seq) * a.b.bt_stride;
  const int warp = tid >> 5, lane = tid & 31, nwarps = blockDim.x >> 5;

  for (int sub = 0; sub < kAttnSplit / kAttnSub; ++sub) {
    const int j0 = jb + sub * kAttnSub;
    if (j0 > maxpos) break;
    __syncthreads();  // previous step's readers of K/V/S are done
    for (int idx = tid; idx < kAttnSub * hd; idx += blockDim.x) {
      const int j = idx / hd, d = idx - (idx / hd) * hd;
      float kv_k = 0.0f, kv_v = 0.0f;
      if (j0 + j <= maxpos) {
        kv_k = KvLoad(KvRow(a.kv.k, a.kv, bt, j0 + j, kvh), a.kv.type, d);
        kv_v = KvLoad(KvRow(a.kv.v, a.kv, bt, j0 + j, kvh), a.kv.type, d);
      }
      K[j * (hd + 1) + d] = kv_k;
      V[j * (hd + 1) + d] = kv_v;
    }
    __syncthreads();
    for (int idx = tid; idx < R * kAttnSub; idx += blockDim.x) {
      const int r = idx >> 5, j = idx & 31;
      const float* qr = Q + r * hd;
      const float* kr = K + j * (hd + 1);
      float dot = 0.0f;
      for (int d = 0; d < hd; ++d) dot = __fmaf_rn(qr[d], kr[d], dot);
      S[r * 33 + j] = j0 + j > P[r] ? -INFINITY : __fmul_rn(dot, a.scale);
    }
    __syncthreads();
    for (int r = warp; r < R; r += nwarps) {
      const float s = S[r * 33 + lane];
      const float mc = WarpMax(s);
      const float mo = M[r];
      const float mn = fmaxf(mo, mc);
      const float p = s == -INFINITY ? 0.0f : expf(__fsub_rn(s, mn));
      const float alpha = mo == -INFINITY ? 0.0f : expf(__fsub_rn(mo, mn));
      const float ls = WarpSum(p);
      S[r * 33 + lane] = p;
      __syncwarp();
      if (lane == 0) {
        L[r] = __fadd_rn(__fmul_rn(L[r], alpha), ls);
        M[r] = mn;
        A[r] = alpha;
      }
    }
    __syncthreads();
    for (int idx = tid; idx < R * hd; idx += blockDim.x) {
      const int r = idx / hd, d = idx - (idx / hd) * hd;
      const float* sr = S + r * 33;
      float o = __fmul_rn(O[idx], A[r]);
#pragma unroll 8
      for (int j = 0; j < kAttnSub; ++j) o = __fmaf_rn(sr[j], V[j * (hd + 1) + d], o);
      O[idx] = o;
    }
  }
  __syncthreads();
  // Partials: [token - tok0][head][split] x {m, l, o[hd]}.
  for (int idx = tid; idx < R * (hd + 2); idx += blockDim.x) {
    const int r = idx / (hd + 2), e = idx - (idx / (hd + 2)) * (hd + 2);
    const int t = tile.t0 + r / ng, head = kvh * pl.group + gh0 + r % ng;
    if (P[r] < jb) continue;  // this token's positions end before the split
    float* dst = a.part + ((static_cast<size_t>(t - a.tok0) * a.n_heads + head) * pl.max_splits + split) * (hd + 2);
    dst[e] = e == 0 ? M[r] : (e == 1 ? L[r] : O[r * hd + e - 2]);
  }
}

// grid (tokens of the wave, n_heads), block: head_dim threads.
__global__ void AttnCombineKernel(const float* part, int n_heads, int hd, int max_splits, const int32_t* pos, int tok0,
                                  float* out) {
  const int t = tok0 + blockIdx.x, head = blockIdx.y;
  const int ns = pos[t] / kAttnSplit + 1;
  const float* base = part + (static_cast<size_t>(blockIdx.x) * n_heads + head) * max_splits * (hd + 2);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float m = base[0], l = base[1], o = base[2 + d];
    for (int s = 1; s < ns; ++s) {
      const float* p = base + static_cast<size_t>(s) * (hd + 2);
      const float ms = p[0];
      const float mn = fmaxf(m, ms);
      const float ea = expf(__fsub_rn(m, mn)), eb = expf(__fsub_rn(ms, mn));
      l = __fadd_rn(__fmul_rn(l, ea), __fmul_rn(p[1], eb));
      o = __fadd_rn(__fmul_rn(o, ea), __fmul_rn(p[2 + d], eb));
      m = mn;
    }
    out[(static_cast<size_t>(t) * n_heads + head) * hd + d] = __fdiv_rn(o, l);
  }
}

}  // namespace

size_t AttnSmemBytes(int rows, int head_dim) {
  return sizeof(float) * (2 * static_cast<size_t>(rows) * head_dim + 2 * kAttnSub * (head_dim + 1) +
                          static_cast<size_t>(rows) * 33 + 4 * static_cast<size_t>(rows)) +
         16;
}

int AttnRowsMax(int head_dim) {
  const size_t limit = static_cast<size_t>(GetDeviceInfo().smem_optin);
  int r = 64;
  while (r > 1 && AttnSmemBytes(r, head_dim) > limit) --r;
  return r;
}

size_t AttnPartialFloats(int n_tok, int n_heads, int head_dim, int max_splits) {
  return static_cast<size_t>(n_tok) * n_heads * max_splits * (head_dim + 2);
}

cudaError_t PrepareAttentionKernels() {
  return cudaFuncSetAttribute(AttnSplitKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              GetDeviceInfo().smem_optin);
}

cudaError_t LaunchKvWrite(const float* k, const float* v, int n_kv_heads, int head_dim, const KvDev& kv,
                          const BatchDev& b, cudaStream_t s) {
  if (b.n_tokens <= 0) return cudaSuccess;
  dim3 grid(b.n_tokens, n_kv_heads);
  const int threads = (head_dim + 31) / 32 * 32;
  KvWriteKernel<<<grid, threads, 0, s>>>(k, v, n_kv_heads, head_dim, kv, b);
  return LaunchResult();
}

cudaError_t LaunchAttention(const float* q, const KvDev& kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const BatchDev& b, const AttnTile* tiles_dev, int tile0, int tile1, int tok0, int tok1,
                            const AttnPlan& plan, float* partials, float* out, cudaStream_t s) {
  if (tile1 <= tile0) return cudaSuccess;
  AttnArgs a{q, kv, n_heads, n_kv_heads, head_dim, scale, b, tiles_dev, tile0, tok0, plan, partials};
  dim3 grid((tile1 - tile0) * plan.n_gchunks, n_kv_heads, plan.max_splits);
  AttnSplitKernel<<<grid, kAttnThreads, AttnSmemBytes(plan.rows_max, head_dim), s>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  dim3 cgrid(tok1 - tok0, n_heads);
  AttnCombineKernel<<<cgrid, head_dim < 256 ? head_dim : 256, 0, s>>>(partials, n_heads, head_dim, plan.max_splits,
                                                                     b.pos, tok0, out);
  return LaunchResult();
}

}  // namespace specd::cuda
