// Reference-quality quantizers from F32, following ggml's quantize_row_*_ref:
// the legacy formats byte for byte (gguf-py reproduces them, see the tests);
// the k-quants with the same searches (weighted least-squares scale/min fits,
// then 6- or 8-bit quantization of the per-group scales). Deterministic: no
// threading, no library calls whose rounding could vary.
#if defined(__GNUC__) && !defined(__clang__)
// As ggml's C reference (C, no contraction): products and sums round separately.
#pragma GCC optimize("fp-contract=off")
#endif
#include <cfloat>
#include <cmath>
#include <cstring>

#include "common/quant/block_dequant.h"
#include "common/quant/quant.h"
#include "common/util/fp16.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace specd {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

// Round to nearest, ties to even: adding 1.5 * 2^23 leaves the rounded integer
// in the low mantissa bits (ggml's nearest_int). Meaningful for |v| < 2^22;
// larger or NaN inputs give some int that callers clamp.
inline int NearestInt(float v) {
  const float t = v + 12582912.0f;
  uint32_t bits;
  std::memcpy(&bits, &t, 4);
  return static_cast<int>(bits & 0x7fffffu) - 0x400000;
}

inline int Clamp(int v, int lo, int hi) { return v < lo ? lo : (v > hi ? hi : v); }

// (int)v clamped to [0, hi]: ggml's MIN(hi, (int8_t)v) for the v >= 0 that
// occur, without the undefined float->int conversion for garbage input.
inline int TruncClamp(float v, int hi) {
  if (!(v > 0.0f)) return 0;
  if (v >= static_cast<float>(hi)) return hi;
  return static_cast<int>(v);
}

// ---------------------------------------------------------------------------
// Legacy 32-element formats.
// ---------------------------------------------------------------------------

// Value of largest magnitude (the first one on ties), sign kept.
inline float SignedAbsMax(const float* x, int n) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < n; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

inline void MinMax(const float* x, int n, float* mn, float* mx) {
  *mn = FLT_MAX;
  *mx = -FLT_MAX;
  for (int j = 0; j < n; ++j) {
    if (x[j] < *mn) *mn = x[j];
    if (x[j] > *mx) *mx = x[j];
  }
}

void QuantizeQ8_0(const float* x, BlockQ8_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float amax = 0.0f;
    for (int j = 0; j < kQK; ++j) amax = std::fmax(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    for (int j = 0; j < kQK; ++j) y[i].qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  }
}

// Symmetric 4/5-bit: the extreme value maps to -2^(b-1) exactly, so the grid
// spends no level on the sign opposite to it.
void QuantizeQ4_0(const float* x, BlockQ4_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = SignedAbsMax(x, kQK) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp(x[j] * id + 8.5f, 15);
      const int q1 = TruncClamp(x[j + kQK / 2] * id + 8.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

void QuantizeQ4_1(const float* x, BlockQ4_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    MinMax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    y[i].m = FloatToHalf(mn);
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp((x[j] - mn) * id + 0.5f, 15);
      const int q1 = TruncClamp((x[j + kQK / 2] - mn) * id + 0.5f, 15);
      y[i].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
  }
}

inline void StoreQh32(uint32_t qh, uint8_t* out) {
  for (int k = 0; k < 4; ++k) out[k] = static_cast<uint8_t>(qh >> (8 * k));
}

void QuantizeQ5_0(const float* x, BlockQ5_0* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    const float d = SignedAbsMax(x, kQK) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp(x[j] * id + 16.5f, 31);
      const int q1 = TruncClamp(x[j + kQK / 2] * id + 16.5f, 31);
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + kQK / 2);
    }
    StoreQh32(qh, y[i].qh);
  }
}

