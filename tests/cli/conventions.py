"""The command line behaves like the tools people know: flag defaults in --help, progress only on
a terminal (plain lines in a log, never a carriage return) and silenced by --quiet, --json on
train, eval, generate and logits, --model RUN_DIR following the run's LATEST, and the sampling
flags llama.cpp users expect, with clear errors.
Usage: conventions.py VWT DATA WORK"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

vwt, data, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)


def run(*args, ok=True):
    p = subprocess.run([vwt, *args], capture_output=True, text=True)
    if ok and p.returncode != 0:
        sys.exit(f"vwt {' '.join(args)} failed ({p.returncode}): {p.stderr}")
    return p


def fail(what):
    sys.exit(f"conventions: {what}")


# --help and `vwt help CMD` show defaults
for text in (run("train", "--help").stdout, run("help", "train").stdout):
    if "--steps INT=200" not in text or "--lr FLOAT=0.003" not in text:
        fail(f"train's help does not show the defaults of --steps and --lr:\n{text}")

# progress: stderr is a pipe here, so plain lines and no carriage return; --quiet: none at all
out = os.path.join(work, "run")
flags = ["train", "--data", data, "--preset", "tiny_l6", "--seq", "32", "--batch", "2", "--threads", "2",
         "--eval-every", "3", "--checkpoint-every", "3", "--steps", "6", "--out", out]
p = run(*flags, "--json")
if "\r" in p.stderr:
    fail("a progress line with a carriage return went to a log")
if "step 6/6" not in p.stderr or "validation loss" not in p.stderr:
    fail(f"no final progress line or validation loss on stderr:\n{p.stderr}")
summary = json.loads(p.stdout)
if summary["step"] != 6 or not os.path.isdir(summary["checkpoint"]) or not summary["loss"] > 0:
    fail(f"train --json summary: {summary}")
p = run(*flags[:-1], os.path.join(work, "quiet"), "--quiet")
if "step" in p.stderr:
    fail(f"--quiet still printed progress:\n{p.stderr}")

# --model RUN_DIR reads the checkpoint that LATEST names
e = json.loads(run("eval", "--model", out, "--data", data, "--seq", "32", "--json").stdout)
if not (e["loss"] > 0 and abs(e["perplexity"] - math.exp(e["loss"])) < 1e-6 * e["perplexity"] and e["windows"] > 0):
    fail(f"eval --json: {e}")
if not e["model"].endswith("step-00000006"):
    fail(f"eval --model RUN_DIR read {e['model']}, not the checkpoint LATEST names")
g = json.loads(run("generate", "--model", out, "--prompt", "The ", "--max-new", "12", "--temperature", "0.8",
                   "--min-p", "0.05", "--repeat-penalty", "1.3", "--repeat-last-n", "16", "--json").stdout)
eos = json.load(open(os.path.join(summary["checkpoint"], "config.json")))["eos_token_id"]
ended = len(g["tokens"]) == 12 or (1 <= len(g["tokens"]) < 12 and g["tokens"][-1] == eos)  # 12 tokens, or stopped at eos
if g["prompt"] != "The " or not ended or g["prompt_tokens"] != 4 or not isinstance(g["text"], str):
    fail(f"generate --json: {g}")
if run("generate", "--model", out, "--prompt", "x", "--min-p", "2", ok=False).stderr.strip() != \
        "vwt: error: sampling: min-p must be in [0, 1], got 2":
    fail("a bad --min-p is not named")
p = run("generate", "--model", os.path.join(work, "none"), "--prompt", "x", ok=False)
if p.returncode != 2 or "none" not in p.stderr:
    fail(f"a missing model directory: {p.returncode} {p.stderr}")

# logits --json: the argmax of each row of the file it wrote
path = os.path.join(work, "logits.bin")
j = json.loads(run("logits", "--model", out, "--tokens", "84,104,101,32", "--out", path, "--json").stdout)
raw = open(path, "rb").read()
vocab = j["vocab"]
values = struct.unpack(f"<{len(raw) // 4}f", raw)
rows = [values[r * vocab:(r + 1) * vocab] for r in range(j["rows"])]
if j["rows"] != 4 or [max(range(vocab), key=row.__getitem__) for row in rows] != j["argmax"]:
    fail(f"logits --json: {j['rows']} rows, argmax {j['argmax']}")
print("conventions: help defaults, progress, --quiet, --json, LATEST and sampling flags behave")
