#include "common/backend/backend.h"

#include <algorithm>

namespace specd {

size_t KvLayout::BlockBytes() const {
  return static_cast<size_t>(n_kv_heads) * block_size * RowBytes(type, head_dim);
}

int Batch::max_blocks() const {
  size_t m = 0;
  for (const auto& s : seqs) m = std::max(m, s.blocks.size());
  return static_cast<int>(m);
}

}  // namespace specd
