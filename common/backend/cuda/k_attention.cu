// Paged KV writes and causal attention (decode, verify and prefill alike).
//
// Split-K ("flash decoding"): positions are cut into fixed splits of 128; one
// block handles (query tile, KV head, split): the tile's queries are several
// consecutive tokens of one sequence times the query heads of the KV head's
// group, so a k+1-token verify reads each K/V row once. Inside a split the
// block walks 32-position steps with an online softmax; a second kernel
// (AttnMergeKernel) merges the splits in order and quantizes the output for
// the next matvec. K and V usually reach the cache through the RoPE launch
// (k_misc.cu), KvWriteKernel otherwise. Every query's arithmetic sequence depends only
// on its own position (masked steps leave its state bit-identical), so the
// same token gives the same output in a decode, a verify or a prefill batch.
#include <cstdlib>
#include <cstring>

#include "common/backend/cuda/k_common.cuh"

namespace specd::cuda {
namespace {

constexpr int kAttnThreads = 256;

// grid (n_tokens, n_kv_heads), block: head_dim rounded up to warps (warp j
// stores the row's 32-element block j).
__global__ void KvWriteKernel(const float* k, const float* v, int n_kv_heads, int hd, KvDev kv, BatchDev b) {
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  const int t = blockIdx.x, h = blockIdx.y, d = threadIdx.x;
  const int pos = b.pos[t];
  const int32_t* bt = b.blocks + static_cast<size_t>(b.seq[t]) * b.bt_stride;
  const size_t src = (static_cast<size_t>(t) * n_kv_heads + h) * hd;
  for (int which = 0; which < 2; ++which) {
    const float* x = which ? v : k;
    uint8_t* row = const_cast<uint8_t*>(KvRow(which ? kv.v : kv.k, kv, bt, pos, h));
    StoreKvBlockWarp(row, kv.type, d >> 5, hd, d < hd ? x[src + d] : 0.0f);
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
  float* part;  // PartEntry's layout (AttnMergeKernel merges them)
};

// The split kernels' partials: entry (token - tok0, head, split) holds
// {o[hd], m, l, -, -}, hd + 4 floats (o 16-byte aligned).
__host__ __device__ constexpr int PartStride(int hd) { return hd + 4; }
template <class T>
__device__ __forceinline__ T* PartEntry(T* part, int tok_rel, int n_heads, int head, int max_splits, int split,
                                        int hd) {
  return part + ((static_cast<size_t>(tok_rel) * n_heads + head) * max_splits + split) * PartStride(hd);
}

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
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
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
  // Partials: [token - tok0][head][split] x {o[hd], m, l, -, -}.
  for (int idx = tid; idx < R * (hd + 2); idx += blockDim.x) {
    const int r = idx / (hd + 2), e = idx - (idx / (hd + 2)) * (hd + 2);
    const int t = tile.t0 + r / ng, head = kvh * pl.group + gh0 + r % ng;
    if (P[r] < jb) continue;  // this token's positions end before the split
    float* dst = PartEntry(a.part, t - a.tok0, a.n_heads, head, pl.max_splits, split, hd);
    dst[e] = e < hd ? O[r * hd + e] : (e == hd ? M[r] : L[r]);
  }
}

// The splits' partials of every (token, head) merged in split order, and
// the output quantized for the next matvec: a block per (token of the wave,
// group of 256 output elements), a thread per element (head e / hd, dim
// e % hd). Its o entries of up to kMergeChunk splits are requested at
// entry, with the heads' m and l: the merge of a row of up to 48 splits
// (6144 positions at 128) waits on one round trip. Where the split kernel's
// last block merged (until round 28), a single SM walked a tile's rows
// through a dependent round trip per 8 splits (the 7-token pass at 4200: ~16
// us a layer, the decode ~7, then ~4 to quantize by a warp a group); this
// kernel made them 10.7% and 4.3% faster on an H100 (round 28 call S).
constexpr int kMergeChunk = 48;
struct AttnMergeArgs {
  const float* part;
  int n_heads, hd, max_splits, split_len;
  const int32_t* pos;
  int tok0;
  float* out;
  uint8_t* xq;  // null: no quantization
};
// The block's heads: a group starting inside a head touches up to 255 / hd + 2.
__host__ __device__ constexpr int MergeHeadsMax(int hd) { return (mmv::kGroup - 1) / hd + 2; }

__global__ void __launch_bounds__(mmv::kGroup) AttnMergeKernel(AttnMergeArgs a) {
  extern __shared__ float s_w[];  // [head of the block][split]: the weights exp(m - max), then L per head
  __shared__ float s_am[8];
  __shared__ int s_sum[16];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int t = a.tok0 + blockIdx.x, dim = a.n_heads * a.hd, es = PartStride(a.hd);
  const int e = blockIdx.y * mmv::kGroup + tid;
  const int h0 = blockIdx.y * mmv::kGroup / a.hd;
  const int nh = (min(dim, (blockIdx.y + 1) * mmv::kGroup) - 1) / a.hd - h0 + 1;
  const bool live = e < dim;
  const int hl = live ? e / a.hd - h0 : 0, d = e % a.hd;
  const int ns = a.pos[t] / a.split_len + 1;  // batch metadata: no kernel writes it
  const float* rows = PartEntry(a.part, blockIdx.x, a.n_heads, h0, a.max_splits, 0, a.hd);
  const float* mine = rows + static_cast<size_t>(hl) * a.max_splits * es + d;
  float* const s_l = s_w + nh * a.max_splits;
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  // Splits past ns are read clamped (always written) and weighted 0: +0 added
  // to a sum that starts at +0 leaves it as it is.
  float v[kMergeChunk];
  auto request = [&](int c0) {
#pragma unroll
    for (int j = 0; j < kMergeChunk; ++j)
      v[j] = live ? __ldcg(mine + static_cast<size_t>(min(c0 + j, ns - 1)) * es) : 0.0f;
  };
  request(0);
  // Weights: warp w takes heads w, w + 8, ...; lane L the splits L, L + 32,
  // ... (m and l of up to 64 splits held from one round trip; more re-read).
  for (int h = warp; h < nh; h += 8) {
    const float* ml = rows + static_cast<size_t>(h) * a.max_splits * es + a.hd;
    float mr[2], lr[2], mx = -INFINITY;
    auto fetch = [&](int c) {
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int sp = c + 32 * k + lane;
        mr[k] = sp < ns ? __ldcg(ml + static_cast<size_t>(sp) * es) : -INFINITY;
        lr[k] = sp < ns ? __ldcg(ml + static_cast<size_t>(sp) * es + 1) : 0.0f;
      }
    };
    for (int c = 0; c < ns; c += 64) {
      fetch(c);
      mx = fmaxf(mx, fmaxf(mr[0], mr[1]));
    }
    mx = WarpMax(mx);
    float L = 0.0f;
    for (int c = 0; c < ns; c += 64) {
      if (ns > 64) fetch(c);
#pragma unroll
      for (int k = 0; k < 2; ++k) {
        const int sp = c + 32 * k + lane;
        if (sp >= ns) continue;
        const float w = expf(__fsub_rn(mr[k], mx));
        s_w[h * a.max_splits + sp] = w;
        L = __fmaf_rn(lr[k], w, L);
      }
    }
    L = WarpSum(L);
    if (lane == 0) s_l[h] = L;
  }
  __syncthreads();
  const float* w = s_w + hl * a.max_splits;
  float acc = 0.0f;
  for (int c0 = 0; c0 < ns; c0 += kMergeChunk) {
    if (c0 > 0) request(c0);
#pragma unroll
    for (int j = 0; j < kMergeChunk; ++j) acc = __fmaf_rn(v[j], c0 + j < ns ? w[c0 + j] : 0.0f, acc);
  }
  const float y = live ? __fdiv_rn(acc, s_l[hl]) : 0.0f;
  if (live) a.out[static_cast<size_t>(t) * dim + e] = y;
  if (a.xq) QuantizeGroupBlock(y, t, blockIdx.y, mmv::Groups(dim), a.xq, s_am, s_sum);
}
size_t MergeSmemBytes(int hd, int max_splits) {  // s_w and s_l
  return sizeof(float) * static_cast<size_t>(MergeHeadsMax(hd)) * (max_splits + 1);
}

// ---------------------------------------------------------------- v2 (tensor cores)
//
// Same split-K structure (fixed splits of split_len positions, merged in a
// fixed order), but QK^T and PV run on mma.sync m16n8k16 (F16 x F16 -> F32):
//  * a block is (tile of <= 16 query rows, KV head, split); warp w of the
//    split_len / 32 warps owns positions [jb + 32w, jb + 32w + 32): it copies
//    their K and V rows into its own shared-memory region (cp.async; Q8_0
//    rows staged raw, then converted to exact F16), so the main phase needs
//    no block barrier; rows older than the batch's tokens are requested (and
//    converted) before griddepcontrol.wait, overlapping the producer of Q;
//  * where a batch's sequence has more rows than one 16-row m-tile (a
//    verify: k + 1 tokens x the group's heads), a block takes a tile of two
//    m-tiles (AttnPlan::mtiles): each position chunk's K/V rows are loaded
//    once, by the first m-tile's warp, and both m-tiles' warps read them
//    after a named barrier (half the blocks, half the loads and fences);
//  * Q is kept near FP32 as two F16 parts (hi = f16(q), lo = f16(q - hi)):
//    S = Q_hi K + Q_lo K; the probabilities likewise (P_hi + P_lo) for PV.
//    F16 K/V are exact; Q8_0 K and V are used as their integer quants: K's
//    per-32 scale applied to each 32-dim partial dot in FP32, V's folded
//    into the probabilities of its 32 dims (P s, then hi + lo), so a Q8_0
//    block holds no dequantized copy and runs three an SM at head_dim 128;
//  * each warp computes its chunk's softmax state (max, sum, O) for the 16
//    rows (no running state), the warps' states are merged by a fixed binary
//    tree through shared memory (warp w + s into w), warp 0 writes the split's
//    partial for AttnMergeKernel.
// Every row's arithmetic depends only on its own query, its own position and
// the KV rows, never on the other rows of the tile (an MMA output element is a
// function of its own A row and B column; masked positions give p = 0; an
// all-masked chunk is skipped by the merge), so decode, verify and prefill
// give the same bits for the same token.

__device__ __forceinline__ void MmaF16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void MmaF16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  MmaF16(d, a[0], a[1], a[2], a[3], b0, b1);
}
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3, const void* p) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(s)
               : "memory");
}
__device__ __forceinline__ uint32_t PackH2(__half lo, __half hi) {
  return static_cast<uint32_t>(__half_as_ushort(lo)) | (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
}
// (x0, x1) -> hi = f16 pair, lo = f16 pair of the remainders (x0 in the low half).
__device__ __forceinline__ void SplitHiLo(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __half h0 = __float2half_rn(x0), h1 = __float2half_rn(x1);
  hi = PackH2(h0, h1);
  lo = PackH2(__float2half_rn(__fsub_rn(x0, __half2float(h0))), __float2half_rn(__fsub_rn(x1, __half2float(h1))));
}

template <int HD, bool kQ8>
struct V2Layout {
  // Rows of HD >= 64 are unpadded, their 16-byte chunks XOR-swizzled by the
  // row's low 3 bits (the MMA fragment loads and ldmatrix stay conflict-free):
  // at HD = 128 an F16 block holds 72 KiB, three blocks an SM instead of two
  // (padded rows: 76 KiB). HD = 32 (4 chunks a row) keeps 8 halves of padding.
  static constexpr bool kSwz = HD >= 64;
  static constexpr int kRS = kSwz ? HD : HD + 8;  // shared row stride in halves
  static constexpr int kNB = HD / 32;                      // Q8_0 blocks per row
  static constexpr int kRB = kNB * 34;                     // Q8_0 row bytes
  static constexpr int kQfBytes = (HD / 16) * 32 * 8 * 4;  // Q hi/lo fragments
  static constexpr int kKvHalves = 32 * kRS;
  // Q8_0: K and V are kept as their exact quants in F16 with each 32-dim
  // block's scale (F16 bits) beside them; the raw rows are staged at the end
  // of their own tile and converted in place (ConvertQ8Rows).
  static constexpr int kRawOff = kKvHalves * 2 - 32 * kRB;  // raw rows' byte offset in a tile
  static constexpr int kScaleBytes = 32 * kNB * 2;
  // per warp: K, V, [K scales, V scales]
  static constexpr int kWarpBytes = 2 * kKvHalves * 2 + (kQ8 ? 2 * kScaleBytes : 0);
  static constexpr int kSlotFloats = (HD / 2 + 4) * 32;  // a warp's merge state
  static_assert(kSlotFloats * 4 <= kWarpBytes, "merge slot must fit in the warp's region");
  static_assert(kWarpBytes % 16 == 0 && kQfBytes % 16 == 0, "16-byte aligned regions");
  static_assert(!kQ8 || (kRawOff >= 0 && kRawOff % 16 == 0), "raw Q8_0 rows must fit, aligned, in a tile");
  // Offset in halves of row j's 16-byte chunk c (halves 8c .. 8c + 7).
  __device__ static __forceinline__ int Chunk(int j, int c) { return j * kRS + (kSwz ? c ^ (j & 7) : c) * 8; }
  // K row r's B fragment of k-step ks for lane quad t: halves 16 ks + 2t, + 1 and those + 8.
  __device__ static __forceinline__ void KFrag(const __half* K, int r, int ks, int t, uint32_t& b0, uint32_t& b1) {
    b0 = *reinterpret_cast<const uint32_t*>(K + Chunk(r, 2 * ks) + 2 * t);
    b1 = *reinterpret_cast<const uint32_t*>(K + Chunk(r, 2 * ks + 1) + 2 * t);
  }
};

// Merge of two softmax states of one row: mode 0 keeps a (b empty), 1 takes
// b (a empty), 2 rescales both.
struct MergeW {
  int mode;
  float ea, eb;
};
__device__ __forceinline__ MergeW MergeWeights(float& m, float& l, float mb, float lb) {
  MergeW w{0, 1.0f, 0.0f};
  if (mb == -INFINITY) return w;
  if (m == -INFINITY) {
    m = mb, l = lb, w.mode = 1;
    return w;
  }
  const float mn = fmaxf(m, mb);
  w.mode = 2;
  w.ea = expf(__fsub_rn(m, mn));
  w.eb = expf(__fsub_rn(mb, mn));
  l = __fadd_rn(__fmul_rn(l, w.ea), __fmul_rn(lb, w.eb));
  m = mn;
  return w;
}
__device__ __forceinline__ float MergeO(const MergeW& w, float o, float ob) {
  return w.mode == 0 ? o : (w.mode == 1 ? ob : __fadd_rn(__fmul_rn(o, w.ea), __fmul_rn(ob, w.eb)));
}

// ---- Q8_0 rows to F16 (exact) ----
// Four int8 (the bytes of w, element 0 lowest) as two half2, exactly: the
// bytes biased by 128, less 1152 (the values __int2half_rn gives).
__device__ __forceinline__ void S8x4ToHalf2(uint32_t w, uint32_t& h01, uint32_t& h23) {
  const uint32_t u = w ^ 0x80808080u;
  h01 = BytesToHalf2(u, false, 0x64806480u);
  h23 = BytesToHalf2(u, true, 0x64806480u);
}
// The 32 quants of a staged Q8_0 block (2-byte aligned) as 8 words.
__device__ __forceinline__ void LoadQ8Quants(const uint8_t* blk, uint32_t (&w)[8]) {
  const uint16_t* h = reinterpret_cast<const uint16_t*>(blk + 2);
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = __byte_perm(h[2 * i], h[2 * i + 1], 0x5410);
}

// Requests a warp's 32 K/V rows (rows j >= nlive, past the tile's last
// position, are not read): F16 straight into the K and V tiles (dead rows
// zeroed), Q8_0 raw into the staging area for ConvertQ8Rows. myoff: lane j's
// row offset in the layer's K (and V) area, so each row's block-table entry
// is read once, by its lane.
template <int HD, bool kQ8>
__device__ __forceinline__ void IssueRows(const AttnArgs& a, unsigned long long myoff, int nlive, int lane, __half* Ks,
                                          __half* Vs, uint8_t* rawK, uint8_t* rawV) {
  using Lay = V2Layout<HD, kQ8>;
  constexpr int RB = kQ8 ? Lay::kRB : HD * 2;
  constexpr int E = RB % 16 == 0 ? 16 : (RB % 8 == 0 ? 8 : (RB % 4 == 0 ? 4 : 2)), PR = RB / E;
#pragma unroll 4
  for (int p = lane; p < 32 * PR; p += 32) {
    const int j = p / PR, c = p - (p / PR) * PR;
    const unsigned long long off = __shfl_sync(kFull, myoff, j) + static_cast<unsigned long long>(c * E);
    if constexpr (!kQ8) {
      __half* kd = Ks + Lay::Chunk(j, c);
      __half* vd = Vs + Lay::Chunk(j, c);
      if (j < nlive) {
        CpAsync16(kd, a.kv.k + off);
        CpAsync16(vd, a.kv.v + off);
      } else {
        *reinterpret_cast<uint4*>(kd) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(vd) = make_uint4(0, 0, 0, 0);
      }
    } else {
      if (j >= nlive) continue;
      if constexpr (E >= 4) {
        CpAsyncCa<E>(rawK + j * RB + c * E, a.kv.k + off);
        CpAsyncCa<E>(rawV + j * RB + c * E, a.kv.v + off);
      } else {
        *reinterpret_cast<uint16_t*>(rawK + j * RB + c * E) = *reinterpret_cast<const uint16_t*>(a.kv.k + off);
        *reinterpret_cast<uint16_t*>(rawV + j * RB + c * E) = *reinterpret_cast<const uint16_t*>(a.kv.v + off);
      }
    }
  }
  CpAsyncCommit();
}

// The staged Q8_0 rows to F16 (after CpAsyncWait and __syncwarp): K and V
// as their exact quants (int8 -> F16), each 32-dim block's scale as F16 bits
// in Ksc / Vsc (the K scale is applied to each 32-dim partial dot, the V
// scale to the probabilities: PV of one dim block is sum_j (p_j s_jb) q_jd).
// The raw rows sit at the end of their own tile (kRawOff) and are converted
// in place: round i (lanes' blocks p = lane + 32 i, rows of 2 HD bytes at
// HD >= 64) writes tile bytes [2048 i, 2048 i + 2048), and the raw rows not
// yet read start at or after 960 NB + 1088 (i + 1) >= 2048 (i + 1) for
// i < NB, so a round overwrites only rows read in it or before (HD = 32: one
// round); each round reads all its blocks into registers before any write.
// Rows j >= nlive are zero.
template <int HD>
__device__ __forceinline__ void ConvertQ8Rows(__half* Ks, __half* Vs, uint16_t* Ksc, uint16_t* Vsc, int nlive,
                                              int lane) {
  using Lay = V2Layout<HD, true>;
  constexpr int NB = Lay::kNB, RB = Lay::kRB;
  const uint8_t* rawK = reinterpret_cast<const uint8_t*>(Ks) + Lay::kRawOff;
  const uint8_t* rawV = reinterpret_cast<const uint8_t*>(Vs) + Lay::kRawOff;
#pragma unroll
  for (int p = lane; p < 32 * NB; p += 32) {
    const int j = p / NB, b = p % NB;
    uint32_t wk[8] = {}, wv[8] = {};
    uint16_t sk = 0, sv = 0;
    if (j < nlive) {
      const uint8_t* bk = rawK + j * RB + b * 34;
      const uint8_t* bv = rawV + j * RB + b * 34;
      sk = *reinterpret_cast<const uint16_t*>(bk);
      sv = *reinterpret_cast<const uint16_t*>(bv);
      LoadQ8Quants(bk, wk);
      LoadQ8Quants(bv, wv);
    }
    __syncwarp();
    Ksc[j * NB + b] = sk;
    Vsc[j * NB + b] = sv;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      uint4 q;
      S8x4ToHalf2(wk[2 * i], q.x, q.y);
      S8x4ToHalf2(wk[2 * i + 1], q.z, q.w);
      *reinterpret_cast<uint4*>(Ks + Lay::Chunk(j, 4 * b + i)) = q;
      S8x4ToHalf2(wv[2 * i], q.x, q.y);
      S8x4ToHalf2(wv[2 * i + 1], q.z, q.w);
      *reinterpret_cast<uint4*>(Vs + Lay::Chunk(j, 4 * b + i)) = q;
    }
    __syncwarp();
  }
}

