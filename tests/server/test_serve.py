"""`vwt serve` with real clients on 127.0.0.1: the PyPI openai client (completions, chat, streaming),
curl, a malformed-request corpus (4xx, never a crash), client disconnects (the slot is freed), the
bounded queue (503), and a load run of 200 requests from 16 concurrent clients whose every response
is checked (throughput and p50/p99 latency printed, and written to $VWT_SERVE_REPORT if set).

Run by scripts/test.sh: VWT_CLI is the built `vwt` binary."""
import concurrent.futures
import http.client
import json
import math
import os
import random
import socket
import struct
import subprocess
import time

import openai
import pytest

CLI = os.environ.get("VWT_CLI", "")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(model, *flags):
    port = free_port()
    proc = subprocess.Popen([CLI, "serve", "--model", str(model), "--port", str(port), *flags],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            status, _ = request(port, "GET", "/health")
            if status == 200:
                return proc, port
        except OSError:
            time.sleep(0.1)
        if proc.poll() is not None:
            raise RuntimeError("vwt serve exited: " + proc.stdout.read())
    proc.kill()
    raise RuntimeError("vwt serve did not answer /health")


def stop(proc):
    proc.terminate()
    assert proc.wait(timeout=20) == 0, proc.stdout.read()


def request(port, method, path, body=None, raw=None):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    payload = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=payload, headers={"Content-Type": "application/json"})
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, data


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    if not CLI:
        pytest.fail("set VWT_CLI to the vwt binary (scripts/test.sh does)")
    out = tmp_path_factory.mktemp("serve") / "tiny"
    subprocess.run([CLI, "init", "--preset", "tiny_l6", "--seed", "11", "--out", str(out)], check=True, capture_output=True)
    return out


@pytest.fixture(scope="module")
def server(model):
    proc, port = start(model, "--slots", "4", "--queue", "64", "--threads", "1")
    yield port
    stop(proc)


def generate_cli(model, prompt, **flags):
    args = [CLI, "generate", "--model", str(model), "--prompt", prompt, "--json"]
    for k, v in flags.items():
        args += ["--" + k.replace("_", "-"), str(v)]
    return json.loads(subprocess.run(args, check=True, capture_output=True, text=True).stdout)


def test_openai_completions_equal_vwt_generate(model, server):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server}/v1", api_key="none")
    want = generate_cli(model, "To be, or", max_new=20, temperature=0.9, top_p=0.95, seed=7)
    got = client.completions.create(model="tiny", prompt="To be, or", max_tokens=20, temperature=0.9, top_p=0.95, seed=7)
    assert got.choices[0].text == want["text"]
    assert got.usage.prompt_tokens == want["prompt_tokens"] and got.usage.completion_tokens == len(want["tokens"])
    assert got.choices[0].finish_reason in ("length", "stop")
    streamed = client.completions.create(model="tiny", prompt="To be, or", max_tokens=20, temperature=0.9, top_p=0.95, seed=7,
                                         stream=True)
    assert "".join(chunk.choices[0].text for chunk in streamed if chunk.choices) == want["text"]
    assert [m.id for m in client.models.list().data] == ["tiny"]


