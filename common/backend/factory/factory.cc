#include "common/backend/backend.h"
#include "common/backend/cpu/cpu_backend.h"
#if defined(SPECD_HAVE_CUDA)
#include "common/backend/cuda/cuda_backend.h"
#endif

namespace specd {

std::vector<std::string> AvailableBackends() {
#if defined(SPECD_HAVE_CUDA)
  return {"cpu", "cuda"};
#else
  return {"cpu"};
#endif
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& opts) {
  if (const int s = opts.cuda_attn_split;
      s != 0 && (s < 0 || s > BackendOptions::kAttnSplitMax || s % BackendOptions::kAttnSplitStep != 0))
    return absl::InvalidArgumentError(absl::StrCat("--cuda-attn-split takes a multiple of ",
                                                   BackendOptions::kAttnSplitStep, " up to ",
                                                   BackendOptions::kAttnSplitMax, " (0: the default), not ", s));
  if (opts.name == "cpu") return std::unique_ptr<Backend>(new CpuBackend(opts.threads, opts.cpu_spin_us));
  if (opts.name == "cuda") {
#if defined(SPECD_HAVE_CUDA)
    return CreateCudaBackend(opts);
#else
    return absl::UnimplementedError("this build of specd has no CUDA backend (built without a CUDA toolkit)");
#endif
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown backend '", opts.name, "' (cpu or cuda)"));
}

}  // namespace specd
