// Tensor formats: block layouts checked against hand-computed values, quantizer
// round-trip error bounds, an independent reference (gguf-py, the format's own
// numpy implementation), and the dot kernels (accuracy, and DotRowsBatched ==
// DotRow bit for bit on every ISA build).
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "common/quant/block_dequant.h"
#include "common/quant/dot_kernels.h"
#include "common/quant/quant.h"
#include "common/util/fp16.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

using quant_internal::DotIsa;

uint32_t Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t H(float f) { return FloatToHalf(f); }

std::vector<float> Dequant(GgmlType t, const void* src, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  DequantizeRow(t, src, out.data(), n);
  return out;
}

template <class Block>
std::vector<float> DequantBlock(const Block& b, GgmlType t) {
  return Dequant(t, &b, TypeTraits(t).block_size);
}

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

std::vector<uint8_t> Quantize(GgmlType t, const std::vector<float>& x) {
  std::vector<uint8_t> q(RowBytes(t, static_cast<int64_t>(x.size())));
  const absl::Status st = QuantizeRow(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
  EXPECT_TRUE(st.ok()) << st;
  return q;
}

// Random bytes with every fp16 scale field replaced by a finite value of
// moderate size, so that the blocks decode to finite numbers. Plain formats:
// random finite values over a wide range of magnitudes.
std::vector<uint8_t> RandomBlocks(GgmlType t, int64_t nblocks, uint32_t seed) {
  const size_t bs = TypeTraits(t).type_size;
  std::mt19937 rng(seed);
  if (TypeTraits(t).block_size == 1) {
    std::vector<float> v(static_cast<size_t>(nblocks));
    for (auto& f : v) f = std::ldexp(static_cast<float>(static_cast<int32_t>(rng())) * 0x1p-31f, static_cast<int>(rng() % 24) - 12);
    std::vector<uint8_t> q(RowBytes(t, nblocks));
    EXPECT_TRUE(QuantizeRow(t, v.data(), q.data(), nblocks).ok());
    return q;
  }
  std::vector<uint8_t> raw(bs * static_cast<size_t>(nblocks));
  for (auto& b : raw) b = static_cast<uint8_t>(rng());
  std::uniform_real_distribution<float> scale(-1.5f, 1.5f);
  std::vector<size_t> offs;  // byte offsets of fp16 fields within a block
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: offs = {0}; break;
    case GgmlType::Q4_1: case GgmlType::Q5_1: offs = {0, 2}; break;
    case GgmlType::Q2_K: offs = {80, 82}; break;
    case GgmlType::Q3_K: offs = {108}; break;
    case GgmlType::Q4_K: case GgmlType::Q5_K: offs = {0, 2}; break;
    case GgmlType::Q6_K: offs = {208}; break;
    default: break;
  }
  for (int64_t i = 0; i < nblocks; ++i)
    for (size_t o : offs) {
      const uint16_t h = H(scale(rng));
      std::memcpy(&raw[i * bs + o], &h, 2);
    }
  return raw;
}

const GgmlType kQuantTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1,
                                GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K,
                                GgmlType::Q5_K, GgmlType::Q6_K};
const GgmlType kAllTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q4_0,
                              GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                              GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                              GgmlType::Q6_K};

// ===========================================================================
// Block layouts, hand-built blocks with known values.
// ===========================================================================

TEST(BlockLayout, Q4_0) {
  BlockQ4_0 b{};
  b.d = H(0.5f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = DequantBlock(b, GgmlType::Q4_0);
  // Low nibble j -> element j, high nibble -> element j + 16; value (q - 8) * d.
  EXPECT_EQ(y[0], -4.0f);
  EXPECT_EQ(y[8], 0.0f);
  EXPECT_EQ(y[15], 3.5f);
  EXPECT_EQ(y[16], 3.5f);
  EXPECT_EQ(y[31], -4.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 0.5f);
    EXPECT_EQ(y[j + 16], (7 - j) * 0.5f);
  }
}

TEST(BlockLayout, Q4_1) {
  BlockQ4_1 b{};
  b.d = H(0.25f);
  b.m = H(-1.0f);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  const auto y = DequantBlock(b, GgmlType::Q4_1);
  EXPECT_EQ(y[0], -1.0f);     // 0 * 0.25 - 1
  EXPECT_EQ(y[15], 2.75f);    // 15 * 0.25 - 1
  EXPECT_EQ(y[16], 2.75f);
  EXPECT_EQ(y[31], -1.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], j * 0.25f - 1.0f);
    EXPECT_EQ(y[j + 16], (15 - j) * 0.25f - 1.0f);
  }
}

TEST(BlockLayout, Q5_0) {
  BlockQ5_0 b{};
  b.d = H(1.0f);
  // Fifth bit of element i is bit i of the little-endian word qh.
  const uint32_t qh = 0x80000001u | (1u << 20);  // elements 0, 20, 31
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(j | (j << 4));
  const auto y = DequantBlock(b, GgmlType::Q5_0);
  EXPECT_EQ(y[0], 0.0f);     // (0 | 16) - 16
  EXPECT_EQ(y[1], -15.0f);   // 1 - 16
  EXPECT_EQ(y[16], -16.0f);  // high nibble of qs[0] = 0, no fifth bit
  EXPECT_EQ(y[20], 4.0f);    // (4 | 16) - 16
  EXPECT_EQ(y[31], 15.0f);   // (15 | 16) - 16
  for (int i = 0; i < 32; ++i) {
    const int q = (i % 16) | (((qh >> i) & 1) << 4);
    EXPECT_EQ(y[i], static_cast<float>(q - 16)) << i;
  }
}

TEST(BlockLayout, Q5_1) {
  BlockQ5_1 b{};
  b.d = H(0.5f);
  b.m = H(2.0f);
  const uint32_t qh = 0xF000000Fu;
  std::memcpy(b.qh, &qh, 4);
  for (int j = 0; j < 16; ++j) b.qs[j] = static_cast<uint8_t>(15 - j);
  const auto y = DequantBlock(b, GgmlType::Q5_1);
  EXPECT_EQ(y[0], 17.5f);  // (15 | 16) * 0.5 + 2
  EXPECT_EQ(y[4], 7.5f);   // 11 * 0.5 + 2
  EXPECT_EQ(y[16], 2.0f);  // high nibble 0, bit 16 clear
  EXPECT_EQ(y[31], 10.0f); // (0 | 16) * 0.5 + 2
  for (int i = 0; i < 32; ++i) {
    const int nib = i < 16 ? 15 - i : 0;
    const int q = nib | (((qh >> i) & 1) << 4);
    EXPECT_EQ(y[i], q * 0.5f + 2.0f) << i;
  }
}

TEST(BlockLayout, Q8_0) {
  BlockQ8_0 b{};
  b.d = H(0.125f);
  for (int j = 0; j < 32; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const auto y = DequantBlock(b, GgmlType::Q8_0);
  EXPECT_EQ(y[0], -16.0f);
  EXPECT_EQ(y[16], 0.0f);
  EXPECT_EQ(y[31], 15.0f);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.125f);
}

