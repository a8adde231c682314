// The CPU backend's speculative ops: sampling and the acceptance rule run the
// reference implementations (common/sampler, common/spec/acceptance.h) on the
// logits where they are (host memory), so the CPU needs no copies and the
// CUDA kernels have one definition to follow.
#include <cstring>

#include "common/backend/cpu/cpu_backend.h"
#include "common/sampler/rng.h"
#include "common/spec/acceptance.h"

namespace specd {

void CpuBackend::Sample(const float* logits, int vocab, const std::vector<SampleRow>& rows) {
  Flush();
  thread_local TokenDist dist;
  thread_local std::vector<int32_t> recent;
  for (const SampleRow& r : rows) {
    const float* row = logits + static_cast<size_t>(r.row) * vocab;
    recent.assign(r.recent.begin(), r.recent.end());
    if (r.n_recent_dev > 0) recent.insert(recent.end(), r.recent_dev, r.recent_dev + r.n_recent_dev);
    ProcessLogits(row, vocab, r.params, recent, &dist);
    if (r.token) {
      *r.token = r.params.greedy() ? dist.ids[0]
                                   : SampleDist(dist, Uniform01(r.params.seed, r.stream, r.counter));
    }
    if (r.confidence) *r.confidence = Confidence(row, vocab, r.params, dist);
    if (r.probs) {
      std::memset(r.probs, 0, sizeof(float) * static_cast<size_t>(vocab));
      for (size_t j = 0; j < dist.ids.size(); ++j) r.probs[dist.ids[j]] = dist.probs[j];
    }
  }
}

void CpuBackend::Accept(const float* logits, int vocab, const std::vector<AcceptRows>& seqs) {
  Flush();
  thread_local std::vector<TokenDist> p;
  thread_local std::vector<int32_t> recent;
  for (const AcceptRows& s : seqs) {
    p.resize(static_cast<size_t>(s.k) + 1);
    recent.assign(s.recent.begin(), s.recent.end());
    for (int t = 0; t <= s.k; ++t) {
      ProcessLogits(logits + static_cast<size_t>(s.row0 + t) * vocab, vocab, s.params, recent, &p[t]);
      if (t < s.k) recent.push_back(s.proposals[t]);
    }
    const AcceptResult r = VerifyProposals(p, s.q, s.proposals.data(), s.k, vocab, s.params.seed, s.pos0);
    s.out[0] = r.n_accepted;
    s.out[1] = r.next_token;
    s.out[2] = r.bonus ? 1 : 0;
  }
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
