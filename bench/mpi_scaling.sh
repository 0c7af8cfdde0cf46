#!/usr/bin/env bash
# Data-parallel scaling on this machine: bench_mpi as 1 rank x 2 threads, then as 2 ranks x 1 thread
# (mpirun), and the scaling efficiency (2-rank tokens/s over 1-rank tokens/s, the same cores).
# Usage: bash bench/mpi_scaling.sh [BUILD_DIR]
set -euo pipefail
build="${1:-build}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
one=$(VWT_BENCH_THREADS=2 "$build/bench/bench_mpi" | tee /dev/stderr | grep '^summary')
two=$(VWT_BENCH_THREADS=1 mpirun -np 2 --oversubscribe -x VWT_BENCH_THREADS "$build/bench/bench_mpi" | tee /dev/stderr | grep '^summary')
tps() { sed -E 's/.*training ([0-9]+) tokens\/s.*/\1/' <<<"$1"; }
echo "$one"
echo "$two"
awk -v a="$(tps "$one")" -v b="$(tps "$two")" 'BEGIN { printf "scaling: 2 ranks x 1 thread / 1 rank x 2 threads = %.2f\n", b / a }'