// Q8_0 at HD <= 128: 74 KiB a block at HD = 128, registers capped for three an SM.
// M = 2 (a verify's tiles of two 16-row m-tiles): the m-tiles' warps of a
// position chunk share its K/V rows (the first m-tile's warp loads them); two
// blocks an SM at HD <= 128 (127-128 registers). Round 27 (H100): verify 7 at
// 4200 8%, verify 6 7% faster; four m-tiles a block (512 threads) no faster.
constexpr int kAttnMtilesMax = 2;
template <int HD, bool kQ8, int M>
constexpr int V2Threads() {
  return M == 1 ? (kQ8 && HD <= 128 ? 128 : 256) : 128 * M;
}
template <int HD, bool kQ8, int M>
constexpr int V2MinBlocks() {
  return M == 1 ? (kQ8 && HD <= 128 ? 3 : 1) : (HD <= 128 ? 2 : 1);
}
template <int HD, bool kQ8, int M>
__global__ void __launch_bounds__(V2Threads<HD, kQ8, M>(), V2MinBlocks<HD, kQ8, M>()) AttnSplitV2Kernel(AttnArgs a) {
  using Lay = V2Layout<HD, kQ8>;
  constexpr int KS = HD / 16, NB = Lay::kNB, NT = HD / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  const AttnPlan& pl = a.plan;
  // Before griddepcontrol.wait: the batch metadata (no kernel writes it) and
  // the K/V rows this batch's tokens did not write (positions below
  // pos[t0] - t0: this sequence's first token in the batch is at index >= 0),
  // so a long context's rows stream in, and Q8_0 rows are converted, while
  // the producer of Q (RoPE, which also stores the new rows) finishes.
  const int tile_i = a.tile0 + blockIdx.x / pl.n_gchunks;
  const int gc = blockIdx.x % pl.n_gchunks;
  const int kvh = blockIdx.y, split = blockIdx.z;
  const AttnTile tile = a.tiles[tile_i];
  const int gh0 = gc * pl.gchunk;
  const int ng = min(pl.gchunk, pl.group - gh0);
  const int R = tile.nt * ng;
  int maxpos = 0;
  for (int i = 0; i < tile.nt; ++i) maxpos = max(maxpos, a.b.pos[tile.t0 + i]);
  const int jb = split * pl.split_len;
  if (jb > maxpos) return;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, nw = blockDim.x >> 5;
  const int g = lane >> 2, t = lane & 3;
  // Warp = (m-tile mt, position chunk cw); chunk cw's K/V rows are loaded by
  // its m-tile-0 warp and read by all M.
  const int nwp = M == 1 ? nw : nw / M, mt = M == 1 ? 0 : warp / nwp, cw = M == 1 ? warp : warp % nwp;
  const bool loader = mt == 0;
  uint32_t* Qf = reinterpret_cast<uint32_t*>(smem) + mt * (Lay::kQfBytes / 4);  // [KS][lane][hi a0..a3, lo a0..a3]
  uint8_t* wreg = smem + M * Lay::kQfBytes + cw * Lay::kWarpBytes;
  __half* Ks = reinterpret_cast<__half*>(wreg);                // [32][kRS] (Lay::Chunk)
  __half* Vs = Ks + Lay::kKvHalves;                            // [32][kRS]
  uint16_t* Ksc = reinterpret_cast<uint16_t*>(Vs + Lay::kKvHalves);  // Q8_0: F16 scales [32][NB]
  uint16_t* Vsc = Ksc + 32 * NB;
  [[maybe_unused]] uint8_t* const rawK = reinterpret_cast<uint8_t*>(Ks) + Lay::kRawOff;  // Q8_0: staged rows
  [[maybe_unused]] uint8_t* const rawV = reinterpret_cast<uint8_t*>(Vs) + Lay::kRawOff;
  const int32_t* bt = a.b.blocks + static_cast<size_t>(tile.seq) * a.b.bt_stride;
  const int jc = jb + cw * 32;
  const bool active = jc <= maxpos;
  const int nlive = active ? min(32, maxpos - jc + 1) : 0;
  const bool early = active && jc + 31 < a.b.pos[tile.t0] - tile.t0;
  unsigned long long myoff = 0;
  if (loader && lane < nlive) myoff = static_cast<unsigned long long>(KvRow(a.kv.k, a.kv, bt, jc + lane, kvh) - a.kv.k);

  // 1. This warp's K/V rows (positions after the tile's last one: zeros).
  if (early && loader) {
    IssueRows<HD, kQ8>(a, myoff, nlive, lane, Ks, Vs, rawK, rawV);
    if constexpr (kQ8) {
      CpAsyncWait<0>();
      __syncwarp();
      ConvertQ8Rows<HD>(Ks, Vs, Ksc, Vsc, nlive, lane);
    }
  }
  GridDepWait();  // programmatic dependent launch: inputs are ready after this
  GridDepLaunch();
  if (active && !early && loader) IssueRows<HD, kQ8>(a, myoff, nlive, lane, Ks, Vs, rawK, rawV);
  // 2. Q fragments (hi/lo) of the tile's rows, shared by the warps; rows >= R
  // are zero. Thread c < 128 M owns register reg of lane ln's A fragment of
  // m-tile c / 128 in every k-step: one row, found once, and all its loads
  // requested before any is converted (one round trip).
  for (int c = tid; c < 128 * M; c += static_cast<int>(blockDim.x)) {
    const int cm = c >> 7, ln = (c & 127) >> 2, reg = c & 3;
    const int r = 16 * cm + (ln >> 2) + (reg & 1) * 8;
    uint32_t* qf = reinterpret_cast<uint32_t*>(smem) + cm * (Lay::kQfBytes / 4);
    float2 qv[KS];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) qv[ks] = make_float2(0.0f, 0.0f);
    if (r < R) {
      const int tok = tile.t0 + r / ng, head = kvh * pl.group + gh0 + r % ng;
      const float* qr = a.q + (static_cast<size_t>(tok) * a.n_heads + head) * HD + 2 * (ln & 3) + (reg >> 1) * 8;
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) qv[ks] = *reinterpret_cast<const float2*>(qr + ks * 16);
    }
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
      uint32_t hi, lo;
      SplitHiLo(qv[ks].x, qv[ks].y, hi, lo);
      qf[(ks * 32 + ln) * 8 + reg] = hi;
      qf[(ks * 32 + ln) * 8 + 4 + reg] = lo;
    }
  }
  const int rg = 16 * mt + g;                                          // this lane's rows rg, rg + 8
  const int pg = rg < R ? a.b.pos[tile.t0 + rg / ng] : -1;             // position of row rg
  const int pg8 = rg + 8 < R ? a.b.pos[tile.t0 + (rg + 8) / ng] : -1;  // of row rg + 8
  __syncthreads();

  float o[NT][4];
