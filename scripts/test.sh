#!/usr/bin/env bash
# Sets up, then builds and runs every test twice: with g++ (oneDNN GEMMs, and the CUDA component
# where nvcc is found) and with clang++ (Eigen GEMMs), both with
# -Wall -Wextra -Wpedantic -Werror, then the I/O, model and CLI tests again under ASan + UBSan, then
# the libFuzzer targets (scripts/fuzz.sh).
# The CTest suite includes the PyTorch parity tests and the install + find_package consumer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
jobs="$(nproc)"
# The CUDA component (vwt::cuda, its tests, `vwt --device cuda`) is built in the g++ stage when
# nvcc is found; its GPU tests skip with a message on a machine without a GPU. The clang++ stage
# builds without it.
nvcc="$(command -v nvcc || true)"
[ -z "$nvcc" ] && [ -x /usr/local/cuda/bin/nvcc ] && nvcc=/usr/local/cuda/bin/nvcc
# The CPU policy's GEMMs: through oneDNN in the g++ stage (vwt::onednn), Eigen's in the clang++ one.
for compiler in g++ clang++; do
  dir="build-test-${compiler}"
  cuda_flags=()
  onednn=ON
  [ "$compiler" = clang++ ] && onednn=OFF
  if [ "$compiler" = g++ ] && [ -n "$nvcc" ]; then
    cuda_flags=(-DVWT_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER="$nvcc")
    echo "=== ${compiler}, oneDNN ${onednn}, with the CUDA component ($nvcc)"
  else
    echo "=== ${compiler}, oneDNN ${onednn}"
  fi
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_COMPILER="$compiler" "${cuda_flags[@]}" -DVWT_WITH_ONEDNN="$onednn" \
    -DVWT_WARNINGS_AS_ERRORS=ON -DVWT_BUILD_TESTS=ON -DVWT_BUILD_BENCH=ON -DVWT_BUILD_EXAMPLES=ON >/dev/null
  cmake --build "$dir" -j"$jobs"
  (cd "$dir" && ctest --output-on-failure -j"$jobs")
done

# The Python package (pip install . into build-venv: scikit-build-core builds python/ with the
# project's CMake), tested with pytest against the g++ build's `vwt` binary.
echo "=== Python package"
build-venv/bin/pip install --quiet --no-build-isolation .
VWT_CLI="$PWD/build-test-g++/tools/vwt" build-venv/bin/python -m pytest -q python/tests
# `vwt serve` with real clients (the openai package, curl) and a 200-request load run
echo "=== vwt serve"
VWT_CLI="$PWD/build-test-g++/tools/vwt" build-venv/bin/python -m pytest -q -s tests/server

# The file-reading code and the model under AddressSanitizer and UndefinedBehaviorSanitizer (without
# MPI: Open MPI's own allocations at exit would read as leaks).
echo "=== sanitizers (ASan + UBSan)"
dir="build-test-sanitize"
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_COMPILER=clang++ -DVWT_BUILD_BENCH=OFF -DVWT_BUILD_EXAMPLES=ON \
  -DVWT_WARNINGS_AS_ERRORS=ON -DVWT_NATIVE_ARCH=OFF -DVWT_WITH_ONEDNN=OFF -DVWT_WITH_MPI=OFF \
  -DCMAKE_CXX_FLAGS="-O1 -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" >/dev/null
cmake --build "$dir" -j"$jobs" --target io_safetensors io_report io_tokenizer model_parity infer_generation backend_matmul backend_ops layers_moe \
  train_gradients vwt_cli
# infer_allocations replaces malloc itself, which ASan's interceptors own: it runs in the builds above.
# The sweep's test is left to the two builds above: under ASan at -O1 it takes ~450 s of a
# ~685 s stage (one training per shape, the loop that `cli: train` and the resume tests run here).
(cd "$dir" && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j"$jobs" \
  -R "^(io_|model_parity|infer_generation|backend_|layers_|train_gradients|reference|cli: )" -E "^cli: sweep ")
# `vwt serve` under the same sanitizers: the server tests again (malformed requests, disconnects, stop
# strings, the load run); each server ends by SIGTERM and must exit with 0, which LeakSanitizer
# turns into a failure on a leak.
echo "=== vwt serve under ASan + UBSan"
ASAN_OPTIONS=detect_leaks=1 VWT_CLI="$PWD/$dir/tools/vwt" build-venv/bin/python -m pytest -q tests/server

# The readers of untrusted input under libFuzzer (60 s per target; FUZZ_SECONDS to change).
echo "=== fuzzing (libFuzzer + ASan + UBSan)"
bash scripts/fuzz.sh
