#include "common/engine/exchange_device.h"

#include <unistd.h>

#include <mutex>

#include "common/util/config.h"

#if defined(SPECD_HAVE_CUDA)
#include "common/backend/cuda/cuda_ipc.h"
#endif

namespace specd {
namespace {

std::mutex g_hooks_mu;
std::optional<DeviceExchangeHooks> g_hooks;

std::optional<DeviceExchangeHooks> Hooks() {
  std::lock_guard<std::mutex> l(g_hooks_mu);
  return g_hooks;
}

#if defined(SPECD_HAVE_CUDA)

class CudaRowsExport final : public DeviceRowsExport {
 public:
  CudaRowsExport(ExchangeBuffer* xb, std::unique_ptr<cuda_ipc::RowsExport> rows) : xb_(xb), rows_(std::move(rows)) {}
  float* Rows(int slot) override {
    if (slot < 0 || slot >= xb_->n_slots()) return nullptr;
    return reinterpret_cast<float*>(static_cast<uint8_t*>(rows_->buffer().ptr) + xb_->DeviceSlotOffset(slot));
  }
  std::string Describe() const override {
    return absl::StrCat("CUDA IPC device rows on device ", rows_->buffer().device, ", ",
                        Config::FormatBytes(static_cast<int64_t>(rows_->buffer().bytes)),
                        rows_->pinned() ? ", host rows pinned" : ", host rows pageable (cudaHostRegister refused)");
  }

 private:
  ExchangeBuffer* xb_;
  std::unique_ptr<cuda_ipc::RowsExport> rows_;
};

class CudaRowsImport final : public DeviceRowsImport {
 public:
  CudaRowsImport(const ExchangeBuffer& xb, std::unique_ptr<cuda_ipc::RowsImport> rows) : xb_(xb), rows_(std::move(rows)) {}
  absl::StatusOr<const float*> Rows(int slot) override {
    if (slot < 0 || slot >= xb_.n_slots()) return absl::OutOfRangeError(absl::StrCat("no exchange slot ", slot));
    return reinterpret_cast<const float*>(reinterpret_cast<const uint8_t*>(rows_->rows()) + xb_.DeviceSlotOffset(slot));
  }
  std::string Describe() const override {
    return absl::StrCat("CUDA IPC, acceptance on the GPU (", rows_->in_process() ? "same process" : "handle opened",
                        ")");
  }

 private:
  const ExchangeBuffer& xb_;
  std::unique_ptr<cuda_ipc::RowsImport> rows_;
};

#endif  // SPECD_HAVE_CUDA

}  // namespace

void SetDeviceExchangeHooksForTesting(std::optional<DeviceExchangeHooks> hooks) {
  std::lock_guard<std::mutex> l(g_hooks_mu);
  g_hooks = std::move(hooks);
}

absl::Status DeviceExchangeSupport(const Engine& engine) {
  if (Hooks()) return absl::OkStatus();
#if defined(SPECD_HAVE_CUDA)
  if (engine.options().backend.name != "cuda")
    return absl::FailedPreconditionError(
        absl::StrCat("the model runs on the ", engine.options().backend.name, " backend, not cuda"));
  return absl::OkStatus();
#else
  return absl::UnimplementedError("this build of specd has no CUDA (built without a CUDA toolkit)");
#endif
}

absl::StatusOr<std::unique_ptr<DeviceRowsExport>> ExportDeviceRows(const Engine& engine, ExchangeBuffer* xb) {
  if (auto h = Hooks()) return h->export_rows(engine, xb);
  SPECD_RETURN_IF_ERROR(DeviceExchangeSupport(engine));
#if defined(SPECD_HAVE_CUDA)
  const int device = engine.options().backend.device;
  SPECD_ASSIGN_OR_RETURN(auto rows, cuda_ipc::RowsExport::Create(xb->mapping(), xb->bytes(), xb->DeviceRowsBytes(),
                                                                  device));
  ExchangeDeviceRows d;
  d.handle = rows->buffer().handle;
  d.device = device;
  d.bytes = rows->buffer().bytes;
  d.owner_pid = static_cast<int64_t>(getpid());
  d.owner_ptr = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(rows->buffer().ptr));
  SPECD_RETURN_IF_ERROR(xb->SetDeviceRows(d));
  return std::unique_ptr<DeviceRowsExport>(new CudaRowsExport(xb, std::move(rows)));
#else
  return absl::UnimplementedError("unreachable");
#endif
}

absl::StatusOr<std::unique_ptr<DeviceRowsImport>> OpenDeviceRows(const Engine& engine, const ExchangeBuffer& xb) {
  if (auto h = Hooks()) return h->open_rows(engine, xb);
  SPECD_RETURN_IF_ERROR(DeviceExchangeSupport(engine));
  const ExchangeDeviceRows* d = xb.device_rows();
  if (!d) return absl::FailedPreconditionError(absl::StrCat("exchange buffer '", xb.name(), "' has no device rows"));
#if defined(SPECD_HAVE_CUDA)
  // Both workers must see the same GPU: the handle names memory on the
  // draft's device, opened here on the target's.
  const int device = engine.options().backend.device;
  SPECD_ASSIGN_OR_RETURN(auto imp,
                         cuda_ipc::RowsImport::Open(d->handle, device, d->bytes, d->owner_pid, d->owner_ptr));
  return std::unique_ptr<DeviceRowsImport>(new CudaRowsImport(xb, std::move(imp)));
#else
  return absl::UnimplementedError("unreachable");
#endif
}

}  // namespace specd
