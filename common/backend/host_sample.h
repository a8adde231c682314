// The speculative ops (Backend::Sample, Backend::Accept) on rows in host
// memory, by the reference rules (common/sampler, common/spec/acceptance.h):
// the CPU backend's implementation, and the CUDA backend's fallback, which
// reads the rows back first (BackendOptions::cuda_device_sampling off).
#pragma once
#include <vector>

#include "common/backend/backend.h"

namespace specd {

// `logits` and every pointer in `rows` are host memory.
void SampleOnHost(const float* logits, int vocab, const std::vector<SampleRow>& rows);
// `logits`, q and out of every sequence are host memory.
void AcceptOnHost(const float* logits, int vocab, const std::vector<AcceptRows>& seqs);

}  // namespace specd
