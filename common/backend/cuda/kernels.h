// Host-side launchers for the CUDA backend's kernels. Plain C++ (no absl, no
// CUDA C++ syntax) so that both nvcc (the .cu files that define them) and the
// host compiler (cuda_backend.cc) can include it. Every launcher enqueues on
// `stream` and returns the launch error (cudaGetLastError), never blocks.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/gguf/ggml_types.h"
#include "common/quant/mmv_tiles.h"

namespace specd::cuda {

// ---- batch metadata (device addresses, fixed for a captured graph) ----
struct BatchDev {
  const int32_t* tokens = nullptr;     // [n_tokens]
  const int32_t* pos = nullptr;        // [n_tokens]
  const int32_t* seq = nullptr;        // [n_tokens] index into the batch's sequences
  const int32_t* out_rows = nullptr;   // [n_out]
  const int32_t* kv_len = nullptr;     // [n_seqs]
  const int32_t* blocks = nullptr;     // [n_seqs][bt_stride] block tables
  int n_tokens = 0, n_out = 0, n_seqs = 0, bt_stride = 0;
};

// One layer of the paged KV cache.
struct KvDev {
  uint8_t* k = nullptr;  // this layer's K blocks
  uint8_t* v = nullptr;
  GgmlType type = GgmlType::F16;
  int block_size = 16;
  size_t block_bytes = 0;  // one block of one layer
  size_t row_bytes = 0;    // one head's row (head_dim elements)
};

// ---- elementwise / row ops ----
// Float embeddings; quantized ones are packed: LaunchDequantPacked with the tokens as row ids.
cudaError_t LaunchEmbed(GgmlType type, const void* emb, int64_t ne0, const BatchDev& b, float* out, cudaStream_t s);
// out may equal x. add != nullptr: x += add first (x is updated in place).
// xq != nullptr: also writes the quantized activations of `out` (as
// LaunchQuantizeX(out, rows, dim, xq) would). counters: `rows` ints at zero
// (left at zero), needed when add != nullptr or out == x.
cudaError_t LaunchRmsNorm(float* x, const float* add, const float* w, float eps, int rows, int dim, float* out,
                          void* xq, int* counters, cudaStream_t s);
// RoPE of up to two tensors (q and k) in one launch, each optionally
// RMS-normalised per head first (qwen3's q/k norms).
struct RopeSeg {
  float* x = nullptr;
  int n_heads = 0;
  const float* norm = nullptr;  // head_dim weights, or null
};
// With kv_write (k_seg >= 0): segment k_seg is K, and the launch also stores
// its rotated rows and v's rows in the KV cache, as LaunchKvWrite would (one
// launch fewer per layer).
struct RopeKvWrite {
  KvDev kv;
  const float* v = nullptr;
  int k_seg = -1;
};
cudaError_t LaunchRope(const RopeSeg* segs, int n_segs, int head_dim, int n_dims, bool neox, float eps,
                       const double* inv_freq, const BatchDev& b, const RopeKvWrite& kv_write, cudaStream_t s);
// n rows of dim; xq as for LaunchRmsNorm.
cudaError_t LaunchSwiGLU(const float* gate, const float* up, int n, int dim, float* out, void* xq, cudaStream_t s);
cudaError_t LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t s);
cudaError_t LaunchGather(const float* x, int dim, const BatchDev& b, float* out, cudaStream_t s);
cudaError_t LaunchAddBias(float* y, const float* bias, int n, int rows, int64_t ldy, cudaStream_t s);

// ---- matmul (k_matvec.cu) ----
// Quantized matrices are stored in the mmv tile layout (common/quant/
// mmv_tiles.h), packed on the device from GGUF rows at load.
bool MmvSupported(GgmlType type);
size_t MmvPackedBytes(GgmlType type, int64_t rows, int64_t k);
// Packs tiles [tile0, tile0 + ntiles) of a rows x k GGUF matrix; `gguf`
// holds its rows from tile0 * 16 on (row_bytes each).
cudaError_t LaunchPack(GgmlType type, const void* gguf, size_t row_bytes, int64_t rows, int64_t k, int64_t tile0,
                       int64_t ntiles, void* packed, cudaStream_t s);
// Activations for the matvec: x (n columns of k floats) -> XQuantBytes(n, k).
size_t XQuantBytes(int n, int64_t k);
cudaError_t LaunchQuantizeX(const float* x, int n, int64_t k, void* xq, cudaStream_t s);

