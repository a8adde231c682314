// Portable build of the dot kernels (scalar block decode, 16-lane arrays): the
// kernel on non-x86 hosts, and a reference variant for the tests on x86.
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
#if defined(__clang__)
#pragma clang fp contract(off)
#endif

#define SPECD_DOT_ISA 0
#define SPECD_DOT_ENTRY DotRowsPortable
#include "common/quant/dot_kernels.inc"

#define SPECD_Q8_ISA 0
#define SPECD_Q8_ENTRY DotRowsInt8Portable
#include "common/quant/dot_q8.inc"
