#include "common/backend/cuda/cuda_backend.h"
#include "common/backend/host_sample.h"

#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/backend/cuda/kernels.h"
#include "common/quant/block_random.h"
#include "common/quant/mmv_tiles.h"
#include "common/util/log.h"

namespace specd {
namespace {

using cuda::AttnPlan;
using cuda::AttnTile;
using cuda::BatchDev;
using cuda::KvDev;

constexpr int kGraphMaxTokens = 64;  // batches replayed from CUDA graphs
constexpr int kGraphMinContext = 1024;  // tokens the block tables cover at least
constexpr size_t kMaxGraphs = 64;
constexpr size_t kWeightPad = 256;   // the float matvec reads whole 16-byte windows past a row's end
constexpr size_t kStageBytes = size_t{64} << 20;        // GGUF rows on their way to being packed
constexpr size_t kAttnPartialBudget = size_t{32} << 20; // split-K attention partials
constexpr size_t kCublasWorkspace = size_t{32} << 20;

std::string CudaErr(cudaError_t e) { return absl::StrCat(cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"); }

#define SPECD_CUDA_RETURN(expr, what)                                                               \
  do {                                                                                              \
    const cudaError_t e_ = (expr);                                                                  \
    if (e_ != cudaSuccess) return absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", CudaErr(e_))); \
  } while (0)


// ---- weight arena on CUDA virtual memory: committed = used rounded up to one page ----
class VmmArena {
 public:
  ~VmmArena() { Release(); }

  bool Init(int device) {
    auto get = [](const char* name, void** fn) {
      cudaDriverEntryPointQueryResult q{};
      return cudaGetDriverEntryPointByVersion(name, fn, 12000, cudaEnableDefault, &q) == cudaSuccess &&
             q == cudaDriverEntryPointSuccess && *fn != nullptr;
    };
    if (!get("cuMemCreate", reinterpret_cast<void**>(&create_)) ||
        !get("cuMemRelease", reinterpret_cast<void**>(&release_)) ||
        !get("cuMemAddressReserve", reinterpret_cast<void**>(&reserve_)) ||
        !get("cuMemAddressFree", reinterpret_cast<void**>(&free_)) ||
        !get("cuMemMap", reinterpret_cast<void**>(&map_)) || !get("cuMemUnmap", reinterpret_cast<void**>(&unmap_)) ||
        !get("cuMemSetAccess", reinterpret_cast<void**>(&access_)) ||
        !get("cuMemGetAllocationGranularity", reinterpret_cast<void**>(&gran_fn_)))
      return false;
    prop_.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop_.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop_.location.id = device;
    device_ = device;
    if (gran_fn_(&gran_, &prop_, CU_MEM_ALLOC_GRANULARITY_MINIMUM) != CUDA_SUCCESS || gran_ == 0) return false;
    size_t free_b = 0, total = 0;
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return false;
    reserved_ = (total + gran_ - 1) / gran_ * gran_;
    if (reserve_(&base_, reserved_, gran_, 0, 0) != CUDA_SUCCESS) {
      base_ = 0;
      return false;
    }
    return true;
  }

  // 256-byte aligned; maps more physical pages as needed.
  void* Alloc(size_t bytes, absl::Status* st) {
    const size_t off = (used_ + 255) / 256 * 256;
    const size_t end = off + bytes;
    if (end > mapped_) {
      const size_t need = (end - mapped_ + gran_ - 1) / gran_ * gran_;
      if (mapped_ + need > reserved_) {
        *st = absl::ResourceExhaustedError("weights exceed the device's memory");
        return nullptr;
      }
      CUmemGenericAllocationHandle h{};
      if (create_(&h, need, &prop_, 0) != CUDA_SUCCESS) {
        *st = absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", need, " bytes of device memory for weights"));
        return nullptr;
      }
      if (map_(base_ + mapped_, need, 0, h, 0) != CUDA_SUCCESS) {
        release_(h);
        *st = absl::InternalError("cuMemMap failed for the weight arena");
        return nullptr;
      }
      CUmemAccessDesc desc{};
      desc.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      desc.location.id = device_;
      desc.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      if (access_(base_ + mapped_, need, &desc, 1) != CUDA_SUCCESS) {
        unmap_(base_ + mapped_, need);
        release_(h);
        *st = absl::InternalError("cuMemSetAccess failed for the weight arena");
        return nullptr;
      }
      chunks_.push_back({h, need});
      mapped_ += need;
    }
    used_ = end;
    return reinterpret_cast<void*>(base_ + off);
  }

  size_t used() const { return used_; }
  size_t committed() const { return mapped_; }

  void Release() {
    size_t off = 0;
    for (auto& [h, size] : chunks_) {
      unmap_(base_ + off, size);
      release_(h);
      off += size;
    }
    chunks_.clear();
    if (base_) free_(base_, reserved_);
    base_ = 0;
    mapped_ = used_ = 0;
  }

 private:
  CUresult (*create_)(CUmemGenericAllocationHandle*, size_t, const CUmemAllocationProp*, unsigned long long) = nullptr;
  CUresult (*release_)(CUmemGenericAllocationHandle) = nullptr;
  CUresult (*reserve_)(CUdeviceptr*, size_t, size_t, CUdeviceptr, unsigned long long) = nullptr;
  CUresult (*free_)(CUdeviceptr, size_t) = nullptr;
  CUresult (*map_)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long) = nullptr;
  CUresult (*unmap_)(CUdeviceptr, size_t) = nullptr;
  CUresult (*access_)(CUdeviceptr, size_t, const CUmemAccessDesc*, size_t) = nullptr;
  CUresult (*gran_fn_)(size_t*, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) = nullptr;
  CUmemAllocationProp prop_{};
  int device_ = 0;
  CUdeviceptr base_ = 0;
  size_t gran_ = 0, reserved_ = 0, mapped_ = 0, used_ = 0;
  std::vector<std::pair<CUmemGenericAllocationHandle, size_t>> chunks_;
};

// ---- recorded ops ----
enum OpKind : int64_t {
  kEmbed = 1, kRmsNorm, kMatMul, kQuantX, kRope, kAttention, kSwiGLU, kAdd, kGather, kFeed, kSample, kAcceptSeqs
};
enum MmPath : int64_t { kPathMmv = 0, kPathFmv, kPathDequant, kPathGemm, kPathQGemm };

// All members 8 bytes wide: no padding, so records compare and hash as bytes.
struct OpRec {
  int64_t kind = 0;
  const void* p[12] = {};
  int64_t i[16] = {};
  double f[2] = {};
};
static_assert(sizeof(OpRec) == 8 * 31);

// MatMul records: p[0] w, p[1] bias, p[2] x, p[3] y, p[4] xq; i[0] type, i[1] K,
// i[2] rows, i[3] n, i[4] path, i[6] row bytes, i[7] matrices (mmv groups:
// matrix j > 0 in p[5+3(j-1)..] = {w, bias, y}, i[9+2(j-1)..] = {rows, row
// bytes}).
constexpr int kMmW[3] = {0, 5, 8}, kMmBias[3] = {1, 6, 9}, kMmY[3] = {3, 7, 10};
constexpr int kMmRows[3] = {2, 9, 11}, kMmRowBytes[3] = {6, 10, 12};
// RoPE records: p[0] x0, p[1] angle table, p[2] x0's head norm, p[3] x1, p[4]
// x1's head norm, p[5] V; i[0] x0's heads, i[1] head_dim, i[2] rotated dims,
// i[3] neox, i[4] x1's heads, i[5] segments, i[6] layer, i[7] K's segment + 1
// when the launch also stores K and V in the cache (0: it does not).
// Attention records: p[0] q, p[1] k, p[2] v, p[3] out, p[4] out's quantized
// activations (or null); i[0] layer, i[1] heads, i[2] KV heads, i[3]
// head_dim, i[4] tile metadata, i[5] 1 when the RoPE before stored K and V;
// f[0] scale.

struct Range {
  const void* p;
  size_t bytes;
};

bool Overlaps(const Range& a, const void* p, size_t bytes) {
  const auto* a0 = static_cast<const uint8_t*>(a.p);
  const auto* b0 = static_cast<const uint8_t*>(p);
  return a0 < b0 + bytes && b0 < a0 + a.bytes;
}

uint64_t HashWords(uint64_t h, const void* data, size_t bytes) {
  const auto* w = static_cast<const uint64_t*>(data);
  for (size_t i = 0; i < bytes / 8; ++i) h = (h ^ w[i]) * 0x100000001b3ull + (h >> 29);
  return h;
}

struct AttnWave {
  int tile0, tile1, tok0, tok1;
};
struct AttnBatchPlan {
  AttnPlan plan;
  int64_t tiles_off = 0;  // in int32 units of the metadata
  int n_tiles = 0;
  std::vector<AttnWave> waves;
  size_t partial_floats = 0;
};

class CudaBackend final : public Backend, public CudaBackendControl {
 public:
  ~CudaBackend() override;
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const BackendOptions& opts);

  std::string Name() const override { return "cuda"; }
  size_t AvailableMemory() const override {
    size_t free_b = 0, total = 0;
    cudaSetDevice(device_);
    if (cudaMemGetInfo(&free_b, &total) != cudaSuccess) return 0;
    return free_b;
  }
  absl::StatusOr<Weight> LoadWeight(const WeightSource& src) override;
  std::string DeviceId() const override { return uuid_; }
  // Weights are uploaded verbatim, each followed by kWeightPad zero bytes, at
  // 256-byte alignment. A change of that (say, repacking blocks for a kernel)
  // must change this string, so that builds never share weights they would
  // read differently.
  // Quantized matrices are repacked at upload (mmv tiles, common/quant/mmv_tiles.h).
  std::string WeightLayout() const override { return "cuda-mmv-tiles-v1-pad256"; }
  absl::Status PlaceWeightsIn(void* base, size_t bytes) override;
  size_t WeightFootprint(GgmlType type, int64_t ne0, int64_t ne1) const override {
    return (StoredBytes(type, ne0, ne1) + kWeightPad + 255) / 256 * 256;
  }
  // Bytes a weight takes on the device: quantized matrices in the mmv tile
  // layout (rows padded to 16, K to 256), the rest as in the file.
  static size_t StoredBytes(GgmlType type, int64_t ne0, int64_t ne1) {
    return cuda::MmvSupported(type) ? cuda::MmvPackedBytes(type, ne1, ne0) : RowBytes(type, ne0) * static_cast<size_t>(ne1);
  }
  absl::Status InitKv(const KvLayout& layout) override;
  absl::StatusOr<float*> AllocActivations(size_t n_floats) override;
  BackendMemory Memory() const override {
    BackendMemory m = mem_;
    m.other = other_bytes_ + (arena_ok_ ? arena_.committed() - arena_.used() : 0);
    return m;
  }

  absl::Status SetBatch(const Batch& batch) override;
  void Embed(const Weight& emb, float* out) override;
  void RmsNorm(const float* x, const Weight& w, float eps, int rows, float* out) override;
  void AddRmsNorm(float* x, const float* r, const Weight& w, float eps, int rows, float* out) override;
  void MatMul(const Weight& w, const Weight* bias, const float* x, int n, float* y) override;
  void Rope(float* x, int n_heads, int head_dim, const RopeParams& p) override;
  void Attention(const float* q, const float* k, const float* v, const AttentionParams& p, float* out) override;
  void SwiGLU(const float* gate, const float* up, int n, int dim, float* out) override;
  void Add(float* x, const float* y, int64_t n) override;
  void GatherOutRows(const float* x, int dim, float* out) override;
  void Sample(const float* logits, int vocab, const std::vector<SampleRow>& rows) override;
  void Accept(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) override;
  // The fallback (BackendOptions::cuda_device_sampling off): the rows read
  // back, the reference rules on the host, the results written back.
  void SampleViaHost(const float* logits, int vocab, const std::vector<SampleRow>& rows);
  void AcceptViaHost(const float* logits, int vocab, const std::vector<AcceptRows>& seqs);
  // Reads logits rows lo..hi of a `vocab`-wide matrix into host_rows_.
  absl::Status ReadRows(const float* logits, int vocab, int lo, int hi);
  absl::StatusOr<void*> AllocBuffer(size_t bytes) override;
  absl::Status WriteBytes(const void* host, void* dst, size_t bytes) override;
  bool HostMemory() const override { return false; }
  int Mark() override;
  double Seconds(int a, int b) override;
  void ClearMarks() override { n_marks_ = 0; }
  absl::Status ReadToHost(const float* src, float* host, size_t n) override;
  absl::Status ReadBytes(const void* src, void* host, size_t bytes) override;
  absl::Status PinHost(void* p, size_t bytes) override {
    cudaSetDevice(device_);
    SPECD_CUDA_RETURN(cudaHostRegister(p, bytes, cudaHostRegisterDefault), "pinning host memory");
    return absl::OkStatus();
  }
  void UnpinHost(void* p) override {
    cudaSetDevice(device_);
    cudaHostUnregister(p);
  }
  absl::Status Synchronize() override;
  int64_t ColdRuns() const override { return stats_.first_runs + stats_.graph_captures; }
  bool PreparesShapes() const override { return graphs_on_; }
  // Device-to-device copy with CUDA events, bytes read + written, best of 10
  // after a warm-up (the roofline's ceiling).
  double MeasureCopyBandwidth(size_t bytes) override {
    cudaSetDevice(device_);
    const size_t half = bytes / 2;
    void *a = nullptr, *b = nullptr;
    if (cudaMalloc(&a, half) != cudaSuccess) return 0.0;
    if (cudaMalloc(&b, half) != cudaSuccess) {
      cudaFree(a);
      return 0.0;
    }
    cudaMemsetAsync(a, 1, half, stream_);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    double best = 0;
    for (int i = 0; i < 11; ++i) {
      cudaEventRecord(e0, stream_);
      cudaMemcpyAsync(b, a, half, cudaMemcpyDeviceToDevice, stream_);
      cudaEventRecord(e1, stream_);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (i > 0 && ms > 0) best = std::max(best, 2.0 * static_cast<double>(half) / (ms * 1e-3));
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaFree(a);
    cudaFree(b);
    return best;
  }

  // CudaBackendControl
  void* Stream() const override { return stream_; }
  absl::Status Flush() override;
  void SetMatMulPath(MatMulPath p) override { forced_path_ = p; }
  void SetGraphs(bool on) override { graphs_on_ = on; }
  Stats GetStats() const override {
    Stats s = stats_;
    s.workspace_bytes = other_bytes_;
    return s;
  }

 private:
  CudaBackend() = default;
  absl::Status Init(const BackendOptions& opts);

  void Fail(const absl::Status& st) {
    if (err_.ok()) err_ = st;
  }
  void Fail(cudaError_t e, const char* what) {
    if (e != cudaSuccess) Fail(absl::InternalError(absl::StrCat("CUDA error in ", what, ": ", CudaErr(e))));
  }
  bool Recording() const { return err_.ok() && batch_set_; }
  absl::Status TakeError() {
    absl::Status s = err_;
    err_ = absl::OkStatus();
    return s;
  }

  // Device scratch that grows on demand; an outgrown buffer is freed only after
  // the next full synchronization (recorded ops may still use it).
  // RmsNorm and AddRmsNorm (r != null: x += r first).
  void RecordNorm(const float* x, const float* r, const Weight& w, float eps, int rows, float* out);
  absl::Status Grow(void** buf, size_t* cap, size_t need, const char* what);
  // Grow for counters that kernels leave at zero: a new buffer is zeroed.
  absl::Status GrowZeroed(void** buf, size_t* cap, size_t need, const char* what);
  void InvalidateGraphs(const char* why);
  void FreeRetired();

  absl::Status EnsureMeta(size_t ints);
  int32_t* MetaHost(int64_t off) { return meta_host_ + off; }
  BatchDev Bd() const;

  void Record(const OpRec& op, std::initializer_list<Range> writes);
  void NoteWrite(const void* p, size_t bytes);
  void* GetXq(const float* x, int n, int64_t k);
  absl::Status EnsureMmvScratch(GgmlType type, int64_t tiles, int64_t k);
  const double* RopeTable(const RopeParams& p);
  AttnBatchPlan* GetAttnPlan(int n_heads, int n_kv_heads, int head_dim);

  void ExecAll();
  void Exec(const OpRec& op);
  void ExecMatMul(const OpRec& op);
  void RunGraph();
  void LogCapture(const std::vector<int64_t>& shape) const;
  KvDev LayerKv(int layer) const;

  int device_ = 0;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_ws_ = nullptr;
  cudaEvent_t meta_ev_ = nullptr;
  VmmArena arena_;
  bool arena_ok_ = false;
  std::vector<void*> weight_allocs_;  // cudaMalloc fallback
  // PlaceWeightsIn: an exportable region (owned by the caller) the weights go to.
  uint8_t* region_ = nullptr;
  size_t region_bytes_ = 0, region_used_ = 0;
  std::string uuid_;  // "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx", as nvidia-smi prints it
  BackendMemory mem_;
  size_t other_bytes_ = 0;

  KvLayout kv_;
  bool kv_init_ = false;
  uint8_t* kv_pool_ = nullptr;
  size_t kv_row_bytes_ = 0;
  std::vector<void*> activations_;

  // Batch metadata: pinned staging and its device copy (fixed while graphs use it).
  int32_t* meta_host_ = nullptr;
  int32_t* meta_dev_ = nullptr;
  size_t meta_cap_ = 0;  // int32 entries
  size_t meta_used_ = 0;
  bool meta_pending_ = false;  // an upload from meta_host_ may still be in flight
  struct {
    int n_tokens = 0, n_out = 0, n_seqs = 0, bt_stride = 0;
    int64_t off_tokens = 0, off_pos = 0, off_seq = 0, off_out = 0, off_kvlen = 0, off_blocks = 0;
    std::vector<int32_t> pos, seq;
  } b_;
  // Appends `n` items to the metadata (8-byte aligned when `align8`);
  // returns their offset in int32 words, or -1 after a Fail.
  template <class T>
  int64_t MetaPut(const T* items, size_t n, bool align8);
  // Records a sampling op over `rows` of the current batch's logits.
  void RecordSample(const float* logits, int vocab, const std::vector<cuda::SampleRowDev>& rows);
  bool batch_set_ = false;
  std::map<std::tuple<int, int, int>, AttnBatchPlan> attn_plans_;

  // Scratch.
  struct XqSlot {
    const float* x = nullptr;
    int n = 0;
    int64_t k = 0;
    bool valid = false;
    uint64_t stamp = 0;
    void* buf = nullptr;
    size_t cap = 0;
  };
  std::array<XqSlot, 4> xq_;
  uint64_t xq_clock_ = 0;
  void* slab_ = nullptr;
  size_t slab_cap_ = 0;
  size_t slab_bytes_ = BackendOptions::kPromptSlabMin;  // its size once a prompt GEMM or the reference path needs it
  void* xhalf_ = nullptr;
  size_t xhalf_cap_ = 0;
  void* xsum_ = nullptr;  // the prompt GEMM's unit sums of xhalf_
  size_t xsum_cap_ = 0;
  void* qg_part_ = nullptr;  // its split-K partial sums
  size_t qg_part_cap_ = 0;
  void* attn_part_ = nullptr;
  size_t attn_part_cap_ = 0;
  void* norm_cnt_ = nullptr;  // RMSNorm blocks done per row, zero between launches
  size_t norm_cnt_cap_ = 0;
  void* mmv_part_ = nullptr;  // the wide matvec's partial sums
  size_t mmv_part_cap_ = 0;
  void* mmv_cnt_ = nullptr;  // wide matvec blocks done per tile range, zero between launches
  size_t mmv_cnt_cap_ = 0;
  void* stage_ = nullptr;  // GGUF rows being packed (load time only; freed by InitKv)
  size_t stage_cap_ = 0;
  std::vector<void*> retired_;
  std::map<std::tuple<int, float, float>, double*> rope_tables_;
  // Speculative steps: target rows processed for acceptance (dense p rows,
  // argmaxes), AllocBuffer's buffers, pinned staging for small reads, timing marks.
  void* accept_rows_ = nullptr;
  size_t accept_rows_cap_ = 0;
  std::vector<void*> buffers_;
  void* read_stage_ = nullptr;
  size_t read_stage_cap_ = 0;
  std::vector<cudaEvent_t> marks_;
  int n_marks_ = 0;
  bool device_sampling_ = false;
  // Host scratch of the host-side sampling: rows, draft q rows, small results.
  std::vector<float> host_rows_, host_q_, host_probs_;
  std::vector<int32_t> host_ints_;
  std::vector<float> host_conf_;

  // Recording and graphs.
  std::vector<OpRec> ops_;
  struct GraphEntry {
    std::vector<int64_t> shape;
    std::vector<OpRec> ops;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };
  std::unordered_map<uint64_t, GraphEntry> graphs_;
  std::unordered_set<uint64_t> graph_seen_;  // shapes run once (eagerly), not captured yet
  // Scratch that a batch a graph may capture (graphs on, at most kGraphMaxTokens
  // tokens) has used: only their growth drops the graphs. A prompt chunk's
  // GEMM buffers (65+ tokens) grow without costing every step shape a new
  // capture (round 38: the first request after the warm-up re-captured them all).
  std::vector<void**> graphed_bufs_;
  uint64_t graph_clock_ = 0;
  bool graphs_on_ = true;
  MatMulPath forced_path_ = MatMulPath::kAuto;
  Stats stats_;
  absl::Status err_;
};

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const BackendOptions& opts) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) return absl::UnavailableError(absl::StrCat("no CUDA device available: ", cudaGetErrorString(e)));
  if (count == 0) return absl::UnavailableError("no CUDA device available: the runtime found 0 devices");
  if (opts.device < 0 || opts.device >= count)
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", opts.device, " does not exist (", count, " device(s) found)"));
  std::unique_ptr<CudaBackend> b(new CudaBackend());
  SPECD_RETURN_IF_ERROR(b->Init(opts));
  return b;
}

absl::Status CudaBackend::Init(const BackendOptions& opts) {
  device_ = opts.device;
  graphs_on_ = opts.cuda_graphs;
  SPECD_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
  cudaDeviceProp prop{};
  SPECD_CUDA_RETURN(cudaGetDeviceProperties(&prop, device_), "cudaGetDeviceProperties");
  if (prop.major < 8)
    return absl::FailedPreconditionError(absl::StrCat("CUDA device ", device_, " (", prop.name, ", sm_", prop.major,
                                                      prop.minor, ") is too old: specd needs sm_80 or newer"));
  cuda::DeviceInfo info;
  info.sm_count = prop.multiProcessorCount;
  info.smem_optin = static_cast<int>(prop.sharedMemPerBlockOptin);
  info.cc_major = prop.major;
  info.cc_minor = prop.minor;
  cuda::SetDeviceInfo(info);
  {
    const auto* u = reinterpret_cast<const unsigned char*>(prop.uuid.bytes);
    char buf[64];
    std::snprintf(buf, sizeof(buf), "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", u[0],
                  u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13], u[14], u[15]);
    uuid_ = buf;
  }
  cuda::Tuning tuning = cuda::GetTuning();  // process-wide: tests set the attention fields before
  tuning.pdl = opts.cuda_pdl;
  static_assert(BackendOptions::kAttnSplitStep == cuda::kAttnSub &&
                BackendOptions::kAttnSplitMax == 8 * cuda::kAttnSub);
  static_assert(BackendOptions::kWgmmaMaxCols == cuda::kMmvMaxCols);
  if (opts.cuda_attn_split != 0) tuning.attn_split = opts.cuda_attn_split;  // checked by CreateBackend
  tuning.qgemm_max_n = opts.cuda_qgemm_max_tokens;
  if (!opts.cuda_wgmma_cols.empty()) {  // (empty: the built-in range, or gpu_check's --wgmma-cols for every backend)
    SPECD_ASSIGN_OR_RETURN(const auto cols, ParseWgmmaCols(opts.cuda_wgmma_cols));
    tuning.wgmma_min_cols = cols.first;
    tuning.wgmma_max_cols = cols.second;
  }
  cuda::SetTuning(tuning);
  device_sampling_ = opts.cuda_device_sampling;
  slab_bytes_ = opts.cuda_prompt_slab > 0 ? opts.cuda_prompt_slab : BackendOptions::kPromptSlabMin;
  SPECD_CUDA_RETURN(cuda::PrepareMatvecKernels(), "preparing the matvec kernels");
  const cuda::Tuning& tu = cuda::GetTuning();
  const bool wgmma = tu.wgmma_min_cols > 0 && cuda::MatvecWgmmaRuns(GgmlType::Q4_K);
  SPECD_LOG(INFO) << "cuda backend" << Kv("device", prop.name) << Kv("sm", absl::StrCat(prop.major, prop.minor))
                  << Kv("multiprocessors", info.sm_count) << Kv("graphs", graphs_on_ ? "on" : "off")
                  << Kv("pdl", tu.pdl && prop.major >= 9 ? "on" : "off") << Kv("attn_kernel", tu.attn_kernel)
                  << Kv("attn_split", tu.attn_split) << Kv("sampling", device_sampling_ ? "device" : "host")
                  << Kv("prompt_slab_mib", slab_bytes_ >> 20) << Kv("qgemm_max_tokens", tu.qgemm_max_n)
                  << Kv("wgmma_cols", wgmma ? absl::StrCat(tu.wgmma_min_cols, "-", tu.wgmma_max_cols) : "off");
  if (tu.wgmma_min_cols > 0 && !wgmma && !opts.cuda_wgmma_cols.empty())
    SPECD_LOG(WARN) << "cuda backend: --cuda-wgmma-cols asked, but this build has no sm_90a code for the device "
                       "(or no block fits it): the mma.sync kernels run"
                    << Kv("sm", absl::StrCat(prop.major, prop.minor));
  SPECD_CUDA_RETURN(cuda::PrepareAttentionKernels(), "preparing the attention kernels");
  SPECD_CUDA_RETURN(cuda::PrepareMiscKernels(), "preparing the norm kernels");
  SPECD_CUDA_RETURN(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
  SPECD_CUDA_RETURN(cudaEventCreateWithFlags(&meta_ev_, cudaEventDisableTiming), "cudaEventCreate");
  if (cublasCreate(&cublas_) != CUBLAS_STATUS_SUCCESS) return absl::InternalError("cublasCreate failed");
  SPECD_CUDA_RETURN(cudaMalloc(&cublas_ws_, kCublasWorkspace), "allocating the cuBLAS workspace");
  other_bytes_ += kCublasWorkspace;
  if (cublasSetStream(cublas_, stream_) != CUBLAS_STATUS_SUCCESS ||
      cublasSetWorkspace(cublas_, cublas_ws_, kCublasWorkspace) != CUBLAS_STATUS_SUCCESS ||
      cublasSetMathMode(cublas_, CUBLAS_DEFAULT_MATH) != CUBLAS_STATUS_SUCCESS)
    return absl::InternalError("configuring cuBLAS failed");
  arena_ok_ = arena_.Init(device_);
  return absl::OkStatus();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  if (stream_) cudaStreamSynchronize(stream_);
  for (auto& [h, g] : graphs_) cudaGraphExecDestroy(g.exec);
  graphs_.clear();
  FreeRetired();
  for (auto& s : xq_) cudaFree(s.buf);
  cudaFree(slab_);
  cudaFree(xhalf_);
  cudaFree(xsum_);
  cudaFree(qg_part_);
  cudaFree(attn_part_);
  cudaFree(norm_cnt_);
  cudaFree(mmv_part_);
  cudaFree(mmv_cnt_);
  cudaFree(stage_);
  cudaFree(accept_rows_);
  for (void* p : buffers_) cudaFree(p);
  if (read_stage_) cudaFreeHost(read_stage_);
  for (cudaEvent_t e : marks_) cudaEventDestroy(e);
  for (auto& [k, t] : rope_tables_) cudaFree(t);
  cudaFree(meta_dev_);
  if (meta_host_) cudaFreeHost(meta_host_);
  for (void* p : activations_) cudaFree(p);
  cudaFree(kv_pool_);
  for (void* p : weight_allocs_) cudaFree(p);
  arena_.Release();
  if (cublas_) cublasDestroy(cublas_);
  cudaFree(cublas_ws_);
  if (meta_ev_) cudaEventDestroy(meta_ev_);
  if (stream_) cudaStreamDestroy(stream_);
}

// ---------------------------------------------------------------- resources

absl::StatusOr<Weight> CudaBackend::LoadWeight(const WeightSource& src) {
  const auto tr = GetTypeTraits(static_cast<uint32_t>(src.type));
  if (!tr || !tr->computable)
    return absl::UnimplementedError(absl::StrCat("tensor ", src.name, ": type ", static_cast<uint32_t>(src.type),
                                                 " is not supported by the CUDA backend"));
  if (src.ne0 <= 0 || src.ne1 <= 0 || src.ne0 % tr->block_size != 0)
    return absl::InvalidArgumentError(absl::StrCat("tensor ", src.name, ": bad shape [", src.ne0, ", ", src.ne1, "]"));
  const size_t row_bytes = RowBytes(src.type, src.ne0);
  const size_t gguf_bytes = row_bytes * static_cast<size_t>(src.ne1);
  if (src.host_data && src.nbytes != gguf_bytes)
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", src.name, ": ", src.nbytes, " bytes of data, expected ", gguf_bytes));
  SPECD_RETURN_IF_ERROR(TakeError());
  // Quantized matrices are stored in the mmv tile layout (same bytes, but
  // rows padded to 16 and K to 256).
  const bool packed = cuda::MmvSupported(src.type);
  const size_t nbytes = StoredBytes(src.type, src.ne0, src.ne1);
  Weight w;
  w.name = src.name;
  w.type = src.type;
  w.ne0 = src.ne0;
  w.ne1 = src.ne1;
  w.nbytes = nbytes;
  if (src.resident) {
    // Another process's upload of the same bytes, padding included (backend.h).
    w.data = src.resident;
    return w;
  }
  SPECD_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
  const size_t alloc = nbytes + kWeightPad;
  void* dst = nullptr;
  if (region_) {
    const size_t need = WeightFootprint(src.type, src.ne0, src.ne1);
    if (need > region_bytes_ - region_used_)
      return absl::ResourceExhaustedError(absl::StrCat("tensor ", src.name, ": the exported weight region (",
                                                       region_bytes_, " bytes) is full"));
    dst = region_ + region_used_;
    region_used_ += need;
  } else if (arena_ok_) {
    absl::Status st;
    dst = arena_.Alloc(alloc, &st);
    if (!dst && arena_.committed() == 0) {
      arena_.Release();  // virtual memory management unavailable here: plain allocations
      arena_ok_ = false;
    } else if (!dst) {
      return absl::ResourceExhaustedError(absl::StrCat("tensor ", src.name, ": ", st.message()));
    }
  }
  if (!dst && !arena_ok_) {
    const cudaError_t e = cudaMalloc(&dst, alloc);
    if (e != cudaSuccess)
      return absl::ResourceExhaustedError(
          absl::StrCat("tensor ", src.name, ": cannot allocate ", alloc, " bytes of device memory: ", CudaErr(e)));
    weight_allocs_.push_back(dst);
  }
  // Random weights are generated on the device (benchmarks build large models
  // without files), the same bytes the CPU backend makes.
  const SyntheticWeight sw = SyntheticWeightFor(src.name, src.ne0, src.ne1);
  if (!packed) {
    if (src.host_data) {
      SPECD_CUDA_RETURN(cudaMemcpy(dst, src.host_data, nbytes, cudaMemcpyHostToDevice), "uploading a weight");
    } else {
      SPECD_CUDA_RETURN(
          cuda::LaunchRandomFill(src.type, dst, src.ne0, 0, src.ne1, sw.seed, sw.sigma, sw.mean, stream_),
          "generating a random weight");
    }
  } else {
    // GGUF rows go through a staging buffer, whole tiles at a time.
    const int64_t tiles = mmv::Tiles(src.ne1);
    const size_t tile_bytes = row_bytes * mmv::kTileRows;
    SPECD_RETURN_IF_ERROR(Grow(&stage_, &stage_cap_, std::max(kStageBytes, tile_bytes), "packing weights"));
    const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(stage_cap_ / tile_bytes));
    for (int64_t t0 = 0; t0 < tiles; t0 += chunk) {
      const int64_t nt = std::min(chunk, tiles - t0);
      const int64_t r0 = t0 * mmv::kTileRows, nr = std::min<int64_t>(nt * mmv::kTileRows, src.ne1 - r0);
      if (src.host_data) {
        SPECD_CUDA_RETURN(cudaMemcpyAsync(stage_, static_cast<const uint8_t*>(src.host_data) + r0 * row_bytes,
                                          nr * row_bytes, cudaMemcpyHostToDevice, stream_),
                          "uploading a weight");
      } else {
        SPECD_CUDA_RETURN(
            cuda::LaunchRandomFill(src.type, stage_, src.ne0, r0, nr, sw.seed, sw.sigma, sw.mean, stream_),
            "generating a random weight");
      }
      SPECD_CUDA_RETURN(cuda::LaunchPack(src.type, stage_, row_bytes, src.ne1, src.ne0, t0, nt, dst, stream_),
                        "packing a weight");
      SPECD_CUDA_RETURN(cudaStreamSynchronize(stream_), "packing a weight");  // the stage is reused
    }
  }
  SPECD_CUDA_RETURN(cudaMemsetAsync(static_cast<uint8_t*>(dst) + nbytes, 0, kWeightPad, stream_), "cudaMemset");
  SPECD_CUDA_RETURN(cudaStreamSynchronize(stream_), "uploading a weight");
  mem_.weights += nbytes;
  other_bytes_ += kWeightPad;
  w.data = dst;
  return w;
}

