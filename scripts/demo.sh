#!/usr/bin/env bash
# Sets up, builds the vwt tool and runs the main demo: the paper's dense_200m ><former beside its
# parameter-matched uniform twin, with a picture of both schedules in build/dense_200m.svg.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DVWT_BUILD_TESTS=OFF -DVWT_BUILD_BENCH=OFF >/dev/null
cmake --build build -j"$(nproc)" --target vwt_cli
./build/tools/vwt info --preset dense_200m --svg build/dense_200m.svg
