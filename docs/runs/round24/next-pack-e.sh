#!/usr/bin/env bash
# Prepared for the next device session: the pack for next-callE.sh, .devpackE/devcarry.tar.xz (carry
# [".devpackE"]): this tree's specd and gpu_check, and builds with docs/runs/round24/next-mmv-l2ahead.patch
# (SPECD_MMV_L2_AHEAD = P: every matvec warp also requests its next P records into L2, in the prologue
# and as its two-slot ring advances: more bytes in flight at the same warps an SM; round 23's ncu had 66%
# of the decode kernel's stalls waiting for records, round 24 found deeper shared-memory rings slower):
# specd.l1, specd.l2 (+ gpu_check.l2: ptxas moves some kernels' registers, so the plan may move), specd.l4.
# (.devpackE is not in a fresh clone's .git/info/exclude: add "/.devpackE/" there.)
exec "$(dirname "$0")/../../../tests/gpu/pack_variants.sh" .devpackE \
  docs/runs/round24/next-mmv-l2ahead.patch common/backend/cuda/k_matvec.cu \
  l1:SPECD_MMV_L2_AHEAD=1 \
  l2:SPECD_MMV_L2_AHEAD=2:+gpu_check \
  l4:SPECD_MMV_L2_AHEAD=4