#pragma unroll
  for (int i = 0; i < NT; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // rows g, g + 8
  if (active) {
    if (loader) {
      CpAsyncWait<0>();
      __syncwarp();
      if constexpr (kQ8)
        if (!early) ConvertQ8Rows<HD>(Ks, Vs, Ksc, Vsc, nlive, lane);  // 2b
    }
    // The chunk's M warps meet once its rows are in (named barrier 1 + cw).
    if constexpr (M > 1) asm volatile("bar.sync %0, %1;" ::"r"(1 + cw), "r"(32 * M) : "memory");
  }
  if (active && 16 * mt < R) {
    // 3. S = Q K^T for the chunk's 32 positions (4 n-tiles of 8 positions).
    float s[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
    if constexpr (!kQ8) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks) {
        const uint4 qh = *reinterpret_cast<const uint4*>(Qf + (ks * 32 + lane) * 8);
        const uint4 ql = *reinterpret_cast<const uint4*>(Qf + (ks * 32 + lane) * 8 + 4);
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          uint32_t b0, b1;
          Lay::KFrag(Ks, nt * 8 + g, ks, t, b0, b1);
          MmaF16(s[nt], qh.x, qh.y, qh.z, qh.w, b0, b1);
          MmaF16(s[nt], ql.x, ql.y, ql.z, ql.w, b0, b1);
        }
      }
    } else {
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        float c[4][4];
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < 2; ++kk) {
          const int ks = 2 * b + kk;
          const uint4 qh = *reinterpret_cast<const uint4*>(Qf + (ks * 32 + lane) * 8);
          const uint4 ql = *reinterpret_cast<const uint4*>(Qf + (ks * 32 + lane) * 8 + 4);
#pragma unroll
          for (int nt = 0; nt < 4; ++nt) {
            uint32_t b0, b1;
            Lay::KFrag(Ks, nt * 8 + g, ks, t, b0, b1);
            MmaF16(c[nt], qh.x, qh.y, qh.z, qh.w, b0, b1);
            MmaF16(c[nt], ql.x, ql.y, ql.z, ql.w, b0, b1);
          }
        }
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) {
          const float sc0 = H2F(Ksc[(nt * 8 + 2 * t) * NB + b]), sc1 = H2F(Ksc[(nt * 8 + 2 * t + 1) * NB + b]);
          s[nt][0] = __fmaf_rn(c[nt][0], sc0, s[nt][0]);
          s[nt][1] = __fmaf_rn(c[nt][1], sc1, s[nt][1]);
          s[nt][2] = __fmaf_rn(c[nt][2], sc0, s[nt][2]);
          s[nt][3] = __fmaf_rn(c[nt][3], sc1, s[nt][3]);
        }
      }
    }
    // 4. Scale, causal mask and the chunk's softmax state per row (a quad holds a row pair).
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int j = jc + nt * 8 + 2 * t + e;
        s[nt][e] = j > pg ? -INFINITY : __fmul_rn(s[nt][e], a.scale);
        s[nt][2 + e] = j > pg8 ? -INFINITY : __fmul_rn(s[nt][2 + e], a.scale);
        mx0 = fmaxf(mx0, s[nt][e]);
        mx1 = fmaxf(mx1, s[nt][2 + e]);
      }
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFull, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(kFull, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFull, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(kFull, mx1, 2));
    float sum0 = 0.0f, sum1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        s[nt][e] = s[nt][e] == -INFINITY ? 0.0f : expf(__fsub_rn(s[nt][e], mx0));
        s[nt][2 + e] = s[nt][2 + e] == -INFINITY ? 0.0f : expf(__fsub_rn(s[nt][2 + e], mx1));
        sum0 = __fadd_rn(sum0, s[nt][e]);
        sum1 = __fadd_rn(sum1, s[nt][2 + e]);
      }
    sum0 = __fadd_rn(sum0, __shfl_xor_sync(kFull, sum0, 1));
    sum0 = __fadd_rn(sum0, __shfl_xor_sync(kFull, sum0, 2));
    sum1 = __fadd_rn(sum1, __shfl_xor_sync(kFull, sum1, 1));
    sum1 = __fadd_rn(sum1, __shfl_xor_sync(kFull, sum1, 2));
    m0 = mx0, m1 = mx1, l0 = sum0, l1 = sum1;
    // 5. O = P V: the S accumulators of n-tiles 2kk, 2kk+1 form the A fragment of k-step kk
    // (this lane's positions kk * 16 + 2t, + 1, + 8, + 9), as hi + lo F16 parts.
    const int mi = lane >> 3, mr = lane & 7;  // ldmatrix: this lane's matrix and row
    if constexpr (!kQ8) {
      uint32_t ph[2][4], plo[2][4];
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        SplitHiLo(s[2 * kk][0], s[2 * kk][1], ph[kk][0], plo[kk][0]);
        SplitHiLo(s[2 * kk][2], s[2 * kk][3], ph[kk][1], plo[kk][1]);
        SplitHiLo(s[2 * kk + 1][0], s[2 * kk + 1][1], ph[kk][2], plo[kk][2]);
        SplitHiLo(s[2 * kk + 1][2], s[2 * kk + 1][3], ph[kk][3], plo[kk][3]);
      }
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
#pragma unroll
        for (int dn = 0; dn < HD / 16; ++dn) {
          uint32_t b0, b1, b2, b3;
          LdMatrixX4Trans(b0, b1, b2, b3, Vs + Lay::Chunk(kk * 16 + mr + (mi & 1) * 8, 2 * dn + (mi >> 1)));
          MmaF16(o[2 * dn], ph[kk], b0, b1);
          MmaF16(o[2 * dn], plo[kk], b0, b1);
          MmaF16(o[2 * dn + 1], ph[kk], b2, b3);
          MmaF16(o[2 * dn + 1], plo[kk], b2, b3);
        }
      }
    } else {
      // Q8_0: V holds exact quants; dim block b's scales go into the
      // probabilities, p_j s_jb (one rounding in FP32), then hi + lo.
#pragma unroll
      for (int kk = 0; kk < 2; ++kk) {
        const int j0 = kk * 16 + 2 * t;
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          const float v0 = H2F(Vsc[j0 * NB + b]), v1 = H2F(Vsc[(j0 + 1) * NB + b]);
          const float v2 = H2F(Vsc[(j0 + 8) * NB + b]), v3 = H2F(Vsc[(j0 + 9) * NB + b]);
          uint32_t ph[4], plo[4];
          SplitHiLo(__fmul_rn(s[2 * kk][0], v0), __fmul_rn(s[2 * kk][1], v1), ph[0], plo[0]);
          SplitHiLo(__fmul_rn(s[2 * kk][2], v0), __fmul_rn(s[2 * kk][3], v1), ph[1], plo[1]);
          SplitHiLo(__fmul_rn(s[2 * kk + 1][0], v2), __fmul_rn(s[2 * kk + 1][1], v3), ph[2], plo[2]);
          SplitHiLo(__fmul_rn(s[2 * kk + 1][2], v2), __fmul_rn(s[2 * kk + 1][3], v3), ph[3], plo[3]);
#pragma unroll
          for (int dn = 2 * b; dn < 2 * b + 2; ++dn) {
            uint32_t b0, b1, b2, b3;
            LdMatrixX4Trans(b0, b1, b2, b3, Vs + Lay::Chunk(kk * 16 + mr + (mi & 1) * 8, 2 * dn + (mi >> 1)));
            MmaF16(o[2 * dn], ph, b0, b1);
            MmaF16(o[2 * dn], plo, b0, b1);
            MmaF16(o[2 * dn + 1], ph, b2, b3);
            MmaF16(o[2 * dn + 1], plo, b2, b3);
          }
        }
      }
    }
  }
  // 6. Merge the chunks' states of each m-tile by a fixed tree (cw + sp into
  // cw). M = 1: through the sender's own region (only its owner ever touched
  // it: no barrier before); M > 1: the regions are shared, so after a
  // barrier, one slot a warp anywhere in the block's memory.
  if constexpr (M > 1) __syncthreads();
  float* const slots = reinterpret_cast<float*>(M == 1 ? smem + Lay::kQfBytes : smem);
  constexpr int kSlot = M == 1 ? Lay::kWarpBytes / 4 : Lay::kSlotFloats;
  for (int sp = 1; sp < nwp; sp <<= 1) {
    if ((cw & (2 * sp - 1)) == sp) {
      float* sl = slots + warp * kSlot;
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) sl[(i * 4 + e) * 32 + lane] = o[i][e];
      sl[(HD / 2 + 0) * 32 + lane] = m0;
      sl[(HD / 2 + 1) * 32 + lane] = l0;
      sl[(HD / 2 + 2) * 32 + lane] = m1;
      sl[(HD / 2 + 3) * 32 + lane] = l1;
    }
    __syncthreads();
    if ((cw & (2 * sp - 1)) == 0 && cw + sp < nwp) {
      const float* sl = slots + (warp + sp) * kSlot;
      const MergeW w0 = MergeWeights(m0, l0, sl[(HD / 2 + 0) * 32 + lane], sl[(HD / 2 + 1) * 32 + lane]);
      const MergeW w1 = MergeWeights(m1, l1, sl[(HD / 2 + 2) * 32 + lane], sl[(HD / 2 + 3) * 32 + lane]);
#pragma unroll
      for (int i = 0; i < NT; ++i)
#pragma unroll
        for (int e = 0; e < 4; ++e) o[i][e] = MergeO(e < 2 ? w0 : w1, o[i][e], sl[(i * 4 + e) * 32 + lane]);
    }
  }
  // 7. Warp 0 of each m-tile writes the split's partial of each row whose
  // position reaches the split: [token - tok0][head][split] x {o[HD], m, l,
  // -, -}; AttnMergeKernel merges them (a row in one split too: its weight is
  // exp(0) = 1, so o / l).
  if (cw == 0) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = rg + 8 * h;
      const int pr = h ? pg8 : pg;
      if (r >= R || pr < jb) continue;
      const int tok = tile.t0 + r / ng, head = kvh * pl.group + gh0 + r % ng;
      float* dst = PartEntry(a.part, tok - a.tok0, a.n_heads, head, pl.max_splits, split, HD);
