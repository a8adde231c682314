#include "common/quant/block_random.h"
#include "common/quant/quant.h"

namespace specd {
namespace {

template <GgmlType T>
void Fill(uint8_t* dst, int64_t first, int64_t n, uint64_t seed, float sigma) {
  for (int64_t b = 0; b < n; ++b) RandomBlock<T>(dst + b * kRandomBlockBytes<T>, seed, first + b, sigma);
}

}  // namespace

absl::Status RandomBlocks(GgmlType type, void* dst_v, int64_t first, int64_t n, uint64_t seed, float sigma) {
  auto* dst = static_cast<uint8_t*>(dst_v);
  switch (type) {
    case GgmlType::F32: Fill<GgmlType::F32>(dst, first, n, seed, sigma); break;
    case GgmlType::F16: Fill<GgmlType::F16>(dst, first, n, seed, sigma); break;
    case GgmlType::BF16: Fill<GgmlType::BF16>(dst, first, n, seed, sigma); break;
    case GgmlType::Q4_0: Fill<GgmlType::Q4_0>(dst, first, n, seed, sigma); break;
    case GgmlType::Q4_1: Fill<GgmlType::Q4_1>(dst, first, n, seed, sigma); break;
    case GgmlType::Q5_0: Fill<GgmlType::Q5_0>(dst, first, n, seed, sigma); break;
    case GgmlType::Q5_1: Fill<GgmlType::Q5_1>(dst, first, n, seed, sigma); break;
    case GgmlType::Q8_0: Fill<GgmlType::Q8_0>(dst, first, n, seed, sigma); break;
    case GgmlType::Q2_K: Fill<GgmlType::Q2_K>(dst, first, n, seed, sigma); break;
    case GgmlType::Q3_K: Fill<GgmlType::Q3_K>(dst, first, n, seed, sigma); break;
    case GgmlType::Q4_K: Fill<GgmlType::Q4_K>(dst, first, n, seed, sigma); break;
    case GgmlType::Q5_K: Fill<GgmlType::Q5_K>(dst, first, n, seed, sigma); break;
    case GgmlType::Q6_K: Fill<GgmlType::Q6_K>(dst, first, n, seed, sigma); break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("no random blocks for type ", std::string(TypeName(type))));
  }
  return absl::OkStatus();
}

}  // namespace specd
