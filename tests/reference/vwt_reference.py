"""An independent PyTorch reference of the vwt model (semantics.md section 2), for parity tests.

It realises the residual resize explicitly, as the authors' code does: every layer's output is
kept, a narrower layer takes a truncated copy, a wider one restores each missing coordinate from
the most recent earlier layer that had it (move_up) or from zeros (zero). The stream variants of
the authors' config (fixed_residual_width: the stream stays at h and each block projects h -> w_i
-> h; original_input_width / original_output_width false: the embedding has width w_1, the head
width w_L; wide_unembedding: the head has the widest layer's width) are separate code paths here.
It computes in float64.
Weights are drawn with torch's own RNG and written as safetensors by the small writer below, so
the C++ side reads files it did not write. Usage: vwt_reference.py OUT_DIR
"""
import json
import math
import os
import struct
import sys

import torch


def write_safetensors(path, tensors, dtype):
    """tensors: list of (name, float tensor); dtype: 'F32' | 'F16' | 'BF16'."""
    torch_dtype = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
    header, blobs, offset = {"__metadata__": {"format": "pt"}}, [], 0
    for name, t in tensors:
        raw = t.to(torch_dtype).contiguous().view(torch.uint8).numpy().tobytes() if dtype != "BF16" else \
            t.to(torch_dtype).contiguous().view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


MASK64 = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def gaussian_noise(seed, place, position, column):
    """The gaussian resize's standard normal for a token's position and a column, as
    docs/semantics-decisions.md states it (inference: salt 0; place: the layer, or L for the head)."""
    key = splitmix64(splitmix64(splitmix64(seed) ^ 0) ^ place)
    a = splitmix64(key ^ (((position & 0xFFFFFFFF) << 32) | (column & 0xFFFFFFFF)))
    b = splitmix64(a)
    u1 = ((a >> 11) + 1) * 2.0 ** -53
    u2 = (b >> 11) * 2.0 ** -53
    return math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2)


