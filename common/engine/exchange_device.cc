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
  absl::Status Enqueue(int slot, int rows) override {
    const float* src = xb_->HostRows(slot);
    if (!src || rows < 0 || rows > xb_->k_max())
      return absl::OutOfRangeError(absl::StrCat("device-row copy of slot ", slot, ", ", rows, " rows"));
    return rows_->Enqueue(src, xb_->DeviceSlotOffset(slot),
                          sizeof(float) * static_cast<size_t>(rows) * static_cast<size_t>(xb_->vocab()));
  }
  absl::Status Wait() override { return rows_->Wait(); }
  std::string Describe() const override {
    return absl::StrCat("CUDA IPC device rows on device ", rows_->buffer().device, ", ",
                        Config::FormatBytes(static_cast<int64_t>(rows_->buffer().bytes)),
                        rows_->pinned() ? ", host rows pinned" : ", host rows pageable (cudaHostRegister refused)");
  }

 private:
  ExchangeBuffer* xb_;
  std::unique_ptr<cuda_ipc::RowsExport> rows_;
};

class CudaAcceptor final : public DeviceAcceptor {
 public:
  CudaAcceptor(const ExchangeBuffer& xb, std::unique_ptr<cuda_ipc::RowsImport> rows) : xb_(xb), rows_(std::move(rows)) {}
  absl::StatusOr<AcceptResult> Accept(int slot, const std::vector<TokenDist>& p, std::span<const int32_t> proposals,
                                      uint64_t seed, int64_t pos0) override {
    if (slot < 0 || slot >= xb_.n_slots()) return absl::OutOfRangeError(absl::StrCat("no exchange slot ", slot));
    return rows_->Accept(xb_.DeviceSlotOffset(slot), p, proposals.data(), static_cast<int>(proposals.size()), seed,
                         pos0);
  }
  std::string Describe() const override {
    return absl::StrCat("CUDA IPC, acceptance on the GPU (", rows_->in_process() ? "same process" : "handle opened",
                        ", staging ", Config::FormatBytes(static_cast<int64_t>(rows_->staging_bytes())), ")");
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

absl::StatusOr<std::unique_ptr<DeviceAcceptor>> OpenDeviceRows(const Engine& engine, const ExchangeBuffer& xb) {
  if (auto h = Hooks()) return h->open_rows(engine, xb);
  SPECD_RETURN_IF_ERROR(DeviceExchangeSupport(engine));
  const ExchangeDeviceRows* d = xb.device_rows();
  if (!d) return absl::FailedPreconditionError(absl::StrCat("exchange buffer '", xb.name(), "' has no device rows"));
#if defined(SPECD_HAVE_CUDA)
  // Both workers must see the same GPU: the handle names memory on the
  // draft's device, opened here on the target's.
  const int device = engine.options().backend.device;
  const int rows = std::min(xb.k_max() + 1, engine.options().max_out_rows);
  SPECD_ASSIGN_OR_RETURN(auto imp, cuda_ipc::RowsImport::Open(d->handle, device, d->bytes, d->owner_pid,
                                                              d->owner_ptr, rows, xb.vocab()));
  return std::unique_ptr<DeviceAcceptor>(new CudaAcceptor(xb, std::move(imp)));
#else
  return absl::UnimplementedError("unreachable");
#endif
}

}  // namespace specd
