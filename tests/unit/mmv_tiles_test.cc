// The GPU tile layout (common/quant/mmv_tiles.h): packing is lossless (every
// packed row dequantizes bit-identically to its GGUF row), the activation
// quantization keeps ~16 bits and its unit sums and limbs are consistent, and
// the emulated device product agrees with a float64 reference on the
// dequantized weights (~8e-5 with outliers in the activations), for every quantized type, rows and K that are not
// multiples of the tile, and 1..17 columns; each column's result does not
// depend on how many columns share the call.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "common/quant/mmv_tiles.h"
#include "common/quant/quant.h"
#include "gtest/gtest.h"

namespace specd {
namespace {

std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

struct Matrix {
  GgmlType type;
  int64_t rows, k;
  size_t row_bytes;
  std::vector<uint8_t> gguf, packed;
};

Matrix MakeMatrix(GgmlType t, int64_t rows, int64_t k, uint32_t seed) {
  Matrix m{t, rows, k, RowBytes(t, k), {}, {}};
  m.gguf.resize(m.row_bytes * rows);
  const auto w = Gaussian(static_cast<size_t>(rows * k), seed, 0.05f);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_TRUE(QuantizeRow(t, w.data() + r * k, m.gguf.data() + r * m.row_bytes, k).ok());
  }
  m.packed.assign(mmv::PackedBytes(t, rows, k), 0xA5);  // poison: every byte must be written
  mmv::PackMatrix(t, m.gguf.data(), m.row_bytes, rows, k, m.packed.data());
  return m;
}

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q5_1, GgmlType::Q8_0,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K};

TEST(MmvTiles, LayoutsKeepTheGgufSize) {
  for (GgmlType t : kTypes) {
    const mmv::Layout l = mmv::LayoutOf(t);
    // 16 rows x 256 elements take exactly the GGUF bytes.
    EXPECT_EQ(static_cast<size_t>(l.rec), 16 * RowBytes(t, 256)) << TypeName(t);
    EXPECT_EQ(l.rec % 16, 0) << TypeName(t);
  }
  EXPECT_FALSE(mmv::HasLayout(GgmlType::F16));
  EXPECT_FALSE(mmv::HasLayout(GgmlType::F32));
}

TEST(MmvTiles, PackingIsLossless) {
  uint32_t seed = 1;
  for (GgmlType t : kTypes) {
    for (int64_t k : {256, 768, 1280}) {
      for (int64_t rows : {16, 37}) {
        const Matrix m = MakeMatrix(t, rows, k, seed++);
        std::vector<float> ref(k), got(k);
        for (int64_t r = 0; r < rows; ++r) {
          DequantizeRow(t, m.gguf.data() + r * m.row_bytes, ref.data(), k);
          mmv::DequantPackedRow(t, m.packed.data(), rows, k, r, got.data());
          ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), sizeof(float) * k))
              << TypeName(t) << " rows=" << rows << " k=" << k << " row " << r;
        }
      }
    }
  }
  // Legacy formats: K a multiple of 32 but not of 256 (the group is padded).
  for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q8_0, GgmlType::Q5_1}) {
    const int64_t k = 352, rows = 19;
    const Matrix m = MakeMatrix(t, rows, k, seed++);
    std::vector<float> ref(k), got(k);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t, m.gguf.data() + r * m.row_bytes, ref.data(), k);
      mmv::DequantPackedRow(t, m.packed.data(), rows, k, r, got.data());
      ASSERT_EQ(0, std::memcmp(ref.data(), got.data(), sizeof(float) * k)) << TypeName(t) << " row " << r;
    }
  }
}

TEST(MmvTiles, PaddingRowsAreZero) {
  const Matrix m = MakeMatrix(GgmlType::Q4_K, 20, 512, 7);
  // Rows 20..31 of the second tile decode to zero codes and zero scales.
  mmv::RowGroup rg;
  for (int rr = 4; rr < 16; ++rr) {
    mmv::DecodeRecordRow(GgmlType::Q4_K, m.packed.data() + mmv::RecordOffset(GgmlType::Q4_K, 2, 1, 1), rr, &rg);
    for (int e = 0; e < 256; ++e) ASSERT_EQ(rg.code[e], 0);
    for (int i = 0; i < 16; ++i) ASSERT_EQ(rg.a[i], 0);
  }
}