absl::Status CudaBackend::PlaceWeightsIn(void* base, size_t bytes) {
  if (!base || bytes == 0) return absl::InvalidArgumentError("PlaceWeightsIn: empty region");
  if (reinterpret_cast<uintptr_t>(base) % 256 != 0) return absl::InvalidArgumentError("PlaceWeightsIn: unaligned region");
  if (mem_.weights > 0) return absl::FailedPreconditionError("PlaceWeightsIn: weights were loaded already");
  region_ = static_cast<uint8_t*>(base);
  region_bytes_ = bytes;
  region_used_ = 0;
  return absl::OkStatus();
}

absl::Status CudaBackend::InitKv(const KvLayout& layout) {
  if (layout.type != GgmlType::F32 && layout.type != GgmlType::F16 && layout.type != GgmlType::Q8_0)
    return absl::InvalidArgumentError(
        absl::StrCat("KV cache type ", std::string(TypeName(layout.type)), " is not supported (f32, f16, q8_0)"));
  if (layout.head_dim % TypeTraits(layout.type).block_size != 0)
    return absl::InvalidArgumentError(absl::StrCat("head dimension ", layout.head_dim, " is not a multiple of ",
                                                   std::string(TypeName(layout.type)), "'s block size"));
  if (layout.n_layers < 1 || layout.n_kv_heads < 1 || layout.head_dim < 1 || layout.block_size < 1 ||
      layout.n_blocks < 1)
    return absl::InvalidArgumentError("bad KV layout");
  SPECD_RETURN_IF_ERROR(Synchronize());
  if (stage_) {  // the weights are loaded: the packing stage is no longer needed
    cudaFree(stage_);
    other_bytes_ -= stage_cap_;
    stage_ = nullptr;
    stage_cap_ = 0;
  }
  cudaFree(kv_pool_);
  kv_pool_ = nullptr;
  const size_t bytes = layout.TotalBytes();
  const cudaError_t e = cudaMalloc(&kv_pool_, bytes);
  if (e != cudaSuccess) {
    kv_pool_ = nullptr;
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate the KV pool (", bytes, " bytes): ", CudaErr(e)));
  }
  SPECD_CUDA_RETURN(cudaMemsetAsync(kv_pool_, 0, bytes, stream_), "clearing the KV pool");
  kv_ = layout;
  kv_row_bytes_ = RowBytes(layout.type, layout.head_dim);
  kv_init_ = true;
  mem_.kv_pool = bytes;
  InvalidateGraphs("the KV pool was allocated");
  return absl::OkStatus();
}

