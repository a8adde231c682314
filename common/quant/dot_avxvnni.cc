// AVX-VNNI (VEX vpdpbusd, e.g. Alder Lake) build of the integer dot kernels;
// its float kernels are the AVX2 build's. Called only after the CPU check in
// quant.cc (DotRowsInt8Kernel).
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
#pragma clang attribute push(__attribute__((target("avxvnni,avx2,fma,f16c"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avxvnni,avx2,fma,f16c")
#endif

#define SPECD_Q8_ISA 2
#define SPECD_Q8_ENTRY DotRowsInt8AvxVnni
#include "common/quant/dot_q8.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
