// DequantizeRow and the dispatch of DotRow/DotRowsBatched to the best kernel
// build this CPU supports (see dot_kernels.h).
#if defined(__GNUC__) && !defined(__clang__)
// Dequantized values must round product and offset separately, as ggml does.
#pragma GCC optimize("fp-contract=off")
#endif
#include "common/quant/quant.h"

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#include <immintrin.h>
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
bool HasAvx512Vnni() { return HasAvx512() && __builtin_cpu_supports("avx512vnni"); }
// AVX-VNNI: CPUID.(EAX=7,ECX=1):EAX bit 4 (the ymm state is checked by HasAvx2).
bool HasAvxVnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return HasAvx2() && __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
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
    case DotIsa::kAvxVnni:
      return HasAvxVnni() ? DotRowsAvx2 : nullptr;
    case DotIsa::kAvx512Vnni:
      return HasAvx512Vnni() ? DotRowsAvx512 : nullptr;
#else
    default:
      return nullptr;
#endif
  }
  return nullptr;
}

DotRowsInt8Fn DotRowsInt8Kernel(DotIsa isa) {
  switch (isa) {
    case DotIsa::kPortable:
      return DotRowsInt8Portable;
#if defined(__x86_64__) || defined(__i386__)
    case DotIsa::kSse2:
      return DotRowsInt8Sse2;
    case DotIsa::kAvx2:
      return HasAvx2() ? DotRowsInt8Avx2 : nullptr;
    case DotIsa::kAvx512:
      return HasAvx512() ? DotRowsInt8Avx512 : nullptr;
    case DotIsa::kAvxVnni:
      return HasAvxVnni() ? DotRowsInt8AvxVnni : nullptr;
    case DotIsa::kAvx512Vnni:
      return HasAvx512Vnni() ? DotRowsInt8Avx512Vnni : nullptr;
#else
    default:
      return nullptr;
#endif
  }
  return nullptr;
}

namespace {
std::atomic<int> g_chosen_isa{-1};  // SetDotKernel's choice (-1: none)
}  // namespace