TEST(BlockLayout, Q2_K) {
  BlockQ2_K b{};
  b.d = H(1.0f);
  b.dmin = H(0.5f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<uint8_t>(g | ((15 - g) << 4));
  for (auto& q : b.qs) q = 0xE4;  // bit pairs 0,1,2,3 hold 0,1,2,3
  const auto y = DequantBlock(b, GgmlType::Q2_K);
  // Group g = 16 elements; its bit pair is (g / 2) % 4, so q = (g / 2) % 4.
  EXPECT_EQ(y[0], -7.5f);          // g 0: 0 * 0 - 0.5 * 15
  EXPECT_EQ(y[5 * 16], 5.0f);      // g 5: 5 * 2 - 0.5 * 10
  EXPECT_EQ(y[15 * 16 + 3], 45.0f); // g 15: 15 * 3 - 0
  for (int g = 0; g < 16; ++g)
    for (int l = 0; l < 16; ++l) EXPECT_EQ(y[16 * g + l], g * ((g / 2) % 4) - 0.5f * (15 - g));

  // The byte/bit-pair mapping: only byte 32 + 17 = element 128 + 17 (pair 0) etc.
  BlockQ2_K c{};
  c.d = H(1.0f);
  c.scales[9] = 1;  // group 9 = elements 144..159: h 1, pair 0, upper half
  c.qs[32 + 17] = 0x03;
  const auto z = DequantBlock(c, GgmlType::Q2_K);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(z[i], i == 145 ? 3.0f : 0.0f) << i;
}

// Independent packing of 16 six-bit Q3_K scales (0..63, stored biased by 32).
void PackQ3Scales(const int* s, uint8_t* out) {
  std::memset(out, 0, 12);
  for (int g = 0; g < 16; ++g) {
    if (g < 8) out[g] |= s[g] & 0xF;
    else out[g - 8] |= (s[g] & 0xF) << 4;
    out[8 + g % 4] |= (s[g] >> 4) << (2 * (g / 4));
  }
}

TEST(BlockLayout, Q3_K) {
  BlockQ3_K b{};
  b.d = H(0.5f);
  int s[16];
  for (int g = 0; g < 16; ++g) s[g] = g * 4;  // signed scale g*4 - 32
  PackQ3Scales(s, b.scales);
  for (int g = 0; g < 16; ++g) EXPECT_EQ(GetScaleQ3K(g, b.scales), g * 4 - 32);
  for (auto& q : b.qs) q = 0xE4;     // low two bits = bit pair index p
  for (auto& m : b.hmask) m = 0x55;  // bits 0,2,4,6 set
  const auto y = DequantBlock(b, GgmlType::Q3_K);
  // Group g: p = (g/2)%4, hmask bit 4*(g/8)+p is set iff p is even; q = p - 4
  // when the bit is clear: p 0 -> 0, 1 -> -3, 2 -> 2, 3 -> -1.
  const int qv[4] = {0, -3, 2, -1};
  EXPECT_EQ(y[2 * 16], 36.0f);   // g 2 (p 1): 0.5 * (8 - 32) * -3
  EXPECT_EQ(y[13 * 16], 20.0f);  // g 13 (p 2): 0.5 * (52 - 32) * 2
  for (int g = 0; g < 16; ++g)
    for (int l = 0; l < 16; ++l)
      EXPECT_EQ(y[16 * g + l], 0.5f * static_cast<float>(s[g] - 32) * qv[(g / 2) % 4]) << g;

  // hmask addressing: byte 16 + 3, bit 5 = element 128 + 32 + 16 + 3.
  BlockQ3_K c{};
  c.d = H(1.0f);
  int one[16];
  for (int g = 0; g < 16; ++g) one[g] = 33;  // scale +1
  PackQ3Scales(one, c.scales);
  c.hmask[19] = 1 << 5;
  const auto z = DequantBlock(c, GgmlType::Q3_K);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(z[i], i == 179 ? 0.0f : -4.0f) << i;
}

// Independent packing of eight 6-bit scales and mins (Q4_K/Q5_K).
void PackK4Scales(const int* sc, const int* mn, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    out[j + 4] = static_cast<uint8_t>((mn[j] & 63) | ((mn[j + 4] >> 4) << 6));
    out[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((mn[j + 4] & 0xF) << 4));
  }
}

TEST(BlockLayout, GetScaleMinK4) {
  uint8_t packed[12];
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = (j * 23 + 5) % 64;
    mn[j] = 63 - (j * 17) % 64;
  }
  PackK4Scales(sc, mn, packed);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    GetScaleMinK4(j, packed, &s, &m);
    EXPECT_EQ(s, sc[j]) << j;
    EXPECT_EQ(m, mn[j]) << j;
  }
  // Byte-level: sub-block 5 scale = low nibble of byte 9 | top bits of byte 1.
  uint8_t q[12] = {};
  q[9] = 0xA7;   // scale low 7, min low 0xA
  q[1] = 0xC0;   // scale high bits 3
  q[5] = 0x40;   // min high bits 1
  uint8_t s, m;
  GetScaleMinK4(5, q, &s, &m);
  EXPECT_EQ(s, 0x37);
  EXPECT_EQ(m, 0x1A);
}

TEST(BlockLayout, Q4_K) {
  BlockQ4_K b{};
  b.d = H(0.5f);
  b.dmin = H(0.25f);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = 10 + 7 * j;  // 10..59
    mn[j] = 63 - 5 * j;  // 63..28
  }
  PackK4Scales(sc, mn, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) | ((15 - i % 16) << 4));
  const auto y = DequantBlock(b, GgmlType::Q4_K);
  // Element 160 = pair 2, high nibbles of qs[64..]: sub-block 5 (sc 45, min 38),
  // q = 15 - 0: 0.5 * 45 * 15 - 0.25 * 38 = 328.
  EXPECT_EQ(y[160], 328.0f);
  // Element 3 = sub-block 0 (sc 10, min 63), q = 3: 0.5 * 10 * 3 - 15.75.
  EXPECT_EQ(y[3], -0.75f);
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 32; ++l) {
      const int lo = (32 * k + l) % 16, hi = 15 - lo;
      EXPECT_EQ(y[64 * k + l], 0.5f * sc[2 * k] * lo - 0.25f * mn[2 * k]);
      EXPECT_EQ(y[64 * k + 32 + l], 0.5f * sc[2 * k + 1] * hi - 0.25f * mn[2 * k + 1]);
    }
}

TEST(BlockLayout, Q5_K) {
  BlockQ5_K b{};
  b.d = H(0.25f);
  b.dmin = H(1.0f);
  int sc[8], mn[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = 60 - 6 * j;
    mn[j] = 3 * j + 1;
  }
  PackK4Scales(sc, mn, b.scales);
  for (int i = 0; i < 128; ++i) b.qs[i] = static_cast<uint8_t>(((i * 5) % 16) | (((i * 3) % 16) << 4));
  for (int l = 0; l < 32; ++l) b.qh[l] = static_cast<uint8_t>(l * 37);
  const auto y = DequantBlock(b, GgmlType::Q5_K);
  // Element 64*1 + 32 + 2 = 98: pair 1 high nibble of qs[34] = (34*3)%16 = 6,
  // fifth bit = qh[2] (= 74 = 0b1001010) bit 3 = 1 -> q 22; sub-block 3: sc 42, min 10.
  EXPECT_EQ(y[98], 0.25f * 42 * 22 - 10.0f);
  for (int k = 0; k < 4; ++k)
    for (int l = 0; l < 32; ++l) {
      const int i = 32 * k + l;
      const int q0 = ((i * 5) % 16) | (((b.qh[l] >> (2 * k)) & 1) << 4);
      const int q1 = ((i * 3) % 16) | (((b.qh[l] >> (2 * k + 1)) & 1) << 4);
      EXPECT_EQ(y[64 * k + l], 0.25f * sc[2 * k] * q0 - 1.0f * mn[2 * k]);
      EXPECT_EQ(y[64 * k + 32 + l], 0.25f * sc[2 * k + 1] * q1 - 1.0f * mn[2 * k + 1]);
    }
}

