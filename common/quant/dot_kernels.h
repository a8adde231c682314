// Internal to common/quant (and its tests/benchmarks): the per-ISA builds of the
// dot-product kernels behind DotRow/DotRowsBatched.
//
// Every ISA variant is the same source (dot_kernels.inc) compiled under a
// different target; the process picks one at first use (SelectedDotIsa) and
// keeps it, so all dots of a process come from one variant. AVX2 and AVX-512
// give bit-identical results (same 16-lane accumulation tree, same FMAs); SSE2
// (no FMA: multiply then add) and portable (scalar decode) differ from those in
// the last bits but are self-consistent.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/gguf/ggml_types.h"

namespace specd::quant_internal {

// kAvxVnni and kAvx512Vnni differ from kAvx2 / kAvx512 only in the integer
// kernels (vpdpbusd); their float kernels are the AVX2 / AVX-512 ones.
enum class DotIsa : int { kPortable = 0, kSse2 = 1, kAvx2 = 2, kAvx512 = 3, kAvxVnni = 4, kAvx512Vnni = 5 };
constexpr DotIsa kAllDotIsas[] = {DotIsa::kPortable, DotIsa::kSse2,    DotIsa::kAvx2,
                                  DotIsa::kAvx512,   DotIsa::kAvxVnni, DotIsa::kAvx512Vnni};

// Same contract as specd::DotRowsBatched.
using DotRowsFn = void (*)(GgmlType type, const void* w, size_t row_bytes, int64_t n,
                           int64_t row_begin, int64_t row_end, const float* x, int64_t ldx,
                           int64_t nx, float* y, int64_t ldy);

// Same contract as specd::DotRowsInt8; false for a type without an integer kernel.
using DotRowsInt8Fn = bool (*)(GgmlType type, const void* w, size_t row_bytes, int64_t n,
                               int64_t row_begin, int64_t row_end, const void* xq,
                               size_t xq_stride, int64_t nx, float* y, int64_t ldy);

// The kernel of one ISA, or nullptr when this build or this CPU lacks it.
DotRowsFn DotRowsKernel(DotIsa isa);
DotRowsInt8Fn DotRowsInt8Kernel(DotIsa isa);
// The best ISA this CPU supports (decided once per process).
DotIsa SelectedDotIsa();
const char* DotIsaName(DotIsa isa);

// Entry points, one per translation unit (dot_<isa>.cc). Only call through
// DotRowsKernel(), which checks the CPU.
void DotRowsPortable(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                     int64_t, int64_t, float*, int64_t);
bool DotRowsInt8Portable(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const void*,
                         size_t, int64_t, float*, int64_t);
#if defined(__x86_64__) || defined(__i386__)
bool DotRowsInt8Sse2(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const void*, size_t,
                     int64_t, float*, int64_t);
bool DotRowsInt8Avx2(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const void*, size_t,
                     int64_t, float*, int64_t);
bool DotRowsInt8Avx512(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const void*,
                       size_t, int64_t, float*, int64_t);
bool DotRowsInt8AvxVnni(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const void*,
                        size_t, int64_t, float*, int64_t);
bool DotRowsInt8Avx512Vnni(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const void*,
                           size_t, int64_t, float*, int64_t);
void DotRowsSse2(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                 int64_t, int64_t, float*, int64_t);
void DotRowsAvx2(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                 int64_t, int64_t, float*, int64_t);
void DotRowsAvx512(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                   int64_t, int64_t, float*, int64_t);
#endif

// Layout of one quantized activation row of n elements (see
// QuantizeInt8Activations): int8 q[n] at 0, float d[n / block] at d_off, then
// at s_off either float s[n / 32] (legacy: d * sum of the block's q) or
// int16 bsum[n / 16] (k-quants: sums of 16 q). bytes: the row stride (a
// multiple of 64).
struct Int8ActLayout {
  int block;
  size_t d_off, s_off, bytes;
};
inline Int8ActLayout GetInt8ActLayout(int64_t n, bool kquant) {
  Int8ActLayout l;
  l.block = kquant ? 256 : 32;
  const size_t nb = static_cast<size_t>(n / l.block);
  l.d_off = static_cast<size_t>(n);
  l.s_off = l.d_off + 4 * nb;
  const size_t end = l.s_off + (kquant ? 2 * static_cast<size_t>(n / 16) : 4 * nb);
  l.bytes = (end + 63) & ~size_t{63};
  return l;
}
inline bool IsKQuant(GgmlType t) {
  return t == GgmlType::Q2_K || t == GgmlType::Q3_K || t == GgmlType::Q4_K || t == GgmlType::Q5_K ||
         t == GgmlType::Q6_K;
}

}  // namespace specd::quant_internal
