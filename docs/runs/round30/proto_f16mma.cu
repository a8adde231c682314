// Round 30 prototype (not product code): how fast could a Q4_K matvec of
// 1-32 columns run if the weights were expanded to F16 in registers and
// multiplied with mma.sync m16n8k16 (one activation level in F16, as
// Marlin / cuBLAS-on-dequantized do), instead of today's int8 codes times two
// int8 activation levels (k_matvec.cu)? Built standalone:
//   nvcc -O3 -std=c++17 -arch=sm_90 -o proto_f16mma proto_f16mma.cu
//   ./proto_f16mma            (checks against a float64 host reference, then times)
// Arithmetic per 16-row tile and 256-element group (a Q4_K super-block):
//   codes q (0..15) -> F16 1024 + q (or 1024 + 16 q) by one LOP3 per half2,
//   then one HFMA2 gives sc*q exactly (sc <= 63: products <= 945);
//   16 HMMAs (fp32 accumulate) give sum_k sc*q*x; the mins' term
//   sum_u m_u * (unit sums of x) is one tf32 m16n8k8 (K = the 8 units);
//   acc += d * D - dmin * M.
// Every lane's operands are in mma fragment order in memory (the packer's job
// in a product), so the kernel only streams, expands and multiplies.
#include <cuda_fp16.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <vector>
#include <random>
#include <algorithm>
#include <cstring>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e_)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

// Record of one (tile, group): 2048 bytes of codes (lane-major 16-byte
// chunks: chunk c of lane L at (c * 32 + L) * 16, its 4 words the k-steps
// 4c .. 4c + 3), then sc[16][8], m[16][8] bytes, then d, dmin per row (half2).
constexpr int kCodes = 2048, kScOff = 2048, kMnOff = 2048 + 128, kDOff = 2048 + 256;
constexpr int kRec = 2048 + 256 + 64;  // 2368 (a GGUF Q4_K super-block of 16 rows: 2304)
// Activations of one group and 8-column tile: the B fragments, [s/2][lane]
// uint4 (k-steps s, s+1: 2 regs each), 4096 bytes, then the unit sums in
// tf32 m16n8k8 B order [lane] (units t, t + 4 of column g), 256 bytes.
constexpr int kXFrag = 4096, kXRec = 4096 + 256;