TEST(BlockLayout, Q6_K) {
  BlockQ6_K b{};
  b.d = H(0.25f);
  for (int g = 0; g < 16; ++g) b.scales[g] = static_cast<int8_t>((g - 8) * 9);
  for (int i = 0; i < 128; ++i) b.ql[i] = static_cast<uint8_t>(i * 7);
  for (int i = 0; i < 64; ++i) b.qh[i] = static_cast<uint8_t>(i * 13);
  const auto y = DequantBlock(b, GgmlType::Q6_K);
  // Element 128 + 64 + 5 (h 1, group of 32 #2 -> high nibble of ql[64 + 5],
  // bits 4..5 of qh[32 + 5]): ql = 483 & 255 = 227 -> 14, qh = 481 & 255 = 225
  // -> (225 >> 4) & 3 = 2; q = 14 | 32 = 46 - 32 = 14; scale #12 = 36.
  EXPECT_EQ(y[197], 0.25f * 36 * 14);
  for (int h = 0; h < 2; ++h)
    for (int g = 0; g < 4; ++g)
      for (int l = 0; l < 32; ++l) {
        const uint8_t ql = b.ql[64 * h + 32 * (g % 2) + l];
        const int nib = g < 2 ? (ql & 0xF) : (ql >> 4);
        const int hi = (b.qh[32 * h + l] >> (2 * g)) & 3;
        const int q = (nib | (hi << 4)) - 32;
        const int e = 128 * h + 32 * g + l;
        EXPECT_EQ(y[e], (0.25f * b.scales[e / 16]) * q) << e;
      }
}

TEST(BlockLayout, F16AndBF16) {
  const uint16_t halves[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x8000, 0x7C00, 0xFC00};
  const float want[] = {1.0f, -2.0f, 65504.0f, 5.9604645e-8f, 6.0975552e-5f, 6.1035156e-5f,
                        -0.0f, INFINITY, -INFINITY};
  const auto y = Dequant(GgmlType::F16, halves, 9);
  for (int i = 0; i < 9; ++i) EXPECT_EQ(Bits(y[i]), Bits(want[i])) << i;
  const uint16_t nan = 0x7E00;
  EXPECT_TRUE(std::isnan(Dequant(GgmlType::F16, &nan, 1)[0]));

  const uint16_t b16[] = {0x3F80, 0xC040, 0x0001, 0x7F80};
  const auto z = Dequant(GgmlType::BF16, b16, 4);
  EXPECT_EQ(z[0], 1.0f);
  EXPECT_EQ(z[1], -3.0f);
  EXPECT_EQ(Bits(z[2]), 0x00010000u);
  EXPECT_EQ(z[3], INFINITY);

  // Round to nearest even on the way in.
  EXPECT_EQ(H(1.0f + std::ldexp(1.0f, -11)), 0x3C00);      // tie -> even
  EXPECT_EQ(H(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3C02);  // tie -> even (up)
  EXPECT_EQ(H(65519.0f), 0x7BFF);
  EXPECT_EQ(H(65520.0f), 0x7C00);                 // overflow tie -> inf
  EXPECT_EQ(H(std::ldexp(1.0f, -25)), 0x0000);    // subnormal tie -> 0
  EXPECT_EQ(H(3 * std::ldexp(1.0f, -25)), 0x0002);
  EXPECT_EQ(FloatToBf16(FromBits(0x3F808000u)), 0x3F80);  // tie -> even
  EXPECT_EQ(FloatToBf16(FromBits(0x3F818000u)), 0x3F82);
}

// ===========================================================================
// Quantizers.
// ===========================================================================

double RelRmse(const std::vector<float>& x, const std::vector<float>& y) {
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (static_cast<double>(x[i]) - y[i]) * (static_cast<double>(x[i]) - y[i]);
    ss += static_cast<double>(x[i]) * x[i];
  }
  return std::sqrt(se / ss);
}

double RoundTripError(GgmlType t, const std::vector<float>& x) {
  const auto q = Quantize(t, x);
  return RelRmse(x, Dequant(t, q.data(), static_cast<int64_t>(x.size())));
}

// Relative RMSE measured on 64 Ki N(0, sigma) samples (seed 1; identical for
// sigma 1 and 0.02): F16 0.00021, BF16 0.00166, Q8_0 0.00536, Q6_K 0.0178,
// Q5_K 0.0361, Q5_1 0.0378, Q5_0 0.0427, Q4_K 0.0716, Q4_1 0.0780,
// Q4_0 0.0859, Q3_K 0.151, Q2_K 0.298. These are what the formats allow for
// Gaussian data (e.g. Q8_0: d = max|x|/127 ~ 2.3/127, step/sqrt(12) ~ 0.0052).
// Bounds leave ~10% margin.
TEST(Quantize, RoundTripErrorBounds) {
  const std::map<GgmlType, double> bound = {
      {GgmlType::F16, 0.00025}, {GgmlType::BF16, 0.0019}, {GgmlType::Q8_0, 0.006},
      {GgmlType::Q6_K, 0.0195}, {GgmlType::Q5_K, 0.0395}, {GgmlType::Q5_1, 0.0415},
      {GgmlType::Q5_0, 0.047},  {GgmlType::Q4_K, 0.079},  {GgmlType::Q4_1, 0.086},
      {GgmlType::Q4_0, 0.094},  {GgmlType::Q3_K, 0.166},  {GgmlType::Q2_K, 0.33}};
  for (float sigma : {1.0f, 0.02f}) {  // unit scale and typical weight scale
    const auto x = Gaussian(65536, 1, sigma);
    for (const auto& [t, b] : bound) {
      const double e = RoundTripError(t, x);
      EXPECT_LT(e, b) << TypeName(t) << " sigma " << sigma;
      std::printf("  %-5s sigma %-5g rel rmse %.5f (bound %.4f)\n", std::string(TypeName(t)).c_str(),
                  sigma, e, b);
    }
  }
  EXPECT_EQ(RoundTripError(GgmlType::F32, Gaussian(4096, 2)), 0.0);
}

TEST(Quantize, KQuantsBeatLegacyAtSameBits) {
  const auto x = Gaussian(65536, 3);
  EXPECT_LT(RoundTripError(GgmlType::Q4_K, x), 0.9 * RoundTripError(GgmlType::Q4_0, x));
  EXPECT_LT(RoundTripError(GgmlType::Q4_K, x), RoundTripError(GgmlType::Q4_1, x));
  EXPECT_LT(RoundTripError(GgmlType::Q5_K, x), RoundTripError(GgmlType::Q5_0, x));
  EXPECT_LT(RoundTripError(GgmlType::Q6_K, x), RoundTripError(GgmlType::Q5_K, x));
  // A heavy-tailed row (Student-t-like outliers) keeps the ordering.
  auto y = Gaussian(65536, 4);
  for (size_t i = 0; i < y.size(); i += 97) y[i] *= 12.0f;
  EXPECT_LT(RoundTripError(GgmlType::Q4_K, y), RoundTripError(GgmlType::Q4_0, y));
}

TEST(Quantize, ZerosConstantsAndOffsets) {
  for (GgmlType t : kAllTypes) {
    std::vector<float> zeros(512, 0.0f);
    const auto q = Quantize(t, zeros);
    for (float v : Dequant(t, q.data(), 512)) EXPECT_EQ(v, 0.0f) << TypeName(t);
  }
  // A constant row: every format with a per-block offset or a symmetric grid
  // reproduces it to within its scale's fp16 rounding.
  for (GgmlType t : kAllTypes) {
    std::vector<float> c(512, 0.75f);
    const auto q = Quantize(t, c);
    for (float v : Dequant(t, q.data(), 512)) EXPECT_NEAR(v, 0.75f, 0.75f * 0.01f) << TypeName(t);
  }
  // Data far from zero: the formats with an offset spend their levels on the
  // spread, not on the offset. Q4_1/Q5_1 store a signed min; the k-quants
  // subtract dmin * m with m >= 0, so only negative offsets are free for them.
  std::vector<float> pos = Gaussian(4096, 5, 0.1f), neg = pos;
  for (auto& v : pos) v += 3.0f;
  for (auto& v : neg) v -= 3.0f;
  EXPECT_LT(RoundTripError(GgmlType::Q4_1, pos), 0.003);
  EXPECT_LT(RoundTripError(GgmlType::Q5_1, pos), 0.0015);
  EXPECT_LT(RoundTripError(GgmlType::Q4_K, neg), 0.003);
  EXPECT_LT(RoundTripError(GgmlType::Q5_K, neg), 0.0018);  // 6-bit mins dominate here
  EXPECT_LT(RoundTripError(GgmlType::Q2_K, neg), 0.016);
}

