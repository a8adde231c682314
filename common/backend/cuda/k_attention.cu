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

// 8 consecutive elements (dims d8*8 .. +8) of a K or V row as floats.
__device__ __forceinline__ void KvLoad8(const uint8_t* row, GgmlType type, int d8, float (&v)[8]) {
  if (type == GgmlType::F16) {
    const uint4 w = *reinterpret_cast<const uint4*>(row + d8 * 16);
    const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      v[2 * i] = H2F(static_cast<uint16_t>(u[i] & 0xFFFF));
      v[2 * i + 1] = H2F(static_cast<uint16_t>(u[i] >> 16));
    }
  } else if (type == GgmlType::F32) {
    const float4 a = *reinterpret_cast<const float4*>(row + d8 * 32);
    const float4 b = *reinterpret_cast<const float4*>(row + d8 * 32 + 16);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
  } else {  // Q8_0: block of 32 = 34 bytes (2-byte aligned)
    const uint8_t* blk = row + (d8 >> 2) * 34;
    const float sc = H2F(*reinterpret_cast<const uint16_t*>(blk));
    const uint16_t* q = reinterpret_cast<const uint16_t*>(blk + 2 + (d8 & 3) * 8);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint16_t w = q[i];
      v[2 * i] = __fmul_rn(static_cast<float>(static_cast<int8_t>(w & 0xFF)), sc);
      v[2 * i + 1] = __fmul_rn(static_cast<float>(static_cast<int8_t>(w >> 8)), sc);
    }
  }
}

