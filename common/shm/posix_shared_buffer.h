// SharedBuffer on POSIX shared memory: shm_open + ftruncate + mmap. Names
// look like "/specd-<pid>-<n>-<random>"; the creator unlinks the name when the
// buffer is destroyed (mappings others hold stay valid until they unmap).
#pragma once
#include <string>

#include "common/shm/shared_buffer.h"

namespace specd {

class PosixSharedBuffer : public SharedBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<PosixSharedBuffer>> Create(size_t bytes);
  static absl::StatusOr<std::unique_ptr<PosixSharedBuffer>> Open(const std::string& name, bool writable);
  // Unlinks segments named by this class whose creating process is gone
  // (left behind by a crash). Returns how many were removed.
  static int RemoveStale();
  // Whether `name` is a name this class could have made (no path tricks).
  static bool ValidName(const std::string& name);

  ~PosixSharedBuffer() override;
  PosixSharedBuffer(const PosixSharedBuffer&) = delete;
  PosixSharedBuffer& operator=(const PosixSharedBuffer&) = delete;

  std::string Kind() const override { return "posix"; }
  const std::string& Name() const override { return name_; }
  void* data() override { return data_; }
  const void* data() const override { return data_; }
  size_t size() const override { return size_; }
  bool writable() const override { return writable_; }
  bool owner() const override { return owner_; }

 private:
  PosixSharedBuffer() = default;
  std::string name_;
  void* data_ = nullptr;
  size_t size_ = 0;
  bool writable_ = false;
  bool owner_ = false;
};

}  // namespace specd