TEST(Quantize, DeterministicAndRejectsBadInput) {
  const auto x = Gaussian(2048, 6);
  for (GgmlType t : kAllTypes) EXPECT_EQ(Quantize(t, x), Quantize(t, x)) << TypeName(t);

  std::vector<uint8_t> buf(4096);
  EXPECT_FALSE(QuantizeRow(GgmlType::Q4_K, x.data(), buf.data(), 100).ok());  // not a block multiple
  EXPECT_FALSE(QuantizeRow(GgmlType::Q8_0, x.data(), buf.data(), 33).ok());
  EXPECT_FALSE(QuantizeRow(GgmlType::IQ2_XS, x.data(), buf.data(), 256).ok());
  EXPECT_FALSE(QuantizeRow(GgmlType::Q8_K, x.data(), buf.data(), 256).ok());
  EXPECT_FALSE(QuantizeRow(static_cast<GgmlType>(5), x.data(), buf.data(), 256).ok());
  EXPECT_TRUE(QuantizeRow(GgmlType::F16, x.data(), buf.data(), 7).ok());
  for (GgmlType t : kAllTypes) EXPECT_TRUE(CanQuantize(t)) << TypeName(t);
  EXPECT_FALSE(CanQuantize(GgmlType::Q8_1));
  EXPECT_FALSE(CanQuantize(GgmlType::IQ4_NL));
}

// ===========================================================================
// Independent reference: gguf-py.
// ===========================================================================

struct PyRef {
  std::string error;   // non-empty when the script failed
  std::string banner;  // "ok gguf=... numpy=..."
  struct Case {
    std::string op;
    GgmlType type;
    std::string label;
    std::vector<uint8_t> in;   // blocks (dequant) or float32 values (quant)
    std::vector<uint8_t> ref;  // gguf-py's output
  };
  std::vector<Case> cases;
};

std::vector<uint8_t> FloatBytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

std::vector<uint8_t> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

// Float32 values that exercise fp16/bf16 rounding: ties, subnormals, overflow,
// specials, then random bit patterns over the whole float range.
std::vector<float> ConversionEdgeValues() {
  std::vector<float> v = {0.0f, -0.0f, 1.0f, -1.0f, 65504.0f, 65519.0f, 65520.0f, 65536.0f,
                          1e9f, INFINITY, -INFINITY, NAN, -NAN, FLT_MIN, FLT_TRUE_MIN,
                          std::ldexp(1.0f, -14), std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
                          std::ldexp(3.0f, -25), std::ldexp(1.0f, -26), 1e-8f, 6.1e-5f};
  for (int e = -26; e <= 16; ++e) {  // exact half-way points at many exponents
    for (uint32_t m : {1u, 3u, 0x3ffu, 0x401u}) {
      v.push_back(std::ldexp(static_cast<float>(2 * m + 1), e - 11));
      v.push_back(-std::ldexp(static_cast<float>(2 * m + 1), e - 11));
    }
  }
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) v.push_back(FromBits(static_cast<uint32_t>(rng())));
  // Dense around the fp16 range and around bf16 ties.
  for (int i = 0; i < 100000; ++i) {
    const uint32_t exp = 100 + rng() % 45;  // 2^-27 .. 2^17
    v.push_back(FromBits((rng() & 0x80000000u) | (exp << 23) | (rng() & 0x7fffffu)));
    v.push_back(FromBits((static_cast<uint32_t>(rng()) & 0xffff0000u) | 0x8000u));
  }
  return v;
}

// Writes every case, runs quant_ref.py once, reads its outputs back.
PyRef RunPyRef() {
  PyRef r;
  testing::TempDir dir;
  std::ofstream manifest(dir.File("manifest.txt"));
  auto add = [&](const std::string& op, GgmlType t, const std::string& label, std::vector<uint8_t> in) {
    const std::string base = dir.File(std::to_string(r.cases.size()));
    std::ofstream(base + ".in", std::ios::binary)
        .write(reinterpret_cast<const char*>(in.data()), static_cast<std::streamsize>(in.size()));
    manifest << op << ' ' << TypeName(t) << ' ' << base << ".in " << base << ".out\n";
    r.cases.push_back({op, t, label, std::move(in), {}});
  };
  uint32_t seed = 100;
  for (GgmlType t : kQuantTypes) {
    const int64_t nb = 64;
    const int64_t n = nb * TypeTraits(t).block_size;
    auto x = Gaussian(static_cast<size_t>(n), ++seed);
    add("dequant", t, "our quantizer", Quantize(t, x));
    add("dequant", t, "random bytes", RandomBlocks(t, nb, ++seed));
    // Quantizer comparison; gguf-py says "unsupported" for types it lacks.
    for (size_t i = 0; i < x.size(); i += 61) x[i] *= 7.0f;  // some outliers
    add("quant", t, "gaussian", FloatBytes(x));
  }
  std::vector<uint8_t> all16(65536 * 2);  // every half / bfloat16 bit pattern
  for (uint32_t i = 0; i < 65536; ++i) {
    all16[2 * i] = static_cast<uint8_t>(i);
    all16[2 * i + 1] = static_cast<uint8_t>(i >> 8);
  }
  add("dequant", GgmlType::F16, "all bit patterns", all16);
  add("dequant", GgmlType::BF16, "all bit patterns", all16);
  const auto edge = FloatBytes(ConversionEdgeValues());
  add("quant", GgmlType::F16, "edge values", edge);
  add("quant", GgmlType::BF16, "edge values", edge);
  add("quant", GgmlType::F32, "edge values", edge);
  manifest.close();

  const std::string cmd = testing::ShellQuote(testing::PythonPath()) + " " +
                          testing::ShellQuote(testing::SourcePath("tests/python/quant_ref.py")) + " " +
                          testing::ShellQuote(dir.File("manifest.txt"));
  std::string out;
  const int rc = testing::RunCommand(cmd, &out);
  if (rc != 0 || out.rfind("ok ", 0) != 0) {
    r.error = "quant_ref.py failed (rc " + std::to_string(rc) + "): " + out;
    return r;
  }
  r.banner = out;
  for (size_t i = 0; i < r.cases.size(); ++i) r.cases[i].ref = ReadFile(dir.File(std::to_string(i) + ".out"));
  return r;
}

const PyRef& GetPyRef() {
  static const PyRef r = RunPyRef();
  return r;
}

std::string Describe(float ours, float ref) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), "ours %.9g (0x%08x) ref %.9g (0x%08x)", ours, Bits(ours), ref, Bits(ref));
  return buf;
}