#pragma unroll
      for (int i = 0; i < NT; ++i)
        *reinterpret_cast<float2*>(dst + i * 8 + 2 * t) = make_float2(o[i][2 * h], o[i][2 * h + 1]);
      if (t == 0) *reinterpret_cast<float2*>(dst + HD) = h ? make_float2(m1, l1) : make_float2(m0, l0);
    }
  }
}

template <typename F>
bool DispatchV2(GgmlType type, int hd, F&& f) {
  if (type != GgmlType::F16 && type != GgmlType::Q8_0) return false;
  const bool q8 = type == GgmlType::Q8_0;
  switch (hd) {
    case 32: return q8 ? f.template operator()<32, true>() : f.template operator()<32, false>();
    case 64: return q8 ? f.template operator()<64, true>() : f.template operator()<64, false>();
    case 128: return q8 ? f.template operator()<128, true>() : f.template operator()<128, false>();
    case 256: return q8 ? f.template operator()<256, true>() : f.template operator()<256, false>();
    default: return false;
  }
}
template <typename F>
bool DispatchV2M(GgmlType type, int hd, int mtiles, F&& f) {
  return DispatchV2(type, hd, [&]<int HD, bool kQ8>() {
    if (mtiles == 2) return f.template operator()<HD, kQ8, 2>();
    return mtiles == 1 && f.template operator()<HD, kQ8, 1>();
  });
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
  return static_cast<size_t>(n_tok) * n_heads * max_splits * PartStride(head_dim);
}

