// DequantizeRow and the dispatch of DotRow/DotRowsBatched to the best kernel
// build this CPU supports (see dot_kernels.h).
#if defined(__GNUC__) && !defined(__clang__)
// Dequantized values must round product and offset separately, as ggml does.
#pragma GCC optimize("fp-contract=off")
#endif
#include "common/quant/quant.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "common/quant/block_dequant.h"
#include "common/quant/dot_kernels.h"
#include "common/util/fp16.h"

#if defined(__clang__)
#pragma clang fp contract(off)
#endif

namespace specd {
namespace {

[[noreturn]] void Unsupported(const char* what, GgmlType type) {
  std::fprintf(stderr, "specd: %s: unsupported tensor type %s\n", what, TypeTraits(type).name);
  std::abort();
}

template <class Block, void (*kFn)(const Block&, float*)>
void DequantBlocks(const void* src, float* dst, int64_t n, int64_t block_elems) {
  const auto* blocks = static_cast<const Block*>(src);
  const int64_t nb = n / block_elems;
  for (int64_t i = 0; i < nb; ++i) kFn(blocks[i], dst + i * block_elems);
}

}  // namespace

void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const uint8_t*>(src);
  switch (type) {
    case GgmlType::F32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case GgmlType::F16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = HalfToFloat(h);
      }
      return;
    case GgmlType::BF16:
      for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, b + 2 * i, 2);
        dst[i] = Bf16ToFloat(h);
      }
      return;
    case GgmlType::Q4_0: return DequantBlocks<BlockQ4_0, DequantBlockQ4_0>(src, dst, n, kQK);
    case GgmlType::Q4_1: return DequantBlocks<BlockQ4_1, DequantBlockQ4_1>(src, dst, n, kQK);
    case GgmlType::Q5_0: return DequantBlocks<BlockQ5_0, DequantBlockQ5_0>(src, dst, n, kQK);
    case GgmlType::Q5_1: return DequantBlocks<BlockQ5_1, DequantBlockQ5_1>(src, dst, n, kQK);
    case GgmlType::Q8_0: return DequantBlocks<BlockQ8_0, DequantBlockQ8_0>(src, dst, n, kQK);
    case GgmlType::Q2_K: return DequantBlocks<BlockQ2_K, DequantBlockQ2_K>(src, dst, n, kQKK);
    case GgmlType::Q3_K: return DequantBlocks<BlockQ3_K, DequantBlockQ3_K>(src, dst, n, kQKK);
    case GgmlType::Q4_K: return DequantBlocks<BlockQ4_K, DequantBlockQ4_K>(src, dst, n, kQKK);
    case GgmlType::Q5_K: return DequantBlocks<BlockQ5_K, DequantBlockQ5_K>(src, dst, n, kQKK);
    case GgmlType::Q6_K: return DequantBlocks<BlockQ6_K, DequantBlockQ6_K>(src, dst, n, kQKK);
    default:
      Unsupported("DequantizeRow", type);
  }
}

namespace quant_internal {

namespace {
#if defined(__x86_64__) || defined(__i386__)
// __builtin_cpu_supports also checks that the OS saves the wide registers.
// F16C (CPUID.1:ECX bit 29) is read directly: not every compiler's builtin
// knows it. Every AVX2 CPU has it, but the check is cheap.
bool HasAvx2() {
  __builtin_cpu_init();
  unsigned a = 0, b = 0, c = 0, d = 0;
  const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
  return f16c && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
bool HasAvx512() {
  return HasAvx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
#endif
}  // namespace

DotRowsFn DotRowsKernel(DotIsa isa) {
  switch (isa) {
    case DotIsa::kPortable:
      return DotRowsPortable;
#if defined(__x86_64__) || defined(__i386__)
    case DotIsa::kSse2:
      return DotRowsSse2;
    case DotIsa::kAvx2:
      return HasAvx2() ? DotRowsAvx2 : nullptr;
    case DotIsa::kAvx512:
      return HasAvx512() ? DotRowsAvx512 : nullptr;
#else
    default:
      return nullptr;
#endif
  }
  return nullptr;
}

DotIsa SelectedDotIsa() {
  static const DotIsa isa = [] {
    for (DotIsa i : {DotIsa::kAvx512, DotIsa::kAvx2, DotIsa::kSse2}) {
      if (DotRowsKernel(i) != nullptr) return i;
    }
    return DotIsa::kPortable;
  }();
  return isa;
}

const char* DotIsaName(DotIsa isa) {
  switch (isa) {
    case DotIsa::kPortable: return "portable";
    case DotIsa::kSse2: return "sse2";
    case DotIsa::kAvx2: return "avx2";
    case DotIsa::kAvx512: return "avx512";
  }
  return "?";
}

}  // namespace quant_internal

namespace {
quant_internal::DotRowsFn Kernel() {
  static const quant_internal::DotRowsFn fn =
      quant_internal::DotRowsKernel(quant_internal::SelectedDotIsa());
  return fn;
}

void CheckDot(GgmlType type, int64_t n) {
  const auto& tr = TypeTraits(type);
  if (!tr.computable) Unsupported("DotRow", type);
  if (n % tr.block_size != 0) {
    std::fprintf(stderr, "specd: DotRow: n=%lld is not a multiple of the %s block size\n",
                 static_cast<long long>(n), tr.name);
    std::abort();
  }
}
}  // namespace

const char* DotKernelName() { return quant_internal::DotIsaName(quant_internal::SelectedDotIsa()); }

float DotRow(GgmlType type, const void* row, const float* x, int64_t n) {
  CheckDot(type, n);
  float y = 0.0f;
  Kernel()(type, row, RowBytes(type, n), n, 0, 1, x, n, 1, &y, 1);
  return y;
}

void DotRowsBatched(GgmlType type, const void* w, size_t row_bytes, int64_t n, int64_t row_begin,
                    int64_t row_end, const float* x, int64_t ldx, int64_t nx, float* y,
                    int64_t ldy) {
  CheckDot(type, n);
  Kernel()(type, w, row_bytes, n, row_begin, row_end, x, ldx, nx, y, ldy);
}

}  // namespace specd
