#!/bin/bash
# Interleaved before/after runs on a shared machine.
P=/tmp/pair152k
for round in 1 2 3; do
  for b in before after; do
    /tmp/specd-$b bench-spec --model $P/target.gguf --draft $P/draft.gguf --ks 2,4,6 --repeats 1 --max-tokens 48 \
      --threads 1 --calibration-reps 3 > bench152k.$b.$round.txt 2>&1
    /tmp/specd-$b generate --model $P/target.gguf --draft $P/draft.gguf --k 4 --temperature 0.7 --top-p 0.9 --seed 7 \
      --prompt "The weather today is quite pleasant and the children" --max-tokens 48 --ignore-eos --threads 1 \
      --print-ids > gen152k.$b.$round.txt 2>&1
  done
done
echo done > finished