size_t AttnV2SmemBytes(GgmlType kv_type, int head_dim, int split_len, int mtiles) {
  size_t r = 0;
  DispatchV2(kv_type, head_dim, [&]<int HD, bool kQ8>() {
    using Lay = V2Layout<HD, kQ8>;
    const size_t chunks = static_cast<size_t>(split_len / 32);
    r = mtiles * Lay::kQfBytes + chunks * Lay::kWarpBytes;
    // mtiles > 1: the merge tree's slots, one a warp, reuse the whole block's memory.
    if (mtiles > 1) r = std::max(r, mtiles * chunks * Lay::kSlotFloats * sizeof(float));
    return true;
  });
  return r;
}

int AttnKernelFor(GgmlType kv_type, int head_dim, int split_len) {
  if (GetTuning().attn_kernel != 2 || split_len < 32 || split_len % 32 != 0 || split_len / 32 > 8) return 1;
  // Q8_0 at head_dim <= 128 is compiled for three blocks an SM (4 warps: splits of 128).
  if (kv_type == GgmlType::Q8_0 && head_dim <= 128 && split_len > 128) return 1;
  const size_t bytes = AttnV2SmemBytes(kv_type, head_dim, split_len);
  if (bytes == 0 || bytes > static_cast<size_t>(GetDeviceInfo().smem_optin)) return 1;
  return 2;
}

