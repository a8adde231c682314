// Random but valid blocks of each ggml weight format, host and device: the
// weights of models whose values do not matter (benchmarks of named shapes,
// `make-model --fill blocks`), made without drawing floats and quantizing them
// (which costs ~100x more).
//
// Block b of a tensor is a pure function of (seed, b, sigma): random quant
// codes everywhere, then finite scales chosen so that the dequantized values
// have mean ~0 and standard deviation ~sigma (uniform codes: a flat
// distribution rather than a Gaussian one). F32/F16/BF16 "blocks" are single
// uniform values of that deviation. The CPU and CUDA paths produce the same
// bytes (the jitter's product is kept out of an FMA).
//
// The block code is plain (no std:: calls): nvcc compiles it for the device too.
#pragma once
#include <cmath>
#include <cstdint>
#include <string_view>

#include "common/gguf/ggml_types.h"
#include "common/quant/block_dequant.h"
#include "common/sampler/rng.h"
#include "common/util/fp16.h"
#include "common/util/hd.h"

namespace specd {

// Bytes of one block (one element for the float formats) of T.
template <GgmlType T>
constexpr int kRandomBlockBytes = T == GgmlType::F32                              ? 4
                                  : T == GgmlType::F16 || T == GgmlType::BF16   ? 2
                                  : T == GgmlType::Q4_0                          ? sizeof(BlockQ4_0)
                                  : T == GgmlType::Q4_1                          ? sizeof(BlockQ4_1)
                                  : T == GgmlType::Q5_0                          ? sizeof(BlockQ5_0)
                                  : T == GgmlType::Q5_1                          ? sizeof(BlockQ5_1)
                                  : T == GgmlType::Q8_0                          ? sizeof(BlockQ8_0)
                                  : T == GgmlType::Q2_K                          ? sizeof(BlockQ2_K)
                                  : T == GgmlType::Q3_K                          ? sizeof(BlockQ3_K)
                                  : T == GgmlType::Q4_K                          ? sizeof(BlockQ4_K)
                                  : T == GgmlType::Q5_K                          ? sizeof(BlockQ5_K)
                                  : T == GgmlType::Q6_K                          ? sizeof(BlockQ6_K)
                                                                                 : 0;

// Uniform in [-1, 1) from the top 32 bits.
SPECD_HD float RandomUnit(uint64_t h) {
  return static_cast<float>(static_cast<int32_t>(h >> 32)) * (1.0f / 2147483648.0f);
}

// Writes block `b` of T at dst; sigma: the target standard deviation.
template <GgmlType T>
SPECD_HD void RandomBlock(uint8_t* dst, uint64_t seed, int64_t b, float sigma) {
  static_assert(kRandomBlockBytes<T> > 0, "no random blocks for this type");
  uint64_t h = Mix64(seed ^ Mix64(static_cast<uint64_t>(b)));
  auto next = [&]() {
    h = Mix64(h);
    return h;
  };
  if constexpr (T == GgmlType::F32 || T == GgmlType::F16 || T == GgmlType::BF16) {
    // Uniform with the requested deviation (bounds sqrt(3) * sigma).
    const float v = QMul(RandomUnit(next()), sigma) * 1.7320508f;
    if constexpr (T == GgmlType::F32) {
      const uint32_t u = FloatToBits(v);
      for (int i = 0; i < 4; ++i) dst[i] = static_cast<uint8_t>(u >> (8 * i));
    } else {
      const uint16_t u = T == GgmlType::F16 ? FloatToHalf(v) : FloatToBf16(v);
      dst[0] = static_cast<uint8_t>(u & 0xff);
      dst[1] = static_cast<uint8_t>(u >> 8);
    }
  } else {
    constexpr int kBytes = kRandomBlockBytes<T>;
    // Random quant codes everywhere, then sane scales on top.
    for (int i = 0; i < kBytes; i += 8) {
      const uint64_t r = next();
      for (int j = 0; j < 8 && i + j < kBytes; ++j) dst[i + j] = static_cast<uint8_t>(r >> (8 * j));
    }
    auto put_half = [&](int off, float v) {
      const uint16_t u = FloatToHalf(v);
      dst[off] = static_cast<uint8_t>(u & 0xff);
      dst[off + 1] = static_cast<uint8_t>(u >> 8);
    };
    const float jitter = 1.0f + QMul(0.25f, RandomUnit(next()));  // scales vary +-25% between blocks
    if constexpr (T == GgmlType::Q8_0) {
      put_half(0, sigma / 73.0f * jitter);  // uniform int8: std 73.6
    } else if constexpr (T == GgmlType::Q4_0 || T == GgmlType::Q5_0) {
      put_half(0, sigma / (T == GgmlType::Q4_0 ? 4.6f : 9.2f) * jitter);  // codes: std 4.6 / 9.2
    } else if constexpr (T == GgmlType::Q4_1 || T == GgmlType::Q5_1) {
      const float q = T == GgmlType::Q4_1 ? 4.6f : 9.2f, mid = T == GgmlType::Q4_1 ? 7.5f : 15.5f;
      const float d = sigma / q * jitter;
      put_half(0, d);
      put_half(2, -d * mid);
    } else if constexpr (T == GgmlType::Q4_K || T == GgmlType::Q5_K) {
      // 6-bit scales in [32, 47] and mins in [16, 31], packed as ggml's
      // get_scale_min_k4 reads them; dmin centres the values around zero.
      uint8_t* sc12 = dst + 4;
      for (int j = 0; j < 12; ++j) sc12[j] = 0;
      for (int j = 0; j < 8; ++j) {
        const uint32_t r = static_cast<uint32_t>(next());
        const uint8_t sc = static_cast<uint8_t>(32 + (r & 15)), m = static_cast<uint8_t>(16 + ((r >> 4) & 15));
        if (j < 4) {
          sc12[j] = static_cast<uint8_t>(sc & 63);
          sc12[j + 4] = static_cast<uint8_t>(m & 63);
        } else {
          sc12[j + 4] = static_cast<uint8_t>((sc & 0xF) | ((m & 0xF) << 4));
          sc12[j - 4] |= static_cast<uint8_t>((sc >> 4) << 6);
          sc12[j] |= static_cast<uint8_t>((m >> 4) << 6);
        }
      }
      const float q = T == GgmlType::Q4_K ? 4.6f : 9.2f, mid = T == GgmlType::Q4_K ? 7.5f : 15.5f;
      const float d = sigma / (q * 40.0f) * jitter;
      put_half(0, d);
      put_half(2, d * mid * 40.0f / 24.0f);
    } else if constexpr (T == GgmlType::Q6_K) {
      for (int j = 0; j < 16; ++j) dst[192 + j] = static_cast<uint8_t>(24 + (next() & 15));  // int8 scales 24..39
      put_half(208, sigma / (18.5f * 31.5f) * jitter);
    } else if constexpr (T == GgmlType::Q2_K) {
      for (int j = 0; j < 16; ++j) dst[j] = static_cast<uint8_t>(8 + (next() & 7)) | (8 << 4);  // scale 8..15, min 8
      put_half(80, sigma / (1.1f * 11.5f) * jitter);
      put_half(82, sigma / (1.1f * 11.5f) * jitter * 1.5f * 11.5f / 8.0f);
    } else if constexpr (T == GgmlType::Q3_K) {
      for (int j = 0; j < 12; ++j) dst[96 + j] = static_cast<uint8_t>(0xAA);  // every 6-bit scale 42 (= +10)
      put_half(108, sigma / (2.3f * 10.0f) * jitter);
    }
  }
}

// ---- Synthesized weights (benchmarks of named shapes, no file) ----
// Both backends make weight `name` from the same seed and scale, so a shape
// synthesized on the CPU and on the GPU has the same bytes.

// FNV-1a of a tensor name: the per-tensor seed.
inline uint64_t WeightNameHash(std::string_view name) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ull;
  return h;
}

struct SyntheticWeight {
  uint64_t seed;
  float sigma;  // deviation of RandomBlock values
  float mean;   // added to F32 vectors (norm weights: 1)
};
// Matrices: 1/sqrt(ne0) (unit-scale activations stay unit-scale), the token
// embedding 1; vectors (ne1 == 1): norm weights 1 +- 0.1, others (biases) 0.05.
inline SyntheticWeight SyntheticWeightFor(std::string_view name, int64_t ne0, int64_t ne1) {
  SyntheticWeight w{WeightNameHash(name), 1.0f / std::sqrt(static_cast<float>(ne0 > 0 ? ne0 : 1)), 0.0f};
  if (ne1 == 1) {
    const bool norm = name.find("norm") != std::string_view::npos;
    w.sigma = norm ? 0.1f : 0.05f;
    w.mean = norm ? 1.0f : 0.0f;
  } else if (name.find("token_embd") != std::string_view::npos) {
    w.sigma = 1.0f;
  }
  return w;
}

}  // namespace specd
