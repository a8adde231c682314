// The device half of the exchange buffer (design card: "shared memory, not
// payloads"): exchange kind "cuda".
//
// When the draft runs on the CUDA backend, LocalDraft keeps a copy of its
// exchange rows in device memory exported with cudaIpcGetMemHandle (its
// handle recorded in the buffer's header, common/shm/exchange.h), copying
// each step's q rows there before it publishes the generation. A target on
// the CUDA backend maps those rows once per attach and applies the
// acceptance rule on the GPU (k_accept.cu) against its own processed
// distributions. Everything else (header, generations, tokens, and the host
// rows) stays in POSIX shared memory, so a target on the CPU backend, or one
// where the IPC mapping fails, reads the host rows: the host path.
//
// This header has no CUDA in it: builds without CUDA get implementations
// that say so, and tests without a GPU can install a stand-in device.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/engine/engine.h"
#include "common/shm/exchange.h"
#include "common/spec/acceptance.h"

namespace specd {

// The draft's side: device rows exported for the target.
class DeviceRowsExport {
 public:
  virtual ~DeviceRowsExport() = default;
  // Enqueues the copy of slot `slot`'s first `rows` host rows to the device.
  virtual absl::Status Enqueue(int slot, int rows) = 0;
  // Waits for the enqueued copies; the proposals may be published after OK.
  virtual absl::Status Wait() = 0;
  virtual std::string Describe() const = 0;  // for the log
};

// The target's side: the draft's device rows mapped, and the acceptance rule.
class DeviceAcceptor {
 public:
  virtual ~DeviceAcceptor() = default;
  // The decisions of VerifyProposals(p, q, proposals, ...) where q is slot
  // `slot`'s first proposals.size() device rows.
  virtual absl::StatusOr<AcceptResult> Accept(int slot, const std::vector<TokenDist>& p,
                                              std::span<const int32_t> proposals, uint64_t seed, int64_t pos0) = 0;
  virtual std::string Describe() const = 0;
};

// OK when `engine` can use device rows: the build has CUDA and the engine
// runs on the CUDA backend (or a test stand-in is installed); otherwise why not.
absl::Status DeviceExchangeSupport(const Engine& engine);

// Allocates device rows for `xb` (the creator's buffer) on the engine's
// device and records them in its header: xb->kind() becomes "cuda".
absl::StatusOr<std::unique_ptr<DeviceRowsExport>> ExportDeviceRows(const Engine& engine, ExchangeBuffer* xb);

// Maps the device rows an attached buffer records, on the engine's device.
absl::StatusOr<std::unique_ptr<DeviceAcceptor>> OpenDeviceRows(const Engine& engine, const ExchangeBuffer& xb);

// A stand-in device for tests without a GPU: while installed, these replace
// the CUDA implementations and DeviceExchangeSupport is OK for every backend.
struct DeviceExchangeHooks {
  std::function<absl::StatusOr<std::unique_ptr<DeviceRowsExport>>(const Engine&, ExchangeBuffer*)> export_rows;
  std::function<absl::StatusOr<std::unique_ptr<DeviceAcceptor>>(const Engine&, const ExchangeBuffer&)> open_rows;
};
void SetDeviceExchangeHooksForTesting(std::optional<DeviceExchangeHooks> hooks);

}  // namespace specd