absl::StatusOr<float*> CudaBackend::AllocActivations(size_t n_floats) {
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, n_floats * sizeof(float));
  if (e != cudaSuccess)
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate ", n_floats * 4, " bytes of activations: ", CudaErr(e)));
  SPECD_CUDA_RETURN(cudaMemsetAsync(p, 0, n_floats * sizeof(float), stream_), "clearing activations");
  activations_.push_back(p);
  mem_.activations += n_floats * sizeof(float);
  return static_cast<float*>(p);
}

absl::Status CudaBackend::Grow(void** buf, size_t* cap, size_t need, const char* what) {
  const bool graphed = absl::c_linear_search(graphed_bufs_, buf);
  if (!graphed && graphs_on_ && batch_set_ && b_.n_tokens <= kGraphMaxTokens) graphed_bufs_.push_back(buf);
  if (need <= *cap) return absl::OkStatus();
  const size_t want = std::max(need, *cap + *cap / 2);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, want);
  if (e != cudaSuccess)
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", want, " bytes for ", what, ": ", CudaErr(e)));
  if (*buf) retired_.push_back(*buf);
  other_bytes_ += want - *cap;
  *buf = p;
  *cap = want;
  if (graphed) InvalidateGraphs(what);  // captured graphs point at the old buffer
  return absl::OkStatus();
}

