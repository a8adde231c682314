#include "common/kv/block_manager.h"

#include <algorithm>

namespace specd {

KvBlockManager::KvBlockManager(int n_blocks, int block_size) : n_blocks_(n_blocks), block_size_(block_size) {
  free_.reserve(n_blocks);
  // Lowest ids on top of the stack, so a fresh pool fills from block 0.
  for (int i = n_blocks - 1; i >= 0; --i) free_.push_back(i);
}

absl::Status KvBlockManager::Create(int32_t seq) {
  if (seqs_.count(seq)) return absl::AlreadyExistsError(absl::StrCat("KV sequence ", seq, " already exists"));
  seqs_[seq] = Seq{};
  return absl::OkStatus();
}

absl::Status KvBlockManager::Reserve(int32_t seq, int64_t len) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("KV sequence ", seq, " does not exist"));
  const int need = BlocksFor(len);
  const int have = static_cast<int>(it->second.blocks.size());
  if (need <= have) return absl::OkStatus();
  if (need - have > free_blocks())
    return absl::ResourceExhaustedError(absl::StrCat("KV pool exhausted: sequence ", seq, " needs ", need - have,
                                                     " more blocks, ", free_blocks(), " free of ", n_blocks_));
  for (int i = have; i < need; ++i) {
    it->second.blocks.push_back(free_.back());
    free_.pop_back();
  }
  return absl::OkStatus();
}

absl::Status KvBlockManager::Truncate(int32_t seq, int64_t len) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("KV sequence ", seq, " does not exist"));
  if (len < 0 || len > it->second.len)
    return absl::OutOfRangeError(absl::StrCat("cannot truncate sequence ", seq, " of length ", it->second.len,
                                              " to ", len));
  it->second.len = len;
  const int keep = BlocksFor(len);
  auto& bl = it->second.blocks;
  while (static_cast<int>(bl.size()) > keep) {
    free_.push_back(bl.back());
    bl.pop_back();
  }
  return absl::OkStatus();
}

absl::Status KvBlockManager::SetLength(int32_t seq, int64_t len) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return absl::NotFoundError(absl::StrCat("KV sequence ", seq, " does not exist"));
  if (BlocksFor(len) > static_cast<int>(it->second.blocks.size()))
    return absl::InternalError(absl::StrCat("sequence ", seq, " length ", len, " exceeds its reserved blocks"));
  it->second.len = len;
  return absl::OkStatus();
}

void KvBlockManager::Release(int32_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  for (auto b : it->second.blocks) free_.push_back(b);
  seqs_.erase(it);
}

int64_t KvBlockManager::Length(int32_t seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? -1 : it->second.len;
}

const std::vector<int32_t>& KvBlockManager::Blocks(int32_t seq) const {
  static const std::vector<int32_t> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

std::vector<int32_t> KvBlockManager::Sequences() const {
  std::vector<int32_t> out;
  for (const auto& [id, s] : seqs_) out.push_back(id);
  return out;
}

}  // namespace specd
