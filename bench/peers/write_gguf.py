"""The uniform twin of a vwt preset as a llama-architecture GGUF with random weights, for
llama-bench: same layers, width, heads, FFN width (4h, SwiGLU), vocabulary and context, so that
llama.cpp and `vwt bench --twin` run the same shapes. (llama.cpp cannot run variable widths; the
><former itself is vwt's.) Weight types: f32, bf16, q8_0 (the 1D norms stay f32, as llama.cpp's own
converters keep them).
Usage: write_gguf.py OUT.gguf --layers 16 --hidden 640 --heads 16 --kv-heads 16 --vocab 4096
       --context 4096 --type q8_0"""
import argparse

import gguf
import numpy as np


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    for flag in ("layers", "hidden", "heads", "kv-heads", "vocab", "context"):
        ap.add_argument("--" + flag, type=int, required=True)
    ap.add_argument("--type", choices=("f32", "bf16", "q8_0"), default="f32")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    h, d = a.hidden, a.hidden // a.heads
    qtype = {"f32": gguf.GGMLQuantizationType.F32, "bf16": gguf.GGMLQuantizationType.BF16,
             "q8_0": gguf.GGMLQuantizationType.Q8_0}[a.type]
    rng = np.random.default_rng(a.seed)

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(f"vwt uniform twin L{a.layers} h{h}")
    w.add_context_length(a.context)
    w.add_embedding_length(h)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(4 * h)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(d)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type({"f32": gguf.LlamaFileType.ALL_F32, "bf16": gguf.LlamaFileType.MOSTLY_BF16,
                     "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[a.type])
    # An SPM vocabulary of unknown/bos/eos, the 256 byte tokens and filler pieces: llama-bench feeds
    # random ids and never tokenizes text.
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += [f"piece{i}" for i in range(a.vocab - len(tokens))]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    types += [gguf.TokenType.NORMAL] * (a.vocab - len(types))
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * a.vocab)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)

    def matrix(name, rows, cols):
        x = (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float32)
        if qtype == gguf.GGMLQuantizationType.F32:
            w.add_tensor(name, x)
        else:
            q = gguf.quants.quantize(x, qtype)
            w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)

    def norm(name, n):
        w.add_tensor(name, np.ones(n, dtype=np.float32))

    kv = a.kv_heads * d
    matrix("token_embd.weight", a.vocab, h)
    for i in range(a.layers):
        norm(f"blk.{i}.attn_norm.weight", h)
        matrix(f"blk.{i}.attn_q.weight", h, h)
        matrix(f"blk.{i}.attn_k.weight", kv, h)
        matrix(f"blk.{i}.attn_v.weight", kv, h)
        matrix(f"blk.{i}.attn_output.weight", h, h)
        norm(f"blk.{i}.ffn_norm.weight", h)
        matrix(f"blk.{i}.ffn_gate.weight", 4 * h, h)
        matrix(f"blk.{i}.ffn_up.weight", 4 * h, h)
        matrix(f"blk.{i}.ffn_down.weight", h, 4 * h)
    norm("output_norm.weight", h)
    matrix("output.weight", a.vocab, h)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"wrote {a.out} ({a.type})")


if __name__ == "__main__":
    main()
