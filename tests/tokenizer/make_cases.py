"""The oracle of the tokenizer tests: PyPI `tokenizers` trains byte-level BPE tokenizers on a
corpus (GPT-2 style: the ByteLevel pre-tokenizer's own pattern; cl100k style: a Split on cl100k's
pattern, then ByteLevel without one; both with special tokens), writes each tokenizer.json, the ids
`tokenizers` gives for the whole corpus (little-endian u32) and for adversarial strings
(cases.json: the string's bytes in hex and its ids; invalid UTF-8 is given to `tokenizers` as
Python's bytes.decode("utf-8", "replace") makes it).
Writes the text it trained on as OUT_DIR/corpus.txt.
Usage: make_cases.py CORPUS OUT_DIR EXTRA_TEXT"""
import json
import os
import struct
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

corpus, out, extra = sys.argv[1:4]
os.makedirs(out, exist_ok=True)
# The corpus (where it exists) and a text rich in digits, markup and punctuation (this project's
# README), so that merges form across everything the pre-tokenizers split.
text = open(extra, encoding="utf-8").read()
if os.path.exists(corpus):
    text = open(corpus, encoding="utf-8").read() + "\n" + text
else:
    print(f"{corpus} not found: training on {extra} alone")
with open(os.path.join(out, "corpus.txt"), "w", encoding="utf-8", newline="") as f:
    f.write(text)
specials = ["<|endoftext|>", "<|pad|>", "<|im_start|>"]
CL100K = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
# tiktoken's current cl100k_base pattern, with possessive quantifiers (what convert_tiktoken_to_fast,
# the authors' tokenizer conversion, writes into tokenizer.json)
CL100K_POSSESSIVE = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""


def train(pre_tokenizer, vocab_size):
    t = Tokenizer(models.BPE())
    t.pre_tokenizer = pre_tokenizer
    t.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    t.train_from_iterator([text], trainer=trainer)
    return t


tokenizers = {
    "gpt2": train(pre_tokenizers.ByteLevel(add_prefix_space=False), 2000),
    "cl100k": train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CL100K), behavior="isolated"),
                                             pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 3000),
    "prefix": train(pre_tokenizers.ByteLevel(add_prefix_space=True), 1000),
    "tiktoken": train(pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(CL100K_POSSESSIVE), behavior="isolated"),
                                               pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]), 2500),
}

adversarial = [
    "", " ", "a", "Hello, world!", "  leading and trailing  ", "tabs\tand\nnewlines\r\n\r\nend",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇫🇷🇯🇵", "combining e\u0301 a\u0300\u0323 Zalgo Z\u0351\u0357\u0300\u0315",
    "CJK 日本語のテキスト 中文字符 한국어", "Arabic مرحبا بالعالم and Hebrew שלום", "Devanagari नमस्ते",
    " " * 1000, "\n" * 300, "9" * 500, "1234567890 3.14159 -42 1e10 0x1F", "a" * 3000,
    "special <|endoftext|> inside<|pad|>text<|im_start|>", "<|endoftext|><|endoftext|>", "<|endoftext", "|>",
    "I'M YOU'RE THEY'LL we've it's", "’curly’ “quotes” — dashes – …", "\u00a0non-breaking\u2003em space\u3000ideographic",
    "\x00\x01\x1f control \x7f", "year 2026, pi 3.14159265358979, 1,000,000 and 12345678901234567890 digits", "mixed\t \t \n \u00a0 \t", "ÿþýüû ¡¢£¤¥ ¦§¨©", "😀" * 100,
]
invalid = [b"\xff\xfe invalid", b"truncated \xe6\x97", b"lone continuation \x80\x80 end", b"\xc0\xaf overlong",
           b"surrogate \xed\xa0\x80 x", b"\xf4\x90\x80\x80 above max", b"ok \xe2\x82\xac then \xe2\x82"]
cases = []
for s in adversarial:
    cases.append({"hex": s.encode("utf-8").hex(), "valid": True})
for b in invalid:
    cases.append({"hex": b.hex(), "valid": False})
for name, t in tokenizers.items():
    t.save(os.path.join(out, f"{name}.json"))
    for c in cases:
        s = bytes.fromhex(c["hex"]).decode("utf-8", "replace")
        c[name] = t.encode(s, add_special_tokens=False).ids
        if c["valid"] and name != "prefix":  # add_prefix_space adds a space decode keeps
            assert t.decode(c[name], skip_special_tokens=False) == s, (name, s)
    ids = t.encode(text, add_special_tokens=False).ids
    with open(os.path.join(out, f"{name}.corpus.u32"), "wb") as f:
        f.write(struct.pack(f"<{len(ids)}I", *ids))
    print(f"{name}: vocab {t.get_vocab_size()}, corpus {len(ids)} tokens")
with open(os.path.join(out, "cases.json"), "w") as f:
    json.dump(cases, f)
