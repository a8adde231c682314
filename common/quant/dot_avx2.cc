// AVX2+FMA+F16C build of the dot kernels. Called only after the CPU check in
// quant.cc (DotRowsKernel).
#if defined(__GNUC__) && !defined(__clang__)
// Only explicit FMAs; the compiler must not fuse a multiply and an add itself.
#pragma GCC optimize("fp-contract=off")
#endif
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/quant/block_dequant.h"
#include "common/quant/dot_kernels.h"
#include "common/util/fp16.h"
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#if defined(__clang__)
#pragma clang fp contract(off)
#pragma clang attribute push(__attribute__((target("avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#endif

#define SPECD_DOT_ISA 2
#define SPECD_DOT_ENTRY DotRowsAvx2
#include "common/quant/dot_kernels.inc"

#define SPECD_Q8_ISA 1
#define SPECD_Q8_ENTRY DotRowsInt8Avx2
#include "common/quant/dot_q8.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
