// Engines over named shapes with synthetic weights (no file): what bench and
// plan measure for model sizes whose files this machine would not hold.
#pragma once
#include <memory>
#include <string>

#include "common/engine/engine.h"

namespace specd::cli {

// `mix`: a weight type or mix name (modelgen's MixTypeFor).
absl::StatusOr<std::unique_ptr<Engine>> CreatePresetEngine(const std::string& preset, const std::string& mix,
                                                           const EngineOptions& opts);
// The ledger such an engine would have, computed without allocating.
absl::StatusOr<MemoryLedger> PlanPreset(const std::string& preset, const std::string& mix, const EngineOptions& opts,
                                        int64_t device_free);

}  // namespace specd::cli