TEST(MmvTiles, ActivationQuantization) {
  const int n = 11;
  const int64_t k = 600;  // three groups, the last one partial
  auto x = Gaussian(static_cast<size_t>(n * k), 3);
  x[5] = 40.0f;  // an outlier coarsens its own group only
  const auto q = mmv::QuantizeActivations(x.data(), n, k);
  ASSERT_EQ(q.size(), mmv::XqBytes(n, k));
  const int64_t groups = mmv::Groups(k);
  for (int c = 0; c < n; ++c) {
    const int g = c % 8;
    for (int64_t gi = 0; gi < groups; ++gi) {
      const uint8_t* rec = q.data() + mmv::XqRecordOffset(groups, c, gi);
      float s;
      std::memcpy(&s, rec + mmv::xq::kScale + 4 * g, 4);
      float amax = 0;
      for (int e = 0; e < 256 && gi * 256 + e < k; ++e) amax = std::max(amax, std::fabs(x[c * k + gi * 256 + e]));
      EXPECT_FLOAT_EQ(s, amax / 32258.0f);
      int xi16[16] = {};
      for (int e = 0; e < 256; ++e) {
        const uint8_t* f = rec + mmv::xq::kFrag + 512 * (e / 32) + mmv::XqFragByte(g, e % 32);
        const int hi = static_cast<int8_t>(f[0]), lo = static_cast<int8_t>(f[8]);
        // The K-major copy (wgmma's B): core matrix (unit, level, k-half), row g, byte e % 16.
        const int wb = mmv::xq::kWide + (((2 * (e / 32)) * 2 + (e % 32) / 16) * 8 + g) * 16 + e % 16;
        ASSERT_EQ(rec[wb], f[0]) << "c=" << c << " e=" << e;
        ASSERT_EQ(rec[wb + 256], f[8]) << "c=" << c << " e=" << e;
        const int64_t idx = gi * 256 + e;
        const double v = idx < k ? x[c * k + idx] : 0.0;
        // Two levels: within half a step of 1/254 of the first level's step.
        EXPECT_NEAR(s * (254.0 * hi + lo), v, 0.51 * s + 1e-12) << "c=" << c << " e=" << idx;
        xi16[e / 16] += 254 * hi + lo;
      }
      for (int u = 0; u < 16; ++u) {
        const int t = u / 4, i = u % 4;
        const uint8_t* p = rec + mmv::xq::kLimb16 + 16 * (4 * g + t) + i;
        EXPECT_EQ(16384 * static_cast<int8_t>(p[8]) + 128 * p[4] + p[0], xi16[u]);
      }
      for (int u = 0; u < 8; ++u) {
        int32_t s32;
        std::memcpy(&s32, rec + mmv::xq::kSum32 + 4 * (8 * g + u), 4);
        EXPECT_EQ(s32, xi16[2 * u] + xi16[2 * u + 1]);
        const uint8_t* p = rec + mmv::xq::kLimb32 + 16 * (4 * g + u / 4) + u % 4;
        EXPECT_EQ(16384 * static_cast<int8_t>(p[8]) + 128 * p[4] + p[0], s32);
      }
    }
  }
}

TEST(MmvTiles, EmulatedProductMatchesFloat64) {
  uint32_t seed = 100;
  for (GgmlType t : kTypes) {
    for (int64_t k : {256, 1280}) {
      const int64_t rows = 45;
      const Matrix m = MakeMatrix(t, rows, k, seed++);
      const int n = 17;
      auto x = Gaussian(static_cast<size_t>(n * k), seed++);
      for (size_t i = 0; i < x.size(); i += 97) x[i] *= 8.0f;  // a few outliers
      const auto bias = Gaussian(rows, seed++, 0.1f);
      const auto xq = mmv::QuantizeActivations(x.data(), n, k);
      const int64_t tiles = mmv::Tiles(rows), groups = mmv::Groups(k);
      // One warp per tile; tiles split into 3 parts; one group per warp.
      for (const mmv::Plan& plan : {mmv::Plan::Tile(tiles, groups, 1), mmv::Plan::Tile(tiles, groups, 3),
                                    mmv::Plan::Tile(tiles, groups, groups)}) {
        std::vector<float> y(static_cast<size_t>(n) * rows);
        mmv::Emulate(t, m.packed.data(), rows, k, xq.data(), n, plan, bias.data(), y.data());
        std::vector<float> w(k);
        double num = 0, den = 0;
        for (int64_t r = 0; r < rows; ++r) {
          DequantizeRow(t, m.gguf.data() + r * m.row_bytes, w.data(), k);
          for (int c = 0; c < n; ++c) {
            double ref = bias[r];
            for (int64_t i = 0; i < k; ++i) ref += static_cast<double>(w[i]) * x[c * k + i];
            const double d = y[c * rows + r] - ref;
            num += d * d;
            den += ref * ref;
          }
        }
        const double rel = std::sqrt(num / den);
        EXPECT_LT(rel, 2e-4) << TypeName(t) << " k=" << k << " warps=" << plan.warps;
        EXPECT_GT(den, 0.0);
        // Column c computed alone (n = 1 from its own quantized activations)
        // gives the same bits as inside the 17-column call.
        for (int c : {0, 8, 16}) {
          const auto xq1 = mmv::QuantizeActivations(x.data() + c * k, 1, k);
          std::vector<float> y1(rows);
          mmv::Emulate(t, m.packed.data(), rows, k, xq1.data(), 1, plan, bias.data(), y1.data());
          ASSERT_EQ(0, std::memcmp(y1.data(), y.data() + c * rows, sizeof(float) * rows)) << TypeName(t) << " c=" << c;
        }
      }
    }
  }
}

TEST(MmvTiles, PlansCoverEveryRecordOnce) {
  for (int64_t tiles : {1, 7, 64, 320, 1600}) {
    for (int64_t groups : {1, 3, 20, 100}) {
      std::vector<mmv::Plan> plans;
      for (int64_t w : {1, 2, 3, 8, 16}) plans.push_back(mmv::Plan::Tile(tiles, groups, w));
      for (const mmv::Plan& p : plans) {
        ASSERT_GE(p.warps, 1);
        ASSERT_EQ(p.Lo(0), 0);
        ASSERT_EQ(p.Lo(p.warps), tiles * groups);
        for (int64_t w = 0; w < p.warps; ++w) {
          const int64_t n = p.Lo(w + 1) - p.Lo(w);
          ASSERT_GE(n, 1) << "empty run";
          ASSERT_LE(n, p.gpw);  // a tile's warps take gpw groups each (the last one the rest)
          ASSERT_EQ(p.Lo(w) / groups, (p.Lo(w + 1) - 1) / groups);
          for (int64_t r = p.Lo(w); r < p.Lo(w + 1); ++r) ASSERT_EQ(p.Owner(r), w);
        }
        for (int64_t t = 0; t < tiles; ++t) {
          ASSERT_GE(p.Parts(t), 1);
          ASSERT_LE(p.Parts(t), groups);
          ASSERT_EQ(p.Lo(p.First(t)) <= t * groups, true);
        }
      }
    }
  }
}

}  // namespace
}  // namespace specd
