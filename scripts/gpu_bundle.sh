#!/usr/bin/env bash
# Prepares what a GPU session carries to the device machine (the `device` tool's `run`, carry
# gpu-bundle): the CUDA build's test, CLI and benchmark binaries, the PyTorch reference models
# they read, and the shared libraries they need that are neither CUDA's own (the device image has
# CUDA 13) nor the C and C++ runtimes (the device's are as new or newer). Then, on the device: bash scripts/gpu_check.sh
set -euo pipefail
cd "$(dirname "$0")/.."
build="${1:-build-gpu}"  # its own build: portable x86-64 code (the device machine's CPU is not this one)
nvcc="$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)"
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DVWT_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc" \
  -DVWT_BUILD_TESTS=ON -DVWT_BUILD_BENCH=ON -DVWT_BUILD_EXAMPLES=ON -DVWT_NATIVE_ARCH=OFF -DVWT_WITH_ONEDNN=OFF \
  -DVWT_WITH_MPI=OFF >/dev/null  # no MPI, so no NCCL: the bundle stays small (libnccl alone is ~300 MB)
cmake --build "$build" -j"$(nproc)" --target cuda_ops cuda_device_policy bench_cuda vwt_cli
(cd "$build" && ctest -R "reference: write" >/dev/null)  # the PyTorch reference models and logits
rm -rf gpu-bundle && mkdir -p gpu-bundle/bin gpu-bundle/lib
cp "$build"/tests/cuda_ops "$build"/tests/cuda_device_policy "$build"/bench/bench_cuda "$build"/tools/vwt gpu-bundle/bin/
cp -r "$build"/tests/reference gpu-bundle/reference
for bin in gpu-bundle/bin/*; do
  ldd "$bin" | awk '/=> \// {print $3}'
done | sort -u | grep -v -E '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*|libstdc\+\+|libgcc_s|libcuda|libcudart|libcublas[^/]*|libnv[^/]*)\.so' \
  | xargs -r -I{} cp -L {} gpu-bundle/lib/
du -sh gpu-bundle
