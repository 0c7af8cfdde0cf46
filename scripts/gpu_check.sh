#!/usr/bin/env bash
# Runs on the lent GPU machine, in one call, everything of the CUDA policy that needs a GPU. Needs
# gpu-bundle/ (scripts/gpu_bundle.sh, run where the project builds). Order: the op-parity tests,
# the model tests (PyTorch logits, decode, 50 training steps against the CPU policy, generation
# from a CPU-trained checkpoint), the CLI with --device cuda, the benchmarks (their summary last),
# then compute-sanitizer over the op tests. Every step has a time limit, so the script always ends
# by packing its logs: $OUT gets summary.txt, bench_cuda.log, the two test logs and logs.tgz (all).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/vwt-gpu-out}"
logs=/tmp/vwt-gpu-logs
rm -rf "$logs" && mkdir -p "$out" "$logs"
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(python3 -c 'import nvidia, os; p = os.path.dirname(nvidia.__path__[0]); print(" ".join(os.path.join(p, "nvidia", x, "lib") for x in ("cublas", "cuda_runtime")))' 2>/dev/null); do
  [ -d "$d" ] && cudalib="$cudalib:$d"
done
libpath="$PWD/gpu-bundle/lib$cudalib:${LD_LIBRARY_PATH:-}"  # for our binaries only, not python3
bin=gpu-bundle/bin
{ nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version --format=csv; lscpu | head -20; } > "$logs/machine.txt" 2>&1
LD_LIBRARY_PATH="$libpath" ldd $bin/cuda_ops > "$logs/ldd.txt" 2>&1
status=0
run() {  # seconds name command...
  local limit="$1" name="$2"; shift 2
  echo "=== $name" | tee -a "$logs/summary.txt"
  local t0=$SECONDS
  if LD_LIBRARY_PATH="$libpath" timeout "$limit" "$@" > "$logs/$name.log" 2>&1; then echo "ok ($((SECONDS - t0)) s)" | tee -a "$logs/summary.txt"
  else echo "FAILED (rc $?, $((SECONDS - t0)) s)" | tee -a "$logs/summary.txt"; status=1; fi
  tail -4 "$logs/$name.log" | tee -a "$logs/summary.txt"
}
export VWT_REFERENCE_DIR="$PWD/gpu-bundle/reference"  # where the tests read the PyTorch reference models
run 60 cuda_ops $bin/cuda_ops -d yes
run 90 cuda_device_policy $bin/cuda_device_policy -d yes
model="$PWD/gpu-bundle/reference/x_tiny_l8"
run 20 cli_logits_cpu $bin/vwt logits --model "$model" --tokens 1,2,3,4,5,6,7,8 --out "$logs/logits_cpu.bin"
run 20 cli_logits_cuda $bin/vwt logits --model "$model" --tokens 1,2,3,4,5,6,7,8 --out "$logs/logits_cuda.bin" --device cuda --gemm fp32
python3 - "$logs" <<'PY' 2>&1 | tee -a "$logs/summary.txt"
import sys, numpy as np
a = np.fromfile(sys.argv[1] + "/logits_cpu.bin", dtype="<f4"); b = np.fromfile(sys.argv[1] + "/logits_cuda.bin", dtype="<f4")
print("cli logits cpu vs cuda: max rel err %.3g" % (np.abs(a - b).max() / np.abs(a).max()) if a.size == b.size and a.size else "cli logits: sizes differ")
PY
run 20 cli_generate_cuda $bin/vwt generate --model "$model" --prompt "Once" --max-new 16 --temperature 0 --device cuda --gemm bf16
run 180 bench_cuda $bin/bench_cuda --benchmark_min_time=0.2 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
if command -v compute-sanitizer >/dev/null; then
  run 40 memcheck compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 3 $bin/cuda_ops
  run 20 racecheck compute-sanitizer --tool racecheck --error-exitcode 3 $bin/cuda_ops "*attention*"
fi
# Where the time goes: each kernel's GPU time in one prefill, one decode step and one training step
# (VWT_PROFILE=1; Nsight Compute, clocks left as they are).
ncu="$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)"
if [ "${VWT_PROFILE:-0}" = 1 ] && [ -n "$ncu" ]; then
  for w in prefill decode train; do
    run 100 "profile_$w" "$ncu" --clock-control none --profile-from-start off --metrics gpu__time_duration.sum --csv \
      --print-summary per-kernel $bin/bench_cuda --profile=$w
  done
fi
sed -n '/^summary/,$p' "$logs/bench_cuda.log" | tee -a "$logs/summary.txt"
cp "$logs/summary.txt" "$logs/bench_cuda.log" "$logs"/profile_*.log "$out/" 2>/dev/null
tar czf "$out/logs.tgz" -C "$logs" .
exit $status