// Up to kMmvMaxMats matrices of one type and K that read the same activations
// (q/k/v, gate/up) go in one launch. y_i[c * rows_i + r] = W_i[r] . x_c
// (+ bias_i[r]) for c < n <= kMmvMaxCols; xq: the records of these n columns
// (LaunchQuantizeX output, advanced by kMmvMaxCols-column groups for larger n). The
// split of each tile's groups over warps (MmvPlan) depends on the shapes and
// the device only, never on n: each column's result is bit-identical whatever
// n is.
constexpr int kMmvMaxMats = 3;
// Columns per launch: up to 16 the per-tile kernels (a block a tile, its
// warps splitting the groups), 17-32 the wide one (a block a run of tiles
// sharing each group's activation records in shared memory, the plan's parts
// across blocks, folded through MmvScratch).
constexpr int kMmvMaxCols = 32;
// Matmuls up to this many columns use these batch-invariant kernels (beyond:
// dequantized F16 tiles and cuBLAS; prompts through wide passes were slower,
// round 26 call W).
constexpr int kMmvMaxN = 64;
struct MmvMatrix {
  const void* w;  // packed
  int64_t rows;
  const float* bias;
  float* y;
};
// The wide kernel's partial sums and the counters that find the last of a
// tile range's blocks (zeroed once; kernels leave them at zero).
struct MmvScratch {
  float* part = nullptr;
  size_t part_bytes = 0;
  int* counter = nullptr;
  size_t counters = 0;
};
mmv::Plan MmvPlan(GgmlType type, int64_t tiles, int64_t k);  // tiles: of all the launch's matrices
size_t MmvScratchBytes(GgmlType type, int64_t tiles, int64_t k);
size_t MmvScratchCounters(int64_t tiles);
bool MmvWide(int n);  // a launch of n columns runs the wide kernel
cudaError_t LaunchMmv(GgmlType type, const MmvMatrix* mats, int n_mats, int64_t k, const void* xq, int n,
                      const MmvScratch& scratch, cudaStream_t s);
// Dequantizes packed rows to F16 or F32, `ld` elements apart in dst: rows
// r0 .. r0 + nrows, or row_ids[0 .. nrows) when row_ids is set (device array).
cudaError_t LaunchDequantPacked(GgmlType type, const void* packed, int64_t k, const int32_t* row_ids, int64_t r0,
                                int64_t nrows, void* dst, int64_t ld, bool to_f16, cudaStream_t s);

// Prompt products (more than kMmvMaxN columns) on packed Q4_K / Q5_K / Q6_K
// tiles, k a multiple of 256 (QGemmSupported): F16 activations x16 (n x k),
// their 32-element unit sums (LaunchUnitSums), FP32 sums; a matrix of few row
// blocks splits its groups into parts through `part` (QGemmPartBytes of its
// plan).
struct QGemmShape {
  int row_blocks = 0, col_blocks = 0, parts = 1;
  int64_t gpp = 0;  // groups a part
};
bool QGemmSupported(GgmlType type, int64_t k);
QGemmShape QGemmPlan(GgmlType type, int64_t rows, int64_t k, int n);
size_t QGemmPartBytes(const QGemmShape& p, int64_t rows, int n);
cudaError_t LaunchUnitSums(const void* x16, int64_t count, void* sums, cudaStream_t s);
cudaError_t LaunchQGemm(GgmlType type, const void* packed, int64_t rows, int64_t k, const void* x16, const void* xsum,
                        int n, float* y, int64_t ldy, float* part, size_t part_cap, cudaStream_t s);

// Float weights (F16, BF16, F32): FP32 FMA kernel, n <= 16 columns.
bool FmvSupported(GgmlType type);
cudaError_t LaunchFmv(GgmlType type, const void* w, int64_t rows, int64_t k, const float* x, int64_t ldx, int n,
                      const float* bias, float* y, int64_t ldy, cudaStream_t s);

// Float weights (F32, F16, BF16): rows [r0, r0 + nrows) to F16 (dst: nrows x
// k) or F32. (Quantized matrices: LaunchDequantPacked.)
cudaError_t LaunchDequantRows(GgmlType type, const void* w, size_t row_bytes, int64_t r0, int64_t nrows, int64_t k,
                              void* dst, bool to_f16, cudaStream_t s);
// x (n x k floats) -> F16, saturating at +-65504.
cudaError_t LaunchToHalf(const float* x, int64_t count, void* dst, cudaStream_t s);

