"""The tokenizer on the command line, with a tokenizer.json that PyPI `tokenizers` trained (the
tokenizer test fixture): `vwt tokenize` writes exactly the ids `tokenizers` gives for the corpus
(u32 and u16); `vwt train --tokenizer` sizes the vocabulary to the tokenizer and puts the
tokenizer.json in its checkpoint, where `vwt generate` uses it (the prompt comes back whole); u16
is refused for a vocabulary that does not fit.
Usage: tokenizer_commands.py VWT CASES_DIR WORK"""
import json
import os
import shutil
import struct
import subprocess
import sys

vwt, cases, work = sys.argv[1:4]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
tok = os.path.join(cases, "cl100k.json")
corpus = os.path.join(cases, "corpus.txt")
with open(os.path.join(cases, "cl100k.corpus.u32"), "rb") as f:
    want = f.read()
for fmt, width in (("u32", 4), ("u16", 2)):
    out = os.path.join(work, f"corpus.{fmt}")
    subprocess.run([vwt, "tokenize", "--tokenizer", tok, "--in", corpus, "--out", out, "--format", fmt, "--quiet"], check=True,
                   stdout=subprocess.DEVNULL)
    with open(out, "rb") as f:
        got = f.read()
    ids = struct.unpack(f"<{len(got) // width}{'I' if width == 4 else 'H'}", got)
    assert list(ids) == list(struct.unpack(f"<{len(want) // 4}I", want)), fmt
print(f"tokenize: {len(want) // 4} ids equal to tokenizers' (u32, u16)")

# a tokenizer.json of more than 65536 ids: u16 refused
big = json.load(open(tok))
big["added_tokens"].append({"id": 70000, "content": "<|far|>", "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True})
json.dump(big, open(os.path.join(work, "big.json"), "w"))
r = subprocess.run([vwt, "tokenize", "--tokenizer", os.path.join(work, "big.json"), "--in", corpus, "--out", os.path.join(work, "x"),
                    "--format", "u16"], capture_output=True, text=True)
assert r.returncode == 2 and "--format u16: the tokenizer has 70001 ids" in r.stderr, r.stderr

run = os.path.join(work, "run")
r = subprocess.run([vwt, "train", "--data", corpus, "--tokenizer", tok, "--layers", "2", "--hidden", "64", "--heads", "2",
                    "--context", "128", "--widths", "64,32", "--seq", "32", "--batch", "2", "--steps", "3", "--eval-every", "0",
                    "--out", run], check=True, capture_output=True, text=True)
checkpoint = os.path.join(run, "step-00000003")
config = json.load(open(os.path.join(checkpoint, "config.json")))
assert config["vocab_size"] == 3000, config["vocab_size"]
assert open(os.path.join(checkpoint, "tokenizer.json")).read() == open(tok).read()
prompt = "ROMEO: the 2026 café ☕"
text = subprocess.run([vwt, "generate", "--model", checkpoint, "--prompt", prompt, "--max-new", "8", "--temperature", "0"],
                      check=True, capture_output=True).stdout
assert text.startswith(prompt.encode("utf-8")), text  # (an untrained model may well generate ill-formed bytes after it)
# --model RUN_DIR: the checkpoint LATEST names, with its tokenizer.json (the same prompt tokens as
# from the checkpoint itself, fewer than the prompt's bytes)
counts = [json.loads(subprocess.run([vwt, "generate", "--model", m, "--prompt", prompt, "--max-new", "2", "--json"],
                                    check=True, capture_output=True, text=True).stdout)["prompt_tokens"] for m in (checkpoint, run)]
assert counts[0] == counts[1] < len(prompt.encode("utf-8")), counts
print("train --tokenizer and generate: ok")