__device__ __forceinline__ void CpAsync16(void* s, const void* g) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(s));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void Commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void WaitGroup() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}
__device__ __forceinline__ uint32_t Lop3(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) | c
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ uint32_t H2Fma(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;\n" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ void Hmma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void Tf32Mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}
// Byte b of w as F16 in both halves (exact: 1024 + v - 1024).
__device__ __forceinline__ uint32_t ByteH2(uint32_t w, int b) {
  const uint32_t v = __byte_perm(w, 0, 0x4040 | (b * 0x0101));  // byte b into bits 0-7 and 16-23
  const uint32_t h = v | 0x64006400u;                              // 1024 + v
  uint32_t r;
  asm("sub.rn.f16x2 %0, %1, %2;\n" : "=r"(r) : "r"(h), "r"(0x64006400u));
  return r;
}

// One (tile, group): rec its weight record, xr the group's NCT activation
// records (shared or global memory).
template <int NCT>
__device__ __forceinline__ void Group(const uint8_t* rec, const uint8_t* xr, int lane, float (&acc)[NCT][4]) {
  const int g = lane >> 2, t = lane & 3;
    const uint2 scg = *reinterpret_cast<const uint2*>(rec + kScOff + 8 * g);
    const uint2 scg8 = *reinterpret_cast<const uint2*>(rec + kScOff + 8 * (g + 8));
    float dd[NCT][4];
#pragma unroll
    for (int c = 0; c < NCT; ++c)
#pragma unroll
      for (int j = 0; j < 4; ++j) dd[c][j] = 0.f;
#pragma unroll
    for (int c4 = 0; c4 < 4; ++c4) {  // 4 k-steps a chunk: units 2 c4, 2 c4 + 1
      const uint4 q = *reinterpret_cast<const uint4*>(rec + (c4 * 32 + lane) * 16);
#pragma unroll
      for (int h = 0; h < 2; ++h) {  // unit u = 2 c4 + h: k-steps 4 c4 + 2h, + 1
        const int u = 2 * c4 + h;
        const uint32_t sg = ByteH2(u < 4 ? scg.x : scg.y, u & 3);
        const uint32_t sg8 = ByteH2(u < 4 ? scg8.x : scg8.y, u & 3);
        const uint32_t s1 = sg, b1 = H2Fma(sg, 0xE400E400u, 0u);            // sc, -1024 sc
        const uint32_t s16 = H2Fma(sg8, 0x2C002C00u, 0u), b16 = H2Fma(sg8, 0xD400D400u, 0u);  // sc/16, -64 sc
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          const uint32_t word = (&q.x)[2 * h + e];
          uint32_t a[4];
          a[0] = H2Fma(Lop3(word, 0x000F000Fu, 0x64006400u), s1, b1);
          a[1] = H2Fma(Lop3(word, 0x00F000F0u, 0x64006400u), s16, b16);
          const uint32_t w8 = word >> 8;
          // rows g (a[2]) use sc of row g: the x1 constants; rows g + 8 the x16 ones
          a[2] = H2Fma(Lop3(w8, 0x000F000Fu, 0x64006400u), s1, b1);
          a[3] = H2Fma(Lop3(w8, 0x00F000F0u, 0x64006400u), s16, b16);
          const int s = 4 * c4 + 2 * h + e;
#pragma unroll
          for (int c = 0; c < NCT; ++c) {
            const uint2 b = *reinterpret_cast<const uint2*>(xr + c * kXRec + ((s >> 1) * 32 + lane) * 16 + 8 * (s & 1));
            Hmma(dd[c], a, b.x, b.y);
          }
        }
      }
    }
    // mins: M = mins (16 x 8 units) x unit sums (8 units x 8 columns), tf32
    const uint8_t* mn = rec + kMnOff;
    const uint32_t ma0 = __float_as_uint(static_cast<float>(mn[8 * g + t]));
    const uint32_t ma1 = __float_as_uint(static_cast<float>(mn[8 * (g + 8) + t]));
    const uint32_t ma2 = __float_as_uint(static_cast<float>(mn[8 * g + t + 4]));
    const uint32_t ma3 = __float_as_uint(static_cast<float>(mn[8 * (g + 8) + t + 4]));
    const float2 dg = __half22float2(*reinterpret_cast<const __half2*>(rec + kDOff + 4 * g));
    const float2 dg8 = __half22float2(*reinterpret_cast<const __half2*>(rec + kDOff + 4 * (g + 8)));
#pragma unroll
    for (int c = 0; c < NCT; ++c) {
      const uint2 us = *reinterpret_cast<const uint2*>(xr + c * kXRec + kXFrag + 8 * lane);
      float m[4] = {0.f, 0.f, 0.f, 0.f};
      Tf32Mma(m, ma0, ma1, ma2, ma3, us.x, us.y);
      acc[c][0] = fmaf(dg.x, dd[c][0], fmaf(-dg.y, m[0], acc[c][0]));
      acc[c][1] = fmaf(dg.x, dd[c][1], fmaf(-dg.y, m[1], acc[c][1]));
      acc[c][2] = fmaf(dg8.x, dd[c][2], fmaf(-dg8.y, m[2], acc[c][2]));
      acc[c][3] = fmaf(dg8.x, dd[c][3], fmaf(-dg8.y, m[3], acc[c][3]));
    }
}

