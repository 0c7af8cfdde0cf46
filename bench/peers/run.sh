#!/usr/bin/env bash
# vwt beside llama.cpp and PyTorch 2.x in one session, on the same shapes (after setup.sh):
#  - inference: `vwt bench` on dense_200m (vocab 4096) and its uniform twin, and llama-bench on the
#    twin written as GGUF, each in f32, bf16 and 8-bit (vwt q8, llama.cpp q8_0), pp256 and tg64;
#  - training: bench_training (vwt, PyTorch eager and torch.compile from the venv), tiny_l8.
# Usage: [ROUNDS=5] [REPS=3] bench/peers/run.sh [BUILD] [PEERS] [THREADS]  (defaults: build, build-peers, nproc)
# Writes PEERS/results/*.json and prints a table with the ratios.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(realpath -m "${1:-$root/build}")"
peers="$(realpath -m "${2:-$root/build-peers}")"
threads="${3:-$(nproc)}"
rounds="${ROUNDS:-5}" reps="${REPS:-3}"
py="$peers/venv/bin/python"
bench="$peers/llama.cpp/build/bin/llama-bench"
[ -x "$py" ] && [ -x "$bench" ] || { echo "run.sh: run bench/peers/setup.sh first" >&2; exit 2; }
out="$peers/results" && mkdir -p "$out"
vwt="$build/tools/vwt"

# dense_200m's dimensions, from vwt itself
read -r layers hidden heads kv_heads < <("$vwt" info --preset dense_200m --json | "$py" -c \
  'import json,sys; d=json.load(sys.stdin); print(d["layers"], d["hidden_size"], d["heads"], d["kv_heads"])')
for type in f32 bf16 q8_0; do
  [ -f "$peers/twin-$type.gguf" ] || "$py" "$root/bench/peers/write_gguf.py" "$peers/twin-$type.gguf" --layers "$layers" \
    --hidden "$hidden" --heads "$heads" --kv-heads "$kv_heads" --vocab 4096 --context 4096 --type "$type"
done

# This VM's memory and clocks change speed from minute to minute, which moved whole-run ratios by
# 30-40%: vwt and llama-bench take turns, a few repetitions each, for $rounds rounds (who goes first
# alternates), and the table gives the median over rounds of each round's ratio with its range.
rm -f "$out"/llama-*.no-repack "$out"/llama-*.json "$out"/vwt-*.json
run_llama() {  # type round
  # llama.cpp repacks q8_0 for its AMX kernels where the CPU has AMX; in the 0.3.36 sdist those
  # kernels die (SIGILL at a tile load, or SIGSEGV) on a 2-core AMX Xeon VM. Then the
  # run is repeated without repacking (its AVX-512 VNNI kernels), and the table says so.
  local flags=()
  if [ -f "$out/llama-$1.no-repack" ]; then flags=(--repack 0); fi
  if ! "$bench" -m "$peers/twin-$1.gguf" -p 256 -n 64 -t "$threads" -r "$reps" "${flags[@]}" -o json \
      > "$out/llama-$1-$2.json" 2> "$out/llama-$1.err"; then
    local why && why="llama-bench failed on $1 ($(tail -n 1 "$out/llama-$1.err"))"
    if [ "${#flags[@]}" != 0 ]; then echo "run.sh: $why, also with --repack 0" >&2 && exit 1; fi
    echo "run.sh: $why; again with --repack 0" >&2
    touch "$out/llama-$1.no-repack" && run_llama "$1" "$2"
  fi
}
run_vwt() {  # weights round
  "$vwt" bench --preset dense_200m --vocab 4096 --twin --weights "$1" --threads "$threads" --reps "$reps" --json \
    > "$out/vwt-$1-$2.json"
}
for round in $(seq 1 "$rounds"); do
  for type in f32 bf16 q8_0; do
    weights=$([ "$type" = q8_0 ] && echo q8 || echo "$type")
    if [ $((round % 2)) = 1 ]; then run_vwt "$weights" "$round" && run_llama "$type" "$round"
    else run_llama "$type" "$round" && run_vwt "$weights" "$round"; fi
  done
done
VWT_TORCH_PYTHON="$py" "$build/bench/bench_training" --benchmark_filter='vwt_train_step|torch_train_step|vwt_peak_memory' > "$out/training.txt" 2>&1 || true

"$py" - "$out" "$threads" "$rounds" "$reps" <<'PY'
import json, os, statistics, sys
out, threads, rounds, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
print(f"same session, {threads} threads, dense_200m shapes with vocab 4096; {rounds} rounds taking turns, "
      f"each the mean of {reps} repetitions; tokens/s and ratios: median over rounds [lowest-highest]")
# llama.cpp runs the uniform twin: "uniform / llama.cpp" compares the same shape, "><former /
# llama.cpp" the x-shaped model of the same parameters
print(f"{'test':6} {'format':6} {'vwt ><former':>13} {'vwt uniform':>12} {'llama.cpp':>10} {'uniform / llama.cpp':>22} {'><former / llama.cpp':>22}")
def spread(values):
    return f"{statistics.median(values):5.2f}x [{min(values):.2f}-{max(values):.2f}]"
for vtype, ltype in (("f32", "f32"), ("bf16", "bf16"), ("q8", "q8_0")):
    for test, key in (("pp256", "n_prompt"), ("tg64", "n_gen")):
        x, u, l = [], [], []
        for r in range(1, rounds + 1):
            vwt = json.load(open(os.path.join(out, f"vwt-{vtype}-{r}.json")))
            llama = json.load(open(os.path.join(out, f"llama-{ltype}-{r}.json")))
            x.append(next(e["avg_ts"] for e in vwt if e["test"] == test and not e["model"].endswith("twin")))
            u.append(next(e["avg_ts"] for e in vwt if e["test"] == test and e["model"].endswith("twin")))
            l.append(next(e["avg_ts"] for e in llama if e[key] > 0 and e[{"n_prompt": "n_gen", "n_gen": "n_prompt"}[key]] == 0))
        note = " (llama.cpp --repack 0)" if os.path.exists(os.path.join(out, f"llama-{ltype}.no-repack")) else ""
        med = statistics.median
        print(f"{test:6} {vtype:6} {med(x):13.1f} {med(u):12.1f} {med(l):10.1f} "
              f"{spread([a / b for a, b in zip(u, l)]):>22} {spread([a / b for a, b in zip(x, l)]):>22}{note}")
print()
print(open(os.path.join(out, "training.txt")).read().split("summary", 1)[-1].strip())
PY
