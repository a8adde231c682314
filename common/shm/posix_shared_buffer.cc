#include "common/shm/posix_shared_buffer.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/util/log.h"

namespace specd {
namespace {

constexpr char kPrefix[] = "specd-xb-";

std::string UniqueName() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  return absl::StrFormat("/%s%d-%d-%08x", kPrefix, static_cast<int>(getpid()), counter.fetch_add(1), rd());
}

std::string Errno(const char* what, const std::string& name) {
  return absl::StrCat(what, " '", name, "': ", std::strerror(errno));
}

}  // namespace

bool PosixSharedBuffer::ValidName(const std::string& name) {
  if (name.size() < 2 || name.size() > 200 || name[0] != '/') return false;
  for (size_t i = 1; i < name.size(); ++i) {
    const char c = name[i];
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                    c == '_' || c == '.';
    if (!ok) return false;
  }
  return name != "/." && name != "/..";
}

absl::StatusOr<std::unique_ptr<PosixSharedBuffer>> PosixSharedBuffer::Create(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("shared buffer of 0 bytes");
  const std::string name = UniqueName();
  // Owner-only: the draft and target workers run as the same (service) user.
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) return absl::InternalError(Errno("shm_open", name));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const std::string err = Errno("ftruncate", name);
    close(fd);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(absl::StrCat(err, " (", bytes, " bytes; is /dev/shm large enough?)"));
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    const std::string err = Errno("mmap", name);
    shm_unlink(name.c_str());
    return absl::ResourceExhaustedError(err);
  }
  std::unique_ptr<PosixSharedBuffer> b(new PosixSharedBuffer());
  b->name_ = name;
  b->data_ = p;
  b->size_ = bytes;
  b->writable_ = true;
  b->owner_ = true;
  return b;
}

absl::StatusOr<std::unique_ptr<PosixSharedBuffer>> PosixSharedBuffer::Open(const std::string& name, bool writable) {
  if (!ValidName(name)) return absl::InvalidArgumentError(absl::StrCat("invalid shared-memory name '", name, "'"));
  const int fd = shm_open(name.c_str(), writable ? O_RDWR : O_RDONLY, 0);
  if (fd < 0) {
    return errno == ENOENT ? absl::NotFoundError(absl::StrCat("no shared-memory segment '", name, "'"))
                           : absl::PermissionDeniedError(Errno("shm_open", name));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat("shared-memory segment '", name, "' is empty"));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  void* p = mmap(nullptr, bytes, writable ? PROT_READ | PROT_WRITE : PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return absl::InternalError(Errno("mmap", name));
  std::unique_ptr<PosixSharedBuffer> b(new PosixSharedBuffer());
  b->name_ = name;
  b->data_ = p;
  b->size_ = bytes;
  b->writable_ = writable;
  b->owner_ = false;
  return b;
}

PosixSharedBuffer::~PosixSharedBuffer() {
  if (data_) munmap(data_, size_);
  if (owner_) shm_unlink(name_.c_str());
}

int PosixSharedBuffer::RemoveStale() {
  DIR* d = opendir("/dev/shm");
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(kPrefix, 0) != 0) continue;
    std::vector<std::string> parts = absl::StrSplit(n.substr(sizeof(kPrefix) - 1), '-');
    int pid = 0;
    if (parts.empty() || !absl::SimpleAtoi(parts[0], &pid) || pid <= 0) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    if (shm_unlink(("/" + n).c_str()) == 0) {
      ++removed;
      SPECD_LOG(INFO) << "removed stale exchange buffer" << Kv("name", n) << Kv("pid", pid);
    }
  }
  closedir(d);
  return removed;
}

}  // namespace specd
