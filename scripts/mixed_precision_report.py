"""Summarises scripts/mixed_precision.sh: per seed, the fp32 and bf16 loss curves side by side.

"Within noise" is judged against the spread between seeds: for each step, the bf16 - fp32 gap of a
seed is compared with the standard deviation of the fp32 losses across seeds at that step.
"""
import json
import pathlib
import statistics
import sys

out, steps, cpu = pathlib.Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
seeds = [1, 2, 3]


def log(gemm, seed):
    entries = [json.loads(line) for line in (out / f"{gemm}-seed{seed}" / "log.jsonl").read_text().splitlines() if line]
    return {e["step"]: e for e in entries}


runs = {(g, s): log(g, s) for g in ("fp32", "bf16") for s in seeds}


def smoothed(run, step, window=25):
    """Mean training loss over the `window` steps ending at `step` (single steps are noisy)."""
    return statistics.mean(run[t]["loss"] for t in range(max(1, step - window + 1), step + 1))


checkpoints = [s for s in range(100, steps + 1, 100)]
lines = [
    "# Mixed-precision training on the CPU",
    "",
    f"tiny_l8 (x-shaped) on byte-level tinyshakespeare, {steps} steps of 8 x 128 tokens, lr 5e-3 cosine, "
    f"3 seeds; `--gemm bf16` (operands of every matrix product rounded to bf16, fp32 sums, fp32 master "
    f"weights and AdamW state) against `--gemm fp32`. Machine: {cpu}, 2 threads. "
    "Command: `scripts/mixed_precision.sh`.",
    "",
    "## Validation loss",
    "",
    "| step | fp32 mean ± std | bf16 mean ± std | bf16 - fp32 per seed | fp32 seed std |",
    "|---|---|---|---|---|",
]
worst_ratio = 0.0
for step in checkpoints:
    f = [runs["fp32", s][step]["val_loss"] for s in seeds]
    b = [runs["bf16", s][step]["val_loss"] for s in seeds]
    gaps = [bb - ff for bb, ff in zip(b, f)]
    sd = statistics.stdev(f)
    worst_ratio = max(worst_ratio, max(abs(g) for g in gaps) / sd)
    lines.append(
        f"| {step} | {statistics.mean(f):.4f} ± {sd:.4f} | {statistics.mean(b):.4f} ± {statistics.stdev(b):.4f} | "
        + " ".join(f"{g:+.4f}" for g in gaps)
        + f" | {sd:.4f} |"
    )
lines += ["", "## Training loss (mean of the 25 steps ending at each step)", "", "| step | fp32 | bf16 | largest |gap| / fp32 seed std |", "|---|---|---|---|"]
train_worst = 0.0
for step in [25] + checkpoints:
    f = [smoothed(runs["fp32", s], step) for s in seeds]
    b = [smoothed(runs["bf16", s], step) for s in seeds]
    ratio = max(abs(bb - ff) for bb, ff in zip(b, f)) / statistics.stdev(f)
    train_worst = max(train_worst, ratio)
    lines.append(f"| {step} | {statistics.mean(f):.4f} | {statistics.mean(b):.4f} | {ratio:.2f} |")
lines += [
    "",
    f"Largest |bf16 - fp32| of one seed over the fp32 seeds' standard deviation: validation {worst_ratio:.2f}, "
    f"smoothed training loss {train_worst:.2f} (below 1: within the noise between seeds).",
    "",
]
(out / "report.md").write_text("\n".join(lines))
print("\n".join(lines))
