// AVX-512 VNNI (EVEX vpdpbusd on 256-bit vectors) build of the integer dot
// kernels; its float kernels are the AVX-512 build's. Called only after the
// CPU check in quant.cc (DotRowsInt8Kernel).
#if defined(__GNUC__) && !defined(__clang__)
// Only explicit FMAs; the compiler must not fuse a multiply and an add itself.
#pragma GCC optimize("fp-contract=off")
// GCC 12's AVX-512 intrinsics self-initialize their "undefined" operands and
// trip -W(maybe-)uninitialized when inlined (GCC PR 105593, fixed in 12.3).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
#pragma clang attribute push(__attribute__((target("avx512vnni,avx512f,avx512bw,avx512vl,avx2,fma,f16c"))), \
                             apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx512vnni,avx512f,avx512bw,avx512vl,avx2,fma,f16c")
#endif

#define SPECD_Q8_ISA 3
#define SPECD_Q8_ENTRY DotRowsInt8Avx512Vnni
#include "common/quant/dot_q8.inc"

#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#endif
