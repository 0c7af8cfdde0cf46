"""The Python package against the command line (an independent front end over the same files):
info and schedules equal `vwt info --json`, logits equal `vwt logits`, generation equals
`vwt generate --json` and is reproducible by seed, streaming yields the same tokens, training
equals `vwt train` and resumes bit-exactly, compute releases the GIL, and bad input raises
vwt.Error naming what was wrong.

Run by scripts/test.sh with VWT_CLI set to the built `vwt` binary."""
import json
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import vwt

CLI = os.environ.get("VWT_CLI", "")


def cli(*args):
    if not CLI:
        pytest.fail("set VWT_CLI to the vwt binary (scripts/test.sh does)")
    return subprocess.run([CLI, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "tiny"
    cli("init", "--preset", "tiny_l6", "--seed", "11", "--out", str(out))
    return out


@pytest.mark.parametrize("options", [
    {"preset": "dense_200m"},
    {"preset": "tiny_l8", "shape": "diamond", "bottleneck": 0.5, "quantize": 8},
    {"layers": 6, "hidden": 96, "heads": 4, "widths": [96, 64, 32, 32, 64, 96]},
    {"preset": "tiny_l8", "fixed_residual_width": True},
    {"preset": "tiny_l8", "narrow_input": True, "narrow_output": True, "wide_unembedding": True, "asymmetric": True},
])
def test_info_equals_the_cli(options):
    flags = []
    for key, value in options.items():
        flags.append("--" + key.replace("_", "-"))
        if value is not True:  # a flag without a value
            flags.append(",".join(map(str, value)) if isinstance(value, list) else str(value))
    want = json.loads(cli("info", "--json", *flags))
    assert vwt.info(**options) == want
    got = vwt.schedule(**options)
    assert got["widths"] == want["widths"] and got["base_width"] == want["base_width"]


def test_schedule_errors_name_the_option():
    with pytest.raises(vwt.Error, match="unknown preset 'nope'"):
        vwt.schedule("nope")
    with pytest.raises(vwt.Error, match="unknown option 'layerz'"):
        vwt.schedule("tiny_l6", layerz=3)
    with pytest.raises(vwt.Error, match="option 'layers' has the wrong type"):
        vwt.schedule("tiny_l6", layers="six")
    with pytest.raises(vwt.Error, match="unknown dtype 'f64'"):
        vwt.info("tiny_l6", kv_dtype="f64")


@pytest.mark.parametrize("weights", ["f32", "bf16"])
def test_logits_equal_the_cli(model_dir, tmp_path, weights):
    tokens = [3, 141, 59, 26, 5, 35, 89, 79, 32, 38]
    out = tmp_path / "logits.f32"
    cli("logits", "--model", str(model_dir), "--tokens", ",".join(map(str, tokens)), "--out", str(out), "--weights", weights,
        "--threads", "1")
    m = vwt.Model(model_dir, weights=weights, threads=1)
    want = np.fromfile(out, dtype="<f4").reshape(len(tokens), m.vocab)
    got = m.logits(np.array(tokens, dtype=np.int32))
    assert got.shape == want.shape and got.dtype == np.float32
    np.testing.assert_array_equal(got, want)
    # 2 threads split the same sums differently: equal to float rounding
    np.testing.assert_allclose(vwt.Model(model_dir, weights=weights, threads=2).logits(tokens), want, rtol=1e-5, atol=1e-5)


def test_generation_equals_the_cli_and_repeats_by_seed(model_dir):
    options = dict(max_new=24, temperature=0.9, top_k=40, top_p=0.95, seed=7)
    want = json.loads(cli("generate", "--model", str(model_dir), "--prompt", "To be, or", "--json", "--max-new", "24",
                          "--temperature", "0.9", "--top-k", "40", "--top-p", "0.95", "--seed", "7"))
    m = vwt.Model(model_dir)
    ids = m.generate("To be, or", **options)
    assert ids == want["tokens"]
    assert m.generate("To be, or", **options) == ids
    assert m.generate("To be, or", **dict(options, seed=8)) != ids
    assert m.text(ids) == want["text"]
    greedy = m.generate([84, 111], max_new=10, temperature=0)
    logits = m.logits([84, 111] + greedy[:-1])
    assert greedy == [int(np.argmax(row)) for row in logits[1:]]


def test_streaming_and_callbacks(model_dir):
    m = vwt.Model(model_dir)
    ids = m.generate("abc", max_new=16, seed=3)
    assert list(m.stream("abc", max_new=16, seed=3)) == ids
    seen = []
    stopped = m.generate("abc", max_new=16, seed=3, on_token=lambda t: (seen.append(t), len(seen) < 5)[1])
    assert stopped == ids[:5] and seen == ids[:5]
    first = next(iter(m.stream("abc", max_new=16, seed=3)))  # an abandoned stream stops its worker
    assert first == ids[0]

    def boom(t):
        raise KeyError("from the callback")
    with pytest.raises(KeyError, match="from the callback"):
        m.generate("abc", max_new=4, on_token=boom)


def test_bad_input_raises(model_dir, tmp_path):
    m = vwt.Model(model_dir)
    with pytest.raises(vwt.Error, match=r"token 300 at position 1 is outside the vocabulary \[0, 258\)"):
        m.logits([1, 300])
    with pytest.raises(vwt.Error, match="token -1"):
        m.generate([-1], max_new=2)
    with pytest.raises(vwt.Error, match="no tokens"):
        m.logits([])
    with pytest.raises(vwt.Error, match="exceed the model's context of 256"):
        m.generate("x" * 250, max_new=10)
    with pytest.raises(vwt.Error, match="temperature"):
        m.generate("x", temperature=-1)
    with pytest.raises(vwt.Error, match="1-D sequence of integer ids"):
        m.logits(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(vwt.Error, match="unknown format 'q4'"):
        vwt.Model(model_dir, weights="q4")
    with pytest.raises(vwt.Error, match="threads must be >= 1"):
        vwt.Model(model_dir, threads=0)
    with pytest.raises(vwt.Error, match="does not exist"):
        vwt.Model(tmp_path / "missing")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{ not json")
    with pytest.raises(vwt.Error, match="config.json"):
        vwt.Model(broken)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    words = ["the", "king", "of", "fair", "verona", "speaks", "and", "rome", "answers", "in", "kind", "words"]
    rng = np.random.default_rng(0)
    text = " ".join(words[i] for i in rng.integers(0, len(words), 6000)) + "\n"
    path = tmp_path_factory.mktemp("corpus") / "corpus.txt"
    path.write_text(text)
    return path


RUN = dict(steps=8, batch=4, seq=32, checkpoint_every=4, eval_every=4, seed=5, lr=3e-3)


def weights_of(run_dir, step):
    return (run_dir / f"step-{step:08d}" / "model.safetensors").read_bytes()


def test_training_equals_the_cli(corpus, tmp_path):
    flags = []
    for key, value in RUN.items():
        flags += ["--" + key.replace("_", "-"), str(value)]
    want = json.loads(cli("train", "--preset", "tiny_l6", "--data", str(corpus), "--out", str(tmp_path / "cli"), "--threads", "1",
                          "--quiet", "--json", *flags))
    steps = []
    got = vwt.train(corpus, tmp_path / "py", "tiny_l6", on_step=steps.append, **RUN)
    assert [r["step"] for r in steps] == list(range(1, 9))
    assert [("val_loss" in r) for r in steps] == [s % 4 == 0 for s in range(1, 9)]
    assert got["step"] == want["step"] == 8 and got["model"] == want["model"]
    assert got["loss"] == want["loss"] and got["val_loss"] == want["val_loss"]
    assert weights_of(tmp_path / "py", 8) == weights_of(tmp_path / "cli", 8)
    assert vwt.Model(tmp_path / "py").directory.endswith("step-00000008")


def test_training_stopped_and_resumed_is_bit_exact(corpus, tmp_path):
    whole = vwt.train(corpus, tmp_path / "whole", "tiny_l6", **RUN)
    stopped = vwt.train(corpus, tmp_path / "parts", "tiny_l6", on_step=lambda r: r["step"] < 6, **RUN)
    assert stopped["step"] == 6  # stopped after step 6; its last checkpoint is step 4
    assert (tmp_path / "parts" / "LATEST").read_text().strip() == "step-00000004"
    resumed = []
    end = vwt.train(corpus, tmp_path / "parts", "tiny_l6", resume=True, on_step=resumed.append, **RUN)
    assert [r["step"] for r in resumed] == [5, 6, 7, 8]
    assert end["loss"] == whole["loss"] and end["val_loss"] == whole["val_loss"]
    assert weights_of(tmp_path / "parts", 8) == weights_of(tmp_path / "whole", 8)
    assert (tmp_path / "parts" / "step-00000008" / "optimizer.safetensors").read_bytes() == \
        (tmp_path / "whole" / "step-00000008" / "optimizer.safetensors").read_bytes()


def test_training_errors(corpus, tmp_path):
    with pytest.raises(vwt.Error, match="--seq: 999 is above the model's context"):
        vwt.train(corpus, tmp_path / "a", "tiny_l6", seq=999)
    with pytest.raises(vwt.Error, match="option 'steps' has the wrong type"):
        vwt.train(corpus, tmp_path / "a", "tiny_l6", steps="many")
    with pytest.raises(vwt.Error, match="missing.txt"):
        vwt.train(tmp_path / "missing.txt", tmp_path / "a", "tiny_l6", steps=2)
    with pytest.raises(vwt.Error, match="no checkpoint"):
        vwt.train(corpus, tmp_path / "fresh", "tiny_l6", resume=True, steps=2)
    with pytest.raises(ZeroDivisionError):
        vwt.train(corpus, tmp_path / "b", "tiny_l6", steps=2, on_step=lambda r: 1 / 0)


def test_compute_releases_the_gil(tmp_path):
    wide = tmp_path / "wide"
    cli("init", "--layers", "4", "--hidden", "512", "--heads", "8", "--vocab", "258", "--shape", "uniform", "--out", str(wide))
    m = vwt.Model(wide)
    tokens = list(range(256))
    call = 1e9
    for _ in range(2):
        start = time.perf_counter()
        m.logits(tokens)
        call = min(call, time.perf_counter() - start)
    assert call > 0.01, f"the work ({call:.3f} s) is too short to tell"
    worker = threading.Thread(target=m.logits, args=(tokens,))
    last, longest = time.perf_counter(), 0.0
    worker.start()  # returns once the worker runs: at once if it lets go of the GIL, after the call if not
    while True:  # pure Python: held off while the worker holds the GIL
        now = time.perf_counter()
        longest, last = max(longest, now - last), now
        if not worker.is_alive():
            break
    worker.join()
    assert longest < call / 2, f"the main thread stalled {longest:.3f} s during a {call:.3f} s call: the GIL was held"


def test_compare_equals_the_cli(corpus, tmp_path):
    options = dict(seeds=[1, 2], steps=6, batch=4, seq=32, eval_every=3, sample_tokens=8)
    flags = []
    for key, value in options.items():
        flags += ["--" + key.replace("_", "-"), ",".join(map(str, value)) if isinstance(value, list) else str(value)]
    want = json.loads(cli("compare", "--preset", "tiny_l6", "--data", str(corpus), "--out", str(tmp_path / "cli"), "--threads", "1",
                          "--quiet", "--json", *flags))
    seen = []
    got = vwt.compare(corpus, tmp_path / "py", "tiny_l6", on_step=seen.append, **options)
    assert got == json.loads((tmp_path / "py" / "report.json").read_text())

    for report in (got, want):  # everything but the data path and the timings
        report.pop("data")
        for model in ("xformer", "uniform"):
            report[model].pop("tokens_per_second")
    assert got == want
    assert len([s for s in seen if "step" in s]) == 2 * 2 * 6 and len([s for s in seen if "final_loss" in s]) == 4
    assert {s["model"] for s in seen} == {"><former", "uniform"}
