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

enum class DotIsa : int { kPortable = 0, kSse2 = 1, kAvx2 = 2, kAvx512 = 3 };

// Same contract as specd::DotRowsBatched.
using DotRowsFn = void (*)(GgmlType type, const void* w, size_t row_bytes, int64_t n,
                           int64_t row_begin, int64_t row_end, const float* x, int64_t ldx,
                           int64_t nx, float* y, int64_t ldy);

// The kernel of one ISA, or nullptr when this build or this CPU lacks it.
DotRowsFn DotRowsKernel(DotIsa isa);
// The best ISA this CPU supports (decided once per process).
DotIsa SelectedDotIsa();
const char* DotIsaName(DotIsa isa);

// Entry points, one per translation unit (dot_<isa>.cc). Only call through
// DotRowsKernel(), which checks the CPU.
void DotRowsPortable(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                     int64_t, int64_t, float*, int64_t);
#if defined(__x86_64__) || defined(__i386__)
void DotRowsSse2(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                 int64_t, int64_t, float*, int64_t);
void DotRowsAvx2(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                 int64_t, int64_t, float*, int64_t);
void DotRowsAvx512(GgmlType, const void*, size_t, int64_t, int64_t, int64_t, const float*,
                   int64_t, int64_t, float*, int64_t);
#endif

}  // namespace specd::quant_internal
