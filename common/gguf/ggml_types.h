// Tensor element types as numbered by the GGUF/ggml format, with their block
// geometry. The numbering is the file format's and must never change.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace specd {

enum class GgmlType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
};

struct GgmlTypeTraits {
  GgmlType type;
  const char* name;
  int64_t block_size;   // elements per block
  size_t type_size;     // bytes per block
  bool computable;      // specd has dequantization/dot kernels for it
};

// nullopt for ids the format does not define (or that were removed from it).
std::optional<GgmlTypeTraits> GetTypeTraits(uint32_t type_id);
const GgmlTypeTraits& TypeTraits(GgmlType t);  // t must be a defined type
std::string_view TypeName(GgmlType t);
std::optional<GgmlType> TypeFromName(std::string_view name);  // "Q4_K", "q4_k", "F16", ...

// Bytes for a row of n elements (n must be a multiple of the block size).
inline size_t RowBytes(GgmlType t, int64_t n) {
  const auto& tr = TypeTraits(t);
  return static_cast<size_t>(n / tr.block_size) * tr.type_size;
}

// Block layouts (little-endian, packed) exactly as ggml defines them.
constexpr int kQK = 32;    // elements per block of the legacy formats
constexpr int kQKK = 256;  // elements per super-block of the k-quants
constexpr int kKScaleSize = 12;

#pragma pack(push, 1)
struct BlockQ4_0 { uint16_t d; uint8_t qs[kQK / 2]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[kQK / 2]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[kQK / 2]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[kQK]; };
struct BlockQ2_K { uint8_t scales[kQKK / 16]; uint8_t qs[kQKK / 4]; uint16_t d; uint16_t dmin; };
struct BlockQ3_K { uint8_t hmask[kQKK / 8]; uint8_t qs[kQKK / 4]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleSize]; uint8_t qs[kQKK / 2]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[kKScaleSize]; uint8_t qh[kQKK / 8]; uint8_t qs[kQKK / 2]; };
struct BlockQ6_K { uint8_t ql[kQKK / 2]; uint8_t qh[kQKK / 4]; int8_t scales[kQKK / 16]; uint16_t d; };
#pragma pack(pop)

static_assert(sizeof(BlockQ4_0) == 18);
static_assert(sizeof(BlockQ4_1) == 20);
static_assert(sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24);
static_assert(sizeof(BlockQ8_0) == 34);
static_assert(sizeof(BlockQ2_K) == 84);
static_assert(sizeof(BlockQ3_K) == 110);
static_assert(sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176);
static_assert(sizeof(BlockQ6_K) == 210);

}  // namespace specd
