// One budget for one device (design card, "Memory plan"): every engine that
// holds memory on a device records what it holds in a registry shared by the
// processes of one user, so that the second worker to start sees what the
// first holds and plans against what is left.
//
// The registry is a directory per device (keyed by the device's UUID) under
// a root that every process of the user sees, systemd units included
// (default /dev/shm/specd-registry-UID: /dev/shm is shared even with
// PrivateTmp=, and it is a tmpfs, so nothing outlives a reboot). Each engine
// writes one small text file, atomically (write + rename): its pid and
// process start time, role, model, state, the bytes it holds (or reserved
// before loading) and, for a target, the weights it exports (common/memory/
// weight_manifest.h). Registering happens under an exclusive flock of the
// directory, so two workers starting at once cannot both take the last
// gigabytes. An entry whose process is gone (crash, kill -9) is stale: it is
// ignored and removed by the next reader; the start time guards against a
// reused pid.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/memory/weight_manifest.h"
#include "common/util/status.h"

namespace specd {

// A process, robust to pid reuse: the start time is field 22 of
// /proc/PID/stat (clock ticks since boot).
struct ProcessId {
  int64_t pid = 0;
  uint64_t start = 0;
  bool operator==(const ProcessId&) const = default;
};
ProcessId SelfProcess();
// False when the process is gone or the pid now names another process.
bool ProcessAlive(const ProcessId& p);
// The start time of `pid`; nullopt when it does not exist.
std::optional<uint64_t> ProcessStartTime(int64_t pid);

struct RegistryEntry {
  ProcessId proc;
  int64_t serial = 0;      // engines of one process (a draft swap holds two for a moment)
  std::string role;        // "target", "draft", or the tool's name
  std::string model;       // the model it hosts (path or shape)
  std::string state = "loading";  // "loading": reserved, being allocated; "ready": resident
  uint64_t bytes = 0;      // device memory it holds (or reserved): counted against the budget
  uint64_t shared = 0;     // bytes it maps from another engine's export (held there)
  int64_t shared_from = 0; // the pid whose weights it maps (0: none)
  int64_t budget = -1;     // its own --vram-budget (-1: the device's free memory)
  std::optional<WeightExport> exported;  // the weights it offers to other processes
  std::string Describe() const;          // "pid 12 target m.gguf: 17.2 GiB (ready)"
};

std::string SerializeEntry(const RegistryEntry& e);
absl::StatusOr<RegistryEntry> ParseEntry(const std::string& text);

// What other engines on the device take from an engine's budget: every live
// entry when the budget is a fixed size; only the entries still loading when
// the budget is the device's free memory (the driver already subtracts what
// the others allocated; a reservation not yet allocated it cannot see).
uint64_t BytesAgainstBudget(const std::vector<RegistryEntry>& others, bool budget_is_free_memory);

class DeviceRegistry;

// One registered engine; the entry is removed when this goes (the memory it
// describes must be released first: destroy it after the engine's memory).
class Registration {
 public:
  ~Registration();
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;
  const RegistryEntry& entry() const { return entry_; }
  // Rewrites the entry (state, bytes, export).
  absl::Status Update(const RegistryEntry& e);
  const std::string& path() const { return path_; }

 private:
  friend class DeviceRegistry;
  Registration(std::string path, RegistryEntry e) : path_(std::move(path)), entry_(std::move(e)) {}
  std::string path_;
  RegistryEntry entry_;
};

class DeviceRegistry {
 public:
  // "/dev/shm/specd-registry-UID".
  static std::string DefaultRoot();
  // The registry of `device` (a key such as "GPU-<uuid>"; characters other
  // than [A-Za-z0-9._-] become '_') under `root`, created (mode 0700) when absent.
  static absl::StatusOr<std::unique_ptr<DeviceRegistry>> Open(const std::string& root, const std::string& device);

  const std::string& root() const { return root_; }
  const std::string& dir() const { return dir_; }
  const std::string& device() const { return device_; }

  // The live entries; stale ones are removed (logged).
  absl::StatusOr<std::vector<RegistryEntry>> List() const;

  // Under the registry's lock: `check` sees the live entries and decides
  // (an error refuses and nothing is written); on OK `entry` is written.
  // The serial is assigned here (unique within this process).
  using Check = std::function<absl::Status(const std::vector<RegistryEntry>& live)>;
  absl::StatusOr<std::unique_ptr<Registration>> Register(RegistryEntry entry, const Check& check);

 private:
  DeviceRegistry(std::string root, std::string dir, std::string device)
      : root_(std::move(root)), dir_(std::move(dir)), device_(std::move(device)) {}
  absl::StatusOr<std::vector<RegistryEntry>> ListLocked() const;
  std::string root_, dir_, device_;
};

}  // namespace specd