class Reference:
    def __init__(self, widths, hidden, heads, kv_heads, vocab, context, mup=True, resize="move_up", seed=0,
                 init_range=None, moe=None, stream=None):
        """moe: None (dense SwiGLU MLPs) or (experts, experts_per_token, intermediate size at width
        hidden): every MLP a mixture of experts (semantics.md section 6), expert intermediate
        round(w_i * inter / hidden) with ties to even. stream: the authors' flags, a dict with any of
        fixed_residual_width, original_input_width, original_output_width, wide_unembedding."""
        self.widths, self.h, self.H, self.Hkv, self.V, self.ctx = widths, hidden, heads, kv_heads, vocab, context
        self.moe = moe
        flags = {"fixed_residual_width": False, "original_input_width": True, "original_output_width": True,
                 "wide_unembedding": False}
        flags.update(stream or {})
        self.flags = flags
        self.fixed = flags["fixed_residual_width"]
        self.emb_width = hidden if flags["original_input_width"] else widths[0]
        if flags["original_output_width"]:
            self.unemb_width = hidden
        else:
            self.unemb_width = max(widths) if flags["wide_unembedding"] else widths[-1]
        self.final_width = hidden if self.fixed else widths[-1]
        self.mup, self.resize = mup, resize
        self.resize_seed = 12345  # the gaussian resize's noise seed
        self.sdpa = False  # True: torch's scaled_dot_product_attention instead of the written-out softmax
        self.m_emb, self.m_res, self.m_width = (12.0, 0.22, 8.0) if mup else (1.0, 1.0, 1.0)
        self.range = init_range if init_range is not None else (0.1 if mup else 0.02)
        self.eps, self.theta = 1e-5, 10000.0
        g = torch.Generator().manual_seed(seed)
        L = len(widths)

        def normal(shape, std):
            return torch.randn(*shape, generator=g, dtype=torch.float64) * std

        self.tensors = [("transformer.wte.weight", normal((vocab, self.emb_width), self.range))]
        for i, w in enumerate(widths):
            d = w // heads
            sigma = self.range * math.sqrt(hidden / w) if mup else self.range
            wdiv = math.sqrt(self.m_width) if mup else 1.0
            # fixed_residual_width: the block's inputs read h columns, its outputs write h; the
            # input projections' std undoes the fan-in correction (x sqrt(w / h)).
            cols = hidden if self.fixed else w
            in_std = sigma * math.sqrt(w / hidden) / wdiv if self.fixed and mup else sigma / wdiv
            p = f"transformer.h.{i}."
            # Norm gains away from 1, so that a wrong gain index shows in the logits.
            self.tensors += [
                (p + "ln_1.weight", 1 + 0.1 * normal((cols,), 1.0)),
                (p + "sequence_mixer.c_attn.weight", normal(((heads + 2 * kv_heads) * d, cols), in_std)),
                (p + "sequence_mixer.c_proj.weight", normal((cols, heads * d), sigma / wdiv / math.sqrt(2 * L))),
                (p + "ln_2.weight", 1 + 0.1 * normal((cols,), 1.0)),
            ]
            if moe:  # lm_engine's MoE block: one parameter per projection, experts stacked first
                E, inter = moe[0], self.expert_inter(w)
                self.tensors += [
                    (p + "mlp_block.gate.weight", normal((E, w), sigma / wdiv)),
                    (p + "mlp_block.c_fc.weight", normal((E, 2 * inter, w), sigma / wdiv)),
                    (p + "mlp_block.c_proj.weight", normal((E, w, inter), sigma / wdiv / math.sqrt(2 * L))),
                ]
            else:
                self.tensors += [
                    (p + "mlp_block.c_fc.weight", normal((8 * w, cols), in_std)),
                    (p + "mlp_block.c_proj.weight", normal((cols, 4 * w), sigma / wdiv / math.sqrt(2 * L))),
                ]
        self.tensors += [("transformer.ln_f.weight", 1 + 0.1 * normal((self.final_width,), 1.0)),
                         ("lm_head.weight", normal((vocab, self.unemb_width), self.range))]
        if resize == "linear":  # the authors' linear_layers: an nn.Linear (no bias) wherever the stream widens
            def uniform(shape):
                bound = 1 / math.sqrt(shape[1])
                return (torch.rand(*shape, generator=g, dtype=torch.float64) * 2 - 1) * bound
            stream = self.emb_width
            for i, w in enumerate(widths):
                if w > stream:
                    self.tensors.append((f"transformer.linear_layers.linear_for_layer{i}.weight", uniform((w, stream))))
                stream = w
            if self.final_width < self.unemb_width:
                self.tensors.append(("transformer.linear_layers.linear_for_unembed.weight",
                                     uniform((self.unemb_width, self.final_width))))
        self.p = dict(self.tensors)

    def round_weights(self, dtype):
        """Use the weights as the file stores them."""
        t = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}[dtype]
        self.tensors = [(n, v.to(t).to(torch.float64)) for n, v in self.tensors]
        self.p = dict(self.tensors)

    def rmsnorm(self, x, g):
        return x / torch.sqrt((x * x).mean(-1, keepdim=True) + self.eps) * g

    def rope(self, x, positions):  # x: [..., T, heads, d]
        d = x.shape[-1]
        inv = self.theta ** (-torch.arange(0, d // 2, dtype=torch.float64) * 2 / d)
        ang = positions[:, None].double() * inv[None, :]
        cos = torch.cat([ang.cos()] * 2, -1)[:, None, :].to(x.dtype)
        sin = torch.cat([ang.sin()] * 2, -1)[:, None, :].to(x.dtype)
        rot = torch.cat([-x[..., d // 2:], x[..., : d // 2]], -1)
        return x * cos + rot * sin

    def resize_to(self, x, width, history, method, linear=None, place=0):
        """Truncate, or grow: from the most recent earlier state that had each coordinate
        (method "move_up"), with zeros ("zero"), by torch's linear interpolation of the whole
        vector ("interpolate"), by the learned matrix `linear` ("linear") or with draws from each
        token's N(mean, std) ("gaussian": the authors' padding, with vwt's noise at `place`)."""
        if width <= x.shape[-1]:
            return x[..., :width]
        if method == "gaussian":
            n, T = x.shape[-1], x.shape[-2]
            mean = x.mean(-1, keepdim=True)
            std = x.std(-1, keepdim=True, unbiased=False)
            z = torch.tensor([[gaussian_noise(self.resize_seed, place, t, c) for c in range(n, width)] for t in range(T)],
                             dtype=x.dtype)
            return torch.cat([x, mean + std * z], -1)
        if method == "interpolate":
            flat = x.reshape(-1, 1, x.shape[-1])
            grown = torch.nn.functional.interpolate(flat, size=width, mode="linear", align_corners=False)
            return grown.reshape(*x.shape[:-1], width)
        if method == "linear":
            return x @ linear.T
        parts, start = [x], x.shape[-1]
        if method == "move_up":
            for cand in reversed(history):
                if cand.shape[-1] <= start:
                    continue
                end = min(cand.shape[-1], width)
                parts.append(cand[..., start:end])
                start = end
                if start >= width:
                    break
        if start < width:
            parts.append(torch.zeros(*x.shape[:-1], width - start, dtype=x.dtype))
        return torch.cat(parts, -1)

    def forward(self, tokens, p=None, trace=None):
        """tokens: int64 [B, T] -> logits [B, T, V]; p: the parameters (default: self.p); trace: a
        list that gets, per layer, its input and output at its width ("in", "out"), the history it
        was restored from ("history": the embedding and every earlier layer's output) and, for
        dense MLPs, the up and gate halves of c_fc's output ("u", "gate")."""
        p = self.p if p is None else p
        B, T = tokens.shape
        pos = torch.arange(T)
        x = p["transformer.wte.weight"][tokens] * self.m_emb
        history = [x]
        causal = torch.triu(torch.ones(T, T, dtype=torch.bool), 1)
        for i, w in enumerate(self.widths):
            if not self.fixed:  # a fixed-width stream is never resized
                x = self.resize_to(x, w, history, self.resize, p.get(f"transformer.linear_layers.linear_for_layer{i}.weight"),
                                   place=i)
            step = {"in": x, "history": list(history)} if trace is not None else None
            d, G = w // self.H, self.H // self.Hkv
            pre = f"transformer.h.{i}."
            a = self.rmsnorm(x, p[pre + "ln_1.weight"])
            qkv = (a @ p[pre + "sequence_mixer.c_attn.weight"].T).view(B, T, self.Hkv, G + 2, d)
            q = qkv[:, :, :, :G, :].reshape(B, T, self.H, d)
            k = qkv[:, :, :, G, :]
            v = qkv[:, :, :, G + 1, :]
            q, k = self.rope(q, pos), self.rope(k, pos)
            k = k.repeat_interleave(G, dim=2)
            v = v.repeat_interleave(G, dim=2)
            if self.sdpa:  # PyTorch's fused attention (torch >= 2.1), for the speed baselines
                o = torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True,
                    scale=self.attention_scale(d)).transpose(1, 2).reshape(B, T, self.H * d)
            else:
                s = torch.einsum("bthd,bshd->bhts", q, k) * self.attention_scale(d)
                s = s.masked_fill(causal, float("-inf"))
                o = torch.einsum("bhts,bshd->bthd", s.softmax(-1), v).reshape(B, T, self.H * d)
            x = x + self.m_res * (o @ p[pre + "sequence_mixer.c_proj.weight"].T)
            b = self.rmsnorm(x, p[pre + "ln_2.weight"])
            if self.moe:
                x = x + self.m_res * self.moe_mlp(b, pre, p)
            else:
                f = b @ p[pre + "mlp_block.c_fc.weight"].T
                u, gate = f[..., : 4 * w], f[..., 4 * w:]
                x = x + self.m_res * ((u * torch.nn.functional.silu(gate)) @ p[pre + "mlp_block.c_proj.weight"].T)
                if step is not None:
                    step["u"], step["gate"] = u, gate
            history.append(x)
            if step is not None:
                step["out"] = x
                trace.append(step)
        y = self.rmsnorm(x, p["transformer.ln_f.weight"])
        # The resize to the unembedding width is move_up whatever the model's resize method
        # (semantics.md section 2, step 3): a zero-resize model restores [w_L, h) too.
        if not self.fixed:
            y = self.resize_to(y, self.unemb_width, history, "move_up" if self.resize == "zero" else self.resize,
                               p.get("transformer.linear_layers.linear_for_unembed.weight"), place=len(self.widths))
        return (y @ p["lm_head.weight"].T) / self.m_width

    def expert_inter(self, w):
        return round(w * self.moe[2] / self.h)  # Python's round: ties to even, as the solver's

    def moe_mlp(self, b, pre, p):
        """Every expert on every token, then each token's top k by router logit (a stable sort:
        ties to the lower expert) weighted by a softmax over the chosen logits."""
        E, k = self.moe[0], self.moe[1]
        r = b @ p[pre + "mlp_block.gate.weight"].T                      # [B, T, E]
        top, chosen = torch.sort(r, dim=-1, descending=True, stable=True)
        weights = top[..., :k].softmax(-1)                               # [B, T, k]
        inter = p[pre + "mlp_block.c_proj.weight"].shape[-1]
        outs = []
        for e in range(E):
            f = b @ p[pre + "mlp_block.c_fc.weight"][e].T
            outs.append((f[..., :inter] * torch.nn.functional.silu(f[..., inter:])) @ p[pre + "mlp_block.c_proj.weight"][e].T)
        outs = torch.stack(outs, -2)                                     # [B, T, E, w]
        picked = torch.gather(outs, -2, chosen[..., :k, None].expand(*chosen.shape[:-1], k, outs.shape[-1]))
        return (weights[..., None] * picked).sum(-2)

    def attention_scale(self, d):
        """muP scores by 1/d (the authors' attention_multiplier), standard by 1/sqrt(d)."""
        return 1.0 / d if self.mup else 1.0 / math.sqrt(d)

    def logits(self, tokens):
        return self.forward(torch.tensor([tokens]))[0]

    def config(self):
        return {
            "model_type": "width_varying", "hidden_size": self.h, "num_layers": len(self.widths),
            "vocab_size": self.V, "max_position_embeddings": self.ctx, "widths": self.widths,
            "expand_method": self.resize, "init_method": "mup" if self.mup else "normal",
            "m_emb": self.m_emb, "m_residual": self.m_res, "m_width": self.m_width,
            "initializer_range": self.range, "layer_norm_epsilon": self.eps, "rope_theta": self.theta,
            "tie_word_embeddings": False, "normalization_function": "rmsnorm", "position_embedding_type": "rope",
            "sequence_mixer_blocks": [{"sequence_mixer_type": "softmax_attention", "num_attention_heads": self.H,
                                       "num_key_value_heads": self.Hkv,
                                       "attention_multiplier": self.attention_scale(w // self.H)}
                                      for w in self.widths],
            "mlp_blocks": [{"mlp_type": "MoE", "activation_function": "swiglu", "intermediate_size": self.expert_inter(w),
                            "num_experts": self.moe[0], "num_experts_per_tok": self.moe[1]}
                           if self.moe else
                           {"mlp_type": "MLP", "activation_function": "swiglu", "intermediate_size": 4 * w}
                           for w in self.widths],
            **({"moe_intermediate_size": self.moe[2], "router_aux_loss_coef": 0.01} if self.moe else {}),
            **self.flags, "embedding_width": self.emb_width, "unembedding_width": self.unemb_width,
            **({"vwt_resize_seed": self.resize_seed} if self.resize == "gaussian" else {}),
        }


def authors_config(ref, dtype):
    """The config.json the authors' code writes through save_pretrained (WidthVaryingConfig over
    lm_engine's CommonConfig): every field of both, generator parameters beside the widths they give
    (tiny_l8's: base 209, bottleneck 0.3, turning layer 6, quantize 8), dropout and bookkeeping."""
    c = ref.config()
    c.update({
        "architectures": ["GPTBaseForCausalLM"], "torch_dtype": {"BF16": "bfloat16", "F16": "float16"}.get(dtype, "float32"),
        "transformers_version": "4.57.1", "use_cache": True, "bos_token_id": 256, "eos_token_id": 257, "pad_token_id": 257,
        "base_width": 209, "bottleneck_ratio": 0.3, "expansion_factor": 0.7128896713256836, "reduction_factor": 2.3304736333528018,
        "max_layer": 6, "duplicate_max_layer": False, "quantize_to": 8, "wide_unembedding": False,
        "interpolate_align_corners": False, "fixed_residual_width": False, "original_input_width": True,
        "original_output_width": True, "permute_widths_seed": None, "permute_all_widths": False, "symmetric_widths": True,
        "delta": None, "delta_neg": None, "sinkhorn_iters": 0, "expand_linear_bias": False, "variable_initialization": True,
        "schedule_type": "geometric", "embedding_width": ref.h, "unembedding_width": ref.h, "rope_dim": -1,
        "embedding_dropout": 0.0, "resid_dropout": 0.0, "router_aux_loss_coef": 0.001, "rope_scaling": None,
    })
    for b in c["sequence_mixer_blocks"]:
        b.update({"add_bias": False, "qkv_bias": False, "softmax_dropout": 0.0, "dropout": 0.0, "sliding_window": None})
    for b in c["mlp_blocks"]:
        b.update({"add_bias": False, "dropout": 0.0, "use_interleaved_weights": False})
    return c


def write_sharded(d, tensors, dtype, max_bytes):
    """Shards as save_pretrained writes them: tensors in name order, a new shard when the next
    tensor would pass max_bytes, model-0000i-of-0000n.safetensors and model.safetensors.index.json."""
    size = {"F32": 4, "F16": 2, "BF16": 2}[dtype]
    shards, current, used = [], [], 0
    for name, t in sorted(tensors, key=lambda x: x[0]):
        n = t.numel() * size
        if current and used + n > max_bytes:
            shards.append(current)
            current, used = [], 0
        current.append((name, t))
        used += n
    shards.append(current)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(d, fname), shard, dtype)
        for name, t in shard:
            weight_map[name] = fname
            total += t.numel() * size
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}, f, indent=2)


CASES = [
    # name, widths, hidden, heads, kv_heads, mup, resize, dtype[, moe: (experts, per token, intermediate at hidden)]
    ("x_tiny_l6", [144, 88, 48, 32, 64, 144], 96, 4, 4, True, "move_up", "F32"),
    ("x_tiny_l8", [208, 152, 104, 72, 56, 40, 88, 208], 128, 4, 4, True, "move_up", "F32"),
    ("x_narrow_ends", [48, 96, 32, 64, 40], 80, 4, 4, True, "move_up", "F32"),  # w_1 < h, w_L < h
    ("x_zero_resize", [48, 96, 32, 64, 40], 80, 4, 4, True, "zero", "F32"),
    ("x_zero_resize_l6", [64, 128, 48, 96, 32, 80], 96, 4, 4, True, "zero", "F32"),  # w_L < h after a wider layer
    ("diamond", [64, 96, 128, 96, 64], 96, 4, 4, True, "move_up", "F32"),
    ("uniform_mup", [96, 96, 96, 96], 96, 4, 4, True, "move_up", "F32"),
    ("uniform_llama", [128, 128, 128], 128, 4, 4, False, "move_up", "F32"),
    ("x_gqa", [192, 128, 64, 128, 192], 128, 8, 2, True, "move_up", "F32"),
    ("x_bf16", [144, 88, 48, 32, 64, 144], 96, 4, 4, True, "move_up", "BF16"),
    ("x_f16", [144, 88, 48, 32, 64, 144], 96, 4, 4, True, "move_up", "F16"),
    # the authors' layout: their whole config, bf16, sharded as save_pretrained shards (see main)
    ("authors_layout", [208, 152, 104, 72, 56, 40, 88, 208], 128, 4, 2, True, "move_up", "BF16"),
    # MoE ><formers and an MoE uniform model (semantics.md section 6)
    ("moe_x_top3", [144, 88, 48, 32, 64, 144], 96, 4, 4, True, "move_up", "F32", (6, 3, 64)),
    ("moe_uniform_top1", [96, 96, 96, 96], 96, 4, 4, True, "move_up", "F32", (4, 1, 64)),
    ("moe_x_gqa_top2", [192, 128, 64, 128, 192], 128, 8, 2, True, "move_up", "F32", (5, 2, 96)),
    # the stream variants (the authors' flags), on schedules no other test uses
    ("constant_residual", [160, 96, 48, 80, 160], 112, 4, 4, True, "move_up", "F32", None,
     {"fixed_residual_width": True}),
    ("constant_residual_gqa_llama", [96, 64, 32, 128], 80, 8, 2, False, "move_up", "F32", None,
     {"fixed_residual_width": True}),
    ("narrow_in_out", [56, 120, 40, 72, 104], 88, 4, 4, True, "move_up", "F32", None,
     {"original_input_width": False, "original_output_width": False}),
    ("narrow_in_zero_resize", [40, 112, 64, 136, 48], 96, 4, 4, True, "zero", "F32", None,
     {"original_input_width": False}),
    ("wide_unembedding", [176, 72, 40, 88, 64], 104, 4, 4, True, "move_up", "F32", None,
     {"original_output_width": False, "wide_unembedding": True}),
    ("wide_unembedding_zero_narrow_in", [64, 152, 48, 96, 56], 96, 4, 4, True, "zero", "F32", None,
     {"original_input_width": False, "original_output_width": False, "wide_unembedding": True}),
    # the parameter-free interpolate resize and the learned linear one (the authors' expand_method)
    ("interpolate", [144, 56, 32, 88, 120], 104, 4, 4, True, "interpolate", "F32"),  # w_1 > h, grows twice, head grows
    ("interpolate_narrow_in_wide_out", [48, 136, 40, 104, 64], 96, 4, 4, True, "interpolate", "F32", None,
     {"original_input_width": False, "original_output_width": False, "wide_unembedding": True}),
    ("linear", [120, 64, 40, 96, 72], 104, 4, 4, True, "linear", "F32"),
    ("linear_llama_gqa", [64, 128, 48, 80], 96, 8, 2, False, "linear", "F32", None,
     {"original_input_width": False}),
    ("gaussian", [152, 64, 40, 96, 80], 112, 4, 4, True, "gaussian", "F32"),  # grows into layers 0, 3 and the head
    ("gaussian_narrow_in_wide_out", [40, 128, 56, 104, 48], 88, 4, 4, True, "gaussian", "F32", None,
     {"original_input_width": False, "original_output_width": False, "wide_unembedding": True}),
]


def main(out):
    os.makedirs(out, exist_ok=True)
    manifest = []
    g = torch.Generator().manual_seed(1234)
    for n, (name, widths, h, H, Hkv, mup, resize, dtype, *extra) in enumerate(CASES):
        moe = extra[0] if extra else None
        stream = extra[1] if len(extra) > 1 else None
        ref = Reference(widths, h, H, Hkv, 258, 256, mup=mup, resize=resize, seed=n, moe=moe, stream=stream)
        ref.round_weights(dtype)
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        if name == "authors_layout":
            write_sharded(d, ref.tensors, dtype, 300_000)
            config = authors_config(ref, dtype)
        else:
            write_safetensors(os.path.join(d, "model.safetensors"), ref.tensors, dtype)
            config = ref.config()
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(config, f, indent=1)
        for length in (1, 7, 33):
            tokens = torch.randint(0, 258, (length,), generator=g).tolist()
            logits = ref.logits(tokens).to(torch.float32).numpy()
            fname = f"logits_{length}.bin"
            logits.tofile(os.path.join(d, fname))
            manifest.append({"model": name, "tokens": tokens, "logits": fname})
    with open(os.path.join(out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)
    print(f"reference: wrote {len(CASES)} models, {len(manifest)} logit files to {out}")


if __name__ == "__main__":
    main(sys.argv[1])