void QuantizeQ5_1(const float* x, BlockQ5_1* y, int64_t nb) {
  for (int64_t i = 0; i < nb; ++i, x += kQK) {
    float mn, mx;
    MinMax(x, kQK, &mn, &mx);
    const float d = (mx - mn) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[i].d = FloatToHalf(d);
    y[i].m = FloatToHalf(mn);
    uint32_t qh = 0;
    for (int j = 0; j < kQK / 2; ++j) {
      const int q0 = TruncClamp((x[j] - mn) * id + 0.5f, 31);
      const int q1 = TruncClamp((x[j + kQK / 2] - mn) * id + 0.5f, 31);
      y[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
      qh |= static_cast<uint32_t>(q0 >> 4) << j;
      qh |= static_cast<uint32_t>(q1 >> 4) << (j + kQK / 2);
    }
    StoreQh32(qh, y[i].qh);
  }
}

// ---------------------------------------------------------------------------
// Group fits used by the k-quants.
// ---------------------------------------------------------------------------

// Fits x ~ scale * L - neg_min with L in [0, nmax] and neg_min >= 0 (the offset
// is never positive, so zero stays representable), minimizing sum w*err^2 (or
// sum w*|err| with use_mad). Starts from the plain min/max grid, then tries
// nstep+1 grids of density (nmax + rmin + rdelta*is)/(max - min); for each it
// solves the weighted least-squares scale and offset of the resulting L in
// closed form and keeps the best. (ggml's make_qkx2_quants.)
float FitScaleMin(int n, int nmax, const float* x, const float* w, uint8_t* L, float* neg_min,
                  uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < lo) lo = x[i];
    if (x[i] > hi) hi = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (lo > 0.0f) lo = 0.0f;
  if (hi == lo) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *neg_min = -lo;
    return 0.0f;
  }
  float iscale = static_cast<float>(nmax) / (hi - lo);
  float scale = 1.0f / iscale;
  float min = lo;
  float best = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax);
    L[i] = static_cast<uint8_t>(l);
    const float diff = scale * static_cast<float>(l) + lo - x[i];
    best += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + static_cast<float>(nmax)) / (hi - lo);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = Clamp(NearestInt(iscale * (x[i] - lo)), 0, nmax);
      Laux[i] = static_cast<uint8_t>(l);
      const float fl = static_cast<float>(l);
      sum_l += w[i] * fl;
      sum_l2 += w[i] * fl * fl;
      sum_xl += w[i] * fl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0.0f) {  // offset must not be positive: refit the scale alone
      this_min = 0.0f;
      this_scale = sum_xl / sum_l2;
    }
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
      err += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
    }
    if (err < best) {
      for (int i = 0; i < n; ++i) L[i] = Laux[i];
      best = err;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// Fits x ~ scale * (L - nmax), L - nmax in [-nmax, nmax-1], weights x^2: the
// extreme value maps to -nmax, then 18 nearby grid densities are tried and the
// one maximizing (sum w x l)^2 / sum w l^2 (the least-squares gain) wins.
// Returns the least-squares scale; L gets values in [0, 2*nmax).
// (ggml's make_qx_quants with rmse_type 1.)
float FitSymmetric(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const auto fit = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0.0f;
    *suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float l = static_cast<float>(Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  const auto assign = [&](float iscale) {
    for (int i = 0; i < n; ++i)
      L[i] = static_cast<int8_t>(nmax + Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1));
  };
  float iscale = -static_cast<float>(nmax) / max;
  float sumlx, suml2;
  fit(iscale, &sumlx, &suml2);
  assign(iscale);
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    fit(iscale, &sumlx, &suml2);
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      assign(iscale);
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

// Q3_K's group fit: symmetric grid from the extreme value, then up to 5 passes
// of coordinate descent moving single L to the value that improves the
// least-squares gain. L gets values in [0, 2*nmax). (ggml's make_q3_quants.)
float FitQ3(int n, int nmax, const float* x, int8_t* L) {
  const float max = SignedAbsMax(x, n);
  if (std::fabs(max) < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = -static_cast<float>(nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = Clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (!(slx > 0.0f)) continue;
      float sl2 = suml2 - w * li * li;
      const int nl = Clamp(NearestInt(x[i] * sl2 / slx), -nmax, nmax - 1);
      if (nl == L[i]) continue;
      slx += w * x[i] * static_cast<float>(nl);
      sl2 += w * static_cast<float>(nl) * static_cast<float>(nl);
      if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
        L[i] = static_cast<int8_t>(nl);
        sumlx = slx;
        suml2 = sl2;
        ++changed;
      }
    }
    if (changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// ---------------------------------------------------------------------------
// k-quants.
// ---------------------------------------------------------------------------

// Inverse of GetScaleMinK4: eight 6-bit scales and mins into 12 bytes.
void PackScaleMinK4(const uint8_t* ls, const uint8_t* lm, uint8_t* out) {
  for (int j = 0; j < 4; ++j) {
    out[j] = ls[j];
    out[j + 4] = lm[j];
  }
  for (int j = 4; j < 8; ++j) {
    out[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
    out[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
    out[j] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
  }
}

// Shared by Q4_K (nmax 15) and Q5_K (nmax 31): per 32-group affine fits with
// weights (rms + |x|), then the group scales and mins as 6-bit multiples of the
// super-block's d and dmin, then L recomputed against the quantized scales.
template <class Block>
void QuantizeK4K5Scales(const float* x, Block* y, uint8_t* L, int nmax, float rmin, int nstep) {
  uint8_t laux[32];
  float w[32], mins[8], scales[8];
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) w[l] = av_x + std::fabs(xs[l]);
    scales[j] = FitScaleMin(32, nmax, xs, w, L + 32 * j, &mins[j], laux, rmin, 0.1f, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(Clamp(NearestInt(inv_scale * scales[j]), 0, 63));
    lm[j] = static_cast<uint8_t>(Clamp(NearestInt(inv_min * mins[j]), 0, 63));
  }
  PackScaleMinK4(ls, lm, y->scales);
  y->d = FloatToHalf(max_scale / 63.0f);
  y->dmin = FloatToHalf(max_min / 63.0f);
  const float d = HalfToFloat(y->d), dmin = HalfToFloat(y->dmin);
  for (int j = 0; j < 8; ++j) {
    const float dl = d * static_cast<float>(ls[j]);
    if (dl == 0.0f) continue;  // decodes to -ml whatever L is
    const float ml = dmin * static_cast<float>(lm[j]);
    for (int l = 0; l < 32; ++l)
      L[32 * j + l] = static_cast<uint8_t>(Clamp(NearestInt((x[32 * j + l] + ml) / dl), 0, nmax));
  }
}

void QuantizeQ4_K(const float* x, BlockQ4_K* y, int64_t nb) {
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    QuantizeK4K5Scales(x, &y[i], L, 15, -1.0f, 20);
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l)
        y[i].qs[32 * k + l] = static_cast<uint8_t>(L[64 * k + l] | (L[64 * k + 32 + l] << 4));
  }
}

void QuantizeQ5_K(const float* x, BlockQ5_K* y, int64_t nb) {
  uint8_t L[kQKK];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    QuantizeK4K5Scales(x, &y[i], L, 31, -0.5f, 15);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int l1 = L[64 * k + l], l2 = L[64 * k + 32 + l];
        y[i].qh[l] |= static_cast<uint8_t>(((l1 >> 4) << (2 * k)) | ((l2 >> 4) << (2 * k + 1)));
        y[i].qs[32 * k + l] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K* y, int64_t nb) {
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max_scale = 0.0f, max_abs = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = FitSymmetric(16, 32, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > max_abs) {
        max_abs = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    if (max_abs < kGroupMaxEps) {
      std::memset(&y[i], 0, sizeof(y[i]));
      continue;
    }
    // The largest group scale maps to -128 so the int8 range is used fully.
    const float iscale = -128.0f / max_scale;
    y[i].d = FloatToHalf(1.0f / iscale);
    for (int g = 0; g < 16; ++g)
      y[i].scales[g] = static_cast<int8_t>(Clamp(NearestInt(iscale * scales[g]), -128, 127));
    const float d = HalfToFloat(y[i].d);
    for (int g = 0; g < 16; ++g) {
      const float dg = d * static_cast<float>(y[i].scales[g]);
      if (dg == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<int8_t>(Clamp(NearestInt(x[16 * g + l] / dg), -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      const int8_t* Lh = L + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = Lh[l], q1 = Lh[l + 32], q2 = Lh[l + 64], q3 = Lh[l + 96];
        y[i].ql[64 * h + l] = static_cast<uint8_t>((q0 & 0xF) | ((q2 & 0xF) << 4));
        y[i].ql[64 * h + 32 + l] = static_cast<uint8_t>((q1 & 0xF) | ((q3 & 0xF) << 4));
        y[i].qh[32 * h + l] =
            static_cast<uint8_t>((q0 >> 4) | ((q1 >> 4) << 2) | ((q2 >> 4) << 4) | ((q3 >> 4) << 6));
      }
    }
  }
}

// 2-bit values of a super-block: qs[32h + l] holds elements 128h + 32p + l in
// bit pair p.
template <class T>
void Pack2Bit(const T* L, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const T* Lh = L + 128 * h + l;
      qs[32 * h + l] = static_cast<uint8_t>(Lh[0] | (Lh[32] << 2) | (Lh[64] << 4) | (Lh[96] << 6));
    }
}

void QuantizeQ2_K(const float* x, BlockQ2_K* y, int64_t nb) {
  uint8_t L[kQKK], laux[16];
  float w[16], mins[16], scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max_scale = 0.0f, max_min = 0.0f;
    for (int g = 0; g < 16; ++g) {
      for (int l = 0; l < 16; ++l) w[l] = std::fabs(x[16 * g + l]);
      scales[g] = FitScaleMin(16, 3, x + 16 * g, w, L + 16 * g, &mins[g], laux, -0.5f, 0.1f, 15, true);
      if (scales[g] > max_scale) max_scale = scales[g];
      if (mins[g] > max_min) max_min = mins[g];
    }
    // 4-bit group scales (low nibble) and mins (high nibble).
    for (int g = 0; g < 16; ++g) y[i].scales[g] = 0;
    y[i].d = FloatToHalf(0.0f);
    y[i].dmin = FloatToHalf(0.0f);
    if (max_scale > 0.0f) {
      const float iscale = 15.0f / max_scale;
      for (int g = 0; g < 16; ++g)
        y[i].scales[g] = static_cast<uint8_t>(Clamp(NearestInt(iscale * scales[g]), 0, 15));
      y[i].d = FloatToHalf(max_scale / 15.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = 15.0f / max_min;
      for (int g = 0; g < 16; ++g)
        y[i].scales[g] |= static_cast<uint8_t>(Clamp(NearestInt(iscale * mins[g]), 0, 15) << 4);
      y[i].dmin = FloatToHalf(max_min / 15.0f);
    }
    const float d = HalfToFloat(y[i].d), dmin = HalfToFloat(y[i].dmin);
    for (int g = 0; g < 16; ++g) {
      const float dl = d * static_cast<float>(y[i].scales[g] & 0xF);
      if (dl == 0.0f) continue;
      const float ml = dmin * static_cast<float>(y[i].scales[g] >> 4);
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<uint8_t>(Clamp(NearestInt((x[16 * g + l] + ml) / dl), 0, 3));
    }
    Pack2Bit(L, y[i].qs);
  }
}

void QuantizeQ3_K(const float* x, BlockQ3_K* y, int64_t nb) {
  int8_t L[kQKK];
  float scales[16];
  for (int64_t i = 0; i < nb; ++i, x += kQKK) {
    float max_scale = 0.0f, amax = 0.0f;
    for (int g = 0; g < 16; ++g) {
      scales[g] = FitQ3(16, 4, x + 16 * g, L + 16 * g);
      if (std::fabs(scales[g]) > amax) {
        amax = std::fabs(scales[g]);
        max_scale = scales[g];
      }
    }
    // Signed 6-bit group scales: low nibbles in bytes 0..7, bit pairs in 8..11.
    std::memset(y[i].scales, 0, sizeof(y[i].scales));
    y[i].d = FloatToHalf(0.0f);
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int g = 0; g < 16; ++g) {
        const int l = Clamp(NearestInt(iscale * scales[g]), -32, 31) + 32;
        if (g < 8) {
          y[i].scales[g] = static_cast<uint8_t>(l & 0xF);
        } else {
          y[i].scales[g - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
        }
        y[i].scales[8 + (g & 3)] |= static_cast<uint8_t>((l >> 4) << (2 * (g >> 2)));
      }
      y[i].d = FloatToHalf(1.0f / iscale);
    }
    const float d = HalfToFloat(y[i].d);
    for (int g = 0; g < 16; ++g) {
      const float dg = d * static_cast<float>(GetScaleQ3K(g, y[i].scales));
      if (dg == 0.0f) continue;
      for (int l = 0; l < 16; ++l)
        L[16 * g + l] = static_cast<int8_t>(Clamp(NearestInt(x[16 * g + l] / dg), -4, 3) + 4);
    }
    // Third bit of element j: hmask[j % 32] bit j / 32.
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int j = 0; j < kQKK; ++j) {
      if (L[j] > 3) {
        y[i].hmask[j % 32] |= static_cast<uint8_t>(1 << (j / 32));
        L[j] = static_cast<int8_t>(L[j] - 4);
      }
    }
    Pack2Bit(L, y[i].qs);
  }
}

void FloatsToHalves(const float* x, uint8_t* out, int64_t n, uint16_t (*conv)(float)) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = conv(x[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}

}  // namespace

bool CanQuantize(GgmlType type) {
  switch (type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
    case GgmlType::Q8_0:
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0:
    case GgmlType::Q5_1:
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n) {
  if (!CanQuantize(type)) {
    const auto tr = GetTypeTraits(static_cast<uint32_t>(type));
    return absl::InvalidArgumentError(absl::StrCat("QuantizeRow: cannot quantize to ",
                                                   tr ? tr->name : "an undefined type", " (",
                                                   static_cast<uint32_t>(type), ")"));
  }
  const auto& tr = TypeTraits(type);
  if (n < 0 || n % tr.block_size != 0) {
    return absl::InvalidArgumentError(absl::StrCat("QuantizeRow: ", n, " elements is not a multiple of the ",
                                                   tr.name, " block size ", tr.block_size));
  }
  const int64_t nb = n / tr.block_size;
  auto* out = static_cast<uint8_t*>(dst);
  switch (type) {
    case GgmlType::F32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); break;
    case GgmlType::F16: FloatsToHalves(src, out, n, FloatToHalf); break;
    case GgmlType::BF16: FloatsToHalves(src, out, n, FloatToBf16); break;
    case GgmlType::Q8_0: QuantizeQ8_0(src, reinterpret_cast<BlockQ8_0*>(out), nb); break;
    case GgmlType::Q4_0: QuantizeQ4_0(src, reinterpret_cast<BlockQ4_0*>(out), nb); break;
    case GgmlType::Q4_1: QuantizeQ4_1(src, reinterpret_cast<BlockQ4_1*>(out), nb); break;
    case GgmlType::Q5_0: QuantizeQ5_0(src, reinterpret_cast<BlockQ5_0*>(out), nb); break;
    case GgmlType::Q5_1: QuantizeQ5_1(src, reinterpret_cast<BlockQ5_1*>(out), nb); break;
    case GgmlType::Q2_K: QuantizeQ2_K(src, reinterpret_cast<BlockQ2_K*>(out), nb); break;
    case GgmlType::Q3_K: QuantizeQ3_K(src, reinterpret_cast<BlockQ3_K*>(out), nb); break;
    case GgmlType::Q4_K: QuantizeQ4_K(src, reinterpret_cast<BlockQ4_K*>(out), nb); break;
    case GgmlType::Q5_K: QuantizeQ5_K(src, reinterpret_cast<BlockQ5_K*>(out), nb); break;
    case GgmlType::Q6_K: QuantizeQ6_K(src, reinterpret_cast<BlockQ6_K*>(out), nb); break;
    default: break;  // excluded by CanQuantize
  }
  return absl::OkStatus();
}

}  // namespace specd
