// Weights shared between processes: which tensors are the same.
//
// A draft derived from its target (`specd make-model --pair`) holds the
// target's token embedding, output head and first layers byte for byte; two
// processes on one device need only one copy. The target publishes, for each
// tensor it holds, its name, type, shape, size, where it lies in the device
// region the target exports, and a SHA-256 of its bytes computed from the
// target's file at load. A draft maps a tensor from that region only when
// name, type, shape, size and digest all equal its own file's tensor (the
// digest computed from the draft's file): identity is decided on content,
// never on names alone. The region also names the backend's weight layout,
// so a build that stores weights differently on the device never shares
// with this one.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/gguf/gguf.h"
#include "common/util/status.h"

namespace specd {

struct TensorRecord {
  std::string name;
  GgmlType type = GgmlType::F32;
  int64_t ne0 = 0;       // row length
  int64_t rows = 1;      // every dimension past the first, folded
  uint64_t offset = 0;   // in the exported region
  uint64_t nbytes = 0;
  std::string digest;    // SHA-256 of the nbytes bytes, hex
};

// The weights one process offers (a target worker's whole model).
struct WeightExport {
  std::string kind;    // how to open it: "cuda-ipc" (a cudaIpcMemHandle), "test" (tests' stand-in)
  std::string layout;  // the backend's weight layout on the device (Backend::WeightLayout)
  std::string handle;  // the opaque bytes that open the region in another process
  uint64_t bytes = 0;  // the region's size
  uint64_t base = 0;   // its address in the exporting process (an importer in that process uses it)
  int32_t device = 0;  // the exporter's device ordinal (the registry's key names the device)
  std::vector<TensorRecord> tensors;
};

// Records of `file`'s tensors (those `which` selects; all when empty), with
// digests computed on up to `threads` threads (<= 0: hardware concurrency).
// Offsets are 0: the caller places them.
std::vector<TensorRecord> DigestTensors(const GgufFile& file, int threads,
                                        const std::function<bool(const GgufTensorInfo&)>& which = {});

// The tensors of a file that another process's export holds identically.
struct SharePlan {
  struct Item {
    std::string name;
    uint64_t offset = 0;  // in the export's region
    uint64_t nbytes = 0;
  };
  std::vector<Item> tensors;
  uint64_t bytes = 0;  // sum of nbytes
  // Tensors not shared, by reason (for the log).
  int not_offered = 0;      // no tensor of that name in the export
  int other_shape = 0;      // same name, another type, shape or size
  int other_content = 0;    // same name, type and shape, other bytes
  std::string Describe() const;  // "12 tensors, 1.49 GiB; not shared: 2 other content, 3 not offered"
};

// Which of `file`'s tensors `exp` holds identically (digests of candidates
// only, on up to `threads` threads). An export that does not lie within its
// region (a corrupt registry entry) matches nothing.
SharePlan MatchTensors(const GgufFile& file, const WeightExport& exp, int threads);

}  // namespace specd