TEST(PyRefTest, DequantizeMatchesGgufPyBitExactly) {
  SPECD_REQUIRE_PYREF("gguf, numpy");
  const PyRef& r = GetPyRef();
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::printf("  reference: %s", r.banner.c_str());
  int checked = 0;
  for (const auto& c : r.cases) {
    if (c.op != "dequant") continue;
    const auto& ref_bytes = c.ref;
    const int64_t n = static_cast<int64_t>(c.in.size() / TypeTraits(c.type).type_size) *
                      TypeTraits(c.type).block_size;
    ASSERT_EQ(ref_bytes.size(), static_cast<size_t>(n) * 4) << TypeName(c.type);
    std::vector<float> ref(static_cast<size_t>(n));
    std::memcpy(ref.data(), ref_bytes.data(), ref_bytes.size());
    const auto ours = Dequant(c.type, c.in.data(), n);
    int bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const bool same = Bits(ours[i]) == Bits(ref[i]) || (std::isnan(ours[i]) && std::isnan(ref[i]));
      if (!same && ++bad <= 3)
        ADD_FAILURE() << TypeName(c.type) << " (" << c.label << ") element " << i << ": "
                      << Describe(ours[i], ref[i]);
    }
    EXPECT_EQ(bad, 0) << TypeName(c.type) << " (" << c.label << ")";
    ++checked;
  }
  EXPECT_EQ(checked, 2 * 10 + 2);
}

TEST(PyRefTest, HalfNanPayloadsMatchNumpy) {
  // Stricter than the isnan() equality above: NaN bit patterns too.
  SPECD_REQUIRE_PYREF("gguf, numpy");
  const PyRef& r = GetPyRef();
  ASSERT_TRUE(r.error.empty()) << r.error;
  for (const auto& c : r.cases) {
    if (c.op != "dequant" || (c.type != GgmlType::F16 && c.type != GgmlType::BF16)) continue;
    const auto& ref = c.ref;
    const auto ours = Dequant(c.type, c.in.data(), 65536);
    int diff = 0;
    for (int i = 0; i < 65536; ++i) diff += std::memcmp(&ours[i], &ref[4 * i], 4) != 0;
    EXPECT_EQ(diff, 0) << TypeName(c.type);
  }
}

TEST(PyRefTest, QuantizeMatchesGgufPyBytes) {
  SPECD_REQUIRE_PYREF("gguf, numpy");
  const PyRef& r = GetPyRef();
  ASSERT_TRUE(r.error.empty()) << r.error;
  std::vector<std::string> compared, unsupported;
  for (const auto& c : r.cases) {
    if (c.op != "quant") continue;
    const auto& ref = c.ref;
    const std::string name(TypeName(c.type));
    if (ref.size() >= 12 && std::memcmp(ref.data(), "unsupported:", 12) == 0) {
      unsupported.push_back(name);
      continue;
    }
    std::vector<float> x(c.in.size() / 4);
    std::memcpy(x.data(), c.in.data(), c.in.size());
    const auto ours = Quantize(c.type, x);
    ASSERT_EQ(ours.size(), ref.size()) << name;
    if (c.type == GgmlType::F16) {
      // numpy keeps (part of) a NaN's payload, we emit the canonical quiet NaN;
      // every non-NaN value must match exactly.
      for (size_t i = 0; i < x.size(); ++i) {
        uint16_t a, b;
        std::memcpy(&a, &ours[2 * i], 2);
        std::memcpy(&b, &ref[2 * i], 2);
        if (std::isnan(x[i])) {
          EXPECT_TRUE((a & 0x7c00) == 0x7c00 && (a & 0x3ff) && (b & 0x7c00) == 0x7c00 && (b & 0x3ff));
          EXPECT_EQ(a & 0x8000, b & 0x8000);
        } else if (a != b) {
          ADD_FAILURE() << "F16 of " << x[i] << " (0x" << std::hex << Bits(x[i]) << "): ours 0x" << a
                        << " numpy 0x" << b << std::dec;
          break;
        }
      }
    } else {
      size_t first = ours.size();
      for (size_t i = 0; i < ours.size(); ++i)
        if (ours[i] != ref[i]) {
          first = i;
          break;
        }
      EXPECT_EQ(first, ours.size()) << name << ": first differing byte " << first;
    }
    compared.push_back(name);
  }
  std::string c_list, u_list;
  for (const auto& s : compared) c_list += s + " ";
  for (const auto& s : unsupported) u_list += s + " ";
  std::printf("  byte-compared with gguf-py: %s\n  gguf-py has no quantizer for: %s\n", c_list.c_str(),
              u_list.c_str());
  // The formats gguf-py implements must all have been compared.
  for (const char* t : {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "F16", "BF16", "F32"})
    EXPECT_NE(c_list.find(std::string(t) + " "), std::string::npos) << t;
}

// ===========================================================================
// Dot products.
// ===========================================================================

struct Row {
  GgmlType type;
  int64_t n;
  std::vector<uint8_t> bytes;
};

std::vector<Row> TestRows(GgmlType t) {
  std::vector<int64_t> ns;
  if (TypeTraits(t).block_size == 1) ns = {1, 15, 16, 17, 255, 256, 257, 1000, 4096};
  else if (TypeTraits(t).block_size == 32) ns = {32, 96, 256, 288, 800, 4096 + 32};
  else ns = {256, 512, 2304, 4096};
  std::vector<Row> rows;
  uint32_t seed = 1000 + static_cast<uint32_t>(t);
  for (int64_t n : ns) {
    rows.push_back({t, n, Quantize(t, Gaussian(static_cast<size_t>(n), ++seed))});
    if (TypeTraits(t).block_size > 1) rows.push_back({t, n, RandomBlocks(t, n / TypeTraits(t).block_size, ++seed)});
  }
  return rows;
}

TEST(Dot, MatchesFloat64ReferenceOnEveryIsa) {
  for (DotIsa isa : quant_internal::kAllDotIsas) {
    const auto fn = quant_internal::DotRowsKernel(isa);
    if (!fn) continue;
    for (GgmlType t : kAllTypes) {
      for (const Row& row : TestRows(t)) {
        const auto x = Gaussian(static_cast<size_t>(row.n), 77);
        const auto w = Dequant(t, row.bytes.data(), row.n);
        double ref = 0, mag = 0;
        for (int64_t i = 0; i < row.n; ++i) {
          ref += static_cast<double>(w[i]) * x[i];
          mag += std::fabs(static_cast<double>(w[i]) * x[i]);
        }
        float got = 0;
        fn(t, row.bytes.data(), row.bytes.size(), row.n, 0, 1, x.data(), row.n, 1, &got, 1);
        // float32 accumulation over <= 16 chunks + 4-deep chains + 4-level tree,
        // plus <= 1 ulp per decoded weight where the decode is fused.
        EXPECT_LE(std::fabs(got - ref), 64 * FLT_EPSILON * mag + 1e-30)
            << quant_internal::DotIsaName(isa) << " " << TypeName(t) << " n=" << row.n;
      }
    }
  }
}

