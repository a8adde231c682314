// Host-side launchers for the CUDA backend's kernels. Plain C++ (no absl, no
// CUDA C++ syntax) so that both nvcc (the .cu files that define them) and the
// host compiler (cuda_backend.cc) can include it. Every launcher enqueues on
// `stream` and returns the launch error (cudaGetLastError), never blocks.
#pragma once
#include <cstddef>
#include <cstdint>

#include <cuda_runtime_api.h>

#include "common/gguf/ggml_types.h"

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

// ---- elementwise / row ops ----
cudaError_t LaunchEmbed(GgmlType type, const void* emb, int64_t ne0, const BatchDev& b, float* out, cudaStream_t s);
// out may equal x. add != nullptr: x += add first (x is updated in place).
// xq != nullptr: also writes the quantized activations of `out` (as
// LaunchQuantizeX(out, rows, dim, xq) would; requires dim % 32 == 0).
cudaError_t LaunchRmsNorm(float* x, const float* add, const float* w, float eps, int rows, int dim, float* out,
                          void* xq, cudaStream_t s);
// RoPE of up to two tensors (q and k) in one launch, each optionally
// RMS-normalised per head first (qwen3's q/k norms).
struct RopeSeg {
  float* x = nullptr;
  int n_heads = 0;
  const float* norm = nullptr;  // head_dim weights, or null
};
cudaError_t LaunchRope(const RopeSeg* segs, int n_segs, int head_dim, int n_dims, bool neox, float eps,
                       const double* inv_freq, const BatchDev& b, cudaStream_t s);
// n rows of dim; xq as for LaunchRmsNorm.
cudaError_t LaunchSwiGLU(const float* gate, const float* up, int n, int dim, float* out, void* xq, cudaStream_t s);
cudaError_t LaunchAdd(float* x, const float* y, int64_t n, cudaStream_t s);
cudaError_t LaunchGather(const float* x, int dim, const BatchDev& b, float* out, cudaStream_t s);
cudaError_t LaunchAddBias(float* y, const float* bias, int n, int rows, int64_t ldy, cudaStream_t s);

// ---- matmul ----
// Quantized activations for the integer tensor-core path: per column group of
// 16 columns, per 32-element unit u: 16 columns x 32 bytes (int8 hi, lo
// interleaved as the fragments want them) + per column {scale/254, sum32} +
// per column {sum16 of each half}. See k_matvec.cu.
size_t XQuantBytes(int n, int64_t k);
cudaError_t LaunchQuantizeX(const float* x, int n, int64_t k, void* xq, cudaStream_t s);

// Up to kMmqMaxMats matrices of one type and K that read the same
// activations (q/k/v, gate/up) go in one launch. The row blocking and the
// K-split depend on the shapes and the device only, never on the number of
// columns (batch invariance); with a K-split > 1, blocks write partials
// (part: ksplit x 16 x part_rows floats) and the last block of each row block
// sums them in split order (counters: one int per row block, zero before the
// first launch; the kernel leaves them zero).
//
// Three kernels: v2 streams Q4_K, Q5_K, Q6_K and Q8_0 weights with
// K % 256 == 0 straight into MMA registers (128 rows per block); v3 (default)
// is v2 with the weight stream in a per-warp cp.async ring in shared memory
// (same blocking, same arithmetic: bit-identical to v2); v1 (all other cases,
// or everything after SetMmqKernel(1)) stages them through shared memory.
// The choice depends on the type and K only.
constexpr int kMmqMaxMats = 3;
struct MmqMatrix {
  const void* w;
  size_t row_bytes;
  int64_t rows;
  const float* bias;
  float* y;  // n x rows
};
bool MmqSupported(GgmlType type, int64_t rows, int64_t k, size_t row_bytes);
int MmqRowBlocks(GgmlType type, int64_t rows, int64_t k);
int64_t MmqPartRows(GgmlType type, int64_t rows, int64_t k);  // rows of the partials' row space taken by a matrix
int MmqKSplit(GgmlType type, int row_blocks, int64_t k);
// Tuning knobs, process-wide. Changing the K-split target or v1 vs v2/v3
// changes summation orders: set them once, before any batch is recorded.
// Blocks per multiprocessor that MmqKSplit aims for (default 8;
// SPECD_CUDA_MMQ_BPS=N at start-up); kernel version (3 default, 2 = v2, 1 =
// the shared-memory kernel for every type; SPECD_CUDA_MMQ=1/2/3 at
// start-up); v2/v3's L2 prefetch two groups ahead (default off: slower on the
// H200; does not change results).
void SetMmqBlocksPerSm(int n);
int GetMmqBlocksPerSm();
void SetMmqKernel(int version);  // 1, 2 or 3 (SPECD_CUDA_MMQ=1/2/3 at start-up; default 3)
int GetMmqKernel();
void SetMmqPrefetch(bool on);
// v3 ring slots per warp (stages of 128 elements; depth - 1 in flight while
// one is computed): 0 = automatic (depth 2 for Q6_K where it keeps v2's
// occupancy, v2 for every other type: measured on the H200), N = forced for
// every type (SPECD_CUDA_MV3_DEPTH=N at start-up; clamped to 2..8 and to what
// fits one block). Does not change results.
void SetMmqDepth(int depth);
int GetMmqDepth(GgmlType type, int n);  // the depth v3 runs with (0: v3 cannot run it, v2 does)
// Resident blocks per SM of the v2/v3 launch for (type, n) under the current
// settings (occupancy API, after a backend was created; 0 if unknown).
int GetMmqResidentBlocks(GgmlType type, int n);
void SetMmqL2Hint(bool on);             // v3 cp.async with .L2::128B (default off; same results)
// v3 Q4_K/Q5_K/Q6_K: fill the ring with 16-byte cp.async.cg copies shared by
// each row's 4 lanes (L1 bypassed, 2x (Q4_K) to 4.5x (Q6_K) fewer copies; a
// __syncwarp after each wait) instead of each lane's own 8-byte (Q6_K: 4-byte)
// cp.async.ca pieces (default on; SPECD_CUDA_MV3_COPY16=0 at start-up turns it
// off; same results).
void SetMmqCopy16(bool on);
bool GetMmqCopy16();
// v3 persistent blocks: resident blocks x SMs, each looping over the same
// (row block, K-split part) work items with the ring running on into the
// next item (default off; SPECD_CUDA_MV3_PERSIST=1; same results).
void SetMmqPersistent(bool on);
bool GetMmqPersistent();
// Bumped by every setter above: part of the CUDA graph key, so a captured
// graph never replays a launch made with other settings.
int MmqConfigGeneration();
// y_i[c * rows_i + r] = W_i[r] . x_c (+ bias_i[r]) for c < n <= 16; xq: the
// column group holding these n columns (LaunchQuantizeX layout).
cudaError_t LaunchMmq(GgmlType type, const MmqMatrix* mats, int n_mats, int64_t k, const void* xq, int n, int ksplit,
                      float* part, int64_t part_rows, int* counters, cudaStream_t s);

