#include "common/shm/shared_buffer.h"

#include "common/shm/posix_shared_buffer.h"

namespace specd {

// One place that knows every implementation; the CUDA IPC one joins here.
absl::StatusOr<std::unique_ptr<SharedBuffer>> CreateSharedBuffer(const std::string& kind, size_t bytes) {
  if (kind == "posix") {
    SPECD_ASSIGN_OR_RETURN(auto b, PosixSharedBuffer::Create(bytes));
    return std::unique_ptr<SharedBuffer>(std::move(b));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown shared buffer kind '", kind, "' (this build has: posix)"));
}

absl::StatusOr<std::unique_ptr<SharedBuffer>> OpenSharedBuffer(const std::string& kind, const std::string& name,
                                                               bool writable) {
  if (kind == "posix") {
    SPECD_ASSIGN_OR_RETURN(auto b, PosixSharedBuffer::Open(name, writable));
    return std::unique_ptr<SharedBuffer>(std::move(b));
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown shared buffer kind '", kind, "' (this build has: posix)"));
}

}  // namespace specd
