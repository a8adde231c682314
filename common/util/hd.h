// Marks functions usable from both host code and CUDA device code, so that the
// CPU and CUDA backends share one implementation of small numeric routines
// (fp16 conversion, dequantization of one block, the RNG, the acceptance rule).
#pragma once
#if defined(__CUDACC__)
#define SPECD_HD __host__ __device__ __forceinline__
#else
#define SPECD_HD inline
#endif