absl::Status CudaBackend::GrowZeroed(void** buf, size_t* cap, size_t need, const char* what) {
  const size_t before = *cap;
  SPECD_RETURN_IF_ERROR(Grow(buf, cap, need, what));
  if (*cap != before) SPECD_CUDA_RETURN(cudaMemsetAsync(*buf, 0, *cap, stream_), what);
  return absl::OkStatus();
}

// A buffer that captured graphs may point at moved: they are all dropped
// (Stats::graph_drops; debug log: a growth after the warm-up costs every
// graph a new capture).
void CudaBackend::InvalidateGraphs(const char* why) {
  if (graphs_.empty()) return;
  ++stats_.graph_drops;
  if (GetLogLevel() <= LogLevel::kDebug)
    SPECD_LOG(DEBUG) << "cuda graphs dropped" << Kv("graphs", graphs_.size()) << Kv("why", why);
  for (auto& [h, g] : graphs_) cudaGraphExecDestroy(g.exec);  // freed after in-flight launches finish
  graphs_.clear();
}

void CudaBackend::FreeRetired() {
  for (void* p : retired_) cudaFree(p);
  retired_.clear();
}

absl::Status CudaBackend::EnsureMeta(size_t ints) {
  if (ints <= meta_cap_) return absl::OkStatus();
  const size_t cap = std::max<size_t>(ints, std::max<size_t>(4096, meta_cap_ * 2));
  int32_t* host = nullptr;
  int32_t* dev = nullptr;
  SPECD_CUDA_RETURN(cudaMallocHost(&host, cap * sizeof(int32_t)), "allocating batch metadata");
  if (const cudaError_t e = cudaMalloc(&dev, cap * sizeof(int32_t)); e != cudaSuccess) {
    cudaFreeHost(host);
    return absl::ResourceExhaustedError(absl::StrCat("allocating batch metadata: ", CudaErr(e)));
  }
  if (meta_host_) {
    if (meta_pending_) cudaEventSynchronize(meta_ev_);
    std::memcpy(host, meta_host_, meta_used_ * sizeof(int32_t));
    cudaFreeHost(meta_host_);
  }
  if (meta_dev_) retired_.push_back(meta_dev_);
  other_bytes_ += (cap - meta_cap_) * sizeof(int32_t);
  meta_host_ = host;
  meta_dev_ = dev;
  meta_cap_ = cap;
  InvalidateGraphs("batch metadata");
  return absl::OkStatus();
}

BatchDev CudaBackend::Bd() const {
  BatchDev d;
  d.tokens = meta_dev_ + b_.off_tokens;
  d.pos = meta_dev_ + b_.off_pos;
  d.seq = meta_dev_ + b_.off_seq;
  d.out_rows = meta_dev_ + b_.off_out;
  d.kv_len = meta_dev_ + b_.off_kvlen;
  d.blocks = meta_dev_ + b_.off_blocks;
  d.n_tokens = b_.n_tokens;
  d.n_out = b_.n_out;
  d.n_seqs = b_.n_seqs;
  d.bt_stride = b_.bt_stride;
  return d;
}

// ---------------------------------------------------------------- batches

absl::Status CudaBackend::SetBatch(const Batch& batch) {
  SPECD_RETURN_IF_ERROR(Flush());
  batch_set_ = false;
  if (!kv_init_) return absl::FailedPreconditionError("SetBatch before InitKv");
  const int n = batch.n_tokens();
  if (n < 1) return absl::InvalidArgumentError("empty batch");
  if (static_cast<int>(batch.pos.size()) != n || static_cast<int>(batch.seq_index.size()) != n)
    return absl::InvalidArgumentError("batch arrays differ in length");
  const int bs = kv_.block_size;
  // A sequence's tokens come at consecutive positions in batch order: the
  // attention reads the rows below pos[t] - t (rows no earlier token of this
  // batch writes) before the batch's own K/V stores are done.
  std::vector<int> last_pos(batch.seqs.size(), -1);
  for (int t = 0; t < n; ++t) {
    const int si = batch.seq_index[t];
    if (si < 0 || si >= static_cast<int>(batch.seqs.size()))
      return absl::InvalidArgumentError("batch token refers to a missing sequence");
    const BatchSeq& s = batch.seqs[si];
    const int pos = batch.pos[t];
    if (pos < 0 || pos >= s.kv_len || pos / bs >= static_cast<int>(s.blocks.size()))
      return absl::InvalidArgumentError(absl::StrCat("position ", pos, " outside the blocks of sequence ", s.slot));
    if (last_pos[si] >= 0 && pos != last_pos[si] + 1)
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s.slot, " has position ", pos, " after ", last_pos[si],
                                                     " in one batch (a batch's positions of a sequence are consecutive)"));
    last_pos[si] = pos;
  }
  for (const auto& s : batch.seqs) {
    for (int32_t b : s.blocks) {
      if (b < 0 || b >= kv_.n_blocks) return absl::InvalidArgumentError(absl::StrCat("bad KV block id ", b));
    }
  }
  for (int32_t r : batch.out_rows) {
    if (r < 0 || r >= n) return absl::InvalidArgumentError("bad output row");
  }
  // Block-table stride: a power of two, and at least kGraphMinContext tokens,
  // so that graphs are shared across lengths: the stride sets the attention's
  // split count, and a request growing from a short prompt would otherwise
  // change it (and capture new graphs) at every doubling (round 10: a fresh
  // 256-token request captured ~10 graphs at fixed k). Splits past a
  // sequence's length exit at once and are not combined.
  int stride = 1;
  while (stride < batch.max_blocks() || stride * kv_.block_size < kGraphMinContext) stride *= 2;
  const int n_out = batch.n_out(), n_seqs = static_cast<int>(batch.seqs.size());
  b_.n_tokens = n;
  b_.n_out = n_out;
  b_.n_seqs = n_seqs;
  b_.bt_stride = stride;
  b_.off_tokens = 0;
  b_.off_pos = b_.off_tokens + n;
  b_.off_seq = b_.off_pos + n;
  b_.off_out = b_.off_seq + n;
  b_.off_kvlen = b_.off_out + n_out;
  b_.off_blocks = b_.off_kvlen + n_seqs;
  size_t used = static_cast<size_t>(b_.off_blocks) + static_cast<size_t>(n_seqs) * stride;
  // Tokens read from device memory when the batch runs (Batch::fed).
  std::vector<cuda::FeedDev> feeds;
  if (!batch.fed.empty()) {
    if (static_cast<int>(batch.fed.size()) != n) return absl::InvalidArgumentError("batch fed[] differs in length");
    for (int t = 0; t < n; ++t) {
      if (batch.fed[t]) feeds.push_back({static_cast<uint64_t>(reinterpret_cast<uintptr_t>(batch.fed[t])), t, 0});
    }
  }
  const int64_t off_feed = static_cast<int64_t>((used + 1) & ~size_t{1});
  if (!feeds.empty()) used = static_cast<size_t>(off_feed) + feeds.size() * (sizeof(cuda::FeedDev) / sizeof(int32_t));
  if (meta_pending_) {
    SPECD_CUDA_RETURN(cudaEventSynchronize(meta_ev_), "waiting for the previous batch upload");
    meta_pending_ = false;
  }
  SPECD_RETURN_IF_ERROR(EnsureMeta(used));
  std::memcpy(MetaHost(b_.off_tokens), batch.tokens.data(), n * sizeof(int32_t));
  std::memcpy(MetaHost(b_.off_pos), batch.pos.data(), n * sizeof(int32_t));
  std::memcpy(MetaHost(b_.off_seq), batch.seq_index.data(), n * sizeof(int32_t));
  if (n_out) std::memcpy(MetaHost(b_.off_out), batch.out_rows.data(), n_out * sizeof(int32_t));
  for (int s = 0; s < n_seqs; ++s) {
    const BatchSeq& q = batch.seqs[s];
    MetaHost(b_.off_kvlen)[s] = q.kv_len;
    int32_t* bt = MetaHost(b_.off_blocks + static_cast<int64_t>(s) * stride);
    std::fill(bt, bt + stride, 0);
    std::copy(q.blocks.begin(), q.blocks.end(), bt);
  }
  if (!feeds.empty()) std::memcpy(MetaHost(off_feed), feeds.data(), feeds.size() * sizeof(cuda::FeedDev));
  meta_used_ = used;
  b_.pos = batch.pos;
  b_.seq = batch.seq_index;
  attn_plans_.clear();
  for (auto& s : xq_) s.valid = false;
  batch_set_ = true;
  if (!feeds.empty()) {  // first of the batch's ops: the embedding reads the tokens
    OpRec op;
    op.kind = kFeed;
    op.i[0] = off_feed;
    op.i[1] = static_cast<int64_t>(feeds.size());
    Record(op, {});
  }
  return absl::OkStatus();
}

void CudaBackend::Record(const OpRec& op, std::initializer_list<Range> writes) {
  for (const Range& r : writes) NoteWrite(r.p, r.bytes);
  ops_.push_back(op);
}

void CudaBackend::NoteWrite(const void* p, size_t bytes) {
  for (auto& s : xq_) {
    if (s.valid && Overlaps(Range{s.x, static_cast<size_t>(s.n) * s.k * sizeof(float)}, p, bytes)) s.valid = false;
  }
}

// The wide matvec's partial sums and counters for a launch of `tiles` (all
// its matrices), sized when the op is recorded at any column count: sized
// only by a wide (17+ column) batch, they grew at a request's first 17..64
// token prompt chunk, after the warm-up (whose verifies stay narrow and whose
// prompt runs the GEMM), and dropped its graphs (round 38).
absl::Status CudaBackend::EnsureMmvScratch(GgmlType type, int64_t tiles, int64_t k) {
  SPECD_RETURN_IF_ERROR(Grow(&mmv_part_, &mmv_part_cap_, cuda::MmvScratchBytes(type, tiles, k), "matvec partial sums"));
  return GrowZeroed(&mmv_cnt_, &mmv_cnt_cap_, sizeof(int) * cuda::MmvScratchCounters(tiles), "matvec counters");
}

// Quantized activations of x for the tensor-core matvec: reused while x is
// unchanged, fused into the op that produced x when it was the last one.
void* CudaBackend::GetXq(const float* x, int n, int64_t k) {
  for (auto& s : xq_) {
    if (s.valid && s.x == x && s.n == n && s.k == k) {
      s.stamp = ++xq_clock_;
      return s.buf;
    }
  }
  XqSlot* slot = &xq_[0];
  for (auto& s : xq_) {
    if (!s.valid) {
      slot = &s;
      break;
    }
    if (s.stamp < slot->stamp) slot = &s;
  }
  // Sized for the widest matvec batch, not this one: the warm-up's prompt
  // runs above it (GEMM), so a first 9..64-token prompt chunk grew the slot
  // and dropped every graph the warm-up had captured (round 38: 10 captures
  // in the first adaptive request, 0.955x the best fixed k).
  const absl::Status st =
      Grow(&slot->buf, &slot->cap, cuda::XQuantBytes(std::max(n, cuda::kMmvMaxN), k), "quantized activations");
  if (!st.ok()) {
    Fail(st);
    return nullptr;
  }
  slot->x = x;
  slot->n = n;
  slot->k = k;
  slot->valid = true;
  slot->stamp = ++xq_clock_;
  if (!ops_.empty()) {
    OpRec& last = ops_.back();
    if (last.kind == kRmsNorm && last.p[3] == x && last.i[0] == n && last.i[1] == k && last.p[4] == nullptr) {
      last.p[4] = slot->buf;
      return slot->buf;
    }
    if (last.kind == kSwiGLU && last.p[2] == x && last.i[0] == n && last.i[1] == k && last.p[3] == nullptr) {
      last.p[3] = slot->buf;
      return slot->buf;
    }
    if (last.kind == kAttention && last.p[3] == x && n == b_.n_tokens && last.i[1] * last.i[3] == k &&
        last.p[4] == nullptr) {  // the attention's merge kernel quantizes its output
      last.p[4] = slot->buf;
      return slot->buf;
    }
  }
  OpRec op;
  op.kind = kQuantX;
  op.p[0] = x;
  op.p[1] = slot->buf;
  op.i[0] = n;
  op.i[1] = k;
  ops_.push_back(op);
  return slot->buf;
}