// The losslessness contract: for any batch size and row range, each y value of
// DotRowsBatched equals DotRow bit for bit. Checked on every ISA build this CPU
// runs, since the process may select any of them on other machines.
TEST(Dot, BatchedEqualsSingleBitwiseOnEveryIsa) {
  int isas = 0;
  for (DotIsa isa : quant_internal::kAllDotIsas) {
    const auto fn = quant_internal::DotRowsKernel(isa);
    if (!fn) continue;
    ++isas;
    for (GgmlType t : kAllTypes) {
      const int64_t bs = TypeTraits(t).block_size;
      for (int64_t n : {bs == 1 ? int64_t{333} : 9 * bs, bs == 1 ? int64_t{512} : 16 * bs}) {
        const int64_t rows = 11;
        const size_t rb = RowBytes(t, n) + 6;  // padded row stride
        std::vector<uint8_t> w(rb * rows);
        for (int64_t r = 0; r < rows; ++r) {
          const auto q = r % 3 == 0 ? RandomBlocks(t, n / bs, 500 + static_cast<uint32_t>(r))
                                    : Quantize(t, Gaussian(static_cast<size_t>(n), 600 + static_cast<uint32_t>(r)));
          std::memcpy(&w[r * rb], q.data(), q.size());
        }
        const int64_t ldx = n + 5, max_nx = 17;
        const auto x = Gaussian(static_cast<size_t>(ldx * max_nx), 900);
        // single[j][r] via the nx == 1 path, one row at a time
        std::vector<float> single(max_nx * rows);
        for (int64_t j = 0; j < max_nx; ++j)
          for (int64_t r = 0; r < rows; ++r)
            fn(t, &w[r * rb], rb, n, 0, 1, &x[j * ldx], ldx, 1, &single[j * rows + r], 1);
        for (int64_t nx : {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 17}) {
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {3, 10}, {5, 6}, {1, 8}}) {
            const int64_t ldy = rows + 3;
            std::vector<float> y(static_cast<size_t>(ldy * nx), -7.0f);
            fn(t, w.data(), rb, n, r0, r1, x.data(), ldx, nx, y.data(), ldy);
            for (int64_t j = 0; j < nx; ++j)
              for (int64_t r = 0; r < ldy; ++r) {
                const float got = y[j * ldy + r];
                if (r < r0 || r >= r1) {
                  ASSERT_EQ(got, -7.0f) << "wrote outside the row range";
                  continue;
                }
                ASSERT_EQ(Bits(got), Bits(single[j * rows + r]))
                    << quant_internal::DotIsaName(isa) << " " << TypeName(t) << " n=" << n
                    << " nx=" << nx << " rows [" << r0 << "," << r1 << ") j=" << j << " r=" << r;
              }
          }
        }
      }
    }
  }
  EXPECT_GE(isas, 1);
}

// Every finite half / bfloat16 value goes through each ISA's vector converter
// (F16C, AVX-512, the integer-only SSE2 path) exactly: rows of 16 copies of a
// value dotted with a one-hot x give the value itself.
TEST(Dot, F16AndBF16DecodeExactlyOnEveryIsa) {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    std::vector<uint16_t> rows;
    std::vector<float> want;
    for (uint32_t h = 0; h < 65536; ++h) {
      const float f = t == GgmlType::F16 ? HalfToFloat(static_cast<uint16_t>(h))
                                         : Bf16ToFloat(static_cast<uint16_t>(h));
      if (!std::isfinite(f)) continue;
      rows.insert(rows.end(), 16, static_cast<uint16_t>(h));
      want.push_back(f);
    }
    const int64_t nrows = static_cast<int64_t>(want.size());
    for (int lane : {0, 7, 15}) {
      std::vector<float> x(16, 0.0f);
      x[lane] = 1.0f;
      for (DotIsa isa : quant_internal::kAllDotIsas) {
        const auto fn = quant_internal::DotRowsKernel(isa);
        if (!fn) continue;
        std::vector<float> y(static_cast<size_t>(nrows));
        fn(t, rows.data(), 32, 16, 0, nrows, x.data(), 16, 1, y.data(), nrows);
        int bad = 0;
        for (int64_t r = 0; r < nrows; ++r)
          if (y[r] != want[r] && ++bad <= 3)
            ADD_FAILURE() << quant_internal::DotIsaName(isa) << " " << TypeName(t) << " "
                          << Describe(y[r], want[r]);
        EXPECT_EQ(bad, 0);
      }
    }
  }
}

// --cpu-dot-kernels: a name chooses the build once per process; after the
// first dot product only the one chosen is accepted.
TEST(Dot, ChoosingTheKernelsByName) {
  std::vector<float> x(32, 1.0f);
  std::vector<float> w(32, 2.0f);
  EXPECT_FLOAT_EQ(DotRow(GgmlType::F32, w.data(), x.data(), 32), 64.0f);  // the kernels are picked by now
  EXPECT_TRUE(SetDotKernel("auto").ok());
  EXPECT_TRUE(SetDotKernel(DotKernelName()).ok());
  const absl::Status bad = SetDotKernel("avx9000");
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("portable"), std::string::npos) << bad;
  if (std::string(DotKernelName()) != "portable") {
    const absl::Status late = SetDotKernel("portable");
    EXPECT_EQ(late.code(), absl::StatusCode::kFailedPrecondition) << late;
    EXPECT_NE(late.message().find("already chosen"), std::string::npos) << late;
  }
}

TEST(Dot, PublicApiBatchedEqualsDotRow) {
  std::printf("  selected dot kernel: %s\n", DotKernelName());
  for (GgmlType t : kAllTypes) {
    const int64_t n = TypeTraits(t).block_size == 1 ? 1000 : 4096;
    const int64_t rows = 7, nx = 9;
    const size_t rb = RowBytes(t, n);
    std::vector<uint8_t> w;
    for (int64_t r = 0; r < rows; ++r) {
      const auto q = Quantize(t, Gaussian(static_cast<size_t>(n), 40 + static_cast<uint32_t>(r)));
      w.insert(w.end(), q.begin(), q.end());
    }
    const auto x = Gaussian(static_cast<size_t>(n * nx), 41);
    std::vector<float> y(static_cast<size_t>(rows * nx));
    DotRowsBatched(t, w.data(), rb, n, 0, rows, x.data(), n, nx, y.data(), rows);
    for (int64_t j = 0; j < nx; ++j)
      for (int64_t r = 0; r < rows; ++r)
        EXPECT_EQ(Bits(y[j * rows + r]), Bits(DotRow(t, &w[r * rb], &x[j * n], n)))
            << TypeName(t) << " j=" << j << " r=" << r;
  }
}

TEST(Dot, Avx2AndAvx512AreBitIdentical) {
  const auto a2 = quant_internal::DotRowsKernel(DotIsa::kAvx2);
  const auto a5 = quant_internal::DotRowsKernel(DotIsa::kAvx512);
  if (!a2 || !a5) GTEST_SKIP() << "needs a CPU with AVX-512";
  for (GgmlType t : kAllTypes) {
    for (const Row& row : TestRows(t)) {
      const auto x = Gaussian(static_cast<size_t>(row.n * 3), 78);
      float y2[3], y5[3];
      a2(t, row.bytes.data(), row.bytes.size(), row.n, 0, 1, x.data(), row.n, 3, y2, 1);
      a5(t, row.bytes.data(), row.bytes.size(), row.n, 0, 1, x.data(), row.n, 3, y5, 1);
      for (int j = 0; j < 3; ++j) EXPECT_EQ(Bits(y2[j]), Bits(y5[j])) << TypeName(t) << " n=" << row.n;
    }
  }
}

// ===========================================================================
// Integer path: quantized weights x int8 activations.
// ===========================================================================

// Decoded int8 activations of a QuantizeInt8Activations row.
std::vector<double> DequantAct(GgmlType t, const std::vector<uint8_t>& xq, int64_t n) {
  const bool kq = quant_internal::IsKQuant(t);
  const auto l = quant_internal::GetInt8ActLayout(n, kq);
  std::vector<double> v(static_cast<size_t>(n));
  const auto* q = reinterpret_cast<const int8_t*>(xq.data());
  const auto* d = reinterpret_cast<const float*>(xq.data() + l.d_off);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(d[i / l.block]) * q[i];
  return v;
}

std::vector<uint8_t> QuantAct(GgmlType t, const float* x, int64_t n) {
  std::vector<uint8_t> xq(Int8ActRowBytes(t, n), 0xAB);
  QuantizeInt8Activations(t, x, n, xq.data());
  return xq;
}

