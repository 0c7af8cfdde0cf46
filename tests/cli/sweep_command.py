"""`vwt sweep` end to end on a small corpus: every shape at one parameter budget, each run equal to
`vwt compare`'s run of the same schedule and seed (the same recipe and windows), an interrupted
sweep continued run by run to the same report, seeds added later, and a changed recipe refused.

Usage: sweep_command.py VWT_BINARY CORPUS WORK_DIR"""
import json
import os
import shutil
import subprocess
import sys

vwt, corpus, work = sys.argv[1], sys.argv[2], sys.argv[3]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
MODEL = ["--layers", "6", "--hidden", "96", "--heads", "4", "--vocab", "258", "--context", "64", "--quantize", "8"]
RECIPE = ["--data", corpus, "--steps", "6", "--batch", "2", "--seq", "32", "--eval-every", "3", "--lr", "3e-3", "--quiet"]
out = os.path.join(work, "sweep")
failures = []


def sweep(*extra):
    r = subprocess.run([vwt, "sweep", *MODEL, *RECIPE, "--out", out, "--json", *extra], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"vwt sweep {extra}: exit {r.returncode}\n{r.stderr}")
    return json.loads(r.stdout)


shapes = ["x", "diamond", "uniform", "shuffled"]
report = sweep("--shapes", ",".join(shapes), "--seeds", "1,2")
by_shape = {s["shape"]: s for s in report["shapes"]}
if [s["shape"] for s in report["shapes"]] != shapes:
    failures.append(f"shapes {list(by_shape)}")
uniform = by_shape["uniform"]
for s in report["shapes"]:
    if len(s["final_validation_loss"]) != 2:
        failures.append(f"{s['shape']}: {len(s['final_validation_loss'])} runs, want 2")
    if abs(s["params"] / uniform["params"] - 1) > 0.06:  # one parameter budget (the solver's match, quantised widths)
        failures.append(f"{s['shape']}: {s['params']} parameters against the uniform's {uniform['params']}")
if sorted(by_shape["shuffled"]["widths"]) != sorted(by_shape["x"]["widths"]) or by_shape["shuffled"]["widths"] == by_shape["x"]["widths"]:
    failures.append(f"shuffled {by_shape['shuffled']['widths']} is not a reordering of x {by_shape['x']['widths']}")

# the same recipe in `vwt compare`: its ><former and uniform runs equal the sweep's x and uniform runs
cmp = json.loads(subprocess.run([vwt, "compare", *MODEL, "--shape", "x", *RECIPE, "--seeds", "1,2", "--out", os.path.join(work, "cmp"),
                                 "--json", "--sample-tokens", "0"], check=True, capture_output=True, text=True).stdout)
for shape, key in [("x", "xformer"), ("uniform", "uniform")]:
    if by_shape[shape]["final_validation_loss"] != cmp[key]["final_validation_loss"]:
        failures.append(f"{shape}: sweep {by_shape[shape]['final_validation_loss']} vs compare {cmp[key]['final_validation_loss']}")

# interrupted: one run's result gone; the continuation trains that run only and writes the same report
first = open(os.path.join(out, "report.json")).read()
shutil.rmtree(os.path.join(out, "runs", "diamond-seed2"))
r = subprocess.run([vwt, "sweep", *MODEL, *RECIPE[:-1], "--out", out, "--shapes", ",".join(shapes), "--seeds", "1,2"],
                   capture_output=True, text=True)
kept = r.stderr.count("kept from an earlier run")
if r.returncode != 0 or kept != 7:
    failures.append(f"continuation: exit {r.returncode}, {kept} runs kept (want 7)\n{r.stderr}")
if open(os.path.join(out, "report.json")).read() != first:
    failures.append("the continued sweep's report differs from the uninterrupted one")

# a seed added later: only its runs train
report3 = sweep("--shapes", ",".join(shapes), "--seeds", "1,2,3")
if [len(s["final_validation_loss"]) for s in report3["shapes"]] != [3] * 4:
    failures.append("seed 3 was not added to every shape")
if [s["final_validation_loss"][:2] for s in report3["shapes"]] != [s["final_validation_loss"] for s in report["shapes"]]:
    failures.append("adding a seed changed the earlier runs")
for f in ["report.md", "val_loss.svg", "schedules.svg", "sweep.json"]:
    if not os.path.exists(os.path.join(out, f)):
        failures.append(f"no {f}")

# errors: a changed recipe, a shape twice, an unknown shape
for extra, message in [(["--steps", "7"], "holds a sweep with steps 6, not 7"), (["--shapes", "x,x"], "'x' is listed twice"),
                       (["--shapes", "x,wedge"], "--shapes: wedge")]:
    args = [vwt, "sweep", *MODEL, *RECIPE, "--out", out]
    if extra[0] == "--steps":
        args = [a if a != "6" else "7" for a in args]
    else:
        args += extra
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode != 2 or message not in r.stderr:
        failures.append(f"{extra}: exit {r.returncode}, stderr {r.stderr!r}, want {message!r}")
# the constant-residual baseline beside x and uniform, with another resize: the recipe records it
out2 = os.path.join(work, "variants")
r = subprocess.run([vwt, "sweep", *MODEL, *RECIPE, "--out", out2, "--json", "--shapes", "x,constant,uniform", "--seeds", "1",
                    "--resize", "interpolate"], capture_output=True, text=True)
if r.returncode != 0:
    failures.append(f"constant/interpolate sweep: exit {r.returncode}\n{r.stderr}")
else:
    by = {s["shape"]: s for s in json.loads(r.stdout)["shapes"]}
    if by["constant"]["widths"] == by["x"]["widths"] or abs(by["constant"]["params"] / by["uniform"]["params"] - 1) > 0.06:
        failures.append(f"constant: widths {by['constant']['widths']}, {by['constant']['params']} parameters")
    if not 0 < by["constant"]["final_validation_loss"][0] < 10:
        failures.append(f"constant: loss {by['constant']['final_validation_loss']}")
    if "resize interpolate" not in open(os.path.join(out2, "report.md")).read():
        failures.append("the report does not name the resize")
    r = subprocess.run([vwt, "sweep", *MODEL, *RECIPE, "--out", out2, "--shapes", "x", "--seeds", "1"], capture_output=True, text=True)
    if r.returncode != 2 or 'holds a sweep with resize "interpolate", not null' not in r.stderr:
        failures.append(f"a continuation with another resize: exit {r.returncode}, {r.stderr!r}")
if failures:
    sys.exit("\n".join(failures))
print("vwt sweep: 4 shapes x 3 seeds at one budget, equal to vwt compare's runs, continued and extended run by run; "
      "the constant-residual shape and another resize")
