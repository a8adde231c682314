// Memory one process allocates and another maps by a handle.
//
// The draft worker's exchange buffer is one: the draft writes proposal
// probabilities into it, the target reads them, and gRPC carries only the
// handle. Implementation: "posix" (POSIX shared memory). Device memory is not
// a SharedBuffer (it has no host address): the exchange buffer's "cuda" kind
// is a posix buffer whose header records CUDA IPC device rows
// (common/shm/exchange.h, common/engine/exchange_device.h).
#pragma once
#include <cstddef>
#include <memory>
#include <string>

#include "common/util/status.h"

namespace specd {

class SharedBuffer {
 public:
  virtual ~SharedBuffer() = default;
  // The implementation, e.g. "posix".
  virtual std::string Kind() const = 0;
  // The handle another process passes to Open.
  virtual const std::string& Name() const = 0;
  virtual void* data() = 0;
  virtual const void* data() const = 0;
  virtual size_t size() const = 0;
  virtual bool writable() const = 0;
  // True for the creator: the buffer's name is removed when it is destroyed.
  virtual bool owner() const = 0;
};

// Allocates a zero-filled buffer of `bytes` with a name unique to this process.
absl::StatusOr<std::unique_ptr<SharedBuffer>> CreateSharedBuffer(const std::string& kind, size_t bytes);
// Maps a buffer another process created. Bad handles are errors, never crashes.
absl::StatusOr<std::unique_ptr<SharedBuffer>> OpenSharedBuffer(const std::string& kind, const std::string& name,
                                                               bool writable);

}  // namespace specd