TEST(Int8Act, QuantizationLayoutAndRounding) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_K}) {
    const bool kq = quant_internal::IsKQuant(t);
    const int64_t n = 512;
    auto x = Gaussian(n, 5);
    x[3] = 0.0f;
    for (int i = 256; i < 256 + (kq ? 256 : 32); ++i) x[i] = 0.0f;  // an all-zero block
    const auto xq = QuantAct(t, x.data(), n);
    EXPECT_EQ(xq.size() % 64, 0u);
    const auto l = quant_internal::GetInt8ActLayout(n, kq);
    const auto* q = reinterpret_cast<const int8_t*>(xq.data());
    const auto* d = reinterpret_cast<const float*>(xq.data() + l.d_off);
    for (int64_t b = 0; b < n / l.block; ++b) {
      float amax = 0;
      for (int i = 0; i < l.block; ++i) amax = std::max(amax, std::fabs(x[b * l.block + i]));
      EXPECT_EQ(d[b], amax / 127.0f);
      for (int i = 0; i < l.block; ++i) {
        const int64_t e = b * l.block + i;
        EXPECT_EQ(q[e], amax == 0 ? 0 : static_cast<int>(std::nearbyint(x[e] * (127.0f / amax)))) << e;
      }
    }
    if (kq) {
      const auto* bs = reinterpret_cast<const int16_t*>(xq.data() + l.s_off);
      for (int g = 0; g < n / 16; ++g) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += q[16 * g + i];
        EXPECT_EQ(bs[g], s);
      }
    } else {
      const auto* sb = reinterpret_cast<const float*>(xq.data() + l.s_off);
      for (int b = 0; b < n / 32; ++b) {
        int s = 0;
        for (int i = 0; i < 32; ++i) s += q[32 * b + i];
        EXPECT_EQ(sb[b], d[b] * static_cast<float>(s));
      }
    }
  }
}

// Every ISA build's integer dot equals the exact dot of the dequantized weights
// with the dequantized activations up to float32 rounding of the combination,
// and all builds agree bit for bit (the integer sums are exact and the float
// steps are the same on every ISA).
TEST(Int8Dot, MatchesExactDotAndIsIdenticalOnEveryIsa) {
  int isas = 0;
  for (GgmlType t : kQuantTypes) {
    EXPECT_TRUE(UsesInt8Activations(t));
    for (const Row& row : TestRows(t)) {
      const auto x = Gaussian(static_cast<size_t>(row.n), 79);
      const auto xq = QuantAct(t, x.data(), row.n);
      const auto xa = DequantAct(t, xq, row.n);
      const auto w = Dequant(t, row.bytes.data(), row.n);
      double ref = 0, mag = 0, ref_f = 0;
      for (int64_t i = 0; i < row.n; ++i) {
        ref += static_cast<double>(w[i]) * xa[i];
        ref_f += static_cast<double>(w[i]) * x[i];
        mag += std::fabs(static_cast<double>(w[i]) * xa[i]);
      }
      bool have = false;
      float first = 0;
      for (DotIsa isa : quant_internal::kAllDotIsas) {
        const auto fn = quant_internal::DotRowsInt8Kernel(isa);
        if (!fn) continue;
        isas = std::max(isas, 1 + static_cast<int>(isa));
        float got = -1;
        ASSERT_TRUE(fn(t, row.bytes.data(), row.bytes.size(), row.n, 0, 1, xq.data(), xq.size(), 1, &got, 1));
        // The weights' scales are products rounded once more than ggml's
        // dequantizer does (d * sc, then * dx): a few ulps per block.
        EXPECT_LE(std::fabs(got - ref), 64 * FLT_EPSILON * mag + 1e-30)
            << quant_internal::DotIsaName(isa) << " " << TypeName(t) << " n=" << row.n;
        if (!have) {
          first = got;
          have = true;
        } else {
          EXPECT_EQ(Bits(got), Bits(first)) << quant_internal::DotIsaName(isa) << " " << TypeName(t) << " n=" << row.n;
        }
      }
      // Against the float activations: the int8 rounding (|x - x8| <= amax/254
      // per block) bounds the difference by sum |w| * amax / 254.
      double bound = 0;
      const int64_t bl = quant_internal::IsKQuant(t) ? 256 : 32;
      for (int64_t b = 0; b < row.n / bl; ++b) {
        double amax = 0, sw = 0;
        for (int64_t i = b * bl; i < (b + 1) * bl; ++i) {
          amax = std::max(amax, static_cast<double>(std::fabs(x[i])));
          sw += std::fabs(w[i]);
        }
        bound += sw * amax / 254.0 * (1 + 1e-5);
      }
      EXPECT_LE(std::fabs(first - ref_f), bound + 64 * FLT_EPSILON * mag) << TypeName(t) << " n=" << row.n;
    }
  }
  std::printf("  integer kernels checked up to ISA %d, selected %s\n", isas - 1, DotKernelName());
}

// Batch invariance of the integer path, on every ISA build: any nx, any row
// range gives each (row, input) the nx == 1 value bit for bit.
TEST(Int8Dot, BatchedEqualsSingleBitwiseOnEveryIsa) {
  for (DotIsa isa : quant_internal::kAllDotIsas) {
    const auto fn = quant_internal::DotRowsInt8Kernel(isa);
    if (!fn) continue;
    for (GgmlType t : kQuantTypes) {
      const int64_t bs = TypeTraits(t).block_size;
      for (int64_t n : {bs == 32 ? int64_t{9 * 32} : int64_t{3 * 256}, int64_t{8 * 256}}) {
        const int64_t rows = 11;
        const size_t rb = RowBytes(t, n) + 6;
        std::vector<uint8_t> w(rb * rows);
        for (int64_t r = 0; r < rows; ++r) {
          const auto q = r % 3 == 0 ? RandomBlocks(t, n / bs, 700 + static_cast<uint32_t>(r))
                                    : Quantize(t, Gaussian(static_cast<size_t>(n), 800 + static_cast<uint32_t>(r)));
          std::memcpy(&w[r * rb], q.data(), q.size());
        }
        const int64_t max_nx = 19;
        const size_t xs = Int8ActRowBytes(t, n);
        std::vector<uint8_t> xq(xs * max_nx);
        for (int64_t j = 0; j < max_nx; ++j) {
          const auto x = Gaussian(static_cast<size_t>(n), 900 + static_cast<uint32_t>(j));
          QuantizeInt8Activations(t, x.data(), n, &xq[j * xs]);
        }
        std::vector<float> single(max_nx * rows);
        for (int64_t j = 0; j < max_nx; ++j)
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_TRUE(fn(t, &w[r * rb], rb, n, 0, 1, &xq[j * xs], xs, 1, &single[j * rows + r], 1));
        for (int64_t nx : {1, 2, 3, 5, 8, 9, 16, 19}) {
          for (auto [r0, r1] : {std::pair<int64_t, int64_t>{0, rows}, {3, 10}, {5, 6}}) {
            const int64_t ldy = rows + 3;
            std::vector<float> y(static_cast<size_t>(ldy * nx), -7.0f);
            ASSERT_TRUE(fn(t, w.data(), rb, n, r0, r1, xq.data(), xs, nx, y.data(), ldy));
            for (int64_t j = 0; j < nx; ++j)
              for (int64_t r = 0; r < ldy; ++r) {
                const float got = y[j * ldy + r];
                if (r < r0 || r >= r1) {
                  ASSERT_EQ(got, -7.0f) << "wrote outside the row range";
                  continue;
                }
                ASSERT_EQ(Bits(got), Bits(single[j * rows + r]))
                    << quant_internal::DotIsaName(isa) << " " << TypeName(t) << " n=" << n << " nx=" << nx
                    << " j=" << j << " r=" << r;
              }
          }
        }
      }
    }
  }
}

