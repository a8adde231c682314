// Block formats: dequantization exactly as ggml defines it, quantization from
// F32, and the dot products the CPU backend runs directly on quantized rows.
//
// Per-block dequantizers are SPECD_HD (block_dequant.h) so the CUDA backend
// decodes blocks with the very same code.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string_view>

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

// Random valid blocks (block_random.h: values of mean ~0 and deviation ~sigma)
// for blocks [first, first + n) of a tensor of `type`, written at `dst`
// (which holds block `first`). A block of F32/F16/BF16 is one element. Every
// type CanQuantize accepts; an error for the others.
absl::Status RandomBlocks(GgmlType type, void* dst, int64_t first, int64_t n, uint64_t seed, float sigma);

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

// ---- Integer path: quantized weights x int8 activations (what the CPU
// backend's MatMul runs for the quantized block formats, as llama.cpp does) ----
//
// Each input row is quantized once (QuantizeInt8Activations), then every dot
// is integer arithmetic (exact) combined in float in one fixed order, so the
// result is bit-identical on every ISA build (VNNI, AVX2, scalar) and for any
// batch size or row range. The price is the activation rounding: a relative
// error of ~1e-3..1e-2 per dot against the float path above.

// True for the quantized block formats (Q4_0 ... Q6_K); F32/F16/BF16 keep the
// float path.
bool UsesInt8Activations(GgmlType type);
// Row stride (bytes, a multiple of 64) of quantized activations of n elements
// for weights of `type` (n a multiple of the type's block size).
size_t Int8ActRowBytes(GgmlType type, int64_t n);
// Elements per activation block for weights of `type`: 32 (legacy) or 256 (k-quants).
int Int8ActBlock(GgmlType type);
// Quantizes x[0..n) for weights of `type` into Int8ActRowBytes(type, n) bytes at
// dst: per block of 32 (legacy formats) or 256 (k-quants) a float scale
// d = amax/127 and int8 q = round-half-even(x * 127/amax), plus block sums.
// Plain float code compiled once: the same bytes on every CPU.
void QuantizeInt8Activations(GgmlType type, const float* x, int64_t n, void* dst);
// y[j*ldy + r] = dot(W_r, xq_j) for r in [row_begin, row_end), j < nx, where
// xq_j = xq + j * xq_stride holds QuantizeInt8Activations output.
void DotRowsInt8(GgmlType type, const void* w, size_t row_bytes, int64_t n, int64_t row_begin,
                 int64_t row_end, const void* xq, size_t xq_stride, int64_t nx, float* y, int64_t ldy);

// dst[i] = half src[i] as float (exact), F16C where the CPU has it.
void HalfToFloatRow(const uint16_t* src, float* dst, int64_t n);

// The kernel build DotRow/DotRowsBatched use on this CPU, chosen once per
// process: "avx512vnni", "avx512", "avxvnni", "avx2", "sse2" or "portable". AVX-512 and AVX2 give
// bit-identical dots; the FMA-less ones differ from them in the last bits.
const char* DotKernelName();
// Chooses that build by name for the process instead ("auto": the default
// choice): before the first dot product. An unknown name, one this CPU or
// build lacks, or another choice after the kernels were picked is an error.
absl::Status SetDotKernel(std::string_view name);

}  // namespace specd
