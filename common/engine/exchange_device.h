// The device half of the exchange buffer (design card: "shared memory, not
// payloads"): exchange kind "cuda".
//
// When the draft runs on the CUDA backend, LocalDraft keeps its exchange rows
// in device memory exported with cudaIpcGetMemHandle (the handle recorded in
// the buffer's header, common/shm/exchange.h): the draft's sampler writes
// each sampled proposal's q rows there directly (Backend::Sample), with no
// host copy. A target on the CUDA backend maps those rows once per attach
// and its acceptance kernel (Backend::Accept) reads them in place. Header,
// generations and tokens stay in POSIX shared memory; a target that cannot
// map the rows (CPU backend, IPC unavailable, --exchange-path host) asks for
// host rows (ExchangeBuffer::RequestHostRows) and reads those: the host path.
// Greedy proposals have no rows at all (q is one-hot at the tokens).
//
// This header has no CUDA in it: builds without CUDA get implementations
// that say so, and tests without a GPU can install a stand-in device.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "common/engine/engine.h"
#include "common/shm/exchange.h"

namespace specd {

// The draft's side: device rows exported for the target.
class DeviceRowsExport {
 public:
  virtual ~DeviceRowsExport() = default;
  // Slot `slot`'s k_max x vocab rows: an address in the draft engine's
  // backend memory, where its sampler writes them.
  virtual float* Rows(int slot) = 0;
  virtual std::string Describe() const = 0;  // for the log
};

// The target's side: the draft's device rows, mapped into the target
// engine's backend memory.
class DeviceRowsImport {
 public:
  virtual ~DeviceRowsImport() = default;
  // Slot `slot`'s rows (an error: the mapping is unusable).
  virtual absl::StatusOr<const float*> Rows(int slot) = 0;
  virtual std::string Describe() const = 0;
};

// OK when `engine` can use device rows: the build has CUDA and the engine
// runs on the CUDA backend (or a test stand-in is installed); otherwise why not.
absl::Status DeviceExchangeSupport(const Engine& engine);

// Allocates device rows for `xb` (the creator's buffer) on the engine's
// device and records them in its header: xb->kind() becomes "cuda".
absl::StatusOr<std::unique_ptr<DeviceRowsExport>> ExportDeviceRows(const Engine& engine, ExchangeBuffer* xb);

// Maps the device rows an attached buffer records, on the engine's device.
absl::StatusOr<std::unique_ptr<DeviceRowsImport>> OpenDeviceRows(const Engine& engine, const ExchangeBuffer& xb);

// A stand-in device for tests without a GPU: while installed, these replace
// the CUDA implementations and DeviceExchangeSupport is OK for every backend.
struct DeviceExchangeHooks {
  std::function<absl::StatusOr<std::unique_ptr<DeviceRowsExport>>(const Engine&, ExchangeBuffer*)> export_rows;
  std::function<absl::StatusOr<std::unique_ptr<DeviceRowsImport>>(const Engine&, const ExchangeBuffer&)> open_rows;
};
void SetDeviceExchangeHooksForTesting(std::optional<DeviceExchangeHooks> hooks);

}  // namespace specd
