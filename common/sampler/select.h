// The sampler's candidate selection without sorting. top-k and top-p are
// thresholds in one total order of the vocabulary (higher logit first, lower
// id on ties), found by a radix select over 64-bit order keys: each pass
// histograms one 8-bit digit of the keys that match the digits chosen so
// far, and picks the bucket where the running weight from the front (counts
// for top-k, probability mass for top-p) reaches the target. O(vocab) per
// pass, at most 8 passes, usually 2 to 4 (a bucket holding one key, or one
// that fills a count exactly, ends it).
//
// The CPU sampler (sampler.cc) runs the passes in a loop; the CUDA sampler
// (common/backend/cuda/k_sample.cu) builds each histogram with a thread
// block. The key and the bucket choice below are shared by both.
#pragma once
#include <cstdint>
#include <cstring>

#include "common/util/hd.h"

namespace specd {

// Ascending keys are the sampler's order: descending logit, then ascending
// id. NaN counts as -inf and -0 as +0, as the sampler compares them.
SPECD_HD uint32_t OrderBits(float l) {
  uint32_t u;
  if (!(l == l)) {
    u = 0xff800000u;  // -inf
  } else {
    if (l == 0.0f) l = 0.0f;
    std::memcpy(&u, &l, sizeof(u));
  }
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);  // ascending with the float
  return ~u;                                        // descending
}

SPECD_HD uint64_t OrderKey(float l, int32_t id) {
  return (static_cast<uint64_t>(OrderBits(l)) << 32) | static_cast<uint32_t>(id);
}

constexpr int kSelectBuckets = 256;
constexpr uint64_t kSelectAll = ~uint64_t{0};

// Cutoffs below the top logit (1, 2, 4, ... 32 logit units): the candidates
// of top-k and top-p usually lie close to the top, so both samplers select
// among the values at or above the nearest cutoff that holds enough of them
// (count for top-k, mass for top-p), not the whole row.
constexpr int kSelectCuts = 6;
SPECD_HD float SelectCut(float top, int c) { return top - static_cast<float>(1 << c); }

// One radix select, pass by pass: histogram the keys (at most `within`)
// for which Matches() holds by Digit(), then Advance(). When done(), the
// selection is the keys <= min(threshold, within): the fewest keys from the
// front whose weight reaches the target (all of them when it is out of
// reach). (A bucket's threshold is its largest possible key, which may lie
// past `within`: hence the min.)
// (No member initializers: the CUDA sampler keeps one in __shared__ memory,
// which cannot be dynamically initialized. Start with Start().)
struct RadixSelect {
  uint64_t prefix;  // digits chosen so far (bits at and above shift + 8)
  int shift;        // this pass histograms bits [shift, shift + 8)
  double below;     // weight of the matching-prefix keys before the chosen buckets
  bool finished;
  uint64_t threshold;

  SPECD_HD static RadixSelect Start() { return RadixSelect{0, 56, 0.0, false, kSelectAll}; }

  SPECD_HD bool done() const { return finished; }
  SPECD_HD bool Matches(uint64_t key) const { return shift >= 56 || (key >> (shift + 8)) == (prefix >> (shift + 8)); }
  SPECD_HD int Digit(uint64_t key) const { return static_cast<int>((key >> shift) & 0xff); }

  // weight[d], count[d]: the matching keys with digit d. counting: weights are
  // counts (a bucket that fills the target exactly needs no further pass).
  SPECD_HD void Advance(const double* weight, const uint32_t* count, double target, bool counting) {
    double acc = below;
    int d = 0;
    for (; d < kSelectBuckets; ++d) {
      if (count[d] > 0 && acc + weight[d] >= target) break;
      acc += weight[d];
    }
    if (d == kSelectBuckets) {  // out of reach (rounding): everything
      finished = true;
      threshold = kSelectAll;
      return;
    }
    below = acc;
    prefix |= static_cast<uint64_t>(d) << shift;
    const uint64_t low = shift == 0 ? 0 : (uint64_t{1} << shift) - 1;
    if (shift == 0 || count[d] == 1 || (counting && acc + weight[d] == target)) {
      finished = true;  // the bucket's keys are all in: its largest key is the threshold
      threshold = prefix | low;
      return;
    }
    shift -= 8;
  }
};

}  // namespace specd
