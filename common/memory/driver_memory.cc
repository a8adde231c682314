#include "common/memory/driver_memory.h"

#include <dlfcn.h>

#include <mutex>

namespace specd {
namespace {

// The few NVML declarations used (nvml.h is not part of every toolkit
// install): nvmlProcessInfo_v2_t, which the _v2 and _v3 queries fill.
using NvmlDevice = void*;
struct NvmlProcessInfo {
  unsigned int pid;
  unsigned long long used_gpu_memory;
  unsigned int gpu_instance_id;
  unsigned int compute_instance_id;
};
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;
constexpr unsigned long long kNvmlValueNotAvailable = ~0ull;

struct Nvml {
  int (*init)() = nullptr;
  int (*by_uuid)(const char*, NvmlDevice*) = nullptr;
  int (*procs)(NvmlDevice, unsigned int*, NvmlProcessInfo*) = nullptr;
  const char* (*error_string)(int) = nullptr;
  std::string why;  // non-empty: unusable
};

const Nvml& Get() {
  static Nvml n;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      n.why = std::string("NVML not available (libnvidia-ml.so.1: ") + dlerror() + ")";
      return;
    }
    n.init = reinterpret_cast<int (*)()>(dlsym(h, "nvmlInit_v2"));
    n.by_uuid = reinterpret_cast<int (*)(const char*, NvmlDevice*)>(dlsym(h, "nvmlDeviceGetHandleByUUID"));
    n.procs = reinterpret_cast<int (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
        dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v3"));
    if (!n.procs)
      n.procs = reinterpret_cast<int (*)(NvmlDevice, unsigned int*, NvmlProcessInfo*)>(
          dlsym(h, "nvmlDeviceGetComputeRunningProcesses_v2"));
    n.error_string = reinterpret_cast<const char* (*)(int)>(dlsym(h, "nvmlErrorString"));
    if (!n.init || !n.by_uuid || !n.procs) {
      n.why = "NVML too old (no nvmlDeviceGetComputeRunningProcesses_v2/_v3)";
      return;
    }
    if (const int r = n.init(); r != kNvmlSuccess) n.why = absl::StrCat("nvmlInit failed (", r, ")");
  });
  return n;
}

std::string Err(const Nvml& n, int r) {
  return n.error_string ? absl::StrCat(n.error_string(r), " (", r, ")") : absl::StrCat("error ", r);
}

}  // namespace

absl::StatusOr<std::vector<DriverProcessMemory>> DriverProcessesOn(const std::string& uuid) {
  const Nvml& n = Get();
  if (!n.why.empty()) return absl::UnavailableError(n.why);
  NvmlDevice dev = nullptr;
  if (const int r = n.by_uuid(uuid.c_str(), &dev); r != kNvmlSuccess)
    return absl::UnavailableError(absl::StrCat("NVML does not know device ", uuid, ": ", Err(n, r)));
  std::vector<NvmlProcessInfo> infos(64);
  for (int attempt = 0; attempt < 4; ++attempt) {
    unsigned int count = static_cast<unsigned int>(infos.size());
    const int r = n.procs(dev, &count, infos.data());
    if (r == kNvmlInsufficientSize) {
      infos.resize(static_cast<size_t>(count) + 16);  // processes came meanwhile: ask again
      continue;
    }
    if (r != kNvmlSuccess) return absl::UnavailableError(absl::StrCat("NVML process query failed: ", Err(n, r)));
    std::vector<DriverProcessMemory> out;
    for (unsigned int i = 0; i < count; ++i) {
      if (infos[i].used_gpu_memory == kNvmlValueNotAvailable) continue;
      out.push_back({static_cast<int64_t>(infos[i].pid), infos[i].used_gpu_memory});
    }
    return out;
  }
  return absl::UnavailableError("NVML process list kept growing");
}

absl::StatusOr<uint64_t> DriverMemoryOf(const std::string& uuid, int64_t pid) {
  SPECD_ASSIGN_OR_RETURN(auto procs, DriverProcessesOn(uuid));
  for (const DriverProcessMemory& p : procs) {
    if (p.pid == pid) return p.bytes;
  }
  return absl::NotFoundError(absl::StrCat("the driver lists no process ", pid, " on ", uuid));
}

}  // namespace specd
