// The CPU backend's speculative ops: sampling and the acceptance rule run the
// reference implementations (host_sample.h) on the logits where they are
// (host memory), so the CPU needs no copies.
#include <cstring>

#include "common/backend/cpu/cpu_backend.h"
#include "common/backend/host_sample.h"

namespace specd {

void CpuBackend::Sample(const float* logits, int vocab, const std::vector<SampleRow>& rows) {
  Flush();
  SampleOnHost(logits, vocab, rows);
}

void CpuBackend::Accept(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) {
  Flush();
  AcceptOnHost(logits, vocab, seqs);
}

absl::StatusOr<void*> CpuBackend::AllocBuffer(size_t bytes) {
  auto buf = std::make_unique<uint8_t[]>(bytes);  // value-initialized: zeroed
  void* p = buf.get();
  buffers_.push_back(std::move(buf));
  mem_.other += bytes;
  return p;
}

absl::Status CpuBackend::WriteBytes(const void* host, void* dst, size_t bytes) {
  Flush();
  if (host != dst) std::memmove(dst, host, bytes);
  return absl::OkStatus();
}

absl::Status CpuBackend::ReadBytes(const void* src, void* host, size_t bytes) {
  Flush();
  if (src != host) std::memmove(host, src, bytes);
  return absl::OkStatus();
}

int CpuBackend::Mark() {
  Flush();  // queued matmuls belong before the mark
  marks_.push_back(std::chrono::steady_clock::now());
  return static_cast<int>(marks_.size()) - 1;
}

double CpuBackend::Seconds(int a, int b) {
  if (a < 0 || b < 0 || a >= static_cast<int>(marks_.size()) || b >= static_cast<int>(marks_.size())) return 0.0;
  return std::chrono::duration<double>(marks_[static_cast<size_t>(b)] - marks_[static_cast<size_t>(a)]).count();
}

}  // namespace specd