// Each thread moves up to kPf pieces (8 elements of K and of V) per step.
constexpr int kPf = 4;

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
  const int hd = a.hd, hs = hd + 4;  // K/V row stride in smem (16-byte rows, banks spread)
  int maxpos = 0;
  for (int i = 0; i < tile.nt; ++i) maxpos = max(maxpos, a.b.pos[tile.t0 + i]);
  const int jb = split * pl.split_len;
  if (jb > maxpos) return;

  float* Q = sm;                          // [R][hd]
  float* O = Q + pl.rows_max * hd;        // [R][hd]
  float* K = O + pl.rows_max * hd;        // [32][hs]
  float* V = K + kAttnSub * hs;           // [32][hs]
  float* S = V + kAttnSub * hs;           // [R][33]
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
  const int pieces = kAttnSub * (hd / 8);  // per K (and per V) step

  // Register prefetch of one 32-position step.
  float pk[kPf][8], pv[kPf][8];
  auto load = [&](int j0) {
#pragma unroll
    for (int i = 0; i < kPf; ++i) {
      const int pc = tid + i * kAttnThreads;
      if (pc < pieces) {
        const int j = pc / (hd / 8), d8 = pc - j * (hd / 8);
        if (j0 + j <= maxpos) {
          KvLoad8(KvRow(a.kv.k, a.kv, bt, j0 + j, kvh), a.kv.type, d8, pk[i]);
          KvLoad8(KvRow(a.kv.v, a.kv, bt, j0 + j, kvh), a.kv.type, d8, pv[i]);
        } else {
#pragma unroll
          for (int e = 0; e < 8; ++e) pk[i][e] = pv[i][e] = 0.0f;
        }
      }
    }
  };
  load(jb);
  for (int sub = 0; sub < pl.split_len / kAttnSub; ++sub) {
    const int j0 = jb + sub * kAttnSub;
    if (j0 > maxpos) break;
    __syncthreads();  // previous step's readers of K/V/S are done (and Q/O initialised)
#pragma unroll
    for (int i = 0; i < kPf; ++i) {
      const int pc = tid + i * kAttnThreads;
      if (pc < pieces) {
        const int j = pc / (hd / 8), d8 = pc - j * (hd / 8);
        float4* kd = reinterpret_cast<float4*>(K + j * hs + d8 * 8);
        float4* vd = reinterpret_cast<float4*>(V + j * hs + d8 * 8);
        kd[0] = make_float4(pk[i][0], pk[i][1], pk[i][2], pk[i][3]);
        kd[1] = make_float4(pk[i][4], pk[i][5], pk[i][6], pk[i][7]);
        vd[0] = make_float4(pv[i][0], pv[i][1], pv[i][2], pv[i][3]);
        vd[1] = make_float4(pv[i][4], pv[i][5], pv[i][6], pv[i][7]);
      }
    }
    __syncthreads();
    if (sub + 1 < pl.split_len / kAttnSub && j0 + kAttnSub <= maxpos) load(j0 + kAttnSub);  // in flight meanwhile
    for (int idx = tid; idx < R * kAttnSub; idx += blockDim.x) {
      const int r = idx >> 5, j = idx & 31;
      const float4* qr = reinterpret_cast<const float4*>(Q + r * hd);
      const float4* kr = reinterpret_cast<const float4*>(K + j * hs);
      float dot = 0.0f;
      for (int d4 = 0; d4 < hd / 4; ++d4) {
        const float4 qv = qr[d4], kv = kr[d4];
        dot = __fmaf_rn(qv.x, kv.x, dot);
        dot = __fmaf_rn(qv.y, kv.y, dot);
        dot = __fmaf_rn(qv.z, kv.z, dot);
        dot = __fmaf_rn(qv.w, kv.w, dot);
      }
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
    const int hd4 = hd / 4;
    for (int idx = tid; idx < R * hd4; idx += blockDim.x) {
      const int r = idx / hd4, d4 = idx - (idx / hd4) * hd4;
      const float* sr = S + r * 33;
      const float al = A[r];
      float4 o = reinterpret_cast<float4*>(O + r * hd)[d4];
      o.x = __fmul_rn(o.x, al);
      o.y = __fmul_rn(o.y, al);
      o.z = __fmul_rn(o.z, al);
      o.w = __fmul_rn(o.w, al);
#pragma unroll 8
      for (int j = 0; j < kAttnSub; ++j) {
        const float pj = sr[j];
        const float4 v = reinterpret_cast<const float4*>(V + j * hs)[d4];
        o.x = __fmaf_rn(pj, v.x, o.x);
        o.y = __fmaf_rn(pj, v.y, o.y);
        o.z = __fmaf_rn(pj, v.z, o.z);
        o.w = __fmaf_rn(pj, v.w, o.w);
      }
      reinterpret_cast<float4*>(O + r * hd)[d4] = o;
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

// grid (tokens of the wave, n_heads), block: head_dim threads (<= 256). xq:
// also quantize the output for the next matvec (head_dim % 32 == 0).
__global__ void AttnCombineKernel(const float* part, int n_heads, int hd, int max_splits, int split_len,
                                  const int32_t* pos, int tok0, float* out, uint8_t* xq) {
  const int t = tok0 + blockIdx.x, head = blockIdx.y;
  const int ns = pos[t] / split_len + 1;
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
    const float v = __fdiv_rn(o, l);
    out[(static_cast<size_t>(t) * n_heads + head) * hd + d] = v;
    if (xq) QuantizeUnitWarp(v, t, (static_cast<int64_t>(head) * hd + d) / 32, static_cast<int64_t>(n_heads) * hd / 32, xq);
  }
}

}  // namespace

size_t AttnSmemBytes(int rows, int head_dim) {
  return sizeof(float) * (2 * static_cast<size_t>(rows) * head_dim + 2 * kAttnSub * (head_dim + 4) +
                          static_cast<size_t>(rows) * 33 + 4 * static_cast<size_t>(rows)) +
         16;
}

int AttnRowsMax(int head_dim) {
  const size_t limit = static_cast<size_t>(GetDeviceInfo().smem_optin) - 1024;
  int r = 64;
  while (r > 1 && AttnSmemBytes(r, head_dim) > limit) --r;
  return r;
}

size_t AttnPartialFloats(int n_tok, int n_heads, int head_dim, int max_splits) {
  return static_cast<size_t>(n_tok) * n_heads * max_splits * (head_dim + 2);
}

namespace {
int g_attn_split = kAttnSplit;
}  // namespace
void SetAttnSplit(int positions) { g_attn_split = positions >= kAttnSub && positions % kAttnSub == 0 ? positions : kAttnSplit; }
int GetAttnSplit() { return g_attn_split; }

cudaError_t PrepareAttentionKernels() {
  cudaFuncAttributes fa{};
  const cudaError_t e = cudaFuncGetAttributes(&fa, AttnSplitKernel);
  if (e != cudaSuccess) return e;
  return cudaFuncSetAttribute(AttnSplitKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              GetDeviceInfo().smem_optin - static_cast<int>(fa.sharedSizeBytes));
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
                            const AttnPlan& plan, float* partials, float* out, void* xq, cudaStream_t s) {
  if (tile1 <= tile0) return cudaSuccess;
  AttnArgs a{q, kv, n_heads, n_kv_heads, head_dim, scale, b, tiles_dev, tile0, tok0, plan, partials};
  dim3 grid((tile1 - tile0) * plan.n_gchunks, n_kv_heads, plan.max_splits);
  AttnSplitKernel<<<grid, kAttnThreads, AttnSmemBytes(plan.rows_max, head_dim), s>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  dim3 cgrid(tok1 - tok0, n_heads);
  if (xq && head_dim % 32 != 0) return cudaErrorInvalidValue;
  AttnCombineKernel<<<cgrid, head_dim < 256 ? head_dim : 256, 0, s>>>(partials, n_heads, head_dim, plan.max_splits,
                                                                     plan.split_len, b.pos, tok0, out,
                                                                     static_cast<uint8_t*>(xq));
  return LaunchResult();
}

}  // namespace specd::cuda
