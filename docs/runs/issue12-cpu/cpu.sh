#!/bin/bash
# CPU time (user+sys) of the same greedy/sampled generation, before vs after: robust to a loaded machine.
P=/tmp/pair152k
PROMPT="The weather today is quite pleasant and the children"
for round in 1 2 3; do
  for b in before after; do
    for mode in greedy sampled targetonly; do
      case $mode in
        greedy) args="--draft $P/draft.gguf --k 4";;
        sampled) args="--draft $P/draft.gguf --k 4 --temperature 0.7 --top-p 0.9 --seed 7";;
        targetonly) args="";;
      esac
      /usr/bin/time -f "%U %S %e" -o t.$b.$mode.$round /tmp/specd-$b generate --model $P/target.gguf $args \
        --prompt "$PROMPT" --max-tokens 64 --ignore-eos --threads 1 --print-ids > out.$b.$mode.$round 2>&1
    done
  done
done
echo done > cpu_finished
