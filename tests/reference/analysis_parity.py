"""`vwt analyze` against the PyTorch reference: the reference model (vwt_reference.py, float64)
records each layer's input, output and MLP halves, and the statistics of docs/analysis.md are
computed here with numpy from those, independently of the C++; vwt's JSON must agree.

Usage: analysis_parity.py VWT_BINARY WORK_DIR"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from vwt_reference import Reference, write_safetensors  # noqa: E402

SEQ, FRACTION, WINDOWS, BATCH = 33, 0.5, 5, 2


def statistics(ref, windows):
    """Per layer: the statistics of docs/analysis.md over all tokens of all windows."""
    trace = []
    ref.forward(torch.tensor(windows), trace=trace)
    W = max([ref.h] + ref.widths)
    tokens = len(windows) * SEQ

    def whole(x, history):  # the whole stream: x's columns, then each missing one from the latest state that had it
        return ref.resize_to(x, W, history + [x], "move_up").reshape(tokens, W).numpy()

    def cosine(a, b):
        return float(np.mean(np.sum(a * b, 1) / np.sqrt(np.sum(a * a, 1) * np.sum(b * b, 1))))

    out = []
    for i, step in enumerate(trace):
        w = step["out"].shape[-1]  # the layer's columns: w_i, or h in a fixed-width stream
        x = step["out"].reshape(tokens, w).numpy()
        lam = np.clip(np.linalg.eigvalsh(np.cov(x, rowvar=False, bias=True)), 0, None)
        sigma = np.sqrt(lam)
        p = sigma[sigma > 0] / sigma.sum()
        before = whole(step["history"][-1], step["history"][:-1])  # the stream after the previous layer
        s = {"width": w, "rms": math.sqrt(float(np.mean(x * x))), "max_abs": float(np.abs(x).max()),
             "participation_ratio": float(lam.sum() ** 2 / np.sum(lam * lam)), "effective_rank": float(np.exp(-np.sum(p * np.log(p)))),
             "cosine_previous": cosine(whole(step["out"], step["history"]), before),
             "cosine_layer": cosine(x, step["in"].reshape(tokens, w).numpy())}
        u = step["u"].reshape(tokens, -1).numpy()
        gate = step["gate"].reshape(tokens, -1).numpy()
        active = gate > 0
        mass = np.abs(u * gate / (1 + np.exp(-gate))).sum(0)
        q = mass[mass > 0] / mass.sum()
        s.update({"mlp_ever_active": float(active.any(0).mean()), "mlp_active_fraction": float(active.mean()),
                  "mlp_entropy": float(-np.sum(q * np.log(q)) / math.log(len(mass)))})
        out.append(s)
    return out


def main(vwt, work):
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(3)
    corpus = bytes(rng.integers(32, 127, 400, dtype=np.uint8))  # printable ASCII: one token a byte
    data = os.path.join(work, "corpus.txt")
    with open(data, "wb") as f:
        f.write(corpus)
    tail = list(corpus[len(corpus) - int(len(corpus) * FRACTION):])
    windows = [tail[i * SEQ:(i + 1) * SEQ] for i in range(min(WINDOWS, (len(tail) - 1) // SEQ))]
    failures = 0
    # schedules the C++ tests do not use: an x shape with a wide first layer, a diamond, a uniform model,
    # the constant-residual baseline (every block reads and writes h columns)
    for name, widths, h, stream in [("x", [160, 96, 64, 32, 48, 160], 96, None), ("diamond", [64, 96, 128, 96, 64], 96, None),
                                    ("uniform", [96] * 4, 96, None), ("constant", [160, 72, 40, 88, 136], 96, {"fixed_residual_width": True})]:
        # a large init, so that every layer turns the stream well away from cosine 1
        ref = Reference(widths, h, 4, 4, 258, 256, seed=len(widths), init_range=1.0, stream=stream)
        ref.round_weights("F32")
        d = os.path.join(work, name)
        os.makedirs(d, exist_ok=True)
        write_safetensors(os.path.join(d, "model.safetensors"), ref.tensors, "F32")
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(ref.config(), f)
        got = json.loads(subprocess.run([vwt, "analyze", "--model", d, "--data", data, "--seq", str(SEQ), "--validation", str(FRACTION),
                                         "--windows", str(WINDOWS), "--batch", str(BATCH), "--json"],
                                        check=True, capture_output=True, text=True).stdout)
        model = got["models"][0]
        assert model["windows"] == len(windows) and model["tokens"] == len(windows) * SEQ, model
        want = statistics(ref, windows)
        assert len(model["layers"]) == len(want)
        for layer, (g, w) in enumerate(zip(model["layers"], want)):
            for key, value in w.items():
                tol = 1.5 / (4 * widths[layer]) if key == "mlp_ever_active" else 2e-3 * abs(value) + 1e-4
                if os.environ.get("VWT_ANALYSIS_VERBOSE"):
                    print(f"{name} layer {layer + 1} {key}: vwt {g[key]} reference {value}")
                if not abs(g[key] - value) <= tol:
                    print(f"{name} layer {layer + 1} {key}: vwt {g[key]} reference {value}")
                    failures += 1
        print(f"{name}: {len(want)} layers, {len(want[0])} statistics each, checked")
    # bad requests: an error naming the flag, exit status 2
    d = os.path.join(work, "x")
    for args, message in [(["--label", "a", "--label", "b"], "--label: give one per --model (1), got 2"),
                          (["--seq", "300"], "--seq: 300 is above the context of 256"),
                          (["--validation", "0.01"], "validation tokens, too few for one window"),
                          (["--batch", "0"], "--seq, --windows and --batch must be at least 1")]:
        r = subprocess.run([vwt, "analyze", "--model", d, "--data", data, *args], capture_output=True, text=True)
        if r.returncode != 2 or message not in r.stderr:
            print(f"analyze {args}: exit {r.returncode}, stderr {r.stderr!r}; expected {message!r}")
            failures += 1
    if failures:
        sys.exit(f"{failures} statistics or errors differ from what is expected")
    print("analysis parity: all statistics agree")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
