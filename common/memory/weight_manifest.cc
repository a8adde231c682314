#include "common/memory/weight_manifest.h"

#include <algorithm>
#include <atomic>
#include <thread>
#include <unordered_map>

#include "absl/strings/str_join.h"
#include "common/util/config.h"
#include "common/util/digest.h"

namespace specd {
namespace {

TensorRecord RecordOf(const GgufTensorInfo& t) {
  TensorRecord r;
  r.name = t.name;
  r.type = t.type;
  r.ne0 = t.ne.empty() ? 1 : t.ne[0];
  r.rows = t.rows();
  r.nbytes = t.nbytes;
  return r;
}

// Runs fn(i) for i in [0, n) on up to `threads` threads (largest first is
// the caller's business): digests are independent, one tensor per task.
void ParallelEach(size_t n, int threads, const std::function<void(size_t)>& fn) {
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  threads = static_cast<int>(std::min<size_t>(static_cast<size_t>(threads), n));
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) fn(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
}

}  // namespace

std::vector<TensorRecord> DigestTensors(const GgufFile& file, int threads,
                                        const std::function<bool(const GgufTensorInfo&)>& which) {
  std::vector<const GgufTensorInfo*> picked;
  for (const auto& t : file.tensors()) {
    if (!which || which(t)) picked.push_back(&t);
  }
  // Largest first, so that one big tensor does not finish last on one thread.
  std::vector<size_t> order(picked.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return picked[a]->nbytes > picked[b]->nbytes; });
  std::vector<TensorRecord> out(picked.size());
  ParallelEach(order.size(), threads, [&](size_t k) {
    const size_t i = order[k];
    out[i] = RecordOf(*picked[i]);
    out[i].digest = Sha256Hex(picked[i]->data, picked[i]->nbytes);
  });
  return out;
}

std::string SharePlan::Describe() const {
  std::string s = absl::StrCat(tensors.size(), " tensors, ", Config::FormatBytes(static_cast<int64_t>(bytes)));
  std::vector<std::string> why;
  if (other_content) why.push_back(absl::StrCat(other_content, " with other content"));
  if (other_shape) why.push_back(absl::StrCat(other_shape, " of another type or shape"));
  if (not_offered) why.push_back(absl::StrCat(not_offered, " not offered"));
  if (!why.empty()) absl::StrAppend(&s, "; not shared: ", absl::StrJoin(why, ", "));
  return s;
}

SharePlan MatchTensors(const GgufFile& file, const WeightExport& exp, int threads) {
  SharePlan plan;
  std::unordered_map<std::string, const TensorRecord*> offered;
  for (const TensorRecord& r : exp.tensors) {
    if (r.offset > exp.bytes || r.nbytes > exp.bytes - r.offset) return plan;  // corrupt: share nothing
    offered.emplace(r.name, &r);
  }
  std::vector<std::pair<const GgufTensorInfo*, const TensorRecord*>> candidates;
  for (const auto& t : file.tensors()) {
    auto it = offered.find(t.name);
    if (it == offered.end()) {
      ++plan.not_offered;
      continue;
    }
    const TensorRecord mine = RecordOf(t);
    const TensorRecord& theirs = *it->second;
    if (mine.type != theirs.type || mine.ne0 != theirs.ne0 || mine.rows != theirs.rows || mine.nbytes != theirs.nbytes) {
      ++plan.other_shape;
      continue;
    }
    candidates.emplace_back(&t, &theirs);
  }
  std::vector<char> same(candidates.size(), 0);
  ParallelEach(candidates.size(), threads, [&](size_t i) {
    same[i] = Sha256Hex(candidates[i].first->data, candidates[i].first->nbytes) == candidates[i].second->digest;
  });
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (!same[i]) {
      ++plan.other_content;
      continue;
    }
    const TensorRecord& r = *candidates[i].second;
    plan.tensors.push_back({r.name, r.offset, r.nbytes});
    plan.bytes += r.nbytes;
  }
  return plan;
}

}  // namespace specd
