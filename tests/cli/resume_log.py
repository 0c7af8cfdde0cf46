"""A resumed `vwt train` run logs the history of one run: after a crash past the last checkpoint
and a --resume, log.jsonl holds every step once, and each step's loss, learning rate, gradient
norm and validation loss are bit-identical to those of an uninterrupted run.
Usage: resume_log.py VWT DATA WORK"""
import json
import os
import shutil
import subprocess
import sys

vwt, data, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
flags = ["--data", data, "--preset", "tiny_l6", "--seq", "32", "--batch", "2", "--threads", "2",
         "--eval-every", "2", "--checkpoint-every", "3", "--steps", "8"]


def train(out, *extra):
    subprocess.run([vwt, "train", *flags, "--out", out, *extra], check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)


def log(out):
    with open(os.path.join(out, "log.jsonl")) as f:
        return [json.loads(line) for line in f]


whole, broken = os.path.join(work, "whole"), os.path.join(work, "broken")
train(whole)
train(broken)
# As if the process had been killed after logging steps 7 and 8 but before checkpointing step 8.
shutil.rmtree(os.path.join(broken, "step-00000008"))
with open(os.path.join(broken, "LATEST"), "w") as f:
    f.write("step-00000006\n")
train(broken, "--resume")

expected, got = log(whole), log(broken)
steps = [e["step"] for e in got]
if steps != list(range(1, 9)):
    sys.exit(f"resumed log holds steps {steps}, expected 1..8 once each")
for e, g in zip(expected, got):
    for key in ("loss", "lr", "grad_norm", "val_loss"):
        if e.get(key) != g.get(key):
            sys.exit(f"step {e['step']}: {key} {g.get(key)!r} after resume, {e.get(key)!r} uninterrupted")
if sum("val_loss" in e for e in got) != 4:
    sys.exit("expected validation losses at steps 2, 4, 6, 8")
print("resumed log equals the uninterrupted run's, every step once")
