// Diagnosis of the device sampler's argmax (docs/runs/round6/callD): the
// rows of gpu_check's sampler check (same Rng, same draws), the real
// SampleRowsKernel, and an instrumented copy of its argmax that dumps every
// thread's and every warp's candidate. Build (repo root): nvcc -O3 -arch=sm_90
// --expt-relaxed-constexpr -std=c++20 -I. docs/runs/round7/argmax_probe.cu
#include "common/backend/cuda/k_sample.cu"

#include <cmath>
#include <cstdio>
#include <vector>

namespace specd::cuda {
namespace {

__global__ void __launch_bounds__(kRowThreads) ProbeKernel(const float* logits, int V, float* tv, int* tj, float* wv,
                                                           int* wj, float* bv, int* bj) {
  const float* l = logits + static_cast<size_t>(blockIdx.x) * V;
  const int tid = threadIdx.x;
  __shared__ float vs[kRowWarps];
  __shared__ int js[kRowWarps];
  float top = -INFINITY;
  int best = INT_MAX;
  for (int j = tid; j < V; j += kRowThreads) {
    const float v = Val(const_cast<float*>(l), j);
    if (Better(v, j, top, best)) {
      top = v;
      best = j;
    }
  }
  tv[blockIdx.x * kRowThreads + tid] = top;
  tj[blockIdx.x * kRowThreads + tid] = best;
  BlockArgmax(&top, &best, vs, js);
  if ((tid & 31) == 0) {
    wv[blockIdx.x * kRowWarps + (tid >> 5)] = vs[tid >> 5];
    wj[blockIdx.x * kRowWarps + (tid >> 5)] = js[tid >> 5];
  }
  if (tid == 0) {
    bv[blockIdx.x] = top;
    bj[blockIdx.x] = best;
  }
}

}  // namespace
}  // namespace specd::cuda

using namespace specd::cuda;

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9e3779b97f4a7c15ull + 1) {}
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double U() { return static_cast<double>(Next() >> 11) * (1.0 / 9007199254740992.0); }
  float Gauss() {
    const double u1 = std::max(U(), 1e-300), u2 = U();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }
  int Int(int n) { return static_cast<int>(Next() % static_cast<uint64_t>(n)); }
};

std::vector<float> SamplerRows(Rng& r, int rows, int V) {
  std::vector<float> l(static_cast<size_t>(rows) * V);
  for (int i = 0; i < rows; ++i) {
    float* row = l.data() + static_cast<size_t>(i) * V;
    const float scale = 1.0f + static_cast<float>(i % 4);
    for (int j = 0; j < V; ++j) row[j] = r.Gauss() * scale;
    for (int t = 0; t < V / 50; ++t) row[r.Int(V)] = 1.5f * scale;
    for (int t = 0; t < V / 100; ++t) row[r.Int(V)] = -INFINITY;
    if (i % 3 == 0) row[r.Int(V)] = NAN;
    if (i % 2 == 0) row[r.Int(V)] = 8.0f * scale;
    if (i == 5) row[r.Int(V)] = INFINITY;
  }
  return l;
}

#define CK(x)                                                                            \
  do {                                                                                   \
    cudaError_t e_ = (x);                                                                \
    if (e_ != cudaSuccess) {                                                             \
      std::printf("CUDA error %s at line %d\n", cudaGetErrorString(e_), __LINE__);       \
      return 2;                                                                          \
    }                                                                                    \
  } while (0)

// The host's argmax in the sampler's order (NaN as -inf, lowest id on ties).
int HostArgmax(const float* l, int V) {
  int b = 0;
  float bv = std::isnan(l[0]) ? -INFINITY : l[0];
  for (int j = 1; j < V; ++j) {
    const float v = std::isnan(l[j]) ? -INFINITY : l[j];
    if (v > bv) {
      bv = v;
      b = j;
    }
  }
  return b;
}

