// The CUDA backend: the Backend interface on one GPU and one stream.
//
// Weights are uploaded once into device memory (a growable virtual-memory
// arena, so the committed bytes equal the weights rounded to one 2 MiB page);
// the KV pool and the activations are single device allocations; nothing
// ever lives in host or managed memory. Ops return void: they are recorded and
// enqueued when the batch is flushed (next SetBatch, ReadToHost or
// Synchronize), and the first error is returned from that call. A decode or
// verify batch (up to 64 tokens) is replayed from a CUDA graph captured for
// its shape and op sequence (the second time that shape runs: one-off shapes
// run eagerly); the batch metadata lives in fixed device buffers that are
// refreshed before each replay.
//
// Numerics: for batches of up to 64 tokens every output element is computed
// in an order that depends only on the shapes, never on the batch, so a k+1
// token verify reproduces single-token decode bit for bit. Larger (prefill)
// batches use cuBLAS on F16 tiles (FP32 accumulation).
#pragma once
#include <cstdint>
#include <memory>

#include "common/backend/backend.h"

namespace specd {

// Creates the backend on opts.device. Errors: "no CUDA device available: ..."
// when the runtime finds none.
absl::StatusOr<std::unique_ptr<Backend>> CreateCudaBackend(const BackendOptions& opts);

// Extra controls for tests and benchmarks (dynamic_cast from Backend*).
class CudaBackendControl {
 public:
  virtual ~CudaBackendControl() = default;
  // The cudaStream_t every op runs on.
  virtual void* Stream() const = 0;
  // Enqueues the recorded ops now (without waiting for them).
  virtual absl::Status Flush() = 0;
  enum class MatMulPath {
    kAuto,     // tensor-core matvec up to 64 columns, cuBLAS above
    kDequant,  // reference: dequantize to F32 + FP32 matvec (any column count)
    kGemm,     // always dequantize to F16 + cuBLAS
  };
  virtual void SetMatMulPath(MatMulPath p) = 0;
  virtual void SetGraphs(bool on) = 0;
  struct Stats {
    int64_t flushes = 0, graph_launches = 0, graph_captures = 0, eager_flushes = 0;
    int64_t first_runs = 0;  // eager_flushes of a shape's first run (graphs on): with graph_captures, ColdRuns()
    int64_t graph_drops = 0;  // times a buffer the graphs point at moved and they were all dropped
    size_t workspace_bytes = 0;  // scratch, cuBLAS workspace, tables, metadata
  };
  virtual Stats GetStats() const = 0;
};

inline CudaBackendControl* AsCudaControl(Backend* b) { return dynamic_cast<CudaBackendControl*>(b); }

}  // namespace specd
