// An importer of another process's weights must not outlive them: when the
// exporting process exits, the CUDA IPC mapping still pins its memory (the
// dead target's weights, which the restarted target needs room for). So a
// draft worker that maps its target's weights watches that process, on its
// own thread:
//
//   following P  -- P exits -->  drop(P)       the model is unloaded at once;
//                                              requests run target-only
//   waiting      -- a target is ready on the device (registry) -->  reload()
//                   maps the new target's weights, or loads an own copy
//                   when it offers none (each logged by the engine); a
//                   refused reload (budget) is retried when another target
//                   process is ready, or after a model swap
//   idle         -- nothing mapped: nothing to watch
//
// The registry says which targets are ready; liveness is polled (a few
// /proc reads per interval).
#pragma once
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/memory/device_registry.h"

namespace specd {

class ExporterWatch {
 public:
  struct Callbacks {
    // Unload whatever maps `gone`'s weights (called once per exit).
    std::function<void(const ProcessId& gone)> drop;
    // Load again; returns the process the new model maps weights from
    // (pid 0: an own copy), or why it could not load.
    std::function<absl::StatusOr<ProcessId>()> reload;
  };
  enum class State { kIdle, kFollowing, kWaiting };

  ExporterWatch(std::unique_ptr<DeviceRegistry> registry, Callbacks cb,
                std::chrono::milliseconds poll = std::chrono::milliseconds(200));
  ~ExporterWatch();  // stops the thread (not while a callback runs)
  ExporterWatch(const ExporterWatch&) = delete;
  ExporterWatch& operator=(const ExporterWatch&) = delete;

  // The current model maps weights from `p` (pid 0: nothing to follow).
  // After a load the watch did not make itself (start, model swap).
  void Follow(const ProcessId& p);
  State state() const;
  static const char* StateName(State s);

 private:
  void Loop();
  void Step();  // one poll

  std::unique_ptr<DeviceRegistry> registry_;
  Callbacks cb_;
  std::chrono::milliseconds poll_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  State state_ = State::kIdle;
  ProcessId following_;
  ProcessId last_failed_;  // the target a reload failed against (retried when another is ready)
  uint64_t follows_ = 0;   // bumped by Follow: a model swap overrides a pending decision
  std::thread thread_;
};

}  // namespace specd
