#!/usr/bin/env bash
# Runs on the lent GPU machine, in one call, everything of the CUDA policy that needs a GPU; logs
# go to $OUT. Needs gpu-bundle/ (scripts/gpu_bundle.sh, run where the project builds). Order: the
# op-parity tests, the model tests (PyTorch logits, decode, 50 training steps against the CPU
# policy, generation from a CPU-trained checkpoint), the CLI with --device cuda, then the
# benchmarks (their summary last).
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-/tmp/vwt-gpu}"
mkdir -p "$out"
cudalib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $(python3 -c 'import nvidia, os; p = os.path.dirname(nvidia.__path__[0]); print(" ".join(os.path.join(p, "nvidia", x, "lib") for x in ("cublas", "cuda_runtime")))' 2>/dev/null); do
  [ -d "$d" ] && cudalib="$cudalib:$d"
done
libpath="$PWD/gpu-bundle/lib$cudalib:${LD_LIBRARY_PATH:-}"  # for our binaries only, not python3
bin=gpu-bundle/bin
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv > "$out/gpu.txt" 2>&1
LD_LIBRARY_PATH="$libpath" ldd $bin/cuda_ops > "$out/ldd.txt" 2>&1
status=0
run() {  # name command...
  local name="$1"; shift
  echo "=== $name" | tee -a "$out/summary.txt"
  if LD_LIBRARY_PATH="$libpath" "$@" > "$out/$name.log" 2>&1; then echo "ok" | tee -a "$out/summary.txt"; else echo "FAILED (rc $?)" | tee -a "$out/summary.txt"; status=1; fi
  tail -3 "$out/$name.log" | tee -a "$out/summary.txt"
}
export VWT_REFERENCE_DIR="$PWD/gpu-bundle/reference"  # where the tests read the PyTorch reference models
run cuda_ops $bin/cuda_ops -d yes
run cuda_device_policy $bin/cuda_device_policy -d yes
model="$PWD/gpu-bundle/reference/x_tiny_l8"
run cli_logits_cpu $bin/vwt logits --model "$model" --tokens 1,2,3,4,5,6,7,8 --out "$out/logits_cpu.bin"
run cli_logits_cuda $bin/vwt logits --model "$model" --tokens 1,2,3,4,5,6,7,8 --out "$out/logits_cuda.bin" --device cuda
python3 - "$out" <<'PY' | tee -a "$out/summary.txt"
import sys, numpy as np
a = np.fromfile(sys.argv[1] + "/logits_cpu.bin", dtype="<f4"); b = np.fromfile(sys.argv[1] + "/logits_cuda.bin", dtype="<f4")
print("cli logits cpu vs cuda: max rel err %.3g" % (np.abs(a - b).max() / np.abs(a).max()) if a.size == b.size and a.size else "cli logits: sizes differ")
PY
run cli_generate_cuda $bin/vwt generate --model "$model" --prompt "Once" --max-new 16 --temperature 0 --device cuda --gemm bf16
run bench_cuda $bin/bench_cuda --benchmark_min_time=0.2s --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
sed -n '/^summary/,$p' "$out/bench_cuda.log"
exit $status