const double* CudaBackend::RopeTable(const RopeParams& p) {
  const auto key = std::make_tuple(p.n_dims, p.freq_base, p.freq_scale);
  auto it = rope_tables_.find(key);
  if (it != rope_tables_.end()) return it->second;
  const int half = p.n_dims / 2;
  std::vector<double> inv(half);
  for (int i = 0; i < half; ++i)
    inv[i] = std::pow(static_cast<double>(p.freq_base), -2.0 * i / p.n_dims) * p.freq_scale;
  double* d = nullptr;
  cudaError_t e = cudaMalloc(&d, sizeof(double) * std::max(half, 1));
  if (e == cudaSuccess) e = cudaMemcpy(d, inv.data(), sizeof(double) * half, cudaMemcpyHostToDevice);
  if (e != cudaSuccess) {
    Fail(e, "uploading a RoPE table");
    cudaFree(d);
    return nullptr;
  }
  other_bytes_ += sizeof(double) * std::max(half, 1);
  rope_tables_[key] = d;
  return d;
}

AttnBatchPlan* CudaBackend::GetAttnPlan(int n_heads, int n_kv_heads, int head_dim) {
  const auto key = std::make_tuple(n_heads, n_kv_heads, head_dim);
  auto it = attn_plans_.find(key);
  if (it != attn_plans_.end()) return &it->second;
  AttnBatchPlan bp;
  AttnPlan& pl = bp.plan;
  pl.split_len = cuda::GetTuning().attn_split;
  pl.kernel = cuda::AttnKernelFor(kv_.type, head_dim, pl.split_len);
  pl.group = n_heads / n_kv_heads;
  // Kernel 2 takes several 16-row m-tiles a block (sharing each chunk's K/V
  // rows) where a sequence of the batch has more rows than one m-tile holds:
  // a verify's tiles then load their K/V once, in fewer blocks. Rows are
  // computed alike either way (decode == verify holds).
  if (pl.kernel == 2) {
    int run = 0, longest = 0;
    for (int t = 0; t < b_.n_tokens; ++t) {
      run = t > 0 && b_.seq[t] == b_.seq[t - 1] ? run + 1 : 1;
      longest = std::max(longest, run);
    }
    pl.mtiles = cuda::AttnMtilesFor(kv_.type, head_dim, pl.split_len, longest * pl.group);
  }
  pl.rows_max = pl.kernel == 2 ? cuda::kAttnV2Rows * pl.mtiles : cuda::AttnRowsMax(head_dim);
  if (pl.group <= pl.rows_max) {
    pl.gchunk = pl.group;
    pl.n_gchunks = 1;
    pl.tile_tokens = pl.rows_max / pl.group;
  } else {
    pl.gchunk = pl.rows_max;
    pl.n_gchunks = (pl.group + pl.rows_max - 1) / pl.rows_max;
    pl.tile_tokens = 1;
  }
  pl.max_splits = std::max(1, (b_.bt_stride * kv_.block_size + pl.split_len - 1) / pl.split_len);
  // Tiles: runs of consecutive tokens of one sequence, at most tile_tokens long.
  std::vector<AttnTile> tiles;
  for (int t = 0; t < b_.n_tokens; ++t) {
    if (!tiles.empty()) {
      AttnTile& last = tiles.back();
      if (last.seq == b_.seq[t] && last.t0 + last.nt == t && last.nt < pl.tile_tokens) {
        ++last.nt;
        continue;
      }
    }
    tiles.push_back({b_.seq[t], t, 1});
  }
  const size_t per_tok = cuda::AttnPartialFloats(1, n_heads, head_dim, pl.max_splits);
  const int wave_tokens =
      std::max<int>(pl.tile_tokens, static_cast<int>(kAttnPartialBudget / sizeof(float) / std::max<size_t>(per_tok, 1)));
  int i = 0;
  while (i < static_cast<int>(tiles.size())) {
    AttnWave w{i, i, tiles[i].t0, tiles[i].t0};
    while (i < static_cast<int>(tiles.size()) && (w.tok1 - w.tok0) + tiles[i].nt <= wave_tokens) {
      w.tok1 = tiles[i].t0 + tiles[i].nt;
      ++i;
      w.tile1 = i;
    }
    bp.waves.push_back(w);
    bp.partial_floats = std::max(bp.partial_floats, per_tok * (w.tok1 - w.tok0));
  }
  bp.n_tiles = static_cast<int>(tiles.size());
  bp.tiles_off = static_cast<int64_t>(meta_used_);
  const size_t need = meta_used_ + tiles.size() * 3;
  if (const absl::Status st = EnsureMeta(need); !st.ok()) {
    Fail(st);
    return nullptr;
  }
  std::memcpy(MetaHost(bp.tiles_off), tiles.data(), tiles.size() * sizeof(AttnTile));
  meta_used_ = need;
  return &(attn_plans_[key] = std::move(bp));
}

// ---------------------------------------------------------------- ops

void CudaBackend::Embed(const Weight& emb, float* out) {
  if (!Recording()) return;
  OpRec op;
  op.kind = kEmbed;
  op.p[0] = emb.data;
  op.p[1] = out;
  op.i[0] = static_cast<int64_t>(emb.type);
  op.i[1] = emb.ne0;
  Record(op, {{out, sizeof(float) * b_.n_tokens * emb.ne0}});
}

void CudaBackend::RmsNorm(const float* x, const Weight& w, float eps, int rows, float* out) {
  RecordNorm(x, nullptr, w, eps, rows, out);
}

void CudaBackend::AddRmsNorm(float* x, const float* r, const Weight& w, float eps, int rows, float* out) {
  RecordNorm(x, r, w, eps, rows, out);
}

void CudaBackend::RecordNorm(const float* x, const float* r, const Weight& w, float eps, int rows, float* out) {
  if (!Recording()) return;
  if (w.type != GgmlType::F32) return Fail(absl::InvalidArgumentError("RmsNorm weight must be F32"));
  if (const absl::Status st = GrowZeroed(&norm_cnt_, &norm_cnt_cap_, sizeof(int) * rows, "RMSNorm counters");
      !st.ok())
    return Fail(st);
  OpRec op;
  op.kind = kRmsNorm;
  op.p[0] = x;
  op.p[1] = r;
  op.p[2] = w.data;
  op.p[3] = out;
  op.p[5] = norm_cnt_;
  op.i[0] = rows;
  op.i[1] = w.ne0;
  op.f[0] = eps;
  const size_t bytes = sizeof(float) * rows * w.ne0;
  if (r) Record(op, {{x, bytes}, {out, bytes}});
  else Record(op, {{out, bytes}});
}

void CudaBackend::MatMul(const Weight& w, const Weight* bias, const float* x, int n, float* y) {
  if (!Recording()) return;
  if (n < 1) return;
  if (bias && (bias->type != GgmlType::F32 || bias->ne0 != w.ne1))
    return Fail(absl::InvalidArgumentError(absl::StrCat("bias of ", w.name, " must be F32 with ", w.ne1, " values")));
  const int64_t k = w.ne0, rows = w.ne1;
  const size_t row_bytes = RowBytes(w.type, k);
  OpRec op;
  op.kind = kMatMul;
  op.p[0] = w.data;
  op.p[1] = bias ? bias->data : nullptr;
  op.p[2] = x;
  op.p[3] = y;
  op.i[0] = static_cast<int64_t>(w.type);
  op.i[1] = k;
  op.i[2] = rows;
  op.i[3] = n;
  op.i[6] = static_cast<int64_t>(row_bytes);
  int64_t path;
  if (forced_path_ == MatMulPath::kDequant) path = kPathDequant;
  else if (forced_path_ == MatMulPath::kGemm || n > cuda::kMmvMaxN) path = kPathGemm;
  else if (cuda::FmvSupported(w.type)) path = kPathFmv;
  else if (cuda::MmvSupported(w.type)) path = kPathMmv;
  else path = kPathDequant;
  // Prompt chunks on k-quant tiles: the quantized tensor-core GEMM instead
  // of dequantized F16 tiles (Tuning::qgemm_max_n, 0: never).
  if (path == kPathGemm && cuda::QGemmSupported(w.type, k) && n <= cuda::GetTuning().qgemm_max_n)
    path = kPathQGemm;
  op.i[4] = path;
  op.i[7] = 1;
  if (path == kPathMmv) {
    op.p[4] = GetXq(x, n, k);
    if (!op.p[4]) return;
    // q/k/v and gate/up: consecutive matmuls of one type on the same
    // activations run as one launch (the same grouping for any n).
    if (!ops_.empty()) {
      OpRec& last = ops_.back();
      if (last.kind == kMatMul && last.i[4] == kPathMmv && last.i[0] == op.i[0] && last.i[1] == k && last.p[2] == x &&
          last.i[3] == n && last.i[7] < cuda::kMmvMaxMats) {
        const int j = static_cast<int>(last.i[7]);
        last.p[kMmW[j]] = w.data;
        last.p[kMmBias[j]] = op.p[1];
        last.p[kMmY[j]] = y;
        last.i[kMmRows[j]] = rows;
        last.i[kMmRowBytes[j]] = static_cast<int64_t>(row_bytes);
        last.i[7] = j + 1;
        int64_t tiles = 0;
        for (int i = 0; i <= j; ++i) tiles += mmv::Tiles(last.i[kMmRows[i]]);
        if (const absl::Status st = EnsureMmvScratch(w.type, tiles, k); !st.ok()) return Fail(st);
        return NoteWrite(y, sizeof(float) * n * rows);
      }
    }
  }
  if (path == kPathMmv) {
    if (const absl::Status st = EnsureMmvScratch(w.type, mmv::Tiles(rows), k); !st.ok()) return Fail(st);
  }
  if (path == kPathDequant || (path == kPathGemm && w.type != GgmlType::F32 && w.type != GgmlType::F16)) {
    const size_t row_f = static_cast<size_t>(k) * (path == kPathGemm ? 2 : 4);
    const size_t need = std::max(slab_bytes_, row_f);
    if (const absl::Status st = Grow(&slab_, &slab_cap_, need, "dequantized weight tiles"); !st.ok()) return Fail(st);
  }
  if ((path == kPathGemm && w.type != GgmlType::F32) || path == kPathQGemm) {
    if (const absl::Status st = Grow(&xhalf_, &xhalf_cap_, static_cast<size_t>(n) * k * 2, "F16 activations");
        !st.ok())
      return Fail(st);
  }
  if (path == kPathQGemm) {
    const size_t part = cuda::QGemmPartBytes(cuda::QGemmPlan(w.type, rows, k, n), rows, n);
    for (auto [buf, cap, bytes, what] :
         {std::tuple{&xsum_, &xsum_cap_, static_cast<size_t>(n) * (k / 32) * 2, "F16 activation unit sums"},
          std::tuple{&qg_part_, &qg_part_cap_, std::max<size_t>(part, 4), "prompt GEMM partial sums"}})
      if (const absl::Status st = Grow(buf, cap, bytes, what); !st.ok()) return Fail(st);
  }
  Record(op, {{y, sizeof(float) * n * rows}});
}