// ---- KV cache and attention ----
cudaError_t LaunchKvWrite(const float* k, const float* v, int n_kv_heads, int head_dim, const KvDev& kv,
                          const BatchDev& b, cudaStream_t s);

constexpr int kAttnSplit = 128;  // default positions per split (fixed per process: batch invariance)
constexpr int kAttnSub = 32;     // positions per inner step
struct AttnTile {
  int32_t seq, t0, nt;  // tokens t0 .. t0+nt-1 of sequence `seq`
};
struct AttnPlan {
  int kernel = 1;      // 1: FP32 shared-memory kernel, 2: tensor-core kernel (AttnKernelFor)
  int rows_max = 0;    // query rows per block (tile tokens x heads of the group chunk)
  int tile_tokens = 0;
  int group = 0;       // n_heads / n_kv_heads
  int gchunk = 0;      // heads of the group per block
  int n_gchunks = 0;
  int max_splits = 0;  // grid z (from the block-table stride)
  int split_len = kAttnSplit;
  int mtiles = 1;      // kernel 2: 16-row m-tiles a block, their warps sharing each chunk's K/V rows (1 or 2)
};
int AttnRowsMax(int head_dim);  // from the device's shared memory
// Attention kernel version (Tuning::attn_kernel; plans are built per batch):
// 2 (default) = tensor-core split kernel
// (mma.sync F16 with Q and P as hi/lo F16 pairs, 16-row query m-tiles, one or
// two a block, one warp per 32 positions of a split and m-tile), for F16
// and Q8_0 KV with head_dim 32/64/128/256 and split_len <= 256 when its shared
// memory fits; everything else, or everything with attn_kernel = 1, runs v1
// (FP32 shared-memory dots). Both write per-split partials that one merge
// kernel combines in split order; both are batch-invariant and differ from
// each other in rounding.
constexpr int kAttnV2Rows = 16;
int AttnKernelFor(GgmlType kv_type, int head_dim, int split_len);  // 1 or 2
size_t AttnV2SmemBytes(GgmlType kv_type, int head_dim, int split_len, int mtiles = 1);
// Kernel 2's m-tiles a block (AttnPlan::mtiles) for tiles of up to `rows` query rows: 1 or 2.
int AttnMtilesFor(GgmlType kv_type, int head_dim, int split_len, int rows);
size_t AttnSmemBytes(int rows, int head_dim);
// One wave: tiles [tile0, tile1) whose tokens are [tok0, tok1): the split
// kernel (plan.kernel) writes each split's partial, a merge kernel merges
// them into `out` and, when xq is not null, writes its quantized activations
// too (as LaunchQuantizeX(out, n_tokens, n_heads * head_dim) would).
cudaError_t LaunchAttention(const float* q, const KvDev& kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const BatchDev& b, const AttnTile* tiles_dev, int tile0, int tile1, int tok0, int tok1,
                            const AttnPlan& plan, float* partials, float* out, void* xq, cudaStream_t s);
size_t AttnPartialFloats(int n_tok, int n_heads, int head_dim, int max_splits);

// ---- random weights ----
// Fills rows [row0, row0 + ne1) of a GGUF matrix of `type` (ne0 per row) at
// dst with block_random.h's valid random blocks (seed, sigma: SyntheticWeightFor;
// mean added to F32 values), the bytes the CPU backend makes for the same
// weight; a matrix filled in pieces equals one filled at once.
cudaError_t LaunchRandomFill(GgmlType type, void* dst, int64_t ne0, int64_t row0, int64_t ne1, uint64_t seed,
                             float sigma, float mean, cudaStream_t s);

// Raises the dynamic shared-memory limits of the kernels that need more than
// 48 KB and reads the occupancies the launch plans use; called once at
// backend creation (never during graph capture).
cudaError_t PrepareMatvecKernels();
// Whether the wgmma matvec can run here for weights of this type (Q4_K / Q5_K with sm_90a code for this
// device; after PrepareMatvecKernels).
bool MatvecWgmmaRuns(GgmlType type);
// Whether a launch of n columns over `rows` rows (all its matrices) takes it, with the tuning as set now.
bool MatvecWgmmaTakes(GgmlType type, int n, int64_t rows);
cudaError_t PrepareAttentionKernels();
cudaError_t PrepareMiscKernels();

// ---- speculative sampling (k_sample.cu) and acceptance (k_accept.cu) ----
// What Backend::Sample and Backend::Accept record: plain structs written into
// the batch metadata (so captured graphs replay with new parameters), device
// addresses as 64-bit integers (0: none). Meta offsets are int32 indices.

