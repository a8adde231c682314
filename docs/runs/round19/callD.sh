#!/usr/bin/env bash
# Round 19 call D: call C showed the 16-column matvec (six streams' 30-token verify) stalled on its activation
# loads (long scoreboard 48% of warp time, L1 hit 68%, occupancy 25% by registers and shared memory). Three
# builds against round 18's (.devpack's specd): specd.pf prefetches the next group's activation records into
# L1 (exp-mmv-prefetch.patch, every kernel of 5+ columns), specd.s2 gives the 16-column kernel a ring of 2
# records (exp-mmv-stages2.patch: more L1 for activations), specd.pfs2 both. Six sequences' verify 4 at 1024
# and one sequence's verify 6 at 4200 (KV f16), alternating; the six-sequence figure twice.
#   run(command="bash docs/runs/round19/callD.sh", carry=[".devpack", ".devpackX"])
set -u
. tests/gpu/device_lib.sh
device_setup
tar -xJf .devpackX/x.tar.xz
make_pair "$M6"
for rep in 1 2; do
  for b in specd specd.pf specd.s2 specd.pfs2; do
    stamp "$b (rep $rep): six sequences verify 4 at 1024"
    timeout 40 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx 1024 --prefill 64 --batches 6 \
      --verify-k 4 --verify-seqs 6 --reps 5 2>&1 | grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'; echo
    [ $rep = 2 ] && continue
    stamp "$b (rep $rep): one sequence verify 6 at 4200"
    timeout 40 "$C/bin/$b" bench --backend cuda --model "$M6/target.gguf" --ctx 4200 --prefill 4096 --batches 1 \
      --verify-k 6 --reps 5 2>&1 | grep -E "^ +[0-9]" | tr -s ' ' | tr '\n' '|'; echo
  done
done
stamp done
