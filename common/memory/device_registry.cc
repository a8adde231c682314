#include "common/memory/device_registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/util/config.h"
#include "common/util/log.h"

namespace specd {

// ---------------------------------------------------------------- processes

std::optional<uint64_t> ProcessStartTime(int64_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  // Field 2 is "(comm)" and may hold spaces or parentheses: count from the last ')'.
  const size_t close = line.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string> f = absl::StrSplit(line.substr(close + 1), ' ', absl::SkipEmpty());
  // f[0] is field 3 (state); starttime is field 22.
  uint64_t start = 0;
  if (f.size() < 20 || !absl::SimpleAtoi(f[19], &start)) return std::nullopt;
  return start;
}

ProcessId SelfProcess() {
  ProcessId p;
  p.pid = static_cast<int64_t>(getpid());
  p.start = ProcessStartTime(p.pid).value_or(0);
  return p;
}

bool ProcessAlive(const ProcessId& p) {
  if (p.pid <= 0) return false;
  if (auto start = ProcessStartTime(p.pid)) return p.start == 0 || *start == p.start;
  // No /proc entry we can read: ask the kernel (EPERM: alive, someone else's).
  return kill(static_cast<pid_t>(p.pid), 0) == 0 || errno == EPERM;
}

// ---------------------------------------------------------------- entries

namespace {

constexpr char kMagic[] = "specd-registry-entry 1";
constexpr char kSuffix[] = ".entry";

std::string Esc(const std::string& s) { return absl::CEscape(s); }

}  // namespace

std::string RegistryEntry::Describe() const {
  std::string s = absl::StrCat("pid ", proc.pid, " ", role, " ", model, ": ",
                               Config::FormatBytes(static_cast<int64_t>(bytes)), " (", state);
  if (shared > 0)
    absl::StrAppend(&s, "; maps ", Config::FormatBytes(static_cast<int64_t>(shared)), " from pid ", shared_from);
  if (exported) absl::StrAppend(&s, "; exports ", exported->tensors.size(), " tensors");
  return s + ")";
}

std::string SerializeEntry(const RegistryEntry& e) {
  std::ostringstream os;
  os << kMagic << "\n";
  os << "pid\t" << e.proc.pid << "\nstart\t" << e.proc.start << "\nserial\t" << e.serial << "\n";
  os << "role\t" << Esc(e.role) << "\nmodel\t" << Esc(e.model) << "\nstate\t" << Esc(e.state) << "\n";
  os << "bytes\t" << e.bytes << "\nshared\t" << e.shared << "\nshared_from\t" << e.shared_from << "\nbudget\t"
     << e.budget << "\n";
  if (e.exported) {
    const WeightExport& x = *e.exported;
    os << "export\t" << Esc(x.kind) << "\t" << Esc(x.layout) << "\t" << absl::BytesToHexString(x.handle) << "\t"
       << x.bytes << "\t" << x.base << "\t" << x.device << "\n";
    for (const TensorRecord& t : x.tensors) {
      os << "tensor\t" << Esc(t.name) << "\t" << static_cast<uint32_t>(t.type) << "\t" << t.ne0 << "\t" << t.rows
         << "\t" << t.offset << "\t" << t.nbytes << "\t" << t.digest << "\n";
    }
  }
  os << "end\n";  // a reader that misses it saw a torn file (not expected: files are renamed into place)
  return os.str();
}

absl::StatusOr<RegistryEntry> ParseEntry(const std::string& text) {
  std::vector<std::string> lines = absl::StrSplit(text, '\n');
  if (lines.empty() || lines[0] != kMagic) return absl::InvalidArgumentError("not a specd registry entry");
  RegistryEntry e;
  bool ended = false;
  auto bad = [](const std::string& line) {
    return absl::InvalidArgumentError(absl::StrCat("bad registry line '", line.substr(0, 80), "'"));
  };
  for (size_t i = 1; i < lines.size() && !ended; ++i) {
    const std::string& line = lines[i];
    if (line.empty()) continue;
    std::vector<std::string> f = absl::StrSplit(line, '\t');
    const std::string& k = f[0];
    auto num = [&](auto* out) { return f.size() == 2 && absl::SimpleAtoi(f[1], out); };
    auto str = [&](std::string* out) { return f.size() == 2 && absl::CUnescape(f[1], out); };
    bool ok = true;
    if (k == "end") ended = true;
    else if (k == "pid") ok = num(&e.proc.pid);
    else if (k == "start") ok = num(&e.proc.start);
    else if (k == "serial") ok = num(&e.serial);
    else if (k == "role") ok = str(&e.role);
    else if (k == "model") ok = str(&e.model);
    else if (k == "state") ok = str(&e.state);
    else if (k == "bytes") ok = num(&e.bytes);
    else if (k == "shared") ok = num(&e.shared);
    else if (k == "shared_from") ok = num(&e.shared_from);
    else if (k == "budget") ok = num(&e.budget);
    else if (k == "export") {
      WeightExport x;
      ok = f.size() == 7 && absl::CUnescape(f[1], &x.kind) && absl::CUnescape(f[2], &x.layout) &&
           f[3].size() % 2 == 0 && f[3].find_first_not_of("0123456789abcdefABCDEF") == std::string::npos &&
           absl::SimpleAtoi(f[4], &x.bytes) && absl::SimpleAtoi(f[5], &x.base) && absl::SimpleAtoi(f[6], &x.device);
      if (ok) {
        x.handle = absl::HexStringToBytes(f[3]);
        e.exported = std::move(x);
      }
    } else if (k == "tensor") {
      TensorRecord t;
      uint32_t type = 0;
      ok = e.exported && f.size() == 8 && absl::CUnescape(f[1], &t.name) && absl::SimpleAtoi(f[2], &type) &&
           absl::SimpleAtoi(f[3], &t.ne0) && absl::SimpleAtoi(f[4], &t.rows) && absl::SimpleAtoi(f[5], &t.offset) &&
           absl::SimpleAtoi(f[6], &t.nbytes) && f[7].size() == 64;
      if (ok) {
        t.type = static_cast<GgmlType>(type);
        t.digest = f[7];
        e.exported->tensors.push_back(std::move(t));
      }
    }
    // Unknown keys are skipped: a newer writer may add some.
    if (!ok) return bad(line);
  }
  if (!ended) return absl::InvalidArgumentError("registry entry is truncated (no 'end' line)");
  if (e.proc.pid <= 0) return absl::InvalidArgumentError("registry entry without a pid");
  return e;
}

uint64_t BytesAgainstBudget(const std::vector<RegistryEntry>& others, bool budget_is_free_memory) {
  uint64_t sum = 0;
  for (const RegistryEntry& e : others) {
    if (!budget_is_free_memory || e.state == "loading") sum += e.bytes;
  }
  return sum;
}

// ---------------------------------------------------------------- files

namespace {

absl::Status Errno(const std::string& what) {
  return absl::UnavailableError(absl::StrCat(what, ": ", std::strerror(errno)));
}

absl::Status MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0700) == 0 || errno == EEXIST) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0) return Errno("device registry " + path);
    if (!S_ISDIR(st.st_mode)) return absl::FailedPreconditionError("device registry " + path + " is not a directory");
    if (st.st_uid != getuid())
      return absl::PermissionDeniedError(absl::StrCat("device registry ", path, " belongs to uid ", st.st_uid,
                                                      ", not this process's uid ", getuid()));
    return absl::OkStatus();
  }
  return Errno("creating the device registry " + path);
}