// Rope records: p[0] x, p[1] table, p[2] norm weights (or null), second
// segment p[3] x, p[4] norm; i[0] heads, i[1] head_dim, i[2] rotated dims,
// i[3] neox, i[4] heads of segment 2, i[5] segments; f[0] eps.
void CudaBackend::Rope(float* x, int n_heads, int head_dim, const RopeParams& p) {
  if (!Recording()) return;
  if (p.n_dims < 2 || p.n_dims > head_dim || p.n_dims % 2 != 0)
    return Fail(absl::InvalidArgumentError(absl::StrCat("bad RoPE dimension count ", p.n_dims)));
  const double* table = RopeTable(p);
  if (!table) return;
  const size_t bytes = sizeof(float) * b_.n_tokens * n_heads * head_dim;
  OpRec op;
  op.kind = kRope;
  op.p[0] = x;
  op.p[1] = table;
  op.i[0] = n_heads;
  op.i[1] = head_dim;
  op.i[2] = p.n_dims;
  op.i[3] = p.style == RopeStyle::kNeox ? 1 : 0;
  op.i[5] = 1;
  // Absorb the per-head RMSNorm of x (qwen3 q/k norms) recorded just before,
  // past ops that do not touch x.
  for (int i = static_cast<int>(ops_.size()) - 1; i >= 0 && i >= static_cast<int>(ops_.size()) - 4; --i) {
    const OpRec& o = ops_[i];
    if (o.kind == kRmsNorm && o.p[0] == x && o.p[3] == x && !o.p[1] && !o.p[4] &&
        o.i[0] == static_cast<int64_t>(b_.n_tokens) * n_heads && o.i[1] == head_dim) {
      op.p[2] = o.p[2];
      op.f[0] = o.f[0];
      ops_.erase(ops_.begin() + i);
      break;
    }
    const bool other = (o.kind == kRmsNorm || o.kind == kRope) &&
                        !Overlaps(Range{o.p[0], sizeof(float) * static_cast<size_t>(o.kind == kRmsNorm ? o.i[0] * o.i[1]
                                                                                    : b_.n_tokens * o.i[0] * o.i[1])},
                                  x, bytes) &&
                        (o.kind != kRope || o.i[5] == 1);
    if (!other) break;
  }
  // q and k in one launch.
  if (!ops_.empty()) {
    OpRec& last = ops_.back();
    if (last.kind == kRope && last.i[5] == 1 && last.p[1] == table && last.i[1] == head_dim && last.i[2] == p.n_dims &&
        last.i[3] == op.i[3] && (!last.p[2] || !op.p[2] || last.f[0] == op.f[0]) &&
        !Overlaps(Range{last.p[0], sizeof(float) * b_.n_tokens * last.i[0] * head_dim}, x, bytes)) {
      last.p[3] = x;
      last.p[4] = op.p[2];
      last.i[4] = n_heads;
      last.i[5] = 2;
      if (op.p[2]) last.f[0] = op.f[0];
      return NoteWrite(x, bytes);
    }
  }
  Record(op, {{x, bytes}});
}

void CudaBackend::Attention(const float* q, const float* k, const float* v, const AttentionParams& p, float* out) {
  if (!Recording()) return;
  if (p.layer < 0 || p.layer >= kv_.n_layers || p.n_kv_heads != kv_.n_kv_heads || p.head_dim != kv_.head_dim ||
      p.n_heads % p.n_kv_heads != 0)
    return Fail(absl::InvalidArgumentError("attention parameters do not match the KV layout"));
  if (p.head_dim % 8 != 0 || p.head_dim > 256)
    return Fail(absl::UnimplementedError(
        absl::StrCat("the CUDA attention needs a head dimension that is a multiple of 8 and at most 256, not ", p.head_dim)));
  AttnBatchPlan* bp = GetAttnPlan(p.n_heads, p.n_kv_heads, p.head_dim);
  if (!bp) return;
  if (const absl::Status st = Grow(&attn_part_, &attn_part_cap_, bp->partial_floats * sizeof(float),
                                   "attention partials");
      !st.ok())
    return Fail(st);
  OpRec op;
  op.kind = kAttention;
  op.p[0] = q;
  op.p[1] = k;
  op.p[2] = v;
  op.p[3] = out;
  op.i[0] = p.layer;
  op.i[1] = p.n_heads;
  op.i[2] = p.n_kv_heads;
  op.i[3] = p.head_dim;
  op.i[4] = bp->tiles_off;
  op.f[0] = p.scale;
  // K's RoPE, recorded just before, stores K and V in the cache (RopeKvWrite).
  if (!ops_.empty()) {
    OpRec& r = ops_.back();
    const int k_seg = r.kind != kRope || r.i[7] != 0 || r.i[1] != p.head_dim ? -1
                      : r.p[0] == k && r.i[0] == p.n_kv_heads                   ? 0
                      : r.i[5] == 2 && r.p[3] == k && r.i[4] == p.n_kv_heads    ? 1
                                                                                : -1;
    if (k_seg >= 0) {
      r.p[5] = v;
      r.i[6] = p.layer;
      r.i[7] = k_seg + 1;
      op.i[5] = 1;
    }
  }
  Record(op, {{out, sizeof(float) * b_.n_tokens * p.n_heads * p.head_dim}});
}

void CudaBackend::SwiGLU(const float* gate, const float* up, int n, int dim, float* out) {
  if (!Recording()) return;
  OpRec op;
  op.kind = kSwiGLU;
  op.p[0] = gate;
  op.p[1] = up;
  op.p[2] = out;
  op.i[0] = n;
  op.i[1] = dim;
  Record(op, {{out, sizeof(float) * n * dim}});
}

void CudaBackend::Add(float* x, const float* y, int64_t n) {
  if (!Recording()) return;
  OpRec op;
  op.kind = kAdd;
  op.p[0] = x;
  op.p[1] = y;
  op.i[0] = n;
  Record(op, {{x, sizeof(float) * n}});
}

void CudaBackend::GatherOutRows(const float* x, int dim, float* out) {
  if (!Recording()) return;
  OpRec op;
  op.kind = kGather;
  op.p[0] = x;
  op.p[1] = out;
  op.i[0] = dim;
  Record(op, {{out, sizeof(float) * b_.n_out * dim}});
}

// ---------------------------------------------------------------- execution

void CudaBackend::ExecAll() {
  for (const OpRec& op : ops_) {
    if (!err_.ok()) return;
    Exec(op);
  }
}

KvDev CudaBackend::LayerKv(int layer) const {
  KvDev kv;
  const size_t layer_bytes = kv_.BlockBytes() * static_cast<size_t>(kv_.n_blocks);
  kv.k = kv_pool_ + (2 * static_cast<size_t>(layer)) * layer_bytes;
  kv.v = kv.k + layer_bytes;
  kv.type = kv_.type;
  kv.block_size = kv_.block_size;
  kv.block_bytes = kv_.BlockBytes();
  kv.row_bytes = kv_row_bytes_;
  return kv;
}

void CudaBackend::Exec(const OpRec& op) {
  const BatchDev bd = Bd();
  switch (op.kind) {
    case kEmbed: {
      const auto type = static_cast<GgmlType>(op.i[0]);
      float* out = static_cast<float*>(const_cast<void*>(op.p[1]));
      if (cuda::MmvSupported(type))  // packed: the token ids are the rows
        return Fail(cuda::LaunchDequantPacked(type, op.p[0], op.i[1], bd.tokens, 0, bd.n_tokens, out, op.i[1], false,
                                              stream_),
                    "embedding");
      return Fail(cuda::LaunchEmbed(type, op.p[0], op.i[1], bd, out, stream_), "embedding");
    }
    case kRmsNorm:
      return Fail(cuda::LaunchRmsNorm(const_cast<float*>(static_cast<const float*>(op.p[0])),
                                      static_cast<const float*>(op.p[1]), static_cast<const float*>(op.p[2]),
                                      static_cast<float>(op.f[0]), static_cast<int>(op.i[0]), static_cast<int>(op.i[1]),
                                      static_cast<float*>(const_cast<void*>(op.p[3])), const_cast<void*>(op.p[4]),
                                      static_cast<int*>(const_cast<void*>(op.p[5])), stream_),
                  "rmsnorm");
    case kQuantX:
      return Fail(cuda::LaunchQuantizeX(static_cast<const float*>(op.p[0]), static_cast<int>(op.i[0]), op.i[1],
                                        const_cast<void*>(op.p[1]), stream_),
                  "activation quantization");
    case kMatMul:
      return ExecMatMul(op);
    case kRope: {
      cuda::RopeSeg segs[2];
      segs[0] = {static_cast<float*>(const_cast<void*>(op.p[0])), static_cast<int>(op.i[0]),
                 static_cast<const float*>(op.p[2])};
      segs[1] = {static_cast<float*>(const_cast<void*>(op.p[3])), static_cast<int>(op.i[4]),
                 static_cast<const float*>(op.p[4])};
      cuda::RopeKvWrite kw;
      if (op.i[7] > 0) {  // K and V stored in the cache here (Attention found this op)
        kw.kv = LayerKv(static_cast<int>(op.i[6]));
        kw.v = static_cast<const float*>(op.p[5]);
        kw.k_seg = static_cast<int>(op.i[7]) - 1;
      }
      return Fail(cuda::LaunchRope(segs, static_cast<int>(op.i[5]), static_cast<int>(op.i[1]), static_cast<int>(op.i[2]),
                                   op.i[3] != 0, static_cast<float>(op.f[0]), static_cast<const double*>(op.p[1]), bd,
                                   kw, stream_),
                  "rope");
    }
    case kAttention: {
      const int layer = static_cast<int>(op.i[0]), n_heads = static_cast<int>(op.i[1]),
                n_kv = static_cast<int>(op.i[2]), hd = static_cast<int>(op.i[3]);
      const KvDev kv = LayerKv(layer);
      if (op.i[5] == 0)  // not stored by the RoPE launch before
        Fail(cuda::LaunchKvWrite(static_cast<const float*>(op.p[1]), static_cast<const float*>(op.p[2]), n_kv, hd, kv,
                                 bd, stream_),
             "KV write");
      const AttnBatchPlan* bp = GetAttnPlan(n_heads, n_kv, hd);
      if (!bp) return;
      const auto* tiles = reinterpret_cast<const AttnTile*>(meta_dev_ + bp->tiles_off);
      for (const AttnWave& w : bp->waves) {
        Fail(cuda::LaunchAttention(static_cast<const float*>(op.p[0]), kv, n_heads, n_kv, hd,
                                   static_cast<float>(op.f[0]), bd, tiles, w.tile0, w.tile1, w.tok0, w.tok1, bp->plan,
                                   static_cast<float*>(attn_part_), static_cast<float*>(const_cast<void*>(op.p[3])),
                                   const_cast<void*>(op.p[4]),
                                   stream_),
             "attention");
      }
      return;
    }
    case kSwiGLU:
      return Fail(cuda::LaunchSwiGLU(static_cast<const float*>(op.p[0]), static_cast<const float*>(op.p[1]),
                                     static_cast<int>(op.i[0]), static_cast<int>(op.i[1]),
                                     static_cast<float*>(const_cast<void*>(op.p[2])), const_cast<void*>(op.p[3]),
                                     stream_),
                  "swiglu");
    case kAdd:
      return Fail(cuda::LaunchAdd(static_cast<float*>(const_cast<void*>(op.p[0])), static_cast<const float*>(op.p[1]),
                                  op.i[0], stream_),
                  "add");
    case kGather:
      return Fail(cuda::LaunchGather(static_cast<const float*>(op.p[0]), static_cast<int>(op.i[0]), bd,
                                     static_cast<float*>(const_cast<void*>(op.p[1])), stream_),
                  "gather");
    case kFeed:
      return Fail(cuda::LaunchFeed(meta_dev_ + b_.off_tokens, reinterpret_cast<const cuda::FeedDev*>(meta_dev_ + op.i[0]),
                                   static_cast<int>(op.i[1]), stream_),
                  "token feed");
    case kSample:
      return Fail(cuda::LaunchSampleRows(static_cast<float*>(const_cast<void*>(op.p[0])), static_cast<int>(op.i[0]),
                                         reinterpret_cast<const cuda::SampleRowDev*>(meta_dev_ + op.i[2]),
                                         static_cast<int>(op.i[1]), meta_dev_, stream_),
                  "sampling");
    case kAcceptSeqs:
      return Fail(cuda::LaunchAcceptSeqs(reinterpret_cast<const cuda::AcceptSeqDev*>(meta_dev_ + op.i[0]),
                                         static_cast<int>(op.i[1]), static_cast<int>(op.i[2]), meta_dev_, stream_),
                  "acceptance");
    default:
      return Fail(absl::InternalError("unknown recorded op"));
  }
}