// Extreme codes: Q8_0 weights of -128 and activations at +-127 everywhere
// (the largest products maddubs sees) and zero rows.
TEST(Int8Dot, ExtremeValuesAreExact) {
  const int64_t n = 256;
  std::vector<uint8_t> w(RowBytes(GgmlType::Q8_0, n));
  for (int64_t b = 0; b < n / 32; ++b) {
    const uint16_t h = H(1.0f);
    std::memcpy(&w[b * 34], &h, 2);
    std::memset(&w[b * 34 + 2], 0x80, 32);  // -128
  }
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? -1.0f : 1.0f;
  const auto xq = QuantAct(GgmlType::Q8_0, x.data(), n);
  double want = 0;
  for (int64_t i = 0; i < n; ++i) want += -128.0 * x[i];
  for (DotIsa isa : quant_internal::kAllDotIsas) {
    const auto fn = quant_internal::DotRowsInt8Kernel(isa);
    if (!fn) continue;
    float got = 0;
    ASSERT_TRUE(fn(GgmlType::Q8_0, w.data(), w.size(), n, 0, 1, xq.data(), xq.size(), 1, &got, 1));
    EXPECT_EQ(got, static_cast<float>(want)) << quant_internal::DotIsaName(isa);
  }
  // Zero activations: exactly 0 for every format.
  for (GgmlType t : kQuantTypes) {
    const int64_t m = 512;
    const auto q = Quantize(t, Gaussian(m, 3));
    std::vector<float> z(m, 0.0f);
    const auto zq = QuantAct(t, z.data(), m);
    float got = 1;
    DotRowsInt8(t, q.data(), q.size(), m, 0, 1, zq.data(), zq.size(), 1, &got, 1);
    EXPECT_EQ(got, 0.0f) << TypeName(t);
  }
}

// ---------------------------------------------------------------------------
// Random valid blocks (block_random.h; make-model --fill blocks, the benchmarks'
// synthetic weights): every scale finite and inside the range the generator
// promises, values of the requested deviation and mean ~0, deterministic by
// (seed, block index) whatever the chunking.

// The block's header scales (d, and dmin where the format has one).
std::vector<float> BlockScales(GgmlType t, const uint8_t* b) {
  auto h = [&](int off) { return HalfToFloat(static_cast<uint16_t>(b[off] | (b[off + 1] << 8))); };
  switch (t) {
    case GgmlType::Q4_0: case GgmlType::Q5_0: case GgmlType::Q8_0: return {h(0)};
    case GgmlType::Q4_1: case GgmlType::Q5_1: return {h(0), h(2)};
    case GgmlType::Q4_K: case GgmlType::Q5_K: return {h(0), h(2)};
    case GgmlType::Q6_K: return {h(208)};
    case GgmlType::Q2_K: return {h(80), h(82)};
    case GgmlType::Q3_K: return {h(108)};
    default: return {};
  }
}

TEST(RandomBlocks, ValidScalesDeviationAndDeterminism) {
  const float sigma = 0.05f;
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q5_1, GgmlType::Q8_0, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K,
                     GgmlType::Q6_K}) {
    const auto& tr = TypeTraits(t);
    const int64_t nblocks = 4096 / tr.block_size * 16, n = nblocks * tr.block_size;
    std::vector<uint8_t> a(nblocks * tr.type_size), b(a.size());
    ASSERT_TRUE(RandomBlocks(t, a.data(), 0, nblocks, 42, sigma).ok()) << tr.name;
    // Chunked (as ParallelFor splits it): the same bytes.
    const int64_t cut = nblocks / 3;
    ASSERT_TRUE(RandomBlocks(t, b.data(), 0, cut, 42, sigma).ok());
    ASSERT_TRUE(RandomBlocks(t, b.data() + cut * tr.type_size, cut, nblocks - cut, 42, sigma).ok());
    EXPECT_EQ(a, b) << tr.name;
    ASSERT_TRUE(RandomBlocks(t, b.data(), 0, nblocks, 43, sigma).ok());
    EXPECT_NE(a, b) << tr.name << ": the seed must matter";
    for (int64_t k = 0; k < nblocks && tr.block_size > 1; ++k) {
      const uint8_t* blk = a.data() + k * tr.type_size;
      for (float s : BlockScales(t, blk)) {
        ASSERT_TRUE(std::isfinite(s) && s != 0.0f) << tr.name << " block " << k << " scale " << s;
      }
      if (t == GgmlType::Q4_K || t == GgmlType::Q5_K) {
        for (int j = 0; j < 8; ++j) {
          uint8_t sc, m;
          GetScaleMinK4(j, blk + 4, &sc, &m);
          ASSERT_TRUE(sc >= 32 && sc <= 47 && m >= 16 && m <= 31) << tr.name << " block " << k << " sub " << j;
        }
      }
      if (t == GgmlType::Q6_K) {
        for (int j = 0; j < 16; ++j) {
          const auto sc = static_cast<int8_t>(blk[192 + j]);
          ASSERT_TRUE(sc >= 24 && sc <= 39) << "Q6_K block " << k;
        }
      }
      if (t == GgmlType::Q2_K) {
        for (int j = 0; j < 16; ++j) ASSERT_TRUE((blk[j] & 15) >= 8 && (blk[j] >> 4) == 8) << "Q2_K block " << k;
      }
    }
    const auto v = Dequant(t, a.data(), n);
    double sum = 0, sq = 0;
    for (float x : v) {
      ASSERT_TRUE(std::isfinite(x)) << tr.name;
      sum += x;
      sq += double{x} * x;
    }
    const double mean = sum / n, sd = std::sqrt(sq / n - mean * mean);
    EXPECT_NEAR(sd, sigma, 0.15 * sigma) << tr.name;
    EXPECT_LT(std::fabs(mean), 0.25 * sigma) << tr.name;
  }
  std::vector<uint8_t> x(64);
  EXPECT_EQ(RandomBlocks(GgmlType::IQ2_XS, x.data(), 0, 1, 1, 1.0f).code(), absl::StatusCode::kInvalidArgument);
}

// The CUDA attention converts Q8_0 K/V rows with half2 arithmetic
// (k_attention.cu: S8x4ToHalf2, ScaleHiLo) and claims the bits of the float
// path it replaced. The arithmetic facts behind that claim, for every int8
// quant and every finite f16 scale: (1) 1024 + (q + 128) is exact in f16 and
// less 1152 gives q, the value int -> half gives; (2) q * s is exact in f32,
// so one rounding to f16 (mul.rn.f16x2) equals f16(float(q) * s); (3) q * s
// - hi is exact in f32, so the fused remainder (fma.rn.f16x2) equals the
// float path's f16(v - float(hi)).
TEST(AttentionQ8Conversion, HalfArithmeticIsExact) {
  for (int q = -128; q <= 127; ++q) {
    const uint16_t biased = static_cast<uint16_t>(0x6400u | static_cast<uint32_t>(q + 128));
    const float v = HalfToFloat(biased);
    ASSERT_EQ(v, 1024.0f + static_cast<float>(q + 128));
    ASSERT_EQ(FloatToHalf(v - 1152.0f), FloatToHalf(static_cast<float>(q))) << q;
  }
  EXPECT_EQ(FloatToHalf(HalfToFloat(0x6480u) - 1152.0f), 0u);  // q = 0 gives +0, as __int2half_rn(0)
  int64_t checked = 0;
  for (uint32_t sb = 0; sb < 0x10000u; ++sb) {
    const float s = HalfToFloat(static_cast<uint16_t>(sb));
    if (!std::isfinite(s)) continue;
    for (int q = -128; q <= 127; ++q) {
      const float v = static_cast<float>(q) * s;
      ASSERT_EQ(static_cast<double>(v), static_cast<double>(q) * static_cast<double>(s)) << q << " " << sb;
      const uint16_t hi = FloatToHalf(v);
      const float hf = HalfToFloat(hi);
      if (!std::isfinite(hf)) continue;  // overflow: inf both ways
      ASSERT_EQ(static_cast<double>(v - hf), static_cast<double>(v) - static_cast<double>(hf)) << q << " " << sb;
      ++checked;
    }
  }
  EXPECT_GT(checked, 13000000);  // the pairs whose f16 product is finite
}

}  // namespace
}  // namespace specd
