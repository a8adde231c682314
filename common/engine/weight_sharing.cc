#include "common/engine/weight_sharing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

#include "absl/strings/str_join.h"
#include "common/util/config.h"
#include "common/util/log.h"

#if defined(SPECD_HAVE_CUDA)
#include "common/backend/cuda/cuda_ipc.h"
#endif

namespace specd {
namespace {

std::atomic<bool> g_file_sharing{false};

bool FileSharing() {
  static const bool env = [] {
    const char* v = std::getenv("SPECD_TEST_WEIGHT_SHARING");
    const bool on = v && std::string(v) == "file";
    if (on)
      SPECD_LOG(WARN) << "TEST MODE: the cpu backend shares weights through file mappings "
                         "(SPECD_TEST_WEIGHT_SHARING=file)";
    return on;
  }();
  return env || g_file_sharing;
}

// Each weight of `model` with a record, at its offset in [base, base + bytes).
absl::StatusOr<WeightExport> DescribeIn(const Model& model, const std::vector<TensorRecord>& records,
                                        const uint8_t* base, uint64_t bytes, WeightExport x) {
  std::unordered_map<std::string, const TensorRecord*> by_name;
  for (const TensorRecord& r : records) by_name.emplace(r.name, &r);
  absl::Status st;
  model.ForEachWeight([&](const Weight& w) {
    auto it = by_name.find(w.name);
    if (it == by_name.end() || it->second->nbytes != w.nbytes) return;
    const auto* p = static_cast<const uint8_t*>(w.data);
    if (p < base || w.nbytes > bytes || static_cast<uint64_t>(p - base) > bytes - w.nbytes) {
      st = absl::InternalError(absl::StrCat("weight ", w.name, " lies outside the exported region"));
      return;
    }
    TensorRecord r = *it->second;
    r.offset = static_cast<uint64_t>(p - base);
    x.tensors.push_back(std::move(r));
  });
  SPECD_RETURN_IF_ERROR(st);
  x.bytes = bytes;
  x.base = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(base));
  return x;
}

// Tests: the weights where the cpu backend left them, in the file mapping;
// the importer maps the same file (kind "file", handle: its path).
class FileExporter final : public WeightExporter {
 public:
  FileExporter(const GgufFile& file, std::string layout) : file_(file), layout_(std::move(layout)) {}
  absl::StatusOr<WeightExport> Describe(const Model& model, const std::vector<TensorRecord>& records) const override {
    if (file_.tensors().empty()) return absl::FailedPreconditionError("no weights to export");
    const GgufTensorInfo& t = file_.tensors().front();
    WeightExport x;
    x.kind = "file";
    x.layout = layout_;
    x.handle = file_.path();
    return DescribeIn(model, records, t.data - file_.data_offset() - t.offset, file_.file_size(), std::move(x));
  }

 private:
  const GgufFile& file_;
  std::string layout_;
};

class FileImport final : public WeightImport {
 public:
  FileImport(void* map, size_t bytes, std::string path) : map_(map), bytes_(bytes), path_(std::move(path)) {}
  ~FileImport() override { munmap(map_, bytes_); }
  const uint8_t* base() const override { return static_cast<const uint8_t*>(map_); }
  std::string Describe() const override { return "file mapping of " + path_ + " (test mode)"; }

