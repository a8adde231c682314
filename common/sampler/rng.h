// Counter-based random numbers: a uniform value is a pure function of
// (seed, stream, counter), so the CPU and CUDA paths draw identical numbers and
// a request's output depends only on its seed and position, never on batching
// or on how many numbers other code consumed.
#pragma once
#include <cstdint>

#include "common/util/hd.h"

namespace specd {

// Streams keep the independent draws of one request apart.
enum RngStream : uint64_t {
  kRngTarget = 1,    // target-only sampling
  kRngDraft = 2,     // the draft's proposals
  kRngAccept = 3,    // acceptance tests
  kRngResidual = 4,  // correction / bonus tokens
};

SPECD_HD uint64_t Mix64(uint64_t z) {
  // splitmix64 finalizer
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits.
SPECD_HD double Uniform01(uint64_t seed, uint64_t stream, uint64_t counter) {
  const uint64_t h = Mix64(Mix64(seed ^ Mix64(stream)) ^ counter);
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace specd
