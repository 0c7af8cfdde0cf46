"""The PyTorch baseline of bench_training: the reference model (tests/reference) in float32,
trained with torch.optim.AdamW on random tokens of the same batch shape as the C++ run; eager, or
with --compile the forward pass through torch.compile. Attention is torch's fused
scaled_dot_product_attention where torch has it (2.1 and later), else the written-out softmax.

Usage: torch_train_step.py --widths 208,152,... --hidden 128 --heads 4 --kv-heads 4 --vocab 258
           --batch 8 --seq 128 --steps 5 --warmup 2 --threads 2 [--compile]
Prints one JSON line: seconds_per_step (the fastest timed step, the statistic vwt's rows use too),
tokens_per_second, peak_rss_bytes (this process) and rss_before_training_bytes (after importing
torch and building the model). Threads: torch's own pool only; OpenBLAS's pool (Debian's torch
calls it) is held to one thread, or the two pools together oversubscribe the cores.
"""
import argparse
import json
import os
import resource
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
from vwt_reference import Reference  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--widths", required=True)
    ap.add_argument("--hidden", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--kv-heads", type=int, required=True)
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--compile", action="store_true", help="torch.compile the forward pass")
    ap.add_argument("--bf16", action="store_true",
                    help="mixed precision: forward and loss under torch.autocast('cpu', torch.bfloat16), float32 master weights")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    widths = [int(w) for w in a.widths.split(",")]
    ref = Reference(widths, a.hidden, a.heads, a.kv_heads, a.vocab, a.seq, seed=0)
    ref.sdpa = tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 1)
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch {torch.__version__} has no torch.compile")
    forward = torch.compile(ref.forward) if a.compile else ref.forward
    params = {n: t.to(torch.float32).requires_grad_() for n, t in ref.tensors}
    opt = torch.optim.AdamW(params.values(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    g = torch.Generator().manual_seed(0)
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=g)
    x, y = data[:, :-1], data[:, 1:]

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            logits = forward(x, params)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params.values(), 1.0)
        opt.step()

    with open("/proc/self/statm") as f:
        rss_before = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    for _ in range(a.warmup):
        step()
    seconds = float("inf")
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        seconds = min(seconds, time.perf_counter() - t0)
    print(json.dumps({"seconds_per_step": seconds, "tokens_per_second": a.batch * a.seq / seconds,
                      "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
                      "rss_before_training_bytes": rss_before,
                      "torch": torch.__version__, "threads": a.threads, "compiled": a.compile, "bf16": a.bf16,
                      "attention": "sdpa" if ref.sdpa else "einsum"}))


if __name__ == "__main__":
    main()