 private:
  void* map_;
  size_t bytes_;
  std::string path_;
};

absl::StatusOr<std::shared_ptr<WeightImport>> OpenFileImport(const WeightExport& exp) {
  const int fd = open(exp.handle.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::NotFoundError(absl::StrCat("cannot open ", exp.handle, ": ", std::strerror(errno)));
  struct stat st {};
  const bool same_size = fstat(fd, &st) == 0 && static_cast<uint64_t>(st.st_size) == exp.bytes;
  void* map = same_size ? mmap(nullptr, exp.bytes, PROT_READ, MAP_SHARED, fd, 0) : MAP_FAILED;
  close(fd);
  if (!same_size) return absl::FailedPreconditionError(exp.handle + " changed since it was exported");
  if (map == MAP_FAILED) return absl::InternalError(absl::StrCat("mmap ", exp.handle, ": ", std::strerror(errno)));
  return std::shared_ptr<WeightImport>(new FileImport(map, exp.bytes, exp.handle));
}

// The exporter's own process: its addresses, no mapping.
class SameProcessImport final : public WeightImport {
 public:
  explicit SameProcessImport(const WeightExport& x)
      : base_(reinterpret_cast<const uint8_t*>(static_cast<uintptr_t>(x.base))), bytes_(x.bytes) {}
  const uint8_t* base() const override { return base_; }
  std::string Describe() const override {
    return absl::StrCat("this process's own export (", Config::FormatBytes(static_cast<int64_t>(bytes_)), ")");
  }

 private:
  const uint8_t* base_;
  uint64_t bytes_;
};

#if defined(SPECD_HAVE_CUDA)

class CudaExporter final : public WeightExporter {
 public:
  CudaExporter(cuda_ipc::ExportedBuffer buf, std::string layout) : buf_(std::move(buf)), layout_(std::move(layout)) {}
  ~CudaExporter() override { cuda_ipc::Destroy(&buf_).IgnoreError(); }
  absl::StatusOr<WeightExport> Describe(const Model& model, const std::vector<TensorRecord>& records) const override {
    WeightExport x;
    x.kind = "cuda-ipc";
    x.layout = layout_;
    x.handle = buf_.handle;
    x.device = buf_.device;
    return DescribeIn(model, records, static_cast<const uint8_t*>(buf_.ptr), buf_.bytes, std::move(x));
  }

 private:
  cuda_ipc::ExportedBuffer buf_;
  std::string layout_;
};

class CudaImport final : public WeightImport {
 public:
  CudaImport(void* ptr, uint64_t bytes, int64_t owner) : ptr_(ptr), bytes_(bytes), owner_(owner) {}
  ~CudaImport() override { cuda_ipc::Close(ptr_).IgnoreError(); }
  const uint8_t* base() const override { return static_cast<const uint8_t*>(ptr_); }
  std::string Describe() const override {
    return absl::StrCat("CUDA IPC mapping of pid ", owner_, "'s ", Config::FormatBytes(static_cast<int64_t>(bytes_)));
  }

 private:
  void* ptr_;
  uint64_t bytes_;
  int64_t owner_;
};

#endif  // SPECD_HAVE_CUDA

// One mapping per export in a process (a handle may not be opened twice by
// one context): engines mapping the same export share it.
std::mutex g_imports_mu;
std::map<std::string, std::weak_ptr<WeightImport>> g_imports;

}  // namespace

void SetFileWeightSharingForTesting(bool on) { g_file_sharing = on; }

absl::Status WeightSharingSupport(const Backend& backend) {
  if (backend.Name() != "cuda") {
    if (FileSharing()) return absl::OkStatus();
    return absl::UnimplementedError(absl::StrCat(backend.Name(),
                                                 " backend: the weights stay in the file mapping, which the page "
                                                 "cache already shares between processes"));
  }
#if defined(SPECD_HAVE_CUDA)
  return absl::OkStatus();
#else
  return absl::UnimplementedError("this build of specd has no CUDA");
#endif
}

absl::StatusOr<std::unique_ptr<WeightExporter>> PrepareWeightExport(Backend* backend, int device, size_t bytes,
                                                                    const GgufFile& file) {
  SPECD_RETURN_IF_ERROR(WeightSharingSupport(*backend));
  if (backend->Name() != "cuda") return std::unique_ptr<WeightExporter>(new FileExporter(file, backend->WeightLayout()));
#if defined(SPECD_HAVE_CUDA)
  SPECD_ASSIGN_OR_RETURN(cuda_ipc::ExportedBuffer buf, cuda_ipc::Create(bytes, device));
  if (absl::Status st = backend->PlaceWeightsIn(buf.ptr, bytes); !st.ok()) {
    cuda_ipc::Destroy(&buf).IgnoreError();
    return st;
  }
  return std::unique_ptr<WeightExporter>(new CudaExporter(std::move(buf), backend->WeightLayout()));
#else
  (void)device;
  (void)bytes;
  return absl::UnimplementedError("unreachable");
#endif
}

absl::StatusOr<std::shared_ptr<WeightImport>> OpenWeightImport(const WeightExport& exp, int64_t owner_pid,
                                                               int device) {
  if (owner_pid == static_cast<int64_t>(getpid())) return std::shared_ptr<WeightImport>(new SameProcessImport(exp));
  if (exp.kind == "file" && FileSharing()) return OpenFileImport(exp);
  if (exp.kind != "cuda-ipc")
    return absl::FailedPreconditionError(
        absl::StrCat("pid ", owner_pid, "'s weights are of kind '", exp.kind, "', which this process cannot map"));
  const std::string key = absl::StrCat(owner_pid, "/", exp.kind, "/", exp.handle);
  std::lock_guard<std::mutex> l(g_imports_mu);
  if (auto it = g_imports.find(key); it != g_imports.end()) {
    if (std::shared_ptr<WeightImport> cur = it->second.lock()) return cur;
  }
#if defined(SPECD_HAVE_CUDA)
  SPECD_ASSIGN_OR_RETURN(void* ptr, cuda_ipc::Open(exp.handle, device));
  std::shared_ptr<WeightImport> imp(new CudaImport(ptr, exp.bytes, owner_pid));
  g_imports[key] = imp;
  return imp;
#else
  (void)device;
  return absl::UnimplementedError("this build of specd has no CUDA: it cannot map CUDA IPC weights");
#endif
}

SharedWeights FindSharedWeights(const std::vector<RegistryEntry>& live, const GgufFile& file, const Backend& backend,
                                int device, int threads, std::string* why) {
  SharedWeights out;
  const RegistryEntry* best = nullptr;
  SharePlan best_plan;
  std::vector<std::string> seen;
  for (const RegistryEntry& e : live) {
    if (!e.exported || e.state != "ready") continue;
    // Another process's weights only from a target worker: a tool's engines
    // come and go (this process's own exporter is always fine).
    if (e.proc.pid != static_cast<int64_t>(getpid()) && e.role != "target") continue;
    if (e.exported->layout != backend.WeightLayout()) {
      seen.push_back(absl::StrCat("pid ", e.proc.pid, " stores weights as ", e.exported->layout, ", this build as ",
                                  backend.WeightLayout()));
      continue;
    }
    SharePlan plan = MatchTensors(file, *e.exported, threads);
    seen.push_back(absl::StrCat("pid ", e.proc.pid, " (", e.role, " ", e.model, "): ", plan.Describe()));
    if (plan.bytes > best_plan.bytes) {
      best = &e;
      best_plan = std::move(plan);
    }
  }
  if (!best) {
    *why = seen.empty() ? "no process on this device exports weights (start the draft after its target)"
                        : absl::StrCat("no export holds any of this model's tensors identically: ",
                                       absl::StrJoin(seen, "; "));
    return out;
  }
  auto imp = OpenWeightImport(*best->exported, best->proc.pid, device);
  if (!imp.ok()) {
    *why = absl::StrCat("cannot map pid ", best->proc.pid, "'s weights: ", imp.status().message());
    return out;
  }
  out.import = *std::move(imp);
  for (const SharePlan::Item& t : best_plan.tensors) out.resident[t.name] = out.import->base() + t.offset;
  out.bytes = best_plan.bytes;
  out.from = best->proc;
  out.description = absl::StrCat(best_plan.Describe(), " from pid ", best->proc.pid, " (", best->role, " ",
                                 best->model, "), ", out.import->Describe());
  return out;
}

}  // namespace specd