absl::Status WriteAtomically(const std::string& path, const std::string& text) {
  const std::string tmp = absl::StrCat(path, ".tmp");
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return Errno("writing " + tmp);
  size_t off = 0;
  while (off < text.size()) {
    const ssize_t n = write(fd, text.data() + off, text.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      const absl::Status st = Errno("writing " + tmp);
      close(fd);
      unlink(tmp.c_str());
      return st;
    }
    off += static_cast<size_t>(n);
  }
  close(fd);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const absl::Status st = Errno("renaming " + tmp);
    unlink(tmp.c_str());
    return st;
  }
  return absl::OkStatus();
}

// flock on the directory's lock file for the scope.
class DirLock {
 public:
  explicit DirLock(const std::string& dir) {
    fd_ = open((dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd_ < 0) {
      st_ = Errno("opening the device registry's lock in " + dir);
      return;
    }
    while (flock(fd_, LOCK_EX) != 0) {
      if (errno != EINTR) {
        st_ = Errno("locking the device registry " + dir);
        return;
      }
    }
  }
  ~DirLock() {
    if (fd_ < 0) return;
    // Unlocked explicitly: closing alone leaves the lock held while a process
    // forked meanwhile keeps the inherited descriptor open (O_CLOEXEC acts on
    // exec only), and every other List() then waits for that process to exit
    // (memory_test's forked children held it for 10 s under load).
    flock(fd_, LOCK_UN);
    close(fd_);
  }
  const absl::Status& status() const { return st_; }

 private:
  int fd_ = -1;
  absl::Status st_;
};

std::atomic<int64_t> g_serial{0};

}  // namespace

