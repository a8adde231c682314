// The driver's own account of device memory (NVML), when the driver has it.
//
// libnvidia-ml.so.1 ships with the NVIDIA driver (not the toolkit, and not
// in every container), so it is loaded at run time, never linked: without
// it these calls say why and the memory plan relies on the registry's
// planned figures alone.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "common/util/status.h"

namespace specd {

struct DriverProcessMemory {
  int64_t pid = 0;
  uint64_t bytes = 0;  // device memory the driver charges to the process (nvidia-smi's figure)
};

// The compute processes on the device named `uuid` ("GPU-8-4-4-4-12" as
// nvidia-smi prints it) and their memory. UNAVAILABLE when NVML cannot be
// loaded or answer. Pids are the driver's: inside a pid namespace they may
// not be this process's view (a caller that cannot find itself ignores them).
absl::StatusOr<std::vector<DriverProcessMemory>> DriverProcessesOn(const std::string& uuid);

// The driver's figure for one process on that device; NOT_FOUND when the
// driver lists no such process (or not with this pid).
absl::StatusOr<uint64_t> DriverMemoryOf(const std::string& uuid, int64_t pid);

}  // namespace specd
