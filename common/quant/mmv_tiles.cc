#include "common/quant/mmv_tiles.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace specd::mmv {
namespace {

// The integer dot of `len` codes of row rg from element e0 with column g's
// hi (lo = false) or lo levels of the activation record `xr`.
int UnitDot(GgmlType t, const RowGroup& rg, const uint8_t* xr, int g, int e0, int len, bool lo) {
  int s = 0;
  for (int e = e0; e < e0 + len; ++e) {
    const int u = e / 32;
    const int8_t x = static_cast<int8_t>(xr[xq::kFrag + 512 * u + XqFragByte(g, e % 32) + (lo ? 8 : 0)]);
    s += DotCode(t, rg.code[e]) * x;
  }
  return s;
}

// Unit sum of column g from its limb bytes (unit16: 16-element units).
int LimbSum(const uint8_t* xr, int g, int u, bool unit16) {
  const int t = u / 4, i = u % 4;
  const uint8_t* p = xr + (unit16 ? xq::kLimb16 : xq::kLimb32) + 16 * (4 * g + t) + i;
  return 16384 * static_cast<int8_t>(p[8]) + 128 * p[4] + p[0];
}

}  // namespace

void PackMatrix(GgmlType t, const void* gguf, size_t row_bytes, int64_t rows, int64_t k, uint8_t* out) {
  const int64_t tiles = Tiles(rows), groups = Groups(k);
  const auto* src = static_cast<const uint8_t*>(gguf);
  const uint8_t* rp[kTileRows];
  for (int64_t tile = 0; tile < tiles; ++tile) {
    for (int rr = 0; rr < kTileRows; ++rr) {
      const int64_t r = tile * kTileRows + rr;
      rp[rr] = r < rows ? src + static_cast<size_t>(r) * row_bytes : nullptr;
    }
    for (int64_t g = 0; g < groups; ++g)
      for (int L = 0; L < 32; ++L) PackLane(t, rp, k, g, L, out + RecordOffset(t, groups, tile, g));
  }
}

void DequantPackedRow(GgmlType t, const uint8_t* packed, int64_t rows, int64_t k, int64_t row, float* y) {
  const int64_t groups = Groups(k);
  const int rr = static_cast<int>(row % kTileRows);
  for (int64_t g = 0; g < groups; ++g) {
    const uint8_t* rec = packed + RecordOffset(t, groups, row / kTileRows, g);
    RowAux x;
    RecordAux(t, rec, rr, &x);
    // K is a multiple of 32: a group's elements come in whole eights.
    for (int e0 = 0; e0 < kGroup && g * kGroup + e0 < k; e0 += 8) DequantRecord8(t, rec, rr, x, e0, y + g * kGroup + e0);
  }
}

std::vector<uint8_t> QuantizeActivations(const float* x, int n, int64_t k) {
  const int64_t groups = Groups(k);
  std::vector<uint8_t> out(XqBytes(n, k), 0);
  for (int c = 0; c < n; ++c) {
    const int g = c % 8;
    for (int64_t gi = 0; gi < groups; ++gi) {
      uint8_t* rec = out.data() + XqRecordOffset(groups, c, gi);
      float v[kGroup];
      float amax = 0.0f;
      for (int e = 0; e < kGroup; ++e) {
        const int64_t idx = gi * kGroup + e;
        v[e] = idx < k ? x[static_cast<size_t>(c) * k + idx] : 0.0f;
        amax = std::max(amax, std::fabs(v[e]));
      }
      const float inv = XqInv(amax);
      int xi16[16] = {};
      for (int e = 0; e < kGroup; ++e) {
        int hi = 0, lo = 0;
        if (amax > 0.0f) XqHiLo(v[e], inv, &hi, &lo);
        const int u = e / 32;
        uint8_t* f = rec + xq::kFrag + 512 * u + XqFragByte(g, e % 32);
        f[0] = static_cast<uint8_t>(static_cast<int8_t>(hi));
        f[8] = static_cast<uint8_t>(static_cast<int8_t>(lo));
        rec[XqWideByte(g, u, 0, e % 32)] = f[0];
        rec[XqWideByte(g, u, 1, e % 32)] = f[8];
        xi16[e / 16] += 254 * hi + lo;
      }
      for (int t = 0; t < 4; ++t)
        for (int limb = 0; limb < 3; ++limb)
          for (int i = 0; i < 4; ++i) {
            const int u = 4 * t + i;
            rec[xq::kLimb16 + 16 * (4 * g + t) + 4 * limb + i] = static_cast<uint8_t>(XqLimbByte(xi16[u], limb));
            if (t < 2)
              rec[xq::kLimb32 + 16 * (4 * g + t) + 4 * limb + i] =
                  static_cast<uint8_t>(XqLimbByte(xi16[2 * u] + xi16[2 * u + 1], limb));
          }
      for (int u = 0; u < kUnits; ++u) {
        const int32_t s = xi16[2 * u] + xi16[2 * u + 1];
        std::memcpy(rec + xq::kSum32 + 4 * (8 * g + u), &s, 4);
      }
      const float scale = XqScale(amax);
      std::memcpy(rec + xq::kScale + 4 * g, &scale, 4);
    }
  }
  return out;
}

