"""The baseline of bench_loading's tokenizer rows: PyPI `tokenizers` trains a cl100k-style byte-level
BPE (vocab 8000) on a corpus, saves it where bench_loading reads it, and times its own encode of
the whole corpus on one thread (the best of --reps). Prints one JSON line.
Usage: tokenizer_encode.py CORPUS TOKENIZER_OUT [--reps N]"""
import json
import os
import sys
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

corpus, out = sys.argv[1:3]
reps = int(sys.argv[sys.argv.index("--reps") + 1]) if "--reps" in sys.argv else 5
text = open(corpus, encoding="utf-8").read()
CL100K = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
t = Tokenizer(models.BPE())
t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CL100K), behavior="isolated"),
                                           pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
t.decoder = decoders.ByteLevel()
t.train_from_iterator([text], trainer=trainers.BpeTrainer(vocab_size=8000, special_tokens=["<|endoftext|>"], show_progress=False,
                                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
t.save(out)
best = float("inf")
for _ in range(reps):
    t0 = time.perf_counter()
    ids = t.encode(text, add_special_tokens=False).ids
    best = min(best, time.perf_counter() - t0)
print(json.dumps({"bytes": len(text.encode("utf-8")), "tokens": len(ids), "seconds": best,
                  "MB_per_s": len(text.encode("utf-8")) / best / 1e6}))