int AttnMtilesFor(GgmlType kv_type, int head_dim, int split_len, int rows) {
  // Two m-tiles where a tile's rows need them, its warps fit the kernel's
  // threads (V2Threads: split_len / 32 warps an m-tile, 128 threads an
  // m-tile) and its block's memory fits; else one.
  if (rows <= kAttnV2Rows || split_len > 128) return 1;
  const size_t bytes = AttnV2SmemBytes(kv_type, head_dim, split_len, kAttnMtilesMax);
  return bytes > 0 && bytes <= static_cast<size_t>(GetDeviceInfo().smem_optin) ? kAttnMtilesMax : 1;
}

cudaError_t PrepareAttentionKernels() {
  auto raise = [](const void* fn) {
    cudaFuncAttributes fa{};
    const cudaError_t e = cudaFuncGetAttributes(&fa, fn);
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(fn, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                GetDeviceInfo().smem_optin - static_cast<int>(fa.sharedSizeBytes));
  };
  cudaError_t e = raise(reinterpret_cast<const void*>(AttnSplitKernel));
  if (e == cudaSuccess) e = raise(reinterpret_cast<const void*>(AttnMergeKernel));
  for (GgmlType t : {GgmlType::F16, GgmlType::Q8_0})
    for (int hd : {32, 64, 128, 256})
      DispatchV2(t, hd, [&]<int HD, bool kQ8>() {
        if (e == cudaSuccess) e = raise(reinterpret_cast<const void*>(AttnSplitV2Kernel<HD, kQ8, 1>));
        if (e == cudaSuccess) e = raise(reinterpret_cast<const void*>(AttnSplitV2Kernel<HD, kQ8, 2>));
        return true;
      });
  return e;
}