int main() {
  constexpr int kRows = 6;
  Rng r(2024);
  int bad = 0;
  for (int V : {5000, 151936}) {
    const std::vector<float> h = SamplerRows(r, kRows, V);
    for (int t = 0; t < 20; ++t) (void)r.Int(V);  // recent(16), earlier(4)
    float* d_l = nullptr;
    CK(cudaMalloc(&d_l, h.size() * sizeof(float)));
    CK(cudaMemcpy(d_l, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
    // The real kernel, greedy rows with token/confidence/probs outputs as in gpu_check.
    float* d_out = nullptr;
    CK(cudaMalloc(&d_out, sizeof(float) * kRows * (V + 2)));
    CK(cudaMemset(d_out, 0, sizeof(float) * kRows * (V + 2)));
    std::vector<SampleRowDev> rows(kRows);
    for (int i = 0; i < kRows; ++i) {
      rows[i].row = i;
      rows[i].greedy = 1;
      rows[i].rep_penalty = 1.0f;
      rows[i].rep_window = 48;
      float* od = d_out + static_cast<size_t>(i) * (V + 2);
      rows[i].token = reinterpret_cast<uint64_t>(od);
      rows[i].confidence = reinterpret_cast<uint64_t>(od + 1);
      rows[i].probs = reinterpret_cast<uint64_t>(od + 2);
    }
    SampleRowDev* d_rows = nullptr;
    int32_t* d_meta = nullptr;
    CK(cudaMalloc(&d_rows, sizeof(SampleRowDev) * kRows));
    CK(cudaMalloc(&d_meta, 1024));
    CK(cudaMemset(d_meta, 0, 1024));
    CK(cudaMemcpy(d_rows, rows.data(), sizeof(SampleRowDev) * kRows, cudaMemcpyHostToDevice));
    CK(LaunchSampleRows(d_l, V, d_rows, kRows, d_meta, 0));
    CK(cudaDeviceSynchronize());
    std::vector<float> out(static_cast<size_t>(kRows) * (V + 2));
    CK(cudaMemcpy(out.data(), d_out, out.size() * sizeof(float), cudaMemcpyDeviceToHost));
    // The instrumented argmax.
    float *tv, *wv, *bv;
    int *tj, *wj, *bj;
    CK(cudaMalloc(&tv, sizeof(float) * kRows * kRowThreads));
    CK(cudaMalloc(&tj, sizeof(int) * kRows * kRowThreads));
    CK(cudaMalloc(&wv, sizeof(float) * kRows * kRowWarps));
    CK(cudaMalloc(&wj, sizeof(int) * kRows * kRowWarps));
    CK(cudaMalloc(&bv, sizeof(float) * kRows));
    CK(cudaMalloc(&bj, sizeof(int) * kRows));
    ProbeKernel<<<kRows, kRowThreads>>>(d_l, V, tv, tj, wv, wj, bv, bj);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    std::vector<float> htv(kRows * kRowThreads), hwv(kRows * kRowWarps), hbv(kRows);
    std::vector<int> htj(kRows * kRowThreads), hwj(kRows * kRowWarps), hbj(kRows);
    CK(cudaMemcpy(htv.data(), tv, htv.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(htj.data(), tj, htj.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hwv.data(), wv, hwv.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hwj.data(), wj, hwj.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hbv.data(), bv, hbv.size() * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hbj.data(), bj, hbj.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<float> back(h.size());
    CK(cudaMemcpy(back.data(), d_l, back.size() * 4, cudaMemcpyDeviceToHost));
    for (int i = 0; i < kRows; ++i) {
      const float* row = h.data() + static_cast<size_t>(i) * V;
      const int want = HostArgmax(row, V);
      int kernel_tok = 0;
      std::memcpy(&kernel_tok, out.data() + static_cast<size_t>(i) * (V + 2), 4);
      const int want_back = HostArgmax(back.data() + static_cast<size_t>(i) * V, V);
      const int t = want % kRowThreads;
      std::printf("V=%d row %d: host %d (%.7g) | device row read back argmax %d | SampleRows %d | probe %d (%.7g) | "
                  "thread %d holds %d (%.7g), warp %d holds %d (%.7g)\n",
                  V, i, want, row[want], want_back, kernel_tok, hbj[i], hbv[i], t, htj[i * kRowThreads + t],
                  htv[i * kRowThreads + t], t / 32, hwj[i * kRowWarps + t / 32], hwv[i * kRowWarps + t / 32]);
      if (kernel_tok != want || hbj[i] != want) {
        ++bad;
        // Where the thread-level scan disagrees with a host scan of the same stride.
        int shown = 0;
        for (int th = 0; th < kRowThreads && shown < 8; ++th) {
          float mv = -INFINITY;
          int mj = INT_MAX;
          for (int j = th; j < V; j += kRowThreads) {
            const float v = std::isnan(row[j]) ? -INFINITY : row[j];
            if (v > mv || (v == mv && j < mj)) {
              mv = v;
              mj = j;
            }
          }
          if (mj != htj[i * kRowThreads + th]) {
            std::printf("   thread %d: host scan %d (%.7g), device %d (%.7g)\n", th, mj, mv, htj[i * kRowThreads + th],
                        htv[i * kRowThreads + th]);
            ++shown;
          }
        }
      }
    }
    cudaFree(d_l);
    cudaFree(d_out);
    cudaFree(d_rows);
    cudaFree(d_meta);
  }
  std::printf("argmax probe: %d bad rows\n", bad);
  return bad ? 1 : 0;
}
