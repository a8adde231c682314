// Weights shared between processes on one device: the device half.
// (common/memory/weight_manifest.h decides which tensors are the same;
// common/memory/device_registry.h is where an export is published.)
//
// A target that exports puts all its weights in one plain cudaMalloc
// allocation (CUDA IPC handles cannot be taken of the backend's virtual-
// memory arena) and publishes that allocation's cudaIpcMemHandle with each
// tensor's offset and digest. A draft on the same device maps the
// allocation once (cudaIpcOpenMemHandle) and wraps the tensors its own file
// holds identically (Model::Load's ResidentWeights); only the rest is
// loaded. An importer in the exporter's own process (in-process pairs, `specd
// plan --allocate`) uses the exporter's address directly.
//
// The mapping keeps the exporter's memory alive even after the exporter
// exits, so an importer must drop it when the exporter goes (the draft worker
// watches the exporter's pid) and re-map the next one, or load its own copy.
//
// The CPU backend never shares (the weights stay in the file mapping, which
// the page cache already shares between processes): both sides log that and
// go on. Tests can make it share anyway, to run the whole protocol without a
// GPU: export kind "file", the target's GGUF file named and mapped again by
// the importer (SetFileWeightSharingForTesting in process; the environment
// variable SPECD_TEST_WEIGHT_SHARING=file for worker processes, logged).
// This header has no CUDA in it; builds without CUDA say so.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/backend/backend.h"
#include "common/memory/device_registry.h"
#include "common/memory/weight_manifest.h"
#include "common/model/model.h"

namespace specd {

// The exporter's side: the region the weights are placed in.
class WeightExporter {
 public:
  virtual ~WeightExporter() = default;  // frees the region: destroy after the model
  // The export of the loaded model: each weight's offset in the region, with
  // its record (type, shape, digest) from `records` (by name); weights
  // without a record are not offered.
  virtual absl::StatusOr<WeightExport> Describe(const Model& model,
                                                const std::vector<TensorRecord>& records) const = 0;
};

// OK when weights can be shared on `backend`: a CUDA build on the cuda
// backend (or the tests' in-place mode); otherwise why not.
absl::Status WeightSharingSupport(const Backend& backend);

// Makes `backend` place the weights of `file` it loads next in an
// exportable region of `bytes` on `device`. UNIMPLEMENTED where
// WeightSharingSupport says so.
absl::StatusOr<std::unique_ptr<WeightExporter>> PrepareWeightExport(Backend* backend, int device, size_t bytes,
                                                                    const GgufFile& file);

// An importer's mapping of another engine's export (one per export and
// process, shared by the engines that use it: a draft swap maps it twice).
class WeightImport {
 public:
  virtual ~WeightImport() = default;  // unmaps
  virtual const uint8_t* base() const = 0;
  virtual std::string Describe() const = 0;  // "CUDA IPC mapping of pid 12's 17.2 GiB"
};

// Maps `exp`, published by process `owner_pid`, on `device`.
absl::StatusOr<std::shared_ptr<WeightImport>> OpenWeightImport(const WeightExport& exp, int64_t owner_pid,
                                                               int device);

// What an importer maps: of the live, ready exports in `live` with the
// backend's weight layout (a target worker's, or one of this process), the
// one holding the most of `file`'s bytes identically. Never an error: when nothing is mapped the result is empty
// and `why` says why (for the log).
struct SharedWeights {
  std::shared_ptr<WeightImport> import;
  ResidentWeights resident;  // tensor name -> address in the mapping
  uint64_t bytes = 0;
  ProcessId from;
  std::string description;   // what was matched and mapped, for the log
};
SharedWeights FindSharedWeights(const std::vector<RegistryEntry>& live, const GgufFile& file, const Backend& backend,
                                int device, int threads, std::string* why);

// Tests without a GPU: while on, the cpu backend exports and imports kind "file".
void SetFileWeightSharingForTesting(bool on);

}  // namespace specd
