#!/usr/bin/env bash
# Round 15 call B: MmvPlan's warp cost (Tuning::mmv_warp_cost, --cuda-mmv-warp-cost; built in 4.3 since
# round 4's kernels): gpu_check --bench-plans (the 27B matrices on each split the cost picks), then the
# 27B step (decode ctx 64 / 4200, verify k = 1, 4, 7) and the draft at several costs; then six streams
# through the services with main's kernels (issue 12's figure for this build: k = 4 and k = 2).
# The build (experiment only, not kept) had cuda::Tuning::mmv_warp_cost (MmvPlan's kWarpOverheadGroups,
# 4.3) set by --cuda-mmv-warp-cost, and gpu_check --bench-plans timing each split MmvPlan picks for costs
# 0.5..64; the plans hardly move and the step did not (PERFORMANCE.md round 15), so both were removed.
set -u
. tests/gpu/device_lib.sh
device_setup
make_pair $M6 & mk6=$!
make_pair $M8 --residual-gain 0.05 & mk8=$!
stamp "gpu_check --bench-plans"
timeout 120 $C/bin/gpu_check --bench-plans 2>&1 | grep -v "^ts=" | tee $O/bench_plans.log
wait $mk6
T=$M6/target.gguf
run_bench() {  # tag, extra flags
  local b=$1 tag=$2; shift 2
  timeout 40 $C/bin/$b bench --backend cuda --model $T --ctx 64 --prefill 16 --batches 1 --verify-k 1,4 --reps 5 "$@" > $O/$tag.ctx64.txt 2>&1
  sed -n '/^decode/,$p' $O/$tag.ctx64.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  timeout 60 $C/bin/$b bench --backend cuda --model $T --ctx 4200 --prefill 4096 --batches 1 --verify-k 1,4,7 --reps 5 "$@" > $O/$tag.depth.txt 2>&1
  sed -n '/^decode/,$p' $O/$tag.depth.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
  timeout 30 $C/bin/$b bench --backend cuda --model $M6/draft.gguf --ctx 64 --prefill 64 --batches 1 --verify-k 1 --reps 5 "$@" > $O/$tag.draft.txt 2>&1
  sed -n '/^decode/,/^$/p' $O/$tag.draft.txt | grep "^ " | tr -s ' ' | tr '\n' '|'; echo
}
stamp "specd.base"; run_bench specd.base base
for wc in 4.3 1 2 3 6 9; do
  stamp "specd --cuda-mmv-warp-cost $wc"; run_bench specd wc$wc --cuda-mmv-warp-cost $wc
done
stamp "specd.base again"; run_bench specd.base base2
cat $O/*.txt > $O/bench.log; xz -9 $O/bench.log; rm -f $O/*.txt
wait $mk8
for k in 4 2; do
  stamp "six streams through the services, k = $k, ~80% pair"
  OUT=$O/s6k$k TARGET=$M8/target.gguf DRAFT=$M8/draft.gguf TOKENS=256 SPEC_FLAGS="--k $k --no-adaptive" timeout 200 bash tests/gpu/batch_spec.sh 2>&1 | tail -n 14
done
tar -czf $O/r15b.tgz -C $O --exclude r15b.tgz s6k4 s6k2 2>/dev/null; rm -rf $O/s6k4 $O/s6k2
stamp done