std::string DeviceRegistry::DefaultRoot() { return absl::StrCat("/dev/shm/specd-registry-", getuid()); }

absl::StatusOr<std::unique_ptr<DeviceRegistry>> DeviceRegistry::Open(const std::string& root,
                                                                     const std::string& device) {
  if (root.empty() || device.empty()) return absl::InvalidArgumentError("device registry needs a root and a device");
  std::string key = device;
  for (char& c : key) {
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-')) c = '_';
  }
  SPECD_RETURN_IF_ERROR(MakeDir(root));
  const std::string dir = root + "/" + key;
  SPECD_RETURN_IF_ERROR(MakeDir(dir));
  return std::unique_ptr<DeviceRegistry>(new DeviceRegistry(root, dir, device));
}

absl::StatusOr<std::vector<RegistryEntry>> DeviceRegistry::ListLocked() const {
  DIR* d = opendir(dir_.c_str());
  if (!d) return Errno("reading the device registry " + dir_);
  std::vector<std::string> names;
  while (dirent* de = readdir(d)) {
    const std::string n = de->d_name;
    if (n.size() > sizeof(kSuffix) - 1 && n.compare(n.size() - (sizeof(kSuffix) - 1), std::string::npos, kSuffix) == 0)
      names.push_back(n);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  std::vector<RegistryEntry> live;
  for (const std::string& n : names) {
    const std::string path = dir_ + "/" + n;
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    auto e = ParseEntry(ss.str());
    if (!e.ok()) {
      // Written by a newer or broken writer: keep it out of the sum, but say so.
      SPECD_LOG(WARN) << "ignoring an unreadable device registry entry" << Kv("path", path)
                      << Kv("error", e.status().message());
      continue;
    }
    if (!ProcessAlive(e->proc)) {
      if (unlink(path.c_str()) == 0)
        SPECD_LOG(INFO) << "removed a stale device registry entry (process gone)" << Kv("path", path)
                        << Kv("entry", e->Describe());
      continue;
    }
    live.push_back(*std::move(e));
  }
  return live;
}

absl::StatusOr<std::vector<RegistryEntry>> DeviceRegistry::List() const {
  DirLock lock(dir_);
  SPECD_RETURN_IF_ERROR(lock.status());
  return ListLocked();
}

absl::StatusOr<std::unique_ptr<Registration>> DeviceRegistry::Register(RegistryEntry entry, const Check& check) {
  DirLock lock(dir_);
  SPECD_RETURN_IF_ERROR(lock.status());
  SPECD_ASSIGN_OR_RETURN(std::vector<RegistryEntry> live, ListLocked());
  SPECD_RETURN_IF_ERROR(check(live));
  entry.proc = SelfProcess();
  entry.serial = g_serial.fetch_add(1);
  const std::string path = absl::StrCat(dir_, "/", entry.proc.pid, "-", entry.serial, kSuffix);
  SPECD_RETURN_IF_ERROR(WriteAtomically(path, SerializeEntry(entry)));
  return std::unique_ptr<Registration>(new Registration(path, std::move(entry)));
}

Registration::~Registration() { unlink(path_.c_str()); }

absl::Status Registration::Update(const RegistryEntry& e) {
  RegistryEntry next = e;
  next.proc = entry_.proc;
  next.serial = entry_.serial;
  SPECD_RETURN_IF_ERROR(WriteAtomically(path_, SerializeEntry(next)));
  entry_ = std::move(next);
  return absl::OkStatus();
}

}  // namespace specd
