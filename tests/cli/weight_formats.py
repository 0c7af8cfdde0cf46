"""`--weights bf16|q8` on the command line: `vwt logits` of a model kept in bf16 or q8 stays within
the stated distance of the f32 logits (and moves them: the flag is not ignored), `vwt generate`
runs, and a model whose widths are not whole q8 blocks is refused naming the tensor. `--gemm`:
bf16 weights with fp32 products differ from the default (bf16 products in prefill), f32 weights
with bf16 products differ from fp32 ones, all within the bf16 tolerance; tf32 is refused on the CPU.
`--max-shard-size`: a sharded directory gives the same logits.
`--kv-dtype bf16`: greedy generation runs (and `vwt bench` reports the dtype), unknown dtypes are refused.
Usage: weight_formats.py VWT WORK"""
import os
import shutil
import struct
import subprocess
import sys

vwt, work = sys.argv[1:3]
shutil.rmtree(work, ignore_errors=True)
model = f"{work}/model"
subprocess.run([vwt, "init", "--layers", "4", "--hidden", "128", "--heads", "4", "--vocab", "300", "--context", "64",
                "--widths", "128,64,96,128", "--seed", "3", "--out", model], check=True, stdout=subprocess.DEVNULL)
tokens = ",".join(str((i * 41 + 7) % 300) for i in range(24))


def logits(weights, gemm="auto"):
    out = f"{work}/logits_{weights}_{gemm}.bin"
    subprocess.run([vwt, "logits", "--model", model, "--tokens", tokens, "--out", out, "--weights", weights, "--threads", "2",
                    "--gemm", gemm], check=True, stdout=subprocess.DEVNULL)
    with open(out, "rb") as f:
        data = f.read()
    return struct.unpack(f"<{len(data) // 4}f", data)


full = logits("f32")
scale = max(abs(v) for v in full)
for weights, tolerance in (("bf16", 1e-2), ("q8", 3e-2)):
    moved = max(abs(a - b) for a, b in zip(logits(weights), full)) / scale
    print(f"{weights}: max |logit - f32 logit| = {moved:.2e} of the largest logit (tolerance {tolerance})")
    assert 0 < moved < tolerance, (weights, moved)
    text = subprocess.run([vwt, "generate", "--model", model, "--prompt", "abc", "--max-new", "5", "--temperature", "0",
                           "--weights", weights], check=True, capture_output=True).stdout
    assert text.startswith(b"abc") and len(text) >= 4, text

for weights, gemm in (("bf16", "fp32"), ("f32", "bf16")):
    a, b = logits(weights, gemm), logits(weights)
    apart = max(abs(x - y) for x, y in zip(a, b)) / scale
    off = max(abs(x - y) for x, y in zip(a, full)) / scale
    print(f"--weights {weights} --gemm {gemm}: {apart:.2e} from --gemm auto, {off:.2e} from f32")
    assert 0 < apart < 1e-2 and off < 1e-2, (weights, gemm, apart, off)
for gemm, message in (("tf32", "the CPU has auto, fp32, bf16"), ("fp16", "unknown arithmetic 'fp16'")):
    r = subprocess.run([vwt, "logits", "--model", model, "--tokens", tokens, "--out", f"{work}/x.bin", "--gemm", gemm],
                       capture_output=True, text=True)
    assert r.returncode == 2 and message in r.stderr, r.stderr

greedy = [vwt, "generate", "--model", model, "--prompt", "abcabc", "--max-new", "12", "--temperature", "0", "--threads", "2"]
kept_f32 = subprocess.run(greedy, check=True, capture_output=True).stdout
kept_bf16 = subprocess.run(greedy + ["--kv-dtype", "bf16"], check=True, capture_output=True).stdout
assert kept_bf16.startswith(b"abcabc") and len(kept_bf16) == len(kept_f32), (kept_f32, kept_bf16)
bench = subprocess.run([vwt, "bench", "--model", model, "--prompt", "8", "--gen", "4", "--reps", "1", "--kv-dtype", "bf16", "--json"],
                       check=True, capture_output=True, text=True).stdout
assert '"kv_dtype": "bf16"' in bench, bench
r = subprocess.run(greedy + ["--kv-dtype", "f8"], capture_output=True, text=True)
assert r.returncode == 2 and "--kv-dtype: unknown dtype 'f8'" in r.stderr, r.stderr

# --max-shard-size: the same model in shards (save_pretrained's names and index) gives the same logits
sharded = f"{work}/sharded"
subprocess.run([vwt, "init", "--layers", "4", "--hidden", "128", "--heads", "4", "--vocab", "300", "--context", "64",
                "--widths", "128,64,96,128", "--seed", "3", "--out", sharded, "--max-shard-size", "100KB"], check=True,
               stdout=subprocess.DEVNULL)
shards = sorted(n for n in os.listdir(sharded) if n.startswith("model-"))
assert len(shards) >= 3 and "model.safetensors.index.json" in os.listdir(sharded), os.listdir(sharded)
subprocess.run([vwt, "logits", "--model", sharded, "--tokens", tokens, "--out", f"{work}/sharded.bin", "--threads", "2"], check=True,
               stdout=subprocess.DEVNULL)
with open(f"{work}/sharded.bin", "rb") as f:
    assert struct.unpack(f"<{len(full)}f", f.read()) == full
r = subprocess.run([vwt, "init", "--preset", "tiny_l6", "--out", f"{work}/x", "--max-shard-size", "12XB"], capture_output=True, text=True)
assert r.returncode == 2 and "--max-shard-size: unknown unit 'XB'" in r.stderr, r.stderr
print(f"sharded: {len(shards)} shards, the same logits")

narrow = f"{work}/narrow"
subprocess.run([vwt, "init", "--preset", "tiny_l6", "--out", narrow], check=True, stdout=subprocess.DEVNULL)
r = subprocess.run([vwt, "logits", "--model", narrow, "--tokens", "1,2,3", "--out", f"{work}/x.bin", "--weights", "q8"],
                   capture_output=True, text=True)
assert r.returncode == 2 and "transformer.h.0.ln_1.weight" in r.stderr and "not whole blocks of 32" in r.stderr, r.stderr
print("weight formats: ok")
