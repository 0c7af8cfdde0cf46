"""`--weights bf16|q8` on the command line: `vwt logits` of a model kept in bf16 or q8 stays within
the stated distance of the f32 logits (and moves them: the flag is not ignored), `vwt generate`
runs, and a model whose widths are not whole q8 blocks is refused naming the tensor.
Usage: weight_formats.py VWT WORK"""
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


def logits(weights):
    out = f"{work}/logits_{weights}.bin"
    subprocess.run([vwt, "logits", "--model", model, "--tokens", tokens, "--out", out, "--weights", weights, "--threads", "2"],
                   check=True, stdout=subprocess.DEVNULL)
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

narrow = f"{work}/narrow"
subprocess.run([vwt, "init", "--preset", "tiny_l6", "--out", narrow], check=True, stdout=subprocess.DEVNULL)
r = subprocess.run([vwt, "logits", "--model", narrow, "--tokens", "1,2,3", "--out", f"{work}/x.bin", "--weights", "q8"],
                   capture_output=True, text=True)
assert r.returncode == 2 and "transformer.h.0.ln_1.weight" in r.stderr and "not whole blocks of 32" in r.stderr, r.stderr
print("weight formats: ok")
