// Dequantization of ONE block of each ggml block format, host and device.
//
// These follow ggml's reference dequantizers (ggml-quants.c dequantize_row_*)
// value for value: every product is rounded on its own and then offset, in
// ggml's order, so the CPU path (and gguf-py's numpy dequantizers) agree bit
// for bit. QMul() keeps compilers from fusing product and offset into one FMA,
// which would round differently.
//
// Plain loops, no std:: calls: this header is compiled by nvcc as well.
#pragma once
#include <cstdint>

#include "common/gguf/ggml_types.h"
#include "common/util/fp16.h"
#include "common/util/hd.h"

namespace specd {

// Product with its own rounding (never contracted into a following add). On the
// host a contraction is only possible when the target has FMA (__FP_FAST_FMAF,
// e.g. -march=native); then an empty asm makes the product opaque.
SPECD_HD float QMul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  float p = a * b;
#if defined(__FP_FAST_FMAF) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(p));
#elif defined(__FP_FAST_FMAF) && defined(__aarch64__)
  __asm__("" : "+w"(p));
#endif
  return p;
#endif
}

// Unpacks the 6-bit scale and 6-bit min of sub-block j (0..7) from the 12
// packed bytes of a Q4_K/Q5_K super-block. Bytes 0..3 hold scales 0..3 in
// their low 6 bits, bytes 4..7 mins 0..3; sub-blocks 4..7 keep their low
// nibbles in bytes 8..11 (scale low, min high) and their top two bits in the
// top two bits of bytes 0..3 (scales) and 4..7 (mins).
SPECD_HD void GetScaleMinK4(int j, const uint8_t* q, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = q[j] & 63;
    *m = q[j + 4] & 63;
  } else {
    *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Signed 6-bit scale s (0..15) of a Q3_K super-block, already minus 32. Low
// nibbles: bytes 0..7 (s < 8 low nibble, s >= 8 high nibble of byte s-8); the
// two high bits: byte 8 + s%4, bit pair s/4.
SPECD_HD int GetScaleQ3K(int s, const uint8_t* scales) {
  const int lo = s < 8 ? (scales[s] & 0xF) : (scales[s - 8] >> 4);
  const int hi = (scales[8 + (s & 3)] >> (2 * (s >> 2))) & 3;
  return (lo | (hi << 4)) - 32;
}

// Q4_0: y = d * (q - 8); element j in the low nibble of qs[j], j+16 in the high.
SPECD_HD void DequantBlockQ4_0(const BlockQ4_0& b, float* y) {
  const float d = HalfToFloat(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = QMul((float)((b.qs[j] & 0xF) - 8), d);
    y[j + kQK / 2] = QMul((float)((b.qs[j] >> 4) - 8), d);
  }
}

// Q4_1: y = d * q + m.
SPECD_HD void DequantBlockQ4_1(const BlockQ4_1& b, float* y) {
  const float d = HalfToFloat(b.d);
  const float m = HalfToFloat(b.m);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = QMul((float)(b.qs[j] & 0xF), d) + m;
    y[j + kQK / 2] = QMul((float)(b.qs[j] >> 4), d) + m;
  }
}

// qh of the 5-bit formats as a little-endian 32-bit word: bit i is the fifth bit
// of element i.
SPECD_HD uint32_t LoadQh32(const uint8_t* qh) {
  return (uint32_t)qh[0] | ((uint32_t)qh[1] << 8) | ((uint32_t)qh[2] << 16) |
         ((uint32_t)qh[3] << 24);
}

// Q5_0: y = d * (q - 16), q = nibble | fifth bit from qh.
SPECD_HD void DequantBlockQ5_0(const BlockQ5_0& b, float* y) {
  const float d = HalfToFloat(b.d);
  const uint32_t qh = LoadQh32(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = (int)((qh >> j) & 1u) << 4;
    const int h1 = (int)((qh >> (j + 16)) & 1u) << 4;
    y[j] = QMul((float)(((b.qs[j] & 0xF) | h0) - 16), d);
    y[j + kQK / 2] = QMul((float)(((b.qs[j] >> 4) | h1) - 16), d);
  }
}

// Q5_1: y = d * q + m.
SPECD_HD void DequantBlockQ5_1(const BlockQ5_1& b, float* y) {
  const float d = HalfToFloat(b.d);
  const float m = HalfToFloat(b.m);
  const uint32_t qh = LoadQh32(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    const int h0 = (int)((qh >> j) & 1u) << 4;
    const int h1 = (int)((qh >> (j + 16)) & 1u) << 4;
    y[j] = QMul((float)((b.qs[j] & 0xF) | h0), d) + m;
    y[j + kQK / 2] = QMul((float)((b.qs[j] >> 4) | h1), d) + m;
  }
}

