#!/usr/bin/env bash
# The peers a user would pick instead of vwt, installed beside the build (never by the test
# command): PyTorch 2.x from PyPI in a virtual environment (with gguf and numpy), and llama.cpp's
# llama-bench built from the source that PyPI's llama-cpp-python sdist ships.
# Usage: bench/peers/setup.sh [DIR]   (default build-peers; ~3 GB: torch's wheels pull CUDA libraries)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
dir="$(realpath -m "${1:-$root/build-peers}")"
mkdir -p "$dir"

if [ ! -x "$dir/venv/bin/python" ]; then
  python3 -m venv "$dir/venv"
fi
"$dir/venv/bin/pip" install --quiet --upgrade pip
"$dir/venv/bin/pip" install --quiet "torch>=2.1" "gguf>=0.10" numpy
"$dir/venv/bin/python" -c "import torch; print('peers: torch', torch.__version__)"

if [ ! -x "$dir/llama.cpp/build/bin/llama-bench" ]; then
  rm -rf "$dir/sdist" && mkdir -p "$dir/sdist"
  "$dir/venv/bin/pip" download --quiet --no-deps --no-binary :all: llama-cpp-python -d "$dir/sdist"
  tar xzf "$dir"/sdist/llama_cpp_python-*.tar.gz -C "$dir/sdist"
  rm -rf "$dir/llama.cpp" && cp -r "$dir"/sdist/llama_cpp_python-*/vendor/llama.cpp "$dir/llama.cpp"
  cmake -S "$dir/llama.cpp" -B "$dir/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON > "$dir/llama-cmake.log"
  cmake --build "$dir/llama.cpp/build" --target llama-bench -j "$(nproc)" > "$dir/llama-build.log"
fi
echo "peers: llama-bench at $dir/llama.cpp/build/bin/llama-bench ($(ls "$dir"/sdist/*.tar.gz 2>/dev/null | xargs -n1 basename))"