def test_openai_chat_streamed_equals_not_streamed(server):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{server}/v1", api_key="none")
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi"}]
    whole = client.chat.completions.create(model="tiny", messages=messages, max_tokens=24, seed=3)
    assert whole.choices[0].message.role == "assistant"
    assert whole.usage.completion_tokens >= 1
    pieces = []
    for chunk in client.chat.completions.create(model="tiny", messages=messages, max_tokens=24, seed=3, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == whole.choices[0].message.content
    # log-probabilities through the client's types: the greedy token is the most likely
    greedy = client.chat.completions.create(model="tiny", messages=messages, max_tokens=3, temperature=0, logprobs=True, top_logprobs=2)
    for c in greedy.choices[0].logprobs.content:
        assert c.top_logprobs[0].token == c.token and c.top_logprobs[0].logprob == pytest.approx(c.logprob)
        assert c.top_logprobs[1].logprob <= c.logprob < 0


def test_openai_stop_strings(trained):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{trained}/v1", api_key="none")
    whole = client.completions.create(model="run", prompt="the king ", max_tokens=30, temperature=0).choices[0].text
    cut = client.completions.create(model="run", prompt="the king ", max_tokens=30, temperature=0, stop=[whole[8:11]])
    assert cut.choices[0].text == whole[:whole.index(whole[8:11])] and cut.choices[0].finish_reason == "stop"


def test_curl(server):
    out = subprocess.run(["curl", "-sS", "--fail-with-body", f"http://127.0.0.1:{server}/v1/completions", "-H",
                          "Content-Type: application/json", "-d", '{"prompt": [84, 111, 32], "max_tokens": 5, "temperature": 0}'],
                         check=True, capture_output=True, text=True).stdout
    j = json.loads(out)
    assert j["object"] == "text_completion" and j["usage"]["completion_tokens"] == 5 and len(j["tokens"]) == 5
    metrics = subprocess.run(["curl", "-sS", f"http://127.0.0.1:{server}/metrics"], check=True, capture_output=True, text=True).stdout
    assert "vwt_generated_tokens_total" in metrics and "vwt_slots 4" in metrics


MALFORMED = [
    ("POST", "/v1/completions", "{not json", 400),
    ("POST", "/v1/completions", "[1, 2]", 400),
    ("POST", "/v1/completions", "{}", 400),
    ("POST", "/v1/completions", '{"prompt": 5}', 400),
    ("POST", "/v1/completions", '{"prompt": []}', 400),
    ("POST", "/v1/completions", '{"prompt": ""}', 400),
    ("POST", "/v1/completions", '{"prompt": [1, 999999]}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": 0}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": -3}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": 100000}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "max_tokens": "ten"}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "temperature": -1}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "top_p": 2}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "n": 3}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "stream": "yes"}', 400),
    ("POST", "/v1/completions", json.dumps({"prompt": "x" * 300}), 400),
    ("POST", "/v1/chat/completions", '{"messages": []}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "wizard", "content": "x"}]}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user"}]}', 400),
    ("POST", "/v1/chat/completions", '{"messages": "hello"}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "stop": ""}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "stop": 5}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "stop": ["a", "b", "c", "d", "e"]}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "logprobs": 6}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "logprobs": true}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "echo": true}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "best_of": 2}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "logit_bias": {"5": 10}}', 400),
    ("POST", "/v1/completions", '{"prompt": "a", "presence_penalty": 0.5}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "logprobs": "yes"}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}', 400),
    ("POST", "/v1/chat/completions", '{"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 21}', 400),
    ("POST", "/v1/completions", "\x00\xff\xfe", 400),
    ("POST", "/v1/completions", "{" * 5000, 400),
    ("GET", "/v1/completions", None, 404),
    ("GET", "/nope", None, 404),
    ("POST", "/v1/completions", "x" * (2 << 20), 413),
]


@pytest.mark.parametrize("method,path,body,status", MALFORMED)
def test_malformed_requests_get_4xx(server, method, path, body, status):
    got, data = request(server, method, path, raw=body)
    assert got == status, data
    if got != 413:
        assert "error" in json.loads(data)
    assert request(server, "GET", "/health")[0] == 200


def metric(port, name):
    _, data = request(port, "GET", "/metrics")
    for line in data.decode().splitlines():
        if line.startswith(name + " "):
            return int(line.split()[1])
    raise KeyError(name)


@pytest.mark.parametrize("stream", [True, False])
def test_a_client_that_goes_away_frees_its_slot(tmp_path, stream):
    wide = tmp_path / "wide"  # slow enough (~3 ms a token) that 240 tokens outlast the disconnect
    subprocess.run([CLI, "init", "--layers", "4", "--hidden", "512", "--heads", "8", "--vocab", "258", "--shape", "uniform",
                    "--out", str(wide)], check=True, capture_output=True)
    # Without an end-of-text token, so that the request can end only by the disconnect or after 240
    # tokens (with its random weights and seed 0, this model samples its EOS as the 7th token: a
    # request that ended there, ~20 ms in, before the disconnect was seen, counted no cancellation).
    config = json.loads((wide / "config.json").read_text())
    config["eos_token_id"] = None
    (wide / "config.json").write_text(json.dumps(config))
    proc, port = start(wide, "--slots", "2", "--threads", "1")
    try:
        s = socket.create_connection(("127.0.0.1", port))
        body = json.dumps({"prompt": "abc", "max_tokens": 240, "stream": stream})
        s.sendall(f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                  f"{body}".encode())
        if stream:
            received = b""
            while b"data:" not in received:  # the headers, then the first event
                chunk = s.recv(4096)
                assert chunk, received
                received += chunk
        else:  # the answer comes at the end: leave once decoding has begun
            deadline = time.time() + 10
            while time.time() < deadline and metric(port, "vwt_generated_tokens_total") == 0:
                time.sleep(0.01)
            assert metric(port, "vwt_slots_busy") == 1
        s.close()
        deadline = time.time() + 10
        while time.time() < deadline and (metric(port, "vwt_requests_cancelled_total") == 0 or metric(port, "vwt_slots_busy") > 0):
            time.sleep(0.05)
        assert metric(port, "vwt_requests_cancelled_total") == 1
        assert metric(port, "vwt_slots_busy") == 0
        assert metric(port, "vwt_generated_tokens_total") < 240  # stopped early
    finally:
        stop(proc)


def streamed(port, path, body):
    """The events of a streamed request, parsed; the last is the one with the finish reason."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    c.request("POST", path, body=json.dumps({**body, "stream": True}), headers={"Content-Type": "application/json"})
    r = c.getresponse()
    assert r.status == 200
    events = [line[len(b"data: "):] for line in r.read().split(b"\n\n") if line.startswith(b"data: ")]
    c.close()
    assert events[-1] == b"[DONE]"
    return [json.loads(e) for e in events[:-1]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """tiny_l6 trained for a few seconds on words, so that its greedy text is plain ASCII."""
    root = tmp_path_factory.mktemp("trained")
    words = ["the", "king", "of", "fair", "verona", "speaks", "and", "rome", "answers", "in", "kind", "words"]
    rng = random.Random(0)
    (root / "corpus.txt").write_text(" ".join(rng.choice(words) for _ in range(6000)) + "\n")
    subprocess.run([CLI, "train", "--preset", "tiny_l6", "--data", str(root / "corpus.txt"), "--out", str(root / "run"), "--steps", "60",
                    "--batch", "8", "--seq", "32", "--lr", "3e-3", "--seed", "1", "--threads", "1", "--quiet"], check=True, capture_output=True)
    proc, port = start(root / "run", "--slots", "2", "--threads", "1")
    yield port
    stop(proc)


def test_stop_strings_end_the_text_before_them(trained):
    prompt = "the king "
    status, data = request(trained, "POST", "/v1/completions", {"prompt": prompt, "max_tokens": 40, "temperature": 0})
    assert status == 200
    whole = json.loads(data)
    text = whole["choices"][0]["text"]
    assert len(whole["tokens"]) == 40 and text.isascii() and len(text) == 40, whole  # one byte a token, no end-of-text
    for stops in [[text[10:13]], [text[25:27], text[12:15], "never there"], [text[30:]], [text[0:2]]]:
        first = min(text.find(s) for s in stops if s in text)
        hit = next(s for s in stops if text.find(s) == first)
        body = {"prompt": prompt, "max_tokens": 40, "temperature": 0, "stop": stops if len(stops) > 1 else stops[0]}
        status, data = request(trained, "POST", "/v1/completions", body)
        j = json.loads(data)
        assert j["choices"][0]["text"] == text[:first] and j["choices"][0]["finish_reason"] == "stop", (stops, j)
        used = j["usage"]["completion_tokens"]  # up to the token that completed the stop string
        assert j["tokens"] == whole["tokens"][:used] and used == first + len(hit)
        events = streamed(trained, "/v1/completions", body)
        assert "".join(e["choices"][0]["text"] for e in events) == text[:first]
        assert events[-1]["choices"][0]["finish_reason"] == "stop" and events[-1]["usage"]["completion_tokens"] == used
    deadline = time.time() + 10  # the engine ends a request at a stop string at its next step
    while time.time() < deadline and metric(trained, "vwt_slots_busy") > 0:
        time.sleep(0.05)
    assert metric(trained, "vwt_slots_busy") == 0 and metric(trained, "vwt_requests_cancelled_total") == 0


def log_softmax(row):
    m = max(row)
    lse = m + math.log(sum(math.exp(v - m) for v in row))
    return [v - lse for v in row]


def test_logprobs_are_the_models(model, server, tmp_path):
    prompt = [84, 111, 32, 98]
    body = {"prompt": prompt, "max_tokens": 6, "temperature": 0.9, "seed": 5, "logprobs": 3}
    status, data = request(server, "POST", "/v1/completions", body)
    assert status == 200, data
    j = json.loads(data)
    tokens = j["tokens"]
    lp = j["choices"][0]["logprobs"]
    # the reference: `vwt logits` over the prompt and the completion, log-softmax of each row
    out = tmp_path / "logits.f32"
    subprocess.run([CLI, "logits", "--model", str(model), "--tokens", ",".join(map(str, prompt + tokens)), "--out", str(out)],
                   check=True, capture_output=True)
    raw = out.read_bytes()
    vocab = len(raw) // 4 // (len(prompt) + len(tokens))
    rows = [list(struct.unpack_from(f"<{vocab}f", raw, 4 * vocab * i)) for i in range(len(prompt) + len(tokens))]
    assert len(lp["token_logprobs"]) == len(tokens) == len(lp["tokens"]) == len(lp["text_offset"])
    # the byte tokenizer's tokens read as their character, "bytes:\\xNN" when not UTF-8, "<|id|>" without bytes
    label = lambda t: chr(t) if t < 128 else f"bytes:\\x{t:02x}" if t < 256 else f"<|{t}|>"
    offset = 0
    for i, t in enumerate(tokens):
        want = log_softmax(rows[len(prompt) - 1 + i])
        assert lp["tokens"][i] == label(t)
        assert lp["token_logprobs"][i] == pytest.approx(want[t], abs=1e-4)
        top = sorted(range(vocab), key=lambda k: -want[k])[:3]
        assert lp["top_logprobs"][i] == pytest.approx({label(k): want[k] for k in top}, abs=1e-4)
        assert lp["text_offset"][i] == offset
        offset += 1 if t < 256 else 0
    assert [e for e in streamed(server, "/v1/completions", body) if e["choices"][0]["logprobs"]]  # streamed too
    streamed_lp = [v for e in streamed(server, "/v1/completions", body) if e["choices"][0]["logprobs"]
                   for v in e["choices"][0]["logprobs"]["token_logprobs"]]
    assert streamed_lp == pytest.approx(lp["token_logprobs"], abs=1e-6)
    # chat: each token's bytes, and the top alternatives by their bytes (the byte tokenizer: id = byte)
    status, data = request(server, "POST", "/v1/chat/completions",
                           {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0, "logprobs": True, "top_logprobs": 2})
    j = json.loads(data)
    content = j["choices"][0]["logprobs"]["content"]
    assert len(content) == len(j["tokens"])
    for c, t in zip(content, j["tokens"]):
        assert c["bytes"] == ([t] if t < 256 else [])
        assert len(c["top_logprobs"]) == 2 and c["top_logprobs"][0]["logprob"] >= c["top_logprobs"][1]["logprob"]
        assert c["top_logprobs"][0]["bytes"] == c["bytes"] and c["top_logprobs"][0]["logprob"] == pytest.approx(c["logprob"])  # greedy


def test_a_full_queue_answers_503(model):
    proc, port = start(model, "--slots", "1", "--queue", "1", "--threads", "1")
    try:
        body = {"prompt": "abc", "max_tokens": 200}
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(lambda _: request(port, "POST", "/v1/completions", body)[0], range(8)))
        assert statuses.count(200) >= 2 and statuses.count(503) >= 1 and set(statuses) <= {200, 503}, statuses
        assert metric(port, "vwt_requests_rejected_total") == statuses.count(503)
    finally:
        stop(proc)


def test_load_200_requests_from_16_clients(server):
    def one(i):
        start = time.perf_counter()
        status, data = request(server, "POST", "/v1/completions",
                               {"prompt": f"request {i}: ", "max_tokens": 32, "temperature": 0.8, "seed": i})
        seconds = time.perf_counter() - start
        assert status == 200, data
        j = json.loads(data)
        usage = j["usage"]
        assert usage["completion_tokens"] == len(j["tokens"]) and 1 <= usage["completion_tokens"] <= 32
        reason = j["choices"][0]["finish_reason"]  # "stop": the end-of-text token, possibly as the 32nd
        assert reason == "stop" or (reason == "length" and usage["completion_tokens"] == 32), j
        return seconds, usage["completion_tokens"]
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, range(200)))
    wall = time.perf_counter() - start
    latencies = sorted(r[0] for r in results)
    tokens = sum(r[1] for r in results)
    report = {"requests": 200, "clients": 16, "slots": 4, "seconds": wall, "requests_per_s": 200 / wall,
              "tokens_per_s": tokens / wall, "p50_ms": 1000 * latencies[99], "p99_ms": 1000 * latencies[197]}
    print("\nload:", json.dumps(report))
    if os.environ.get("VWT_SERVE_REPORT"):
        with open(os.environ["VWT_SERVE_REPORT"], "w") as f:
            json.dump(report, f, indent=2)
    assert metric(server, "vwt_slots_busy") == 0
