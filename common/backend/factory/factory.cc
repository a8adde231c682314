#include "common/backend/backend.h"
#include "common/backend/cpu/cpu_backend.h"
#include "common/quant/quant.h"
#include "common/util/log.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
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

absl::StatusOr<std::pair<int, int>> ParseWgmmaCols(const std::string& v) {
  if (v == "off") return std::pair<int, int>{0, 0};
  const std::vector<std::string> parts = absl::StrSplit(v, '-');
  int lo = 0, hi = 0;
  if (parts.size() != 2 || !absl::SimpleAtoi(parts[0], &lo) || !absl::SimpleAtoi(parts[1], &hi) || lo < 1 ||
      lo > hi || hi > BackendOptions::kWgmmaMaxCols)
    return absl::InvalidArgumentError(absl::StrCat("--cuda-wgmma-cols takes MIN-MAX columns (1 <= MIN <= MAX <= ",
                                                   BackendOptions::kWgmmaMaxCols, ") or off, not '", v, "'"));
  return std::pair<int, int>{lo, hi};
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(const BackendOptions& opts) {
  if (!opts.cuda_wgmma_cols.empty())
    if (auto r = ParseWgmmaCols(opts.cuda_wgmma_cols); !r.ok()) return r.status();
  if (const int s = opts.cuda_attn_split;
      s != 0 && (s < 0 || s > BackendOptions::kAttnSplitMax || s % BackendOptions::kAttnSplitStep != 0))
    return absl::InvalidArgumentError(absl::StrCat("--cuda-attn-split takes a multiple of ",
                                                   BackendOptions::kAttnSplitStep, " up to ",
                                                   BackendOptions::kAttnSplitMax, " (0: the default), not ", s));
  if (opts.name == "cpu") {
    if (absl::Status st = SetDotKernel(opts.cpu_dot_kernels); !st.ok()) return st;
    auto cpu = std::make_unique<CpuBackend>(opts.threads, opts.cpu_spin_us);
    cpu->set_float_activations_for(opts.cpu_float_activations);
    SPECD_LOG(INFO) << "cpu backend" << Kv("threads", cpu->threads()) << Kv("dot_kernels", DotKernelName())
                    << Kv("float_activations", opts.cpu_float_activations.empty() ? "none" : opts.cpu_float_activations);
    return std::unique_ptr<Backend>(std::move(cpu));
  }
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
