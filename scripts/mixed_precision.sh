#!/usr/bin/env bash
# Mixed-precision training on the CPU against fp32: the x-shaped tiny_l8 trained on byte-level
# tinyshakespeare with `--gemm bf16` (every matrix product on operands rounded to bf16, fp32 sums,
# fp32 master weights and optimizer state) and with `--gemm fp32`, 3 seeds each, the same windows
# in the same order per seed. Writes the runs' logs and results/mixed_precision/report.md.
#
#   scripts/mixed_precision.sh [BUILD_DIR] [DATA_FILE] [STEPS]
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$here/build}
data=${2:-$here/../shared/data/tinyshakespeare.txt}
steps=${3:-500}
out=$here/results/mixed_precision
vwt=$build/tools/vwt
[[ -x $vwt ]] || { echo "no vwt binary at $vwt (build the project first)" >&2; exit 1; }
[[ -f $data ]] || { echo "no corpus at $data" >&2; exit 1; }
mkdir -p "$out"
for seed in 1 2 3; do
    for gemm in fp32 bf16; do
        run=$out/$gemm-seed$seed
        rm -rf "$run"
        "$vwt" train --data "$data" --preset tiny_l8 --steps "$steps" --batch 8 --seq 128 --lr 5e-3 --seed "$seed" \
            --eval-every 100 --checkpoint-every "$steps" --threads 2 --gemm "$gemm" --out "$run" 2>/dev/null
        echo "$gemm seed $seed: $(tail -1 "$run/log.jsonl")"
    done
done
python3 "$here/scripts/mixed_precision_report.py" "$out" "$steps" "$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
