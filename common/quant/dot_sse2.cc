// SSE2 build of the dot kernels (x86-64 baseline; multiply then add, no FMA).
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
#endif

#define SPECD_DOT_ISA 1
#define SPECD_DOT_ENTRY DotRowsSse2
#include "common/quant/dot_kernels.inc"

#define SPECD_Q8_ISA 0
#define SPECD_Q8_ENTRY DotRowsInt8Sse2
#include "common/quant/dot_q8.inc"
#endif