// One block: W warps, a tile each, every group of K; NCT 8-column tiles.
template <int NCT, int W, int S>
__global__ void __launch_bounds__(32 * W) ProtoKernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ x,
                                                     float* __restrict__ y, int tiles, int groups, int n) {
  extern __shared__ uint4 smem[];
  uint8_t* xs = reinterpret_cast<uint8_t*>(smem);                 // S stages x NCT x kXRec
  uint8_t* ws = xs + S * NCT * kXRec;                             // per warp S records
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int tile = blockIdx.x * W + warp;
  const bool active = tile < tiles;
  uint8_t* ring = ws + warp * S * kRec;
  const int gpp = (groups + gridDim.y - 1) / gridDim.y, g0 = blockIdx.y * gpp, ng = min(groups, g0 + gpp) - g0;
  const uint8_t* wt = w + (static_cast<size_t>(active ? tile : 0) * groups + g0) * kRec;
  auto copy = [&](int i) {
    if (i >= ng) return;
    if (active) {
      const uint8_t* src = wt + static_cast<size_t>(i) * kRec;
      uint8_t* dst = ring + (i % S) * kRec;
      for (int j = lane; j < kRec / 16; j += 32) CpAsync16(dst + 16 * j, src + 16 * j);
    }
    const uint8_t* xsrc = x + static_cast<size_t>(g0 + i) * NCT * kXRec;  // [group][ct] records
    uint8_t* xdst = xs + (i % S) * NCT * kXRec;
    for (int j = threadIdx.x; j < NCT * kXRec / 16; j += 32 * W) CpAsync16(xdst + 16 * j, xsrc + 16 * j);
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    copy(i);
    Commit();
  }
  const int g = lane >> 2, t = lane & 3;
  float acc[NCT][4];
#pragma unroll
  for (int c = 0; c < NCT; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[c][i] = 0.f;
  for (int i = 0; i < ng; ++i) {
    WaitGroup<S - 2>();
    __syncthreads();
    copy(i + S - 1);
    Commit();
    if (!active) continue;
    Group<NCT>(ring + (i % S) * kRec, xs + (i % S) * NCT * kXRec, lane, acc);
  }
  if (!active) return;
  const int rows = tiles * 16;
#pragma unroll
  for (int c = 0; c < NCT; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = 8 * c + 2 * t + (i & 1), row = tile * 16 + g + 8 * (i >> 1);
      if (col >= n) continue;
      if (gridDim.y == 1) y[static_cast<size_t>(col) * rows + row] = acc[c][i];
      else atomicAdd(&y[static_cast<size_t>(col) * rows + row], acc[c][i]);
    }
}


// A warp per (tile, part of the groups), PARTS parts a tile (as the product's
// plan splits a tile's groups over warps), 4 warps a block; activations read
// from global memory (L1/L2), weights through a ring of S records a warp;
// the parts' sums added with atomics (timing only: the order is not fixed).
template <int NCT, int PARTS, int S>
__global__ void __launch_bounds__(128) ProtoSplitKernel(const uint8_t* __restrict__ w, const uint8_t* __restrict__ x,
                                                       float* __restrict__ y, int tiles, int groups, int n) {
  extern __shared__ uint4 smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int wid = blockIdx.x * 4 + warp, tile = wid / PARTS, part = wid % PARTS;
  if (tile >= tiles) return;
  const int gpp = (groups + PARTS - 1) / PARTS, g0 = part * gpp, ng = min(groups, g0 + gpp) - g0;
  uint8_t* ring = reinterpret_cast<uint8_t*>(smem) + warp * S * kRec;
  const uint8_t* wt = w + (static_cast<size_t>(tile) * groups + g0) * kRec;
  auto copy = [&](int i) {
    if (i >= ng) return;
    const uint8_t* src = wt + static_cast<size_t>(i) * kRec;
    uint8_t* dst = ring + (i % S) * kRec;
    for (int j = lane; j < kRec / 16; j += 32) CpAsync16(dst + 16 * j, src + 16 * j);
  };
#pragma unroll
  for (int i = 0; i < S - 1; ++i) {
    copy(i);
    Commit();
  }
  float acc[NCT][4];
#pragma unroll
  for (int c = 0; c < NCT; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[c][i] = 0.f;
  for (int i = 0; i < ng; ++i) {
    WaitGroup<S - 2>();
    __syncwarp();
    copy(i + S - 1);
    Commit();
    Group<NCT>(ring + (i % S) * kRec, x + static_cast<size_t>(g0 + i) * NCT * kXRec, lane, acc);
    __syncwarp();
  }
  const int g = lane >> 2, t = lane & 3, rows = tiles * 16;
#pragma unroll
  for (int c = 0; c < NCT; ++c)
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int col = 8 * c + 2 * t + (i & 1), row = tile * 16 + g + 8 * (i >> 1);
      if (col < n) atomicAdd(&y[static_cast<size_t>(col) * rows + row], acc[c][i]);
    }
}

// ---- host: random weights and activations, packing, reference ----
struct Mat {
  int rows, k;
  std::vector<uint8_t> q;          // [row][k] codes 0..15
  std::vector<uint8_t> sc, mn;     // [row][k/32]
  std::vector<float> d, dmin;      // [row][k/256] (values as stored in F16)
};

template <int kNct, int kW, int kS, int kParts = 0>
struct Cfg {  // kParts > 0: ProtoSplitKernel (kW unused: 4 warps a block); kParts < 0: ProtoKernel over
              // -kParts parts of the groups (grid y)
  static constexpr int NCT = kNct, W = kW, S = kS, P = kParts;
};
using K1 = Cfg<1, 4, 3>;
using K1b = Cfg<1, 2, 4>;
using K2 = Cfg<2, 4, 3>;
using K4 = Cfg<4, 4, 3>;
using K4b = Cfg<4, 8, 2>;
using K4c = Cfg<4, 4, 2>;
using P1a = Cfg<1, 4, 3, 3>;
using P1b = Cfg<1, 4, 4, 3>;
using P1c = Cfg<1, 4, 3, 5>;
using P1d = Cfg<1, 4, 2, 4>;
using P2a = Cfg<2, 4, 3, 3>;
using Q1a = Cfg<1, 4, 3, -2>;
using Q1b = Cfg<1, 4, 3, -3>;
using Q1c = Cfg<1, 8, 3, -3>;
using Q1d = Cfg<1, 4, 2, -3>;
using Q1e = Cfg<1, 2, 3, -3>;
using Q4a = Cfg<4, 8, 2, -2>;
using Q4b = Cfg<4, 4, 2, -2>;

int main() {
  const int rows = 25600, k = 5120, G = k / 256, tiles = rows / 16;
  std::mt19937 rng(7);
  Mat m{rows, k};
  m.q.resize(static_cast<size_t>(rows) * k);
  m.sc.resize(static_cast<size_t>(rows) * k / 32);
  m.mn.resize(m.sc.size());
  m.d.resize(static_cast<size_t>(rows) * G);
  m.dmin.resize(m.d.size());
  for (auto& v : m.q) v = rng() & 15;
  for (auto& v : m.sc) v = rng() & 63;
  for (auto& v : m.mn) v = rng() & 63;
  std::normal_distribution<float> nd(0.f, 1.f);
  for (size_t i = 0; i < m.d.size(); ++i) {
    m.d[i] = __half2float(__float2half(0.001f * (1.f + 0.2f * nd(rng))));
    m.dmin[i] = __half2float(__float2half(0.0005f * (1.f + 0.2f * nd(rng))));
  }
  // pack the records
  std::vector<uint8_t> W(static_cast<size_t>(tiles) * G * kRec, 0);
  for (int tl = 0; tl < tiles; ++tl)
    for (int gr = 0; gr < G; ++gr) {
      uint8_t* rec = &W[(static_cast<size_t>(tl) * G + gr) * kRec];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane >> 2, t = lane & 3;
        for (int s = 0; s < 16; ++s) {
          auto code = [&](int r, int kk) { return m.q[static_cast<size_t>(tl * 16 + r) * k + gr * 256 + 16 * s + kk]; };
          uint32_t word = code(g, 2 * t) | code(g, 2 * t + 1) << 16 | code(g + 8, 2 * t) << 4 |
                          code(g + 8, 2 * t + 1) << 20 | code(g, 2 * t + 8) << 8 | code(g, 2 * t + 9) << 24 |
                          code(g + 8, 2 * t + 8) << 12 | code(g + 8, 2 * t + 9) << 28;
          const int c4 = s / 4, wi = s % 4;
          std::memcpy(rec + (c4 * 32 + lane) * 16 + 4 * wi, &word, 4);
        }
      }
      for (int r = 0; r < 16; ++r)
        for (int u = 0; u < 8; ++u) {
          rec[kScOff + 8 * r + u] = m.sc[static_cast<size_t>(tl * 16 + r) * (k / 32) + gr * 8 + u];
          rec[kMnOff + 8 * r + u] = m.mn[static_cast<size_t>(tl * 16 + r) * (k / 32) + gr * 8 + u];
        }
      for (int r = 0; r < 16; ++r) {
        __half2 h = __floats2half2_rn(m.d[static_cast<size_t>(tl * 16 + r) * G + gr],
                                      m.dmin[static_cast<size_t>(tl * 16 + r) * G + gr]);
        std::memcpy(rec + kDOff + 4 * r, &h, 4);
      }
    }
  uint8_t* dw;
  CK(cudaMalloc(&dw, W.size()));
  CK(cudaMemcpy(dw, W.data(), W.size(), cudaMemcpyHostToDevice));
  float* dy;
  CK(cudaMalloc(&dy, sizeof(float) * 32 * rows));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("prototype F16-MMA Q4_K matvec, %d x %d (%.1f MB of records; GGUF Q4_K %.1f MB)\n", rows, k,
              W.size() / 1e6, static_cast<double>(rows) * k * 4.5 / 8 / 1e6);

  auto run = [&](auto kernel_tag, int nct, int n) {
    using K = decltype(kernel_tag);
    constexpr int NCT = K::NCT, WW = K::W, S = K::S;
    // activations: n columns, F16, fragment order; unit sums from the F16 values
    std::vector<float> x(static_cast<size_t>(n) * k);
    for (auto& v : x) v = __half2float(__float2half(nd(rng)));
    std::vector<uint8_t> X(static_cast<size_t>(G) * NCT * kXRec, 0);
    for (int gr = 0; gr < G; ++gr)
      for (int c = 0; c < NCT; ++c) {
        uint8_t* xr = &X[(static_cast<size_t>(gr) * NCT + c) * kXRec];
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane >> 2, t = lane & 3, col = 8 * c + g;
          auto xv = [&](int kk) { return col < n ? x[static_cast<size_t>(col) * k + gr * 256 + kk] : 0.f; };
          for (int s = 0; s < 16; ++s) {
            __half2 b0 = __floats2half2_rn(xv(16 * s + 2 * t), xv(16 * s + 2 * t + 1));
            __half2 b1 = __floats2half2_rn(xv(16 * s + 2 * t + 8), xv(16 * s + 2 * t + 9));
            uint8_t* p = xr + ((s >> 1) * 32 + lane) * 16 + 8 * (s & 1);
            std::memcpy(p, &b0, 4);
            std::memcpy(p + 4, &b1, 4);
          }
          float us[2] = {0.f, 0.f};
          for (int h = 0; h < 2; ++h)
            for (int kk = 0; kk < 32; ++kk) us[h] += xv(32 * (t + 4 * h) + kk);
          std::memcpy(xr + kXFrag + 8 * lane, us, 8);
        }
      }
    uint8_t* dx;
    CK(cudaMalloc(&dx, X.size()));
    CK(cudaMemcpy(dx, X.data(), X.size(), cudaMemcpyHostToDevice));
    constexpr int P = K::P;
    const size_t sm = P > 0 ? static_cast<size_t>(4) * S * kRec : static_cast<size_t>(S) * (NCT * kXRec + WW * kRec);
    auto kern = P > 0 ? ProtoSplitKernel<NCT, (P > 0 ? P : 1), S> : ProtoKernel<NCT, WW, S>;
    CK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sm)));
    const dim3 blocks(P > 0 ? (tiles * P + 3) / 4 : (tiles + WW - 1) / WW, P < 0 ? -P : 1);
    const int threads = P > 0 ? 128 : 32 * WW;
    CK(cudaMemset(dy, 0, sizeof(float) * 32 * rows));
    kern<<<blocks, threads, sm>>>(dw, dx, dy, tiles, G, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    // check a sample of rows against float64
    std::vector<float> y(static_cast<size_t>(n) * rows);
    CK(cudaMemcpy(y.data(), dy, y.size() * 4, cudaMemcpyDeviceToHost));
    double maxrel = 0;
    for (int r = 0; r < rows; r += 997)
      for (int col = 0; col < n; ++col) {
        double ref = 0, mag = 0;
        for (int kk = 0; kk < k; ++kk) {
          const size_t ri = static_cast<size_t>(r) * k + kk;
          const int u = kk / 32, gr = kk / 256;
          const double wv = static_cast<double>(m.d[static_cast<size_t>(r) * G + gr]) * m.sc[static_cast<size_t>(r) * (k / 32) + u] * m.q[ri] -
                            static_cast<double>(m.dmin[static_cast<size_t>(r) * G + gr]) * m.mn[static_cast<size_t>(r) * (k / 32) + u];
          ref += wv * x[static_cast<size_t>(col) * k + kk];
          mag += std::fabs(wv * x[static_cast<size_t>(col) * k + kk]);
        }
        maxrel = std::max(maxrel, std::fabs(y[static_cast<size_t>(col) * rows + r] - ref) / (mag / std::sqrt(k)));
      }
    // time
    const int reps = 50;
    for (int i = 0; i < 5; ++i) kern<<<blocks, threads, sm>>>(dw, dx, dy, tiles, G, n);
    CK(cudaEventRecord(e0));
    for (int i = 0; i < reps; ++i) kern<<<blocks, threads, sm>>>(dw, dx, dy, tiles, G, n);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ms /= reps;
    int nb = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, kern, threads, sm));
    std::printf("  n=%2d (%d col tiles, %s %d, %d stages, %d blocks an SM): %.1f us, %.0f GB/s of records; "
                "max error %.2e of the typical term sum\n",
                n, nct, P > 0 ? "a warp a tile's part, parts" : P < 0 ? "parts over blocks, warps a block" : "a warp a tile, warps a block", P > 0 ? P : WW, S, nb,
                ms * 1e3, W.size() / (ms * 1e-3) / 1e9, maxrel);
    CK(cudaFree(dx));
  };
  run(K1{}, 1, 1);
  run(Q1a{}, 1, 1);
  run(Q1b{}, 1, 1);
  run(Q1c{}, 1, 1);
  run(Q1d{}, 1, 1);
  run(Q1e{}, 1, 1);
  run(P1d{}, 1, 1);
  run(Q1b{}, 1, 8);
  run(Q4a{}, 4, 30);
  run(Q4b{}, 4, 30);
  run(K1{}, 1, 8);
  run(K2{}, 2, 16);
  run(K4{}, 4, 30);
  run(K4b{}, 4, 30);
  run(K4c{}, 4, 30);
  run(K4{}, 4, 32);
  return 0;
}
