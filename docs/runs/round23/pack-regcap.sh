#!/usr/bin/env bash
# Round 23's pack for call R, .devpackR/devcarry.tar.xz (carry [".devpackR"]), as run at 703b25a (the
# patch applies there; b722fd7 landed its 5-8-column cap): this tree's specd and gpu_check, and builds with
# docs/runs/round23/exp-mmv-regcap.patch (the 5-8 and 9-16-column matvec kernels as their own __global__
# wrappers of one body, under a __maxnreg__ cap):
#   specd.k80 / specd.k88   the 5-8-column kernel at 80 / 88 registers (Q4_K: 97 before, no spills)
#   specd.k2                the 9-16-column kernel at 112 (128 before; Q4_K 8 bytes of spills)
#   specd.k80k2, gpu_check.k80k2   both
# The plan (MmvPlan) sizes each launch's waves by the paired decode kernel's residency (78 registers:
# 25 warps an SM); at 97 registers the 5-8-column kernel kept 19, so a launch planned as one wave
# may run a partial second one.
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackR docs/runs/round23/exp-mmv-regcap.patch \
  common/backend/cuda/k_matvec.cu k80:SPECD_MMV_K1_MAXREG=80 k88:SPECD_MMV_K1_MAXREG=88 \
  k2:SPECD_MMV_K2_MAXREG=112 k80k2:SPECD_MMV_K1_MAXREG=80,SPECD_MMV_K2_MAXREG=112:+gpu_check
