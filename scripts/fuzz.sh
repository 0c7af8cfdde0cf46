#!/usr/bin/env bash
# Fuzzes the readers of untrusted input with libFuzzer (clang, ASan + UBSan): the safetensors reader,
# the config reader, the token-id parser and the BPE tokenizer's encode and decode. Seeds are real files written by `vwt init` (several
# schedules, dtypes and layouts) and hand-written token lists. Each target runs FUZZ_SECONDS
# (default 60); any crash, leak, input slower than 1 s or allocation above 1 GiB fails the script.
# Prints executions and coverage per target.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${FUZZ_SECONDS:-60}"
dir=build-fuzz
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++ -DVWT_BUILD_FUZZERS=ON -DVWT_WITH_ONEDNN=OFF \
  -DVWT_BUILD_TESTS=OFF -DVWT_BUILD_BENCH=OFF -DVWT_BUILD_EXAMPLES=ON -DVWT_NATIVE_ARCH=OFF -DVWT_WARNINGS_AS_ERRORS=ON >/dev/null
cmake --build "$dir" -j"$(nproc)" --target fuzz_safetensors fuzz_config fuzz_token_ids fuzz_tokenizer vwt_cli
vwt="$dir/tools/vwt"

# Seed corpus: small real model directories (a safetensors file each is a few KB).
seeds="$dir/seeds"
rm -rf "$seeds" "$dir/corpus" "$dir/artifacts"
mkdir -p "$seeds"/{safetensors,config,token_ids,tokenizer} "$dir/artifacts"
n=0
seed_model() {  # vwt init flags...
  n=$((n + 1))
  "$vwt" init --seed "$n" --out "$seeds/m$n" "$@" >/dev/null
  cp "$seeds/m$n/config.json" "$seeds/config/c$n.json"
  cp "$seeds/m$n/model.safetensors" "$seeds/safetensors/m$n.safetensors"
  rm -rf "$seeds/m$n"
}
small=(--vocab 256 --context 64)
seed_model --layers 2 --hidden 16 --heads 2 --widths 16,8 "${small[@]}" --dtype bf16
seed_model --layers 3 --hidden 16 --heads 2 --kv-heads 1 --widths 8,24,8 "${small[@]}" --dtype f16 --resize zero
seed_model --layers 2 --hidden 16 --heads 2 --widths 16,16 "${small[@]}" --standard
seed_model --preset tiny_l6 --layers 4 --hidden 32 --heads 2 --quantize 4 "${small[@]}" --dtype bf16
cp "$seeds/config/c4.json" "$seeds/config/c5.json"  # a preset's generator fields (base_width, factors)
printf '\x01%s' "1,2,3" > "$seeds/token_ids/t1"
printf '\x00%s' "0" > "$seeds/token_ids/t2"
printf '\xff%s' " 72, 101 ,108,108,111" > "$seeds/token_ids/t3"
printf '\x02%s' "1,,2,-3,abc,99999999999999999999" > "$seeds/token_ids/t4"
printf '%s' "the theme   12 123 <|eot|> <|eo" > "$seeds/tokenizer/s1"
printf 'caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80 \xff\xe6\x97 \r\n\r\n  x' > "$seeds/tokenizer/s2"

status=0
for target in safetensors config token_ids tokenizer; do
  corpus="$dir/corpus/$target"
  mkdir -p "$corpus"
  log="$dir/fuzz_$target.log"
  if ! "$dir/tests/fuzz/fuzz_$target" "$corpus" "$seeds/$target" -max_total_time="$seconds" -timeout=1 \
      -rss_limit_mb=2048 -malloc_limit_mb=1024 -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$dir/artifacts/$target-" >"$log" 2>&1; then
    echo "fuzz_$target: FAILED (see $log and $dir/artifacts/)"
    tail -30 "$log"
    status=1
    continue
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
  cov=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | grep -o 'cov: [0-9]* ft: [0-9]*' | tail -1 || true)
  echo "fuzz_$target: ${runs} executions in ${seconds} s, ${cov:-cov: ?}, corpus $(ls "$corpus" | wc -l) inputs, no crash"
done
exit $status