void CudaBackend::ExecMatMul(const OpRec& op) {
  const auto type = static_cast<GgmlType>(op.i[0]);
  const int64_t k = op.i[1], rows = op.i[2];
  const int n = static_cast<int>(op.i[3]);
  const size_t row_bytes = static_cast<size_t>(op.i[6]);
  const float* x = static_cast<const float*>(op.p[2]);
  float* y = static_cast<float*>(const_cast<void*>(op.p[3]));
  const float* bias = static_cast<const float*>(op.p[1]);
  switch (op.i[4]) {
    case kPathMmv: {
      // kMmvMaxCols columns per launch; their activation records start (c0 / 8) column tiles in.
      const size_t ct_bytes = static_cast<size_t>(mmv::Groups(k)) * mmv::xq::kRec;
      const int nm = static_cast<int>(op.i[7]);
      const cuda::MmvScratch scratch{static_cast<float*>(mmv_part_), mmv_part_cap_, static_cast<int*>(mmv_cnt_),
                                     mmv_cnt_cap_ / sizeof(int)};
      for (int c0 = 0; c0 < n; c0 += cuda::kMmvMaxCols) {
        cuda::MmvMatrix mats[cuda::kMmvMaxMats];
        for (int j = 0; j < nm; ++j) {
          const int64_t r = op.i[kMmRows[j]];
          mats[j] = {op.p[kMmW[j]], r, static_cast<const float*>(op.p[kMmBias[j]]),
                     static_cast<float*>(const_cast<void*>(op.p[kMmY[j]])) + c0 * r};
        }
        const auto* xq = static_cast<const uint8_t*>(op.p[4]) + (c0 / 8) * ct_bytes;
        Fail(cuda::LaunchMmv(type, mats, nm, k, xq, std::min(cuda::kMmvMaxCols, n - c0), scratch, stream_),
             "matvec");
      }
      return;
    }
    case kPathFmv:
      for (int c0 = 0; c0 < n; c0 += 16)
        Fail(cuda::LaunchFmv(type, op.p[0], rows, k, x + c0 * k, k, std::min(16, n - c0), bias, y + c0 * rows, rows,
                             stream_),
             "float matvec");
      return;
    case kPathDequant: {
      const int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(slab_cap_ / 4) / k);
      for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        const int64_t nr = std::min(chunk, rows - r0);
        Fail(cuda::MmvSupported(type)
                 ? cuda::LaunchDequantPacked(type, op.p[0], k, nullptr, r0, nr, slab_, k, false, stream_)
                 : cuda::LaunchDequantRows(type, op.p[0], row_bytes, r0, nr, k, slab_, false, stream_),
             "dequantization");
        for (int c0 = 0; c0 < n; c0 += 16)
          Fail(cuda::LaunchFmv(GgmlType::F32, slab_, nr, k, x + c0 * k, k, std::min(16, n - c0),
                               bias ? bias + r0 : nullptr, y + c0 * rows + r0, rows, stream_),
               "reference matvec");
      }
      return;
    }
    case kPathGemm: {
      const float one = 1.0f, zero = 0.0f;
      auto check = [&](cublasStatus_t s) {
        if (s != CUBLAS_STATUS_SUCCESS)
          Fail(absl::InternalError(absl::StrCat("cuBLAS GEMM failed: ", cublasGetStatusString(s))));
      };
      if (type == GgmlType::F32) {
        check(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n, static_cast<int>(k), &one,
                          static_cast<const float*>(op.p[0]), static_cast<int>(k), x, static_cast<int>(k), &zero, y,
                          static_cast<int>(rows)));
      } else {
        Fail(cuda::LaunchToHalf(x, static_cast<int64_t>(n) * k, xhalf_, stream_), "activation conversion");
        if (type == GgmlType::F16) {
          check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(rows), n, static_cast<int>(k), &one,
                             op.p[0], CUDA_R_16F, static_cast<int>(k), xhalf_, CUDA_R_16F, static_cast<int>(k), &zero,
                             y, CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
        } else {
          // Chunks of whole 128-row blocks keep each GEMM's output pointer
          // aligned (unaligned ones send cuBLAS to its align1 kernels).
          int64_t chunk = std::max<int64_t>(1, static_cast<int64_t>(slab_cap_ / 2) / k);
          if (chunk >= rows) chunk = rows;  // the matrix whole: one GEMM
          else if (chunk >= 128) chunk -= chunk % 128;
          for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
            const int64_t nr = std::min(chunk, rows - r0);
            Fail(cuda::MmvSupported(type)
                     ? cuda::LaunchDequantPacked(type, op.p[0], k, nullptr, r0, nr, slab_, k, true, stream_)
                     : cuda::LaunchDequantRows(type, op.p[0], row_bytes, r0, nr, k, slab_, true, stream_),
                 "dequantization");
            check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(nr), n, static_cast<int>(k), &one,
                               slab_, CUDA_R_16F, static_cast<int>(k), xhalf_, CUDA_R_16F, static_cast<int>(k), &zero,
                               y + r0, CUDA_R_32F, static_cast<int>(rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
          }
        }
      }
      if (bias) Fail(cuda::LaunchAddBias(y, bias, n, static_cast<int>(rows), rows, stream_), "bias");
      return;
    }
    case kPathQGemm:
      Fail(cuda::LaunchToHalf(x, static_cast<int64_t>(n) * k, xhalf_, stream_), "activation conversion");
      Fail(cuda::LaunchUnitSums(xhalf_, static_cast<int64_t>(n) * k, xsum_, stream_), "activation unit sums");
      Fail(cuda::LaunchQGemm(type, op.p[0], rows, k, xhalf_, xsum_, n, y, rows, static_cast<float*>(qg_part_),
                             qg_part_cap_, stream_),
           "prompt GEMM");
      if (bias) Fail(cuda::LaunchAddBias(y, bias, n, static_cast<int>(rows), rows, stream_), "bias");
      return;
    default:
      return Fail(absl::InternalError("unknown matmul path"));
  }
}

// Debug: what a new capture is, and where it first differs from a captured
// graph of the same shape (a field that changes every step defeats the cache).
void CudaBackend::LogCapture(const std::vector<int64_t>& shape) const {
  std::string why = "no captured graph of this shape";
  for (const auto& [h, g] : graphs_) {
    if (g.shape != shape) continue;
    if (g.ops.size() != ops_.size()) {
      why = absl::StrCat("same shape, ", g.ops.size(), " ops captured vs ", ops_.size());
      break;
    }
    for (size_t j = 0; j < ops_.size(); ++j) {
      const OpRec &a = g.ops[j], &b = ops_[j];
      if (std::memcmp(&a, &b, sizeof(OpRec)) == 0) continue;
      std::string field;
      for (int f = 0; f < 12 && field.empty(); ++f)
        if (a.p[f] != b.p[f]) field = absl::StrCat("p[", f, "]");
      for (int f = 0; f < 16 && field.empty(); ++f)
        if (a.i[f] != b.i[f]) field = absl::StrCat("i[", f, "] ", a.i[f], " -> ", b.i[f]);
      if (field.empty()) field = "f";
      why = absl::StrCat("same shape, op ", j, " (kind ", b.kind, ") differs in ", field);
      break;
    }
    break;
  }
  SPECD_LOG(DEBUG) << "cuda graph capture" << Kv("tokens", b_.n_tokens) << Kv("outputs", b_.n_out)
                   << Kv("seqs", b_.n_seqs) << Kv("bt_stride", b_.bt_stride) << Kv("meta_words", meta_used_)
                   << Kv("ops", ops_.size()) << Kv("captured", graphs_.size()) << Kv("shape", absl::StrJoin(shape, ","))
                   << Kv("why", why);
}

void CudaBackend::RunGraph() {
  std::vector<int64_t> shape = {b_.n_tokens, b_.n_out, b_.n_seqs, b_.bt_stride, static_cast<int64_t>(meta_used_)};
  for (const auto& [key, bp] : attn_plans_) {
    shape.push_back(bp.n_tiles);
    shape.push_back(bp.plan.kernel);
    // A graph freezes the launch's kernel instance, block and grid: the
    // m-tiles follow the batch's longest sequence run (and the tile shape,
    // rows_max and the group chunks, follows them).
    shape.push_back(bp.plan.mtiles);
    for (const AttnWave& w : bp.waves) shape.insert(shape.end(), {w.tile0, w.tile1, w.tok0, w.tok1});
  }
  uint64_t h = HashWords(0xcbf29ce484222325ull, shape.data(), shape.size() * sizeof(int64_t));
  h = HashWords(h, ops_.data(), ops_.size() * sizeof(OpRec));
  auto it = graphs_.find(h);
  if (it != graphs_.end() && it->second.shape == shape && it->second.ops.size() == ops_.size() &&
      std::memcmp(it->second.ops.data(), ops_.data(), ops_.size() * sizeof(OpRec)) == 0) {
    it->second.last_use = ++graph_clock_;
    Fail(cudaGraphLaunch(it->second.exec, stream_), "cudaGraphLaunch");
    ++stats_.graph_launches;
    return;
  }
  // Capture a shape the second time it runs: a one-off batch (a draft
  // catching up on some odd number of tokens) runs eagerly instead of paying
  // a capture and instantiation, and does not evict a graph in use.
  if (graph_seen_.size() > 4 * kMaxGraphs) graph_seen_.clear();
  if (graph_seen_.insert(h).second) {
    // Debug: each first run with its key, so that a shape that never repeats
    // (a field that changes between two same-length steps) shows in the log.
    if (GetLogLevel() <= LogLevel::kDebug)
      SPECD_LOG(DEBUG) << "cuda graph: first run, eager" << Kv("tokens", b_.n_tokens) << Kv("outputs", b_.n_out)
                       << Kv("ops", ops_.size()) << Kv("key", absl::StrFormat("%016x", h))
                       << Kv("shape", absl::StrJoin(shape, ","));
    ExecAll();
    ++stats_.eager_flushes;
    ++stats_.first_runs;
    return;
  }
  if (GetLogLevel() <= LogLevel::kDebug) LogCapture(shape);
  Fail(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
  if (!err_.ok()) return;
  ExecAll();
  cudaGraph_t graph = nullptr;
  const cudaError_t e = cudaStreamEndCapture(stream_, &graph);
  if (!err_.ok() || e != cudaSuccess) {
    Fail(e, "cudaStreamEndCapture");
    if (graph) cudaGraphDestroy(graph);
    return;
  }
  cudaGraphExec_t exec = nullptr;
  const cudaError_t ie = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  if (ie != cudaSuccess) return Fail(ie, "cudaGraphInstantiate");
  if (graphs_.size() >= kMaxGraphs) {
    auto lru = graphs_.begin();
    for (auto g = graphs_.begin(); g != graphs_.end(); ++g)
      if (g->second.last_use < lru->second.last_use) lru = g;
    cudaGraphExecDestroy(lru->second.exec);
    graphs_.erase(lru);
  }
  if (it != graphs_.end()) {  // hash collision: replace
    cudaGraphExecDestroy(it->second.exec);
    graphs_.erase(it);
  }
  GraphEntry& g = graphs_[h];
  g.shape = std::move(shape);
  g.ops = ops_;
  g.exec = exec;
  g.last_use = ++graph_clock_;
  ++stats_.graph_captures;
  Fail(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  ++stats_.graph_launches;
}

absl::Status CudaBackend::Flush() {
  if (ops_.empty()) return TakeError();
  if (!err_.ok()) {
    ops_.clear();
    return TakeError();
  }
  ++stats_.flushes;
  Fail(cudaMemcpyAsync(meta_dev_, meta_host_, meta_used_ * sizeof(int32_t), cudaMemcpyHostToDevice, stream_),
       "uploading batch metadata");
  Fail(cudaEventRecord(meta_ev_, stream_), "cudaEventRecord");
  meta_pending_ = true;
  if (graphs_on_ && b_.n_tokens <= kGraphMaxTokens) {
    RunGraph();
  } else {
    ExecAll();
    ++stats_.eager_flushes;
  }
  ops_.clear();
  return TakeError();
}

// ---------------------------------------------------------------- speculative steps

template <class T>
int64_t CudaBackend::MetaPut(const T* items, size_t n, bool align8) {
  static_assert(sizeof(T) % sizeof(int32_t) == 0);
  size_t at = meta_used_;
  if (align8) at = (at + 1) & ~size_t{1};  // meta_dev_ is 256-byte aligned: even offsets are 8-byte aligned
  const size_t words = n * sizeof(T) / sizeof(int32_t);
  if (const absl::Status st = EnsureMeta(at + words); !st.ok()) {
    Fail(st);
    return -1;
  }
  if (n) std::memcpy(MetaHost(static_cast<int64_t>(at)), items, n * sizeof(T));
  meta_used_ = at + words;
  return static_cast<int64_t>(at);
}

void CudaBackend::RecordSample(const float* logits, int vocab, const std::vector<cuda::SampleRowDev>& rows) {
  const int64_t off = MetaPut(rows.data(), rows.size(), true);
  if (off < 0) return;
  OpRec op;
  op.kind = kSample;
  op.p[0] = logits;
  op.i[0] = vocab;
  op.i[1] = static_cast<int64_t>(rows.size());
  op.i[2] = off;
  // The rows may be penalized in place; the results go to buffers no op reads.
  Record(op, {{logits, sizeof(float) * static_cast<size_t>(b_.n_out) * static_cast<size_t>(vocab)}});
}

namespace {
uint64_t Addr(const void* p) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p)); }

