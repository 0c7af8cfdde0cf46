"""vwt: Variable-Width Transformers (><formers) from Python.

A thin layer over the C++ library (the nanobind module vwt._vwt): width schedules and their
costs (the numbers of ``vwt info --json``), training runs (``vwt train``) with a per-step
callback, models loaded from a directory (config.json + safetensors) in f32, bf16 or q8 weights,
logits as NumPy arrays, and sampled generation with a streaming iterator. Compute releases the GIL; the library's errors raise ``vwt.Error`` (a
ValueError) with its message.
"""
from __future__ import annotations

import json
import queue
import threading
from typing import Callable, Iterator, Optional, Sequence, Union

import numpy as np

from . import _vwt

__version__ = _vwt.__version__
Error = _vwt.Error
Tokenizer = _vwt.Tokenizer


def info(preset: Optional[str] = None, *, flops_context: int = 0, kv_dtype: str = "bf16", weight_dtype: str = "bf16",
         **options) -> dict:
    """The schedule and its costs beside its uniform twin: ``vwt info --json`` as a dict.

    ``options`` are the command line's schedule flags with underscores (layers, hidden, heads,
    kv_heads, vocab, context, shape, bottleneck, turn, quantize, widths, ...)."""
    return json.loads(_vwt.info_json(dict(options, preset=preset), flops_context, kv_dtype, weight_dtype))


def schedule(preset: Optional[str] = None, **options) -> dict:
    """The width schedule the options describe: name, dims, widths and the solver's base width."""
    report = info(preset, **options)
    keep = ("name", "base_width", "dims", "widths")
    return {k: report[k] for k in keep if k in report}


_Tokens = Union[Sequence[int], np.ndarray]


def _token_list(tokens: _Tokens) -> list:
    array = np.asarray(tokens)
    if array.ndim != 1 or not (array.size == 0 or np.issubdtype(array.dtype, np.integer)):
        raise Error(f"tokens: expected a 1-D sequence of integer ids, got shape {array.shape} of {array.dtype}")
    return array.astype(np.int64).tolist()


class Model:
    """A model directory (or a training run's directory: its newest checkpoint) loaded for the CPU.

    weights: "f32", "bf16" or "q8" (converted at load); threads: OpenMP threads of each op;
    gemm: "auto" (bf16 prefill on bf16/q8 weights), "fp32" or "bf16"."""

    def __init__(self, directory, *, weights: str = "f32", threads: int = 1, gemm: str = "auto"):
        self._core = _vwt.Model(str(directory), weights, threads, gemm)

    vocab = property(lambda self: self._core.vocab)
    context = property(lambda self: self._core.context)
    widths = property(lambda self: list(self._core.widths))
    eos_token_id = property(lambda self: self._core.eos_token_id)
    directory = property(lambda self: self._core.directory)
    tokenizer = property(lambda self: self._core.tokenizer, doc="tokenizer.json of the directory, else bytes")

    def logits(self, tokens: _Tokens) -> np.ndarray:
        """float32 logits [len(tokens), vocab] of every position (the array owns the C++ buffer)."""
        return self._core.logits(_token_list(tokens))

    def generate(self, prompt: Union[str, _Tokens], *, max_new: int = 64, temperature: float = 1.0, top_k: int = 0,
                 top_p: float = 1.0, min_p: float = 0.0, repeat_penalty: float = 1.0, repeat_last_n: int = 64,
                 seed: int = 0, stop_at_eos: bool = True, on_token: Optional[Callable[[int], Optional[bool]]] = None):
        """New token ids after the prompt (text is encoded with the model's tokenizer).

        on_token(id) is called with each new token; returning False stops generation. The same
        seed gives the same tokens."""
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else _token_list(prompt)
        callback = None
        if on_token is not None:
            callback = lambda t: on_token(t) is not False  # noqa: E731  (None means go on)
        return self._core.generate(ids, max_new, temperature, top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed,
                                   stop_at_eos, callback)

    def stream(self, prompt: Union[str, _Tokens], **options) -> Iterator[int]:
        """The tokens of generate() as an iterator, each as soon as it is sampled (generation runs
        on a worker thread; closing the iterator early stops it)."""
        tokens: "queue.Queue" = queue.Queue()
        stop = threading.Event()
        done = object()
        failure = []

        def run():
            try:
                self.generate(prompt, on_token=lambda t: (tokens.put(t), not stop.is_set())[1], **options)
            except BaseException as e:  # handed to the consumer
                failure.append(e)
            finally:
                tokens.put(done)

        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        try:
            while True:
                t = tokens.get()
                if t is done:
                    break
                yield t
        finally:
            stop.set()
            worker.join()
        if failure:
            raise failure[0]

    def text(self, ids: Sequence[int]) -> str:
        """The text of token ids (bytes that are not UTF-8 become U+FFFD)."""
        return self.tokenizer.decode(list(ids)).decode("utf-8", errors="replace")


def train(data, out, preset: Optional[str] = None, *, threads: int = 1, resume: bool = False,
          on_step: Optional[Callable[[dict], Optional[bool]]] = None, **options) -> dict:
    """Trains a model as `vwt train` does: ``data`` a corpus file, ``out`` the run directory (its
    checkpoints; Model(out) loads the newest), ``options`` the command line's flags with underscores
    (steps, batch, seq, accumulate, lr, decay, warmup, clip, validation, seed, eval_every,
    checkpoint_every, max_shard_size, tokenizer, format, standard, and the schedule's: layers,
    hidden, shape, ...). on_step(report) gets each step's dict (step, loss, lr, grad_norm,
    tokens_per_s, val_loss when evaluated); returning False stops the run there, keeping its last
    checkpoint, which resume=True continues from. Returns the summary of `vwt train --json`."""
    callback = None
    if on_step is not None:
        callback = lambda report: on_step(report) is not False  # noqa: E731
    return _vwt.train(dict(options, data=data, out=out, preset=preset), threads, resume, callback)


def compare(data, out, preset: Optional[str] = None, *, threads: int = 1,
            on_step: Optional[Callable[[dict], None]] = None, **options) -> dict:
    """The ><former against its parameter-matched uniform twin, as `vwt compare` runs it: both
    trained on ``data`` in the same order for each seed; report.json, report.md and the SVG plots
    written into ``out``. ``options``: its flags with underscores (seeds, steps, batch, seq, lr,
    eval_every, validation, prompt, sample_tokens, format, and the schedule's). on_step(report) sees
    every step ({"model", "seed", "step", "loss"}) and every finished run ({"model", "seed",
    "final_loss"}). Returns report.json's content."""
    return json.loads(_vwt.compare(dict(options, data=data, out=out, preset=preset), threads, on_step))


__all__ = ["Error", "Model", "Tokenizer", "compare", "info", "schedule", "train", "__version__"]