// One logits row to process by the sampler's rule (common/sampler).
struct SampleRowDev {
  uint64_t seed = 0, stream = 0, counter = 0;  // Uniform01(seed, stream, counter)
  uint64_t recent_dev = 0;  // const int32_t*: n_recent_dev tokens after the meta ones (penalty window)
  uint64_t token = 0;       // int32_t*: the token drawn (greedy: the argmax)
  uint64_t confidence = 0;  // float*: Confidence() (sampler.h)
  uint64_t probs = 0;       // float*: the processed distribution, vocab floats
  float temperature = 0, top_p = 1, min_p = 0, rep_penalty = 1;
  int32_t top_k = 0, rep_window = 0, row = 0, greedy = 0;
  int32_t recent_off = 0, n_recent = 0, n_recent_dev = 0, unused = 0;
};
static_assert(sizeof(SampleRowDev) % 8 == 0);

// A token of the batch read from device memory when the batch runs.
struct FeedDev {
  uint64_t src = 0;  // const int32_t*
  int32_t index = 0, unused = 0;
};

// One sequence's acceptance against processed target rows (SampleRowDev
// outputs): dense p rows (sampled) or their argmaxes (greedy).
struct AcceptSeqDev {
  uint64_t seed = 0;
  int64_t pos0 = 0;
  uint64_t q = 0;       // const float*: k dense draft rows; 0: one-hot at the proposals
  uint64_t p = 0;       // const float*: k+1 dense target rows (sampled)
  uint64_t argmax = 0;  // const int32_t*: k+1 target argmaxes (greedy)
  uint64_t out = 0;     // int32_t*: {n_accepted, next_token, bonus}
  int32_t k = 0, greedy = 0, proposals_off = 0, unused = 0;
};
static_assert(sizeof(AcceptSeqDev) % 8 == 0);

// One block per row. Rows may be modified in place (the repetition penalty).
cudaError_t LaunchSampleRows(float* logits, int vocab, const SampleRowDev* rows, int n_rows, const int32_t* meta,
                             cudaStream_t s);
// tokens[feeds[i].index] = *feeds[i].src.
cudaError_t LaunchFeed(int32_t* tokens, const FeedDev* feeds, int n, cudaStream_t s);
// One block per sequence.
cudaError_t LaunchAcceptSeqs(const AcceptSeqDev* seqs, int n, int vocab, const int32_t* meta, cudaStream_t s);
// The acceptance rule on dense p (k+1 rows) and q (k rows; null: one-hot at
// the proposals); out_dev[0..2] = {n_accepted, next_token, bonus}.
cudaError_t LaunchAccept(const float* p, const float* q, const int32_t* proposals, int k, int vocab, uint64_t seed,
                         int64_t pos0, int32_t* out_dev, cudaStream_t s);

// ---- device properties cached once ----
struct DeviceInfo {
  int sm_count = 0;
  int smem_optin = 48 * 1024;  // max dynamic shared memory per block
  int cc_major = 0, cc_minor = 0;
};
void SetDeviceInfo(const DeviceInfo& d);
const DeviceInfo& GetDeviceInfo();

// ---- tuning: process-wide, set once at backend creation (logged there) ----
// None of these changes results except attn_kernel and attn_split (other
// summation orders; both are batch-invariant) and qgemm_max_n (prompts'
// products, which no decode or verify has to reproduce).
struct Tuning {
  bool pdl = true;              // programmatic dependent launch between kernels (sm_90)
  int attn_kernel = 2;          // 2: tensor-core split kernel where it applies, 1: FP32 everywhere
  int attn_split = kAttnSplit;  // positions per attention split (multiple of 32)
  int qgemm_max_n = 256;        // prompt chunks up to this many tokens on k-quant tiles: LaunchQGemm (0: never)
  // Q4_K / Q5_K products of wgmma_min_cols..wgmma_max_cols columns on the
  // wgmma kernel where sm_90a code runs (0, 0: never; below 17 columns only
  // on 4096 rows or more). Round 43 (H100, two stages a block, four blocks an
  // SM): at 30 columns 6-14% faster than the mma.sync wide kernel on every
  // matrix of the 27B shape, at 24 4-18%, at 9-16 7-22% on the ones of 4096
  // rows or more; at 1-8 slower.
  int wgmma_min_cols = 9, wgmma_max_cols = 32;
};
void SetTuning(const Tuning& t);
const Tuning& GetTuning();

}  // namespace specd::cuda