cudaError_t LaunchKvWrite(const float* k, const float* v, int n_kv_heads, int head_dim, const KvDev& kv,
                          const BatchDev& b, cudaStream_t s) {
  if (b.n_tokens <= 0) return cudaSuccess;
  dim3 grid(b.n_tokens, n_kv_heads);
  const int threads = (head_dim + 31) / 32 * 32;
  LaunchPdl(KvWriteKernel, dim3(grid), dim3(threads), 0, s, k, v, n_kv_heads, head_dim, kv, b);
  return LaunchResult();
}

cudaError_t LaunchAttention(const float* q, const KvDev& kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const BatchDev& b, const AttnTile* tiles_dev, int tile0, int tile1, int tok0, int tok1,
                            const AttnPlan& plan, float* partials, float* out, void* xq, cudaStream_t s) {
  if (tile1 <= tile0) return cudaSuccess;
  const size_t merge_smem = MergeSmemBytes(head_dim, plan.max_splits);
  if (merge_smem + 1024 > static_cast<size_t>(GetDeviceInfo().smem_optin)) return cudaErrorInvalidValue;
  AttnArgs a{q, kv, n_heads, n_kv_heads, head_dim, scale, b, tiles_dev, tile0, tok0, plan, partials};
  dim3 grid((tile1 - tile0) * plan.n_gchunks, n_kv_heads, plan.max_splits);
  if (plan.kernel == 2) {
    if (plan.mtiles < 1 || plan.mtiles > kAttnMtilesMax || (plan.mtiles > 1 && plan.split_len > 128) ||
        plan.rows_max > kAttnV2Rows * plan.mtiles)
      return cudaErrorInvalidValue;
    const size_t smem = AttnV2SmemBytes(kv.type, head_dim, plan.split_len, plan.mtiles);
    const bool ok = DispatchV2M(kv.type, head_dim, plan.mtiles, [&]<int HD, bool kQ8, int M>() {
      LaunchPdl(AttnSplitV2Kernel<HD, kQ8, M>, dim3(grid), dim3(plan.split_len * M), smem, s, a);
      return true;
    });
    if (!ok) return cudaErrorInvalidValue;
  } else {
    LaunchPdl(AttnSplitKernel, dim3(grid), dim3(kAttnThreads), AttnSmemBytes(plan.rows_max, head_dim), s, a);
  }
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  const AttnMergeArgs m{partials, n_heads, head_dim, plan.max_splits, plan.split_len, b.pos, tok0, out,
                        static_cast<uint8_t*>(xq)};
  const int64_t groups = mmv::Groups(static_cast<int64_t>(n_heads) * head_dim);
  LaunchPdl(AttnMergeKernel, dim3(tok1 - tok0, static_cast<unsigned>(groups)), dim3(mmv::kGroup), merge_smem, s, m);
  return LaunchResult();
}

}  // namespace specd::cuda
