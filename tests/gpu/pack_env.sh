# Sourced by the scripts that build device packs (docs/runs/*/prepare.sh) from their own folder: the repository
# root as the working directory, CUDA's compiler on the PATH, and the packs and builds kept out of git.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
export PATH=/usr/local/cuda/bin:$PATH
for p in '/.devpack*/' '/.peer/' '/.devcarry/' '/build*/'; do
  grep -qxF "$p" .git/info/exclude 2> /dev/null || echo "$p" >> .git/info/exclude
done
