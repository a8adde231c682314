#!/usr/bin/env bash
# Prepared for the next device session (not run): where the product's wide kernel loses to the lean prototype
# at the same launch shape. ncu --set full of one 30-column launch on Q4_K 25600 x 5120, then the stall
# samples by SASS region and the occupancy / memory sections side by side:
#   lwc30     the landed wide kernel (8-warp blocks, 3 parts over grid y: 600 blocks; 71-72 us);
#   ppall30   call E's pp build with SPECD_EXP_PPB=3: every part in one block row, 200 blocks of 8 warps, two
#             stages, two an SM: the prototype's shape (75.4 us);
#   lean8_30  the prototype's kI8Imad kernel in that shape (ProtoKernel<4, 8, 2, 1>, 55.5 us; the 57th launch
#             of that instantiation is a timed one);
#   lwp4_30   call B's lwp4 (4-warp blocks four an SM, 91 us): why the prototype's best block shape loses here.
#   run(command="bash docs/runs/round31/next-callF.sh", carry=[".devpackF31"])
# .devpackF31 (not in git; ~19 MB): gpu_check.lwc and gpu_check.lwp4 from .devpackB31, gpu_check.pp from
# .devpackE31, proto_f16mma from .devpackA31, lib/ from .devpackE31 (the packs' libraries are identical):
#   tar -xJf .devpackX31/devcarry.tar.xz into separate folders, copy those four binaries and one lib/ into a
#   .devcarry, XZ_OPT=-6 tar -cJf .devpackF31/devcarry.tar.xz .devcarry
set -u
export DEVPACK=.devpackF31/devcarry.tar.xz
. tests/gpu/device_lib.sh
device_setup
exec > >(tee "$O/stdout.txt") 2>&1
ncu_full_of lwc30 MmvKernelWide 216 1 "$C/bin/gpu_check.lwc" --bench-matvec
SPECD_EXP_PPB=3 ncu_full_of ppall30 MmvKernelWide 216 1 "$C/bin/gpu_check.pp" --bench-matvec
ncu_full_of lwp4_30 MmvKernelWide 216 1 "$C/bin/gpu_check.lwp4" --bench-matvec
# The prototype: its instantiations share a base name, so pick one by its demangled name.
NCU_NAME_BASE=demangled ncu_full_of lean8_30 "ProtoKernel<(\(int\))?4, (\(int\))?8, (\(int\))?2, (\(int\))?1>" 10 1 \
  "$C/bin/proto_f16mma"
for t in lwc30 ppall30 lean8_30 lwp4_30; do
  stamp "$t: occupancy, memory, issue"
  xz -dc "$O/${t}_details.txt.xz" | grep -E "Duration|Achieved Occupancy|Theoretical Occupancy|Block Limit|Waves Per SM|L2 Hit|Memory Throughput|DRAM Throughput|L1/TEX Hit|Mem Busy|Max Bandwidth|Issue Slots Busy|No Eligible|Shared Memory Configuration Size|Dynamic Shared" | head -30
done
stamp done
bundle_out