// The sampler's parameters of one row (the rest: pointers and history).
cuda::SampleRowDev RowParams(int row, const SamplingParams& p, uint64_t stream, uint64_t counter) {
  cuda::SampleRowDev d;
  d.row = row;
  d.greedy = p.greedy() ? 1 : 0;
  d.temperature = p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.rep_penalty = p.repetition_penalty;
  d.rep_window = p.repetition_window;
  d.seed = p.seed;
  d.stream = stream;
  d.counter = counter;
  return d;
}
}  // namespace

absl::Status CudaBackend::ReadRows(const float* logits, int vocab, int lo, int hi) {
  const size_t V = static_cast<size_t>(vocab);
  host_rows_.resize(static_cast<size_t>(hi - lo + 1) * V);
  return ReadBytes(logits + static_cast<size_t>(lo) * V, host_rows_.data(), host_rows_.size() * sizeof(float));
}

void CudaBackend::SampleViaHost(const float* logits, int vocab, const std::vector<SampleRow>& rows) {
  const size_t V = static_cast<size_t>(vocab), n = rows.size();
  int lo = rows[0].row, hi = rows[0].row;
  size_t n_recent = 0;
  for (const SampleRow& r : rows) {
    lo = std::min(lo, r.row);
    hi = std::max(hi, r.row);
    if (r.recent_dev) n_recent += static_cast<size_t>(std::max(0, r.n_recent_dev));
  }
  if (const absl::Status st = ReadRows(logits, vocab, lo, hi); !st.ok()) return Fail(st);
  // Host stand-ins for the backend pointers: tokens first, then the penalty windows' device parts.
  host_ints_.assign(n + n_recent, 0);
  host_conf_.assign(n, 0.0f);
  host_probs_.resize(n * V);
  std::vector<SampleRow> h(rows);
  size_t at = n;
  for (size_t i = 0; i < n; ++i) {
    const SampleRow& r = rows[i];
    h[i].row = r.row - lo;
    if (r.recent_dev && r.n_recent_dev > 0) {
      if (const absl::Status st = ReadBytes(r.recent_dev, host_ints_.data() + at, sizeof(int32_t) * r.n_recent_dev);
          !st.ok())
        return Fail(st);
      h[i].recent_dev = host_ints_.data() + at;
      at += static_cast<size_t>(r.n_recent_dev);
    } else {
      h[i].recent_dev = nullptr;
      h[i].n_recent_dev = 0;
    }
    h[i].token = r.token ? host_ints_.data() + i : nullptr;
    h[i].confidence = r.confidence ? host_conf_.data() + i : nullptr;
    h[i].probs = r.probs ? host_probs_.data() + i * V : nullptr;
  }
  SampleOnHost(host_rows_.data(), vocab, h);
  // Back where the callers look (stream-ordered before whatever reads them).
  for (size_t i = 0; i < n; ++i) {
    const SampleRow& r = rows[i];
    if (r.token)
      Fail(cudaMemcpyAsync(r.token, h[i].token, sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "sampled token");
    if (r.confidence)
      Fail(cudaMemcpyAsync(r.confidence, h[i].confidence, sizeof(float), cudaMemcpyHostToDevice, stream_),
           "confidence");
    if (r.probs)
      Fail(cudaMemcpyAsync(r.probs, h[i].probs, sizeof(float) * V, cudaMemcpyHostToDevice, stream_), "q row");
  }
  // The sources are host scratch that the next call reuses: wait for the copies.
  Fail(cudaStreamSynchronize(stream_), "host sampling");
}

void CudaBackend::AcceptViaHost(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) {
  const size_t V = static_cast<size_t>(vocab), n = seqs.size();
  int lo = seqs[0].row0, hi = seqs[0].row0;
  size_t q_rows = 0;
  for (const AcceptRows& a : seqs) {
    lo = std::min(lo, a.row0);
    hi = std::max(hi, a.row0 + a.k);
    if (a.q) q_rows += static_cast<size_t>(a.k);
  }
  if (const absl::Status st = ReadRows(logits, vocab, lo, hi); !st.ok()) return Fail(st);
  host_q_.resize(q_rows * V);
  host_ints_.assign(4 * n, 0);
  std::vector<AcceptRows> h(seqs);
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const AcceptRows& a = seqs[i];
    h[i].row0 = a.row0 - lo;
    if (a.q) {
      float* q = host_q_.data() + at * V;
      if (const absl::Status st = ReadBytes(a.q, q, sizeof(float) * V * static_cast<size_t>(a.k)); !st.ok())
        return Fail(st);
      h[i].q = q;
      at += static_cast<size_t>(a.k);
    }
    h[i].out = host_ints_.data() + 4 * i;
  }
  AcceptOnHost(host_rows_.data(), vocab, h);
  for (size_t i = 0; i < n; ++i)
    Fail(cudaMemcpyAsync(seqs[i].out, h[i].out, 3 * sizeof(int32_t), cudaMemcpyHostToDevice, stream_), "acceptance");
  Fail(cudaStreamSynchronize(stream_), "host acceptance");
}

void CudaBackend::Sample(const float* logits, int vocab, const std::vector<SampleRow>& rows) {
  if (!Recording() || rows.empty()) return;
  if (!device_sampling_) return SampleViaHost(logits, vocab, rows);
  std::vector<cuda::SampleRowDev> devs;
  devs.reserve(rows.size());
  for (const SampleRow& r : rows) {
    cuda::SampleRowDev d = RowParams(r.row, r.params, r.stream, r.counter);
    d.recent_off = static_cast<int32_t>(MetaPut(r.recent.data(), r.recent.size(), false));
    if (d.recent_off < 0) return;
    d.n_recent = static_cast<int32_t>(r.recent.size());
    d.recent_dev = Addr(r.recent_dev);
    d.n_recent_dev = r.recent_dev ? r.n_recent_dev : 0;
    d.token = Addr(r.token);
    d.confidence = Addr(r.confidence);
    d.probs = Addr(r.probs);
    devs.push_back(d);
  }
  RecordSample(logits, vocab, devs);
}

void CudaBackend::Accept(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) {
  if (!Recording() || seqs.empty()) return;
  if (!device_sampling_) return AcceptViaHost(logits, vocab, seqs);
  // Scratch for the processed target rows: dense p rows, then one argmax per row.
  size_t n_rows = 0;
  for (const AcceptRows& a : seqs) n_rows += static_cast<size_t>(a.k) + 1;
  const size_t p_bytes = n_rows * static_cast<size_t>(vocab) * sizeof(float);
  if (const absl::Status st = Grow(&accept_rows_, &accept_rows_cap_, p_bytes + n_rows * sizeof(int32_t),
                                   "acceptance rows");
      !st.ok())
    return Fail(st);
  auto* p_rows = static_cast<float*>(accept_rows_);
  auto* argmax = reinterpret_cast<int32_t*>(static_cast<uint8_t*>(accept_rows_) + p_bytes);
  std::vector<cuda::SampleRowDev> rows;
  std::vector<cuda::AcceptSeqDev> accepts;
  size_t row = 0;
  for (const AcceptRows& a : seqs) {
    // The penalty window of row t: the committed tail, then x_1..x_t (contiguous in the metadata).
    const int64_t hist = MetaPut(a.recent.data(), a.recent.size(), false);
    if (hist < 0 || MetaPut(a.proposals.data(), a.proposals.size(), false) < 0) return;
    cuda::AcceptSeqDev s;
    s.seed = a.params.seed;
    s.pos0 = a.pos0;
    s.q = Addr(a.q);
    s.p = Addr(p_rows + row * static_cast<size_t>(vocab));
    s.argmax = Addr(argmax + row);
    s.out = Addr(a.out);
    s.k = a.k;
    s.greedy = a.params.greedy() ? 1 : 0;
    s.proposals_off = static_cast<int32_t>(hist + static_cast<int64_t>(a.recent.size()));
    accepts.push_back(s);
    for (int t = 0; t <= a.k; ++t, ++row) {
      cuda::SampleRowDev d = RowParams(a.row0 + t, a.params, 0, 0);
      d.recent_off = static_cast<int32_t>(hist);
      d.n_recent = static_cast<int32_t>(a.recent.size()) + t;
      if (s.greedy) d.token = Addr(argmax + row);
      else d.probs = Addr(p_rows + row * static_cast<size_t>(vocab));
      rows.push_back(d);
    }
  }
  RecordSample(logits, vocab, rows);
  const int64_t seqs_off = MetaPut(accepts.data(), accepts.size(), true);
  if (seqs_off < 0) return;
  OpRec acc;
  acc.kind = kAcceptSeqs;
  acc.i[0] = seqs_off;
  acc.i[1] = static_cast<int64_t>(accepts.size());
  acc.i[2] = vocab;
  Record(acc, {});
}

absl::StatusOr<void*> CudaBackend::AllocBuffer(size_t bytes) {
  SPECD_CUDA_RETURN(cudaSetDevice(device_), "cudaSetDevice");
  void* p = nullptr;
  if (const cudaError_t e = cudaMalloc(&p, std::max<size_t>(bytes, 1)); e != cudaSuccess)
    return absl::ResourceExhaustedError(absl::StrCat("cannot allocate ", bytes, " bytes of device memory: ", CudaErr(e)));
  buffers_.push_back(p);
  other_bytes_ += bytes;
  // On the backend's stream: a legacy-stream memset is not ordered before
  // the non-blocking stream's next writes to the buffer.
  SPECD_CUDA_RETURN(cudaMemsetAsync(p, 0, bytes, stream_), "clearing a buffer");
  return p;
}

absl::Status CudaBackend::WriteBytes(const void* host, void* dst, size_t bytes) {
  SPECD_RETURN_IF_ERROR(Flush());
  SPECD_CUDA_RETURN(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, stream_), "WriteBytes");
  return absl::OkStatus();
}

absl::Status CudaBackend::ReadBytes(const void* src, void* host, size_t bytes) {
  SPECD_RETURN_IF_ERROR(Flush());
  // Small results (token ids, decisions) through pinned staging: an
  // asynchronous DMA, then one wait.
  constexpr size_t kStageMax = size_t{1} << 20;
  if (bytes <= kStageMax && bytes > read_stage_cap_) {
    if (read_stage_) cudaFreeHost(read_stage_);
    read_stage_ = nullptr;
    read_stage_cap_ = 0;
    const size_t cap = std::max<size_t>(bytes, 64 << 10);
    SPECD_CUDA_RETURN(cudaMallocHost(&read_stage_, cap), "allocating pinned staging");
    read_stage_cap_ = cap;
  }
  const bool staged = bytes <= read_stage_cap_;
  SPECD_CUDA_RETURN(cudaMemcpyAsync(staged ? read_stage_ : host, src, bytes, cudaMemcpyDeviceToHost, stream_),
                    "ReadBytes");
  SPECD_CUDA_RETURN(cudaStreamSynchronize(stream_), "ReadBytes");
  if (staged) std::memcpy(host, read_stage_, bytes);
  meta_pending_ = false;
  FreeRetired();
  return absl::OkStatus();
}

int CudaBackend::Mark() {
  if (const absl::Status st = Flush(); !st.ok()) Fail(st);  // reported by the next wait
  if (n_marks_ == static_cast<int>(marks_.size())) {
    cudaEvent_t e = nullptr;
    if (cudaEventCreate(&e) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    marks_.push_back(e);
  }
  if (cudaEventRecord(marks_[static_cast<size_t>(n_marks_)], stream_) != cudaSuccess) {
    (void)cudaGetLastError();
    return -1;
  }
  return n_marks_++;
}

double CudaBackend::Seconds(int a, int b) {
  if (a < 0 || b < 0 || a >= n_marks_ || b >= n_marks_) return 0.0;
  float ms = 0;
  if (cudaEventElapsedTime(&ms, marks_[static_cast<size_t>(a)], marks_[static_cast<size_t>(b)]) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0.0;
  }
  return static_cast<double>(ms) * 1e-3;
}

absl::Status CudaBackend::ReadToHost(const float* src, float* host, size_t n) {
  SPECD_RETURN_IF_ERROR(Flush());
  SPECD_CUDA_RETURN(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "ReadToHost");
  SPECD_CUDA_RETURN(cudaStreamSynchronize(stream_), "ReadToHost");
  meta_pending_ = false;
  FreeRetired();
  return absl::OkStatus();
}

absl::Status CudaBackend::Synchronize() {
  SPECD_RETURN_IF_ERROR(Flush());
  SPECD_CUDA_RETURN(cudaStreamSynchronize(stream_), "Synchronize");
  meta_pending_ = false;
  FreeRetired();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& opts) {
  SPECD_ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> b, CudaBackend::Create(opts));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace specd
