#!/usr/bin/env bash
# Installs the dependencies from Debian's packages (and PyPI for what Debian lacks).
# Usage: setup.sh          every dependency of the build, tests and benchmarks (scripts/test.sh)
#        setup.sh --demo   only what the demo needs: a compiler, CMake, the library's dependencies,
#                          CLI11, PCRE2, oneDNN and the demo's corpus (scripts/demo.sh)
# Idempotent: packages already present are skipped, and nothing is asked interactively.
set -euo pipefail

demo=0
case "${1:-}" in
  --demo) demo=1 ;;
  "") ;;
  *) echo "setup.sh: unknown argument '$1' (--demo, or nothing for everything)" >&2; exit 2 ;;
esac

demo_packages=(
  build-essential cmake libeigen3-dev nlohmann-json3-dev libcli11-dev libpcre2-dev libdnnl-dev bible-kjv
)
packages=(
  build-essential cmake clang libomp-dev
  libclang-rt-14-dev    # clang's sanitizer and libFuzzer runtimes (ASan/UBSan tests, scripts/fuzz.sh)
  libeigen3-dev nlohmann-json3-dev libcli11-dev catch2 libbenchmark-dev
  python3 python3-torch python3-numpy
  python3-venv          # build-venv: PyPI tokenizers, the oracle of the tokenizer tests
  python3-dev           # Python.h for the nanobind module (pip install ., python/)
  libpcre2-dev          # the pre-tokenizer patterns of tokenizer.json (vwt::tokenizer)
  libopenblas0-pthread  # an optimised BLAS for PyTorch, whose Debian build otherwise uses the reference BLAS
  libopenblas-dev libdnnl-dev  # the library GEMM baselines of bench/bench_inference
  pkg-config            # the package test builds a consumer from the installed vwt.pc
  libcpp-httplib-dev    # `vwt serve` (the tool builds without it, lacking that command)
  curl                  # a client of `vwt serve` in tests/server
  libopenmpi-dev openmpi-bin  # vwt::mpi: data-parallel training (mpirun)
  bible-kjv             # the demo's corpus: the King James Version (public domain), printed by `bible`
)

((demo)) && packages=("${demo_packages[@]}")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: all packages present"
fi

((demo)) && exit 0
# Python packages the tests need that Debian does not ship, from PyPI into build-venv (ignored by git).
venv="$(dirname "$0")/../build-venv"
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -c "import tokenizers" 2>/dev/null || "$venv/bin/pip" install --quiet "tokenizers==0.23.3"
"$venv/bin/python" -c "import tokenizers; print('setup: tokenizers', tokenizers.__version__)"
# The Python package's build (scikit-build-core, nanobind) and tests (numpy, pytest): pip install
# --no-build-isolation . in scripts/test.sh builds with these
"$venv/bin/python" -c "import nanobind, scikit_build_core, numpy, pytest" 2>/dev/null ||
  "$venv/bin/pip" install --quiet "nanobind>=2.0,<3" "scikit-build-core>=0.10,<2" "numpy>=1.22" "pytest>=7"
# The OpenAI client, a real client of `vwt serve` in tests/server
"$venv/bin/python" -c "import openai" 2>/dev/null || "$venv/bin/pip" install --quiet "openai>=1.0,<3"
# Conan 2, for the offline `conan create` of the recipe (tests/packaging/conan_create.sh)
[ -x "$venv/bin/conan" ] || "$venv/bin/pip" install --quiet "conan>=2.0,<3"
echo "setup: $("$venv/bin/conan" --version)"
