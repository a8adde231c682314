#!/usr/bin/env bash
# Round 35 pack I, .devpackI35/devcarry.tar.xz (carry [".devpackI35"]), for round 32's callI2.sh with
# DEVPACK=.devpackI35/devcarry.tar.xz: .devcarry/bin the services, specd and gpu_check of this tree (the
# coordinator's warm-up); .devcarry/base/bin round 34's tree (no warm-up), from .devpackI34's bin.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BASE=.devpackI34 OUT=.devpackI35 bash docs/runs/round34/pack-i.sh