DotIsa SelectedDotIsa() {
  static const DotIsa isa = [] {
    if (const int c = g_chosen_isa.load(); c >= 0) return static_cast<DotIsa>(c);
    for (DotIsa i : {DotIsa::kAvx512Vnni, DotIsa::kAvx512, DotIsa::kAvxVnni, DotIsa::kAvx2, DotIsa::kSse2}) {
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
    case DotIsa::kAvxVnni: return "avxvnni";
    case DotIsa::kAvx512Vnni: return "avx512vnni";
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

absl::Status SetDotKernel(std::string_view name) {
  using quant_internal::DotIsa;
  if (name == "auto") return absl::OkStatus();
  const std::string n(name);  // (Debian's Abseil has its own string_view)
  std::string names;
  for (DotIsa i : quant_internal::kAllDotIsas) {
    if (name != quant_internal::DotIsaName(i)) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", quant_internal::DotIsaName(i));
      continue;
    }
    if (quant_internal::DotRowsKernel(i) == nullptr)
      return absl::FailedPreconditionError(absl::StrCat("the ", n, " dot kernels are not in this build or this CPU"));
    quant_internal::g_chosen_isa.store(static_cast<int>(i));
    if (quant_internal::SelectedDotIsa() != i)
      return absl::FailedPreconditionError(absl::StrCat("the dot kernels were already chosen (", DotKernelName(),
                                                        "); ", n, " can no longer be"));
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dot kernels '", n, "' (auto, ", names, ")"));
}

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

namespace {
#if defined(__x86_64__) || defined(__i386__)
__attribute__((target("avx2,f16c"))) void HalfToFloatF16c(const uint16_t* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}
#endif
}  // namespace

void HalfToFloatRow(const uint16_t* src, float* dst, int64_t n) {
#if defined(__x86_64__) || defined(__i386__)
  static const bool f16c = quant_internal::DotRowsKernel(quant_internal::DotIsa::kAvx2) != nullptr;
  if (f16c) return HalfToFloatF16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = HalfToFloat(src[i]);
}

bool UsesInt8Activations(GgmlType type) {
  switch (type) {
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::Q8_0: case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K:
    case GgmlType::Q5_K: case GgmlType::Q6_K:
      return true;
    default:
      return false;
  }
}

int Int8ActBlock(GgmlType type) { return quant_internal::IsKQuant(type) ? 256 : 32; }

size_t Int8ActRowBytes(GgmlType type, int64_t n) {
  return quant_internal::GetInt8ActLayout(n, quant_internal::IsKQuant(type)).bytes;
}

namespace {
// Round half to even of |v| <= 2^22 by the float magic number (exact, no libm,
// vectorizable with any SSE level).
inline float RoundEven(float v) {
  constexpr float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float r = (v + kMagic) - kMagic;
  return r;
}

// One block of `bs` values: d = amax/127, q = round(x * 127/amax).
template <int bs>
inline float QuantBlock(const float* x, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < bs; ++i) {
    const float a = std::fabs(x[i]);
    amax = a > amax ? a : amax;
  }
  if (!(amax > 0.0f) || !std::isfinite(amax)) {
    // Zeros give d = 0; inf/nan give a NaN scale that poisons the dot.
    std::memset(q, 0, static_cast<size_t>(bs));
    return amax == 0.0f ? 0.0f : std::numeric_limits<float>::quiet_NaN();
  }
  const float id = 127.0f / amax;
  for (int i = 0; i < bs; ++i) {
    float v = RoundEven(x[i] * id);
    v = v > 127.0f ? 127.0f : (v < -127.0f ? -127.0f : v);
    q[i] = static_cast<int8_t>(static_cast<int>(v));
  }
  return amax / 127.0f;
}
}  // namespace

// Plain float steps (no FMA: fp-contract is off in this file), so the clones
// give the same bytes.
#if defined(__GNUC__) && !defined(__clang__) && (defined(__x86_64__) || defined(__i386__))
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
void QuantizeInt8Activations(GgmlType type, const float* x, int64_t n, void* dst) {
  const bool kq = quant_internal::IsKQuant(type);
  const quant_internal::Int8ActLayout l = quant_internal::GetInt8ActLayout(n, kq);
  auto* base = static_cast<uint8_t*>(dst);
  auto* q = reinterpret_cast<int8_t*>(base);
  auto* d = reinterpret_cast<float*>(base + l.d_off);
  const int64_t nb = n / l.block;
  for (int64_t b = 0; b < nb; ++b)
    d[b] = kq ? QuantBlock<256>(x + b * l.block, q + b * l.block) : QuantBlock<32>(x + b * l.block, q + b * l.block);
  if (kq) {
    auto* bs = reinterpret_cast<int16_t*>(base + l.s_off);
    for (int64_t g = 0; g < n / 16; ++g) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += q[16 * g + i];
      bs[g] = static_cast<int16_t>(s);
    }
  } else {
    auto* s = reinterpret_cast<float*>(base + l.s_off);
    for (int64_t b = 0; b < nb; ++b) {
      int t = 0;
      for (int i = 0; i < 32; ++i) t += q[32 * b + i];
      s[b] = d[b] * static_cast<float>(t);
    }
  }
  const size_t end = l.s_off + (kq ? 2 * static_cast<size_t>(n / 16) : 4 * static_cast<size_t>(nb));
  std::memset(base + end, 0, l.bytes - end);  // padding: deterministic bytes
}

namespace {
quant_internal::DotRowsInt8Fn Int8Kernel() {
  static const quant_internal::DotRowsInt8Fn fn =
      quant_internal::DotRowsInt8Kernel(quant_internal::SelectedDotIsa());
  return fn;
}
}  // namespace

void DotRowsInt8(GgmlType type, const void* w, size_t row_bytes, int64_t n, int64_t row_begin,
                 int64_t row_end, const void* xq, size_t xq_stride, int64_t nx, float* y, int64_t ldy) {
  CheckDot(type, n);
  if (!Int8Kernel()(type, w, row_bytes, n, row_begin, row_end, xq, xq_stride, nx, y, ldy))
    Unsupported("DotRowsInt8", type);
}

}  // namespace specd
