#!/usr/bin/env bash
# Sets up, then builds and runs every test twice: with g++ and with clang++, both with
# -Wall -Wextra -Wpedantic -Werror. The CTest suite includes the install + find_package consumer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
for compiler in g++ clang++; do
  dir="build-test-${compiler}"
  echo "=== ${compiler}"
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$compiler" \
    -DVWT_WARNINGS_AS_ERRORS=ON -DVWT_BUILD_TESTS=ON -DVWT_BUILD_BENCH=ON -DVWT_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$dir" -j"$jobs"
  (cd "$dir" && ctest --output-on-failure -j"$jobs")
done
