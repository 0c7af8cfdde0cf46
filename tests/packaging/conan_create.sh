#!/usr/bin/env bash
# `conan create` of vwt's real recipe (conanfile.py + test_package/), offline: Conan Center is
# unreachable here, so its eigen and nlohmann_json are replaced by the stand-in recipes beside this
# script, which package Debian's headers under the same names. Conan's home is kept in WORK.
# Usage: conan_create.sh CONAN WORK
set -euo pipefail
conan="$1"
work="$(realpath -m "$2")"
root="$(cd "$(dirname "$0")/../.." && pwd)"
here="$root/tests/packaging/conan"
rm -rf "$work" && mkdir -p "$work"
export CONAN_HOME="$work/home"
"$conan" profile detect --force > "$work/profile.log" 2>&1
"$conan" remote disable conancenter > /dev/null  # offline: only the local cache
for dep in eigen nlohmann_json; do
  "$conan" create "$here/$dep" > "$work/$dep.log" 2>&1 || { cat "$work/$dep.log" >&2; exit 1; }
done
# vwt needs C++20: without it in the profile the recipe refuses with a message that says so
if "$conan" create "$root" -s compiler.cppstd=17 --build=missing > "$work/cpp17.log" 2>&1; then
  echo "conan_create: the recipe accepted compiler.cppstd=17" >&2; exit 1
fi
grep -q "vwt needs C++20" "$work/cpp17.log" || { cat "$work/cpp17.log" >&2; echo "conan_create: no C++20 message" >&2; exit 1; }
"$conan" create "$root" -s compiler.cppstd=20 -s build_type=Release --build=missing > "$work/vwt.log" 2>&1 \
  || { tail -n 60 "$work/vwt.log" >&2; exit 1; }
grep "generated 8 tokens" "$work/vwt.log"