// Float weights (F16, BF16, F32): FP32 FMA kernel, n <= 16 columns.
bool FmvSupported(GgmlType type);
cudaError_t LaunchFmv(GgmlType type, const void* w, int64_t rows, int64_t k, const float* x, int64_t ldx, int n,
                      const float* bias, float* y, int64_t ldy, cudaStream_t s);

// Dequantizes rows [r0, r0 + nrows) to F16 (dst: nrows x k) or F32.
cudaError_t LaunchDequantRows(GgmlType type, const void* w, size_t row_bytes, int64_t r0, int64_t nrows, int64_t k,
                              void* dst, bool to_f16, cudaStream_t s);
// x (n x k floats) -> F16, saturating at +-65504.
cudaError_t LaunchToHalf(const float* x, int64_t count, void* dst, cudaStream_t s);

// ---- KV cache and attention ----
struct KvDev {
  uint8_t* k = nullptr;  // this layer's K blocks
  uint8_t* v = nullptr;
  GgmlType type = GgmlType::F16;
  int block_size = 16;
  size_t block_bytes = 0;  // one block of one layer
  size_t row_bytes = 0;    // one head's row (head_dim elements)
};
cudaError_t LaunchKvWrite(const float* k, const float* v, int n_kv_heads, int head_dim, const KvDev& kv,
                          const BatchDev& b, cudaStream_t s);

constexpr int kAttnSplit = 128;  // default positions per split (fixed per process: batch invariance)
constexpr int kAttnSub = 32;     // positions per inner step
// Positions per split (a multiple of 32); set once, before any batch is recorded.
void SetAttnSplit(int positions);
int GetAttnSplit();
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
};
int AttnRowsMax(int head_dim);  // from the device's shared memory
// Attention kernel version, process-wide (set once, before any batch is
// recorded; plans are built per batch): 2 (default) = tensor-core split kernel
// (mma.sync F16 with Q and P as hi/lo F16 pairs, <= 16 query rows per block,
// one warp per 32 positions of a split) + parallel fixed-order combine, for F16
// and Q8_0 KV with head_dim 32/64/128/256 and split_len <= 256 when its shared
// memory fits; everything else, or everything after SetAttnKernel(1) /
// SPECD_CUDA_ATTN=1 at start-up, runs v1 (FP32 shared-memory dots, serial
// combine). Both are batch-invariant; they differ from each other in rounding.
constexpr int kAttnV2Rows = 16;
void SetAttnKernel(int version);
int GetAttnKernel();
int AttnKernelFor(GgmlType kv_type, int head_dim, int split_len);  // 1 or 2
size_t AttnV2SmemBytes(GgmlType kv_type, int head_dim, int split_len);
size_t AttnSmemBytes(int rows, int head_dim);
// One wave: tiles [tile0, tile1) whose tokens are [tok0, tok1). xq: also
// quantize the output rows for the next matvec (head_dim % 32 == 0).
cudaError_t LaunchAttention(const float* q, const KvDev& kv, int n_heads, int n_kv_heads, int head_dim, float scale,
                            const BatchDev& b, const AttnTile* tiles_dev, int tile0, int tile1, int tok0, int tok1,
                            const AttnPlan& plan, float* partials, float* out, void* xq, cudaStream_t s);
size_t AttnPartialFloats(int n_tok, int n_heads, int head_dim, int max_splits);

// ---- random weights ----
// Fills `nbytes` of weight data of `type` with valid random blocks (finite,
// moderate values), deterministic from `seed`. kind: 0 matrix (std ~ 1/sqrt(ne0)),
// 1 embedding (std ~ 1), 2 norm (around 1), 3 bias (small).
cudaError_t LaunchRandomFill(GgmlType type, void* dst, int64_t ne0, int64_t ne1, int kind, uint64_t seed,
                             cudaStream_t s);

// Raises the dynamic shared-memory limits of the kernels that need more than
// 48 KB; called once at backend creation (never during graph capture).
cudaError_t PrepareMatvecKernels();
cudaError_t PrepareAttentionKernels();

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

}  // namespace specd::cuda
