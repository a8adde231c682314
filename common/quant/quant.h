// Block formats: dequantization exactly as ggml defines it, quantization from
// F32, and the dot products the CPU backend runs directly on quantized rows.
//
// Per-block dequantizers are SPECD_HD (block_dequant.h) so the CUDA backend
// decodes blocks with the very same code.
#pragma once
#include <cstddef>
#include <cstdint>

#include "common/gguf/ggml_types.h"
#include "common/util/status.h"

namespace specd {

// Dequantizes n elements (a multiple of the block size) of `type` at `src`.
// Supported: every type with traits.computable.
void DequantizeRow(GgmlType type, const void* src, float* dst, int64_t n);

// Quantizes n floats (multiple of block size) into `dst` (RowBytes(type, n) bytes).
// Supported targets: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q4_K,
// Q5_K, Q6_K (ggml's reference quantizers; deterministic). Error for other types.
absl::Status QuantizeRow(GgmlType type, const float* src, void* dst, int64_t n);
bool CanQuantize(GgmlType type);

// dot(row of `type` with n elements, x[0..n)) in float. Accumulation order
// depends only on n and the data, never on threading or batch size, so a
// batched matmul and a single matvec give bit-identical results per row.
float DotRow(GgmlType type, const void* row, const float* x, int64_t n);

// For each output row r in [row_begin, row_end) and each of the `nx` inputs
// x[j*ldx .. +n): y[j*ldy + r] = dot(W_r, x_j). The weight row is read once for
// all nx inputs. Each y value equals DotRow(...) bit for bit.
void DotRowsBatched(GgmlType type, const void* w, size_t row_bytes, int64_t n,
                    int64_t row_begin, int64_t row_end, const float* x, int64_t ldx, int64_t nx,
                    float* y, int64_t ldy);

// The kernel build DotRow/DotRowsBatched use on this CPU, chosen once per
// process: "avx512", "avx2", "sse2" or "portable". AVX-512 and AVX2 give
// bit-identical dots; the FMA-less ones differ from them in the last bits.
const char* DotKernelName();

}  // namespace specd
