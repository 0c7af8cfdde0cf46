#!/usr/bin/env bash
# vwt beside llama.cpp and PyTorch 2.x in one session, on the same shapes (after setup.sh):
#  - inference: `vwt bench` on dense_200m (vocab 4096) and its uniform twin, and llama-bench on the
#    twin written as GGUF, each in f32, bf16 and 8-bit (vwt q8, llama.cpp q8_0), pp256 and tg64;
#  - training: bench_training (vwt, PyTorch eager and torch.compile from the venv), tiny_l8.
# Usage: bench/peers/run.sh [BUILD] [PEERS] [THREADS]  (defaults: build, build-peers, nproc)
# Writes PEERS/results/*.json and prints a table with the ratios.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
build="$(realpath -m "${1:-$root/build}")"
peers="$(realpath -m "${2:-$root/build-peers}")"
threads="${3:-$(nproc)}"
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

rm -f "$out"/llama-*.no-repack
for type in f32 bf16 q8_0; do
  weights=$([ "$type" = q8_0 ] && echo q8 || echo "$type")
  # llama.cpp repacks q8_0 for its AMX kernels where the CPU has AMX; in the 0.3.36 sdist those
  # kernels die (SIGILL at a tile load, or SIGSEGV) on a 2-core AMX Xeon VM. Then the
  # run is repeated without repacking (its AVX-512 VNNI kernels), and the table says so.
  if ! "$bench" -m "$peers/twin-$type.gguf" -p 256 -n 64 -t "$threads" -r 5 -o json > "$out/llama-$type.json" 2> "$out/llama-$type.err"; then
    echo "run.sh: llama-bench failed on $type ($(tail -n 1 "$out/llama-$type.err")); again with --repack 0" >&2
    "$bench" -m "$peers/twin-$type.gguf" -p 256 -n 64 -t "$threads" -r 5 --repack 0 -o json > "$out/llama-$type.json"
    touch "$out/llama-$type.no-repack"
  fi
  "$vwt" bench --preset dense_200m --vocab 4096 --twin --weights "$weights" --threads "$threads" --reps 5 --json > "$out/vwt-$weights.json"
done
VWT_TORCH_PYTHON="$py" "$build/bench/bench_training" --benchmark_filter='vwt_train_step|torch_train_step|vwt_peak_memory' > "$out/training.txt" 2>&1 || true

"$py" - "$out" "$threads" <<'PY'
import json, os, sys
out, threads = sys.argv[1], sys.argv[2]
print(f"same session, {threads} threads, dense_200m shapes with vocab 4096; tokens/s, mean of 5 repetitions")
# llama.cpp runs the uniform twin: "uniform / llama.cpp" compares the same shape, "><former /
# llama.cpp" the x-shaped model of the same parameters
print(f"{'test':6} {'format':6} {'vwt ><former':>13} {'vwt uniform':>12} {'llama.cpp':>10} {'uniform / llama.cpp':>20} {'><former / llama.cpp':>21}")
for vtype, ltype in (("f32", "f32"), ("bf16", "bf16"), ("q8", "q8_0")):
    vwt = json.load(open(os.path.join(out, f"vwt-{vtype}.json")))
    llama = json.load(open(os.path.join(out, f"llama-{ltype}.json")))
    for test, key in (("pp256", "n_prompt"), ("tg64", "n_gen")):
        x = next(r["avg_ts"] for r in vwt if r["test"] == test and not r["model"].endswith("twin"))
        u = next(r["avg_ts"] for r in vwt if r["test"] == test and r["model"].endswith("twin"))
        l = next(r["avg_ts"] for r in llama if r[key] > 0 and r[{"n_prompt": "n_gen", "n_gen": "n_prompt"}[key]] == 0)
        note = " (llama.cpp --repack 0)" if os.path.exists(os.path.join(out, f"llama-{ltype}.no-repack")) else ""
        print(f"{test:6} {vtype:6} {x:13.1f} {u:12.1f} {l:10.1f} {u / l:19.2f}x {x / l:20.2f}x{note}")
print()
print(open(os.path.join(out, "training.txt")).read().split("summary", 1)[-1].strip())
PY
