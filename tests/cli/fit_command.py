"""`vwt fit` on synthetic `vwt compare` reports whose losses lie exactly on known curves: the uniform
model at L(C) = a C^-b + c, the ><former reaching every loss with 20% fewer training FLOPs and
15% fewer KV bytes, so the savings at matched loss must come out as 20% and 15%; then the errors.

Usage: fit_command.py VWT_BINARY WORK_DIR"""
import json
import os
import subprocess
import sys

vwt, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
STEPS, BATCH, SEQ = 400, 8, 128
TOKENS = STEPS * BATCH * SEQ


def loss_at(x, a, b, c):
    return a * x ** -b + c


reports = []
for i, flops in enumerate([2e6, 4e6, 8e6, 1.6e7]):  # uniform forward FLOPs per token
    kv = 2048 * 2 ** i
    C = 3 * flops * TOKENS
    # the ><former: 3% fewer FLOPs per token and 10% fewer KV bytes than the uniform of its size, and the
    # loss the uniform curve gives at its training FLOPs / 0.8
    xf_flops, xf_kv = 0.97 * flops, 0.9 * kv
    u_loss = loss_at(C / 1e12, 1.5, 0.3, 1.2)
    x_loss = loss_at(3 * xf_flops * TOKENS / 0.8 / 1e12, 1.5, 0.3, 1.2)
    r = {"data": "corpus.txt", "seeds": [1, 2], "steps": STEPS, "batch": BATCH, "seq": SEQ, "lr": 0.005,
         "xformer": {"flops_per_token": xf_flops, "kv_bytes_per_token": xf_kv, "final_validation_loss": [x_loss + 0.01, x_loss - 0.01]},
         "uniform": {"flops_per_token": flops, "kv_bytes_per_token": kv, "final_validation_loss": [u_loss + 0.01, u_loss - 0.01]}}
    d = os.path.join(work, f"size{i}")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "report.json")
    with open(path, "w") as f:
        json.dump(r, f)
    reports.append(path)

args = [vwt, "fit", "--bootstrap", "200", "--seed", "3", "--out", os.path.join(work, "out")]
for p in reports:
    args += ["--report", p]
got = json.loads(subprocess.run(args + ["--json"], check=True, capture_output=True, text=True).stdout)
failures = []
for row in got["savings"]:
    if abs(row["flops_saving"] - 0.2) > 1e-4:
        failures.append(f"FLOP saving {row['flops_saving']} at {row['report']}, want 0.2")
    lo, hi = row["flops_ci95"]
    if not lo <= row["flops_saving"] <= hi:
        failures.append(f"FLOP saving {row['flops_saving']} outside its interval {lo}..{hi}")
# the KV axis: the uniform's KV bytes are proportional to its FLOPs (both double per size), so the
# ><former's KV curve is the uniform's with K scaled by 0.97 / (0.8 x 0.9): at matched loss it needs
# 0.8 x 0.9 / 0.97 of the uniform's KV bytes
want_kv = 1 - 0.9 * 0.8 / 0.97
for row in got["savings"]:
    if abs(row["kv_saving"] - want_kv) > 1e-3:
        failures.append(f"KV saving {row['kv_saving']} at {row['report']}, want {want_kv}")
for f in ["fit.json", "report.md", "loss_vs_flops.svg", "loss_vs_kv.svg"]:
    if not os.path.exists(os.path.join(work, "out", f)):
        failures.append(f"no {f} written")
fits = got["fits"]["uniform"]["flops"]
if abs(fits["b"] - 0.3) > 1e-4 or abs(fits["c"] - 1.2) > 1e-4:
    failures.append(f"uniform FLOP fit {fits}, want b 0.3, c 1.2")

# errors: exit status 2 and a message naming the flag and the file
bad = os.path.join(work, "bad.json")
with open(bad, "w") as f:
    f.write("{ not json")
other = os.path.join(work, "other.json")
with open(other, "w") as f:
    r = json.load(open(reports[0]))
    r["data"] = "elsewhere.txt"
    json.dump(r, f)
for extra, message in [([bad], f"--report '{bad}': not JSON"), ([other], "trained on 'elsewhere.txt'"),
                       ([os.path.join(work, "missing.json")], "cannot be read")]:
    a = [vwt, "fit"] + sum([["--report", p] for p in reports[:2] + extra], [])
    r = subprocess.run(a, capture_output=True, text=True)
    if r.returncode != 2 or message not in r.stderr:
        failures.append(f"{extra}: exit {r.returncode}, stderr {r.stderr!r}, want {message!r}")
r = subprocess.run([vwt, "fit", "--report", reports[0], "--report", reports[1]], capture_output=True, text=True)
if r.returncode != 2 or "three sizes at least" not in r.stderr:
    failures.append(f"two reports: exit {r.returncode}, stderr {r.stderr!r}")
if failures:
    sys.exit("\n".join(failures))
print(f"vwt fit: known savings recovered (20% FLOPs, {100 * want_kv:.1f}% KV), errors named")
