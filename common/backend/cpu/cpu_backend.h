// The CPU backend: multithreaded kernels on host memory. Weights are used in
// place from the GGUF mapping (zero copy) and multiplied in their quantized
// form. Every kernel computes a token's result independently of the other
// tokens in the batch, in a fixed order, so batched verification reproduces
// single-token decoding bit for bit.
#pragma once
#include <chrono>
#include <memory>
#include <vector>

#include "common/backend/backend.h"
#include "common/util/thread_pool.h"

namespace specd {

class CpuBackend : public Backend {
 public:
  explicit CpuBackend(int threads, int64_t spin_us = ThreadPool::kDefaultSpinUs);
  ~CpuBackend() override;

  std::string Name() const override { return "cpu"; }
  size_t AvailableMemory() const override;
  absl::StatusOr<Weight> LoadWeight(const WeightSource& src) override;
  absl::Status InitKv(const KvLayout& layout) override;
  absl::StatusOr<float*> AllocActivations(size_t n_floats) override;
  BackendMemory Memory() const override { return mem_; }

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
  absl::StatusOr<void*> AllocBuffer(size_t bytes) override;
  absl::Status WriteBytes(const void* host, void* dst, size_t bytes) override;
  bool HostMemory() const override { return true; }
  int Mark() override;
  double Seconds(int a, int b) override;
  void ClearMarks() override { marks_.clear(); }
  absl::Status ReadToHost(const float* src, float* host, size_t n) override;
  absl::Status ReadBytes(const void* src, void* host, size_t bytes) override;
  absl::Status Synchronize() override;
  double MeasureCopyBandwidth(size_t bytes) override;

  int threads() const { return pool_.size(); }
  // Quantized weights multiply float activations (the exact, slower path)
  // instead of int8-quantized ones. Default off: int8 (see quant.h).
  void set_float_activations(bool on) { float_activations_ = on; }
  // The same for the weights whose tensor name holds `pattern` ("all": every
  // one; empty: none beyond set_float_activations): an accuracy A/B.
  void set_float_activations_for(std::string pattern) { float_pattern_ = std::move(pattern); }

 private:
  // Address of the K (or V) row of one KV head at one position of a sequence.
  uint8_t* KvRow(int layer, bool is_v, const BatchSeq& s, int pos, int kv_head) const;

  // MatMuls are queued and run together at the next other op (or when one
  // reads another's output): q/k/v and gate/up then share one ParallelFor and
  // one activation quantization. Per-row arithmetic is unchanged.
  struct PendingMatMul {
    Weight w;
    const float* bias;
    const float* x;
    int n;
    float* y;
    bool int8;
    size_t xq_off;  // quantized input at act_q_ + xq_off (int8)
  };
  void Flush();

  ThreadPool pool_;
  std::vector<PendingMatMul> pending_;
  const Batch* batch_ = nullptr;  // set by SetBatch; valid during the forward pass
  Batch fed_batch_;               // the batch with its fed tokens read (when it has any)
  std::vector<std::unique_ptr<uint8_t[]>> buffers_;  // AllocBuffer
  std::vector<std::chrono::steady_clock::time_point> marks_;
  KvLayout kv_;
  size_t kv_row_bytes_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> k_pool_, v_pool_;  // per layer
  std::vector<std::unique_ptr<float[]>> activations_;
  std::vector<std::unique_ptr<uint8_t[]>> synthetic_;  // weights made in place
  std::unique_ptr<uint8_t[]> act_q_;  // int8-quantized MatMul inputs (grown on demand)
  size_t act_q_bytes_ = 0;
  bool float_activations_ = false;
  std::string float_pattern_;
  BackendMemory mem_;
};

}  // namespace specd
