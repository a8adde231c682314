// Throughput of the CPU backend's matmul hot loop, DotRowsBatched, in GB/s of
// weight bytes (bytes_per_second), for one input (decode) and eight inputs
// (batched verification). "dram" matrices are 256 MiB, far larger than the
// last-level cache, so nx=1 shows how close a format gets to memory bandwidth;
// "cache" matrices (2 MiB) show the compute ceiling. BM_MemRead is the
// bandwidth reference: a plain streaming read of the same 256 MiB.
//
//   quant_bench [--benchmark_filter=Q4_K] [--benchmark_min_time=1]
// BM_DotRowsInt8 is the integer path (int8 activations) the CPU backend runs
// for quantized weights; nx=5 is a k=4 verification.
// SPECD_BENCH_ISA=avx512vnni|avx512|avxvnni|avx2|sse2|portable runs that kernel build instead of
// the one DotRowsBatched selects (if this CPU supports it).
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/quant/dot_kernels.h"
#include "common/quant/quant.h"

namespace specd {
namespace {

constexpr int64_t kN = 4096;  // row length (elements)
constexpr size_t kDramBytes = size_t{256} << 20;
constexpr size_t kCacheBytes = size_t{2} << 20;

using quant_internal::DotIsa;
DotIsa g_isa;
quant_internal::DotRowsFn g_kernel;
quant_internal::DotRowsInt8Fn g_int8_kernel;

struct Matrix {
  std::vector<uint8_t> w;
  int64_t rows = 0;
  size_t row_bytes = 0;
};

std::vector<float> Gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 0.02f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

// Real quantized rows (so every scale is sane), tiled to the requested size.
const Matrix& GetMatrix(GgmlType t, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<GgmlType, size_t>, std::unique_ptr<Matrix>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto& m = cache[{t, bytes}];
  if (!m) {
    m = std::make_unique<Matrix>();
    m->row_bytes = RowBytes(t, kN);
    m->rows = static_cast<int64_t>(bytes / m->row_bytes);
    m->w.resize(m->row_bytes * static_cast<size_t>(m->rows));
    constexpr int kDistinct = 32;
    std::vector<uint8_t> rows(m->row_bytes * kDistinct);
    const auto x = Gaussian(static_cast<size_t>(kN) * kDistinct, 1);
    for (int r = 0; r < kDistinct; ++r)
      (void)QuantizeRow(t, &x[static_cast<size_t>(r) * kN], &rows[r * m->row_bytes], kN);
    for (int64_t r = 0; r < m->rows; ++r)
      std::memcpy(&m->w[r * m->row_bytes], &rows[(r % kDistinct) * m->row_bytes], m->row_bytes);
  }
  return *m;
}

void BM_DotRowsBatched(benchmark::State& state, GgmlType t, int64_t nx, size_t bytes) {
  const Matrix& m = GetMatrix(t, bytes);
  // Threads split the rows, as the CPU backend's thread pool does.
  const int64_t r0 = m.rows * state.thread_index() / state.threads();
  const int64_t r1 = m.rows * (state.thread_index() + 1) / state.threads();
  const auto x = Gaussian(static_cast<size_t>(kN * nx), 2);
  std::vector<float> y(static_cast<size_t>(m.rows * nx));
  for (auto _ : state) {
    g_kernel(t, m.w.data(), m.row_bytes, kN, r0, r1, x.data(), kN, nx, y.data(), m.rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (r1 - r0) *
                          static_cast<int64_t>(m.row_bytes));
  state.counters["Gweights/s"] = benchmark::Counter(
      static_cast<double>(state.iterations()) * static_cast<double>(r1 - r0) * kN * 1e-9,
      benchmark::Counter::kIsRate);
  state.SetLabel(quant_internal::DotIsaName(g_isa));
}

// The integer path (int8 activations, quantized once outside the loop) on the
// same matrices: what the CPU backend's MatMul runs for quantized weights.
void BM_DotRowsInt8(benchmark::State& state, GgmlType t, int64_t nx, size_t bytes) {
  const Matrix& m = GetMatrix(t, bytes);
  const int64_t r0 = m.rows * state.thread_index() / state.threads();
  const int64_t r1 = m.rows * (state.thread_index() + 1) / state.threads();
  const auto x = Gaussian(static_cast<size_t>(kN * nx), 2);
  const size_t xs = Int8ActRowBytes(t, kN);
  std::vector<uint8_t> xq(xs * static_cast<size_t>(nx));
  for (int64_t j = 0; j < nx; ++j) QuantizeInt8Activations(t, &x[j * kN], kN, &xq[j * xs]);
  std::vector<float> y(static_cast<size_t>(m.rows * nx));
  for (auto _ : state) {
    (void)g_int8_kernel(t, m.w.data(), m.row_bytes, kN, r0, r1, xq.data(), xs, nx, y.data(), m.rows);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * (r1 - r0) *
                          static_cast<int64_t>(m.row_bytes));
  state.SetLabel(quant_internal::DotIsaName(g_isa));
}

// Streaming read of 256 MiB with independent 64-bit accumulators: the memory
// bandwidth a row scan can hope for.
void BM_MemRead(benchmark::State& state) {
  static const std::vector<uint64_t> buf(kDramBytes / 8, 0x0123456789abcdefULL);
  const size_t n = buf.size();
  const size_t b0 = n * static_cast<size_t>(state.thread_index()) / static_cast<size_t>(state.threads());
  const size_t b1 = n * static_cast<size_t>(state.thread_index() + 1) / static_cast<size_t>(state.threads());
  for (auto _ : state) {
    uint64_t a[8] = {};
    for (size_t i = b0; i + 8 <= b1; i += 8)
      for (int k = 0; k < 8; ++k) a[k] += buf[i + k];
    uint64_t s = 0;
    for (uint64_t v : a) s ^= v;
    benchmark::DoNotOptimize(s);
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>((b1 - b0) * 8));
}

void Register() {
  benchmark::RegisterBenchmark("BM_MemRead/dram", BM_MemRead)->Threads(1)->Threads(2)->UseRealTime();
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K,
                     GgmlType::Q4_0, GgmlType::Q5_K}) {
    for (int64_t nx : {1, 5, 8}) {
      for (auto [where, bytes] : {std::pair<const char*, size_t>{"dram", kDramBytes}, {"cache", kCacheBytes}}) {
        const std::string name = std::string("BM_DotRowsBatched/") + std::string(TypeName(t)) + "/nx:" +
                                 std::to_string(nx) + "/" + where;
        benchmark::RegisterBenchmark(name.c_str(), BM_DotRowsBatched, t, nx, bytes)
            ->Threads(1)
            ->Threads(2)
            ->UseRealTime();
        if (!UsesInt8Activations(t)) continue;
        const std::string iname = std::string("BM_DotRowsInt8/") + std::string(TypeName(t)) + "/nx:" +
                                  std::to_string(nx) + "/" + where;
        benchmark::RegisterBenchmark(iname.c_str(), BM_DotRowsInt8, t, nx, bytes)
            ->Threads(1)
            ->Threads(2)
            ->UseRealTime();
      }
    }
  }
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) {
  using specd::quant_internal::DotIsa;
  specd::g_isa = specd::quant_internal::SelectedDotIsa();
  if (const char* want = std::getenv("SPECD_BENCH_ISA")) {
    bool found = false;
    for (DotIsa i : specd::quant_internal::kAllDotIsas)
      if (std::string(want) == specd::quant_internal::DotIsaName(i)) specd::g_isa = i, found = true;
    if (!found) {
      std::fprintf(stderr, "unknown SPECD_BENCH_ISA %s\n", want);
      return 1;
    }
  }
  specd::g_kernel = specd::quant_internal::DotRowsKernel(specd::g_isa);
  specd::g_int8_kernel = specd::quant_internal::DotRowsInt8Kernel(specd::g_isa);
  if (!specd::g_kernel) {
    std::fprintf(stderr, "this CPU cannot run the %s kernels\n", specd::quant_internal::DotIsaName(specd::g_isa));
    return 1;
  }
  specd::Register();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
