#!/usr/bin/env bash
# Sets up, builds the vwt tool and runs the main demo: the paper's dense_200m ><former beside its
# parameter-matched uniform twin (picture in build/dense_200m.svg), then a small ><former written
# as a checkpoint and streamed from (random weights until training lands, so the text is noise).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DVWT_BUILD_TESTS=OFF -DVWT_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target vwt_cli
./build/tools/vwt info --preset dense_200m --svg build/dense_200m.svg
./build/tools/vwt init --preset tiny_l8 --seed 1 --out build/demo_model
./build/tools/vwt generate --model build/demo_model --prompt "The narrow middle " --max-new 40 --seed 7 --threads 2 \
  | LC_ALL=C tr -c '[:print:]\n' '?'