void Emulate(GgmlType t, const uint8_t* packed, int64_t rows, int64_t k, const uint8_t* xq, int n, const Plan& plan,
             const float* bias, float* y) {
  const Layout l = LayoutOf(t);
  const int64_t groups = Groups(k);
  std::vector<RowGroup> rg(static_cast<size_t>(groups));
  // One group's value for row r's decoded groups and column c.
  auto group_value = [&](const RowGroup& q, int c, int64_t gi, float* dx) {
    const int g = c % 8;
    const uint8_t* xr = xq + XqRecordOffset(groups, c, gi);
    std::memcpy(dx, xr + xq::kScale + 4 * g, 4);
    if (l.kquant) {
      const int units = l.unit16 ? 16 : 8, len = l.unit16 ? 16 : 32;
      int shi = 0, slo = 0, m = 0;
      for (int u = 0; u < units; ++u) {
        const int sc = KScale(t, q, u);
        shi += sc * UnitDot(t, q, xr, g, len * u, len, false);
        slo += sc * UnitDot(t, q, xr, g, len * u, len, true);
        if (HasMins(t)) m += KMin(t, q, u) * LimbSum(xr, g, u, l.unit16);
      }
      return KGroupValue(shi, slo, m, KD(t, q), KOff(t, q));
    }
    float v = 0.0f;
    for (int u = 0; u < kUnits; ++u) {
      int32_t xi;
      std::memcpy(&xi, xr + xq::kSum32 + 4 * (8 * g + u), 4);
      v = LegacyUnit(v, UnitDot(t, q, xr, g, 32 * u, 32, false), UnitDot(t, q, xr, g, 32 * u, 32, true), xi,
                     LegacyD(t, q, u), LegacyM(t, q, u), HasMins(t));
    }
    return v;
  };
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t tile = r / kTileRows;
    for (int64_t gi = 0; gi < groups; ++gi)
      DecodeRecordRow(t, packed + RecordOffset(t, groups, tile, gi), static_cast<int>(r % kTileRows), &rg[gi]);
    const int64_t first = plan.First(tile), parts = plan.Parts(tile);
    for (int c = 0; c < n; ++c) {
      float out = 0.0f;
      for (int64_t p = 0; p < parts; ++p) {  // each warp's share of the tile, in warp order
        const int64_t w = first + p;
        const int64_t r0 = std::max(plan.Lo(w), tile * groups), r1 = std::min(plan.Lo(w + 1), (tile + 1) * groups);
        float acc = 0.0f;
        for (int64_t rec = r0; rec < r1; ++rec) {
          float dx;
          const float v = group_value(rg[rec - tile * groups], c, rec - tile * groups, &dx);
          acc = Fma(dx, v, acc);
        }
        out = p == 0 ? acc : Add(out, acc);
      }
      y[static_cast<size_t>(c) * rows + r] = bias ? Add(out, bias[r]) : out;
    }
  }
}

}  // namespace specd::mmv