// Q8_0: y = d * q.
SPECD_HD void DequantBlockQ8_0(const BlockQ8_0& b, float* y) {
  const float d = HalfToFloat(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = QMul((float)b.qs[j], d);
}

// Q2_K: 16 groups of 16; group g has 4-bit scale (low nibble of scales[g]) and
// 4-bit min (high nibble). Element order: for each 128-half h, for each bit
// pair p (0..3), the 32 bytes qs[32h .. 32h+32) shifted by 2p.
SPECD_HD void DequantBlockQ2_K(const BlockQ2_K& b, float* y) {
  const float d = HalfToFloat(b.d);
  const float dmin = HalfToFloat(b.dmin);
  for (int g = 0; g < kQKK / 16; ++g) {
    const int h = g >> 3, p = (g >> 1) & 3, half = g & 1;
    const float dl = QMul(d, (float)(b.scales[g] & 0xF));
    const float ml = QMul(dmin, (float)(b.scales[g] >> 4));
    const uint8_t* q = b.qs + 32 * h + 16 * half;
    for (int l = 0; l < 16; ++l) y[16 * g + l] = QMul(dl, (float)((q[l] >> (2 * p)) & 3)) - ml;
  }
}

// Q3_K: q = 2 low bits (as Q2_K) - 4 unless the hmask bit is set; hmask byte
// l + 16*half, bit 4h + p. Signed 6-bit group scales, see GetScaleQ3K.
SPECD_HD void DequantBlockQ3_K(const BlockQ3_K& b, float* y) {
  const float d = HalfToFloat(b.d);
  for (int g = 0; g < kQKK / 16; ++g) {
    const int h = g >> 3, p = (g >> 1) & 3, half = g & 1;
    const float dl = QMul(d, (float)GetScaleQ3K(g, b.scales));
    const uint8_t* q = b.qs + 32 * h + 16 * half;
    const uint8_t* hm = b.hmask + 16 * half;
    const int bit = 4 * h + p;
    for (int l = 0; l < 16; ++l) {
      const int v = ((q[l] >> (2 * p)) & 3) - (((hm[l] >> bit) & 1) ? 0 : 4);
      y[16 * g + l] = QMul(dl, (float)v);
    }
  }
}

// Q4_K: 8 sub-blocks of 32 with 6-bit scale/min; pair k of sub-blocks shares the
// 32 bytes qs[32k ..): sub-block 2k in the low nibbles, 2k+1 in the high ones.
SPECD_HD void DequantBlockQ4_K(const BlockQ4_K& b, float* y) {
  const float d = HalfToFloat(b.d);
  const float dmin = HalfToFloat(b.dmin);
  for (int k = 0; k < 4; ++k) {
    uint8_t sc, m;
    GetScaleMinK4(2 * k, b.scales, &sc, &m);
    const float d1 = QMul(d, (float)sc), m1 = QMul(dmin, (float)m);
    GetScaleMinK4(2 * k + 1, b.scales, &sc, &m);
    const float d2 = QMul(d, (float)sc), m2 = QMul(dmin, (float)m);
    const uint8_t* q = b.qs + 32 * k;
    for (int l = 0; l < 32; ++l) y[64 * k + l] = QMul(d1, (float)(q[l] & 0xF)) - m1;
    for (int l = 0; l < 32; ++l) y[64 * k + 32 + l] = QMul(d2, (float)(q[l] >> 4)) - m2;
  }
}

// Q5_K: Q4_K plus a fifth bit: qh[l] bit 2k for sub-block 2k, bit 2k+1 for 2k+1.
SPECD_HD void DequantBlockQ5_K(const BlockQ5_K& b, float* y) {
  const float d = HalfToFloat(b.d);
  const float dmin = HalfToFloat(b.dmin);
  for (int k = 0; k < 4; ++k) {
    uint8_t sc, m;
    GetScaleMinK4(2 * k, b.scales, &sc, &m);
    const float d1 = QMul(d, (float)sc), m1 = QMul(dmin, (float)m);
    GetScaleMinK4(2 * k + 1, b.scales, &sc, &m);
    const float d2 = QMul(d, (float)sc), m2 = QMul(dmin, (float)m);
    const uint8_t* q = b.qs + 32 * k;
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] & 0xF) | (((b.qh[l] >> (2 * k)) & 1) << 4);
      y[64 * k + l] = QMul(d1, (float)v) - m1;
    }
    for (int l = 0; l < 32; ++l) {
      const int v = (q[l] >> 4) | (((b.qh[l] >> (2 * k + 1)) & 1) << 4);
      y[64 * k + 32 + l] = QMul(d2, (float)v) - m2;
    }
  }
}

// Q6_K: per 128-half h, 4 groups of 32: low nibbles of ql[64h..+32), of
// ql[64h+32..+32), high nibbles of the same two ranges; two more bits each from
// qh[32h + l] (bit pairs 0,1,2,3 for the four groups). q - 32, int8 scale per 16.
SPECD_HD void DequantBlockQ6_K(const BlockQ6_K& b, float* y) {
  const float d = HalfToFloat(b.d);
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const uint8_t* qh = b.qh + 32 * h;
    const int8_t* sc = b.scales + 8 * h;
    float* yh = y + 128 * h;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      yh[l] = QMul(QMul(d, (float)sc[is]), (float)q1);
      yh[l + 32] = QMul(QMul(d, (float)sc[is + 2]), (float)q2);
      yh[l + 64] = QMul(QMul(d, (float)sc[is + 4]), (float)q3);
      yh[l + 96] = QMul(QMul(d, (float)sc[is + 6]), (float)q4);
    }
  }
}

}  // namespace specd
