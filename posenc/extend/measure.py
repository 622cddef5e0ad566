"""The two measurements of ``posenc extend``: perplexity by position and passkey retrieval.

**No whole-sequence logits.** ``token_nll`` runs the decoder (``model.get_decoder()``) for the
hidden states ``[L, d]`` and projects ``chunk`` rows at a time through the output layer, so the
logits held at once are ``chunk × vocab`` (1024 × 49,152 float32: 201 MB) instead of ``L × vocab``
(32k tokens: 6.4 GB). Attention is the model's SDPA with ``is_causal`` and no mask tensor (one
unpadded row: transformers passes no ``L × L`` mask), whose CPU and CUDA kernels hold O(L) memory.

**Memory before allocation.** ``forward_bytes`` estimates a forward's peak from the config; ``check_fits``
refuses a length whose estimate exceeds the memory available, before any tensor of that length exists.

**Passkey** (Mohtashami & Jaggi 2023): a five-digit number in a sentence hidden at a relative depth of
repeated filler, and a question at the end; the greedy continuation (a few tokens) is correct when
the first number in it equals the key.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from contextlib import contextmanager
from typing import Any

import numpy as np

from posenc.limits import available_bytes  # physical memory or the address-space limit, as posenc.build

CHUNK = 1024  # rows of logits at once: 1024 × 49,152 float32 = 201 MB
ANSWER_TOKENS = 8  # greedy tokens decoded for a passkey answer (a 5-digit key and a little more)
INTRO = ("There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
         "I will quiz you about the important information there.\n")
FILLER = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = "\nWhat is the pass key? The pass key is"


LAYERS_SHARE = 0.9  # of a forward's progress: the decoder's layers (the rest: the loss in chunks)


def token_nll(model: Any, ids: Any, *, chunk: int = CHUNK, step: Callable[[float], None] | None = None) -> np.ndarray:
    """``(L − 1,)`` float64: ``−log p(ids[t] | ids[:t])`` for ``t = 1 … L−1``, the loss in chunks.

    ``step(tokens)``: progress within the forward, called after each decoder layer's pass
    (``LAYERS_SHARE · L / layers`` tokens) and each chunk of the loss (the rest), summing to ``L``."""
    import torch

    decoder, head = model.get_decoder(), model.get_output_embeddings()
    with torch.inference_mode(), layer_progress(decoder, step, LAYERS_SHARE):
        hidden = decoder(input_ids=ids[None], use_cache=False).last_hidden_state[0]  # (L, d)
        out = np.empty(ids.numel() - 1, dtype=np.float64)
        for start in range(0, ids.numel() - 1, chunk):
            stop = min(start + chunk, ids.numel() - 1)
            logits = head(hidden[start:stop]).float()  # (c, V)
            nll = torch.nn.functional.cross_entropy(logits, ids[start + 1:stop + 1], reduction="none")
            out[start:stop] = nll.double().numpy()
            if step is not None:
                step((1 - LAYERS_SHARE) * ids.numel() * (stop - start) / (ids.numel() - 1))
    return out


@contextmanager
def layer_progress(decoder: Any, step: Callable[[float], None] | None, share: float = 1.0):
    """Calls ``step(share · tokens / layers)`` after each pass of one of ``decoder.layers`` (tokens: the
    pass's sequence length), so a forward of minutes shows its progress layer by layer."""
    layers = list(getattr(decoder, "layers", None) or []) if step is not None else []
    hooks = [layer.register_forward_hook(lambda mod, args, kwargs, outp: step(share * _tokens(args, kwargs) / len(layers)),
                                         with_kwargs=True) for layer in layers]
    try:
        yield
    finally:
        for h in hooks:
            h.remove()


def _tokens(args: tuple, kwargs: dict) -> int:
    """The sequence length of a decoder layer's call (its hidden states ``(B, L, d)``)."""
    x = args[0] if args else kwargs.get("hidden_states")
    return int(x.shape[1]) if getattr(x, "ndim", 0) >= 2 else 0


def bucket_means(nll: np.ndarray, bucket: int) -> list[float]:
    """Mean NLL per ``bucket`` positions (the loss of the token at position ``t`` counts in bucket
    ``t // bucket``; a last, partial bucket is kept)."""
    positions = np.arange(1, nll.size + 1)
    return [float(nll[(positions // bucket) == b].mean()) for b in range(int(positions[-1] // bucket) + 1)]


def forward_bytes(config: Any, length: int, *, chunk: int = CHUNK) -> int:
    """Estimated peak bytes of one float32 forward of ``length`` tokens (with the passkey's KV cache):
    weights, a layer's activations, the key/value cache of every layer and one chunk of logits."""
    d = config.hidden_size
    heads = config.num_attention_heads
    kv = getattr(config, "num_key_value_heads", None) or heads
    head_dim = getattr(config, "head_dim", None) or d // heads
    inter = getattr(config, "intermediate_size", 4 * d)
    vocab, layers = config.vocab_size, config.num_hidden_layers
    params = vocab * d * 2 + layers * (d * (heads + 2 * kv) * head_dim + heads * head_dim * d + 3 * d * inter)
    layer = length * (6 * d + 3 * inter + 2 * (heads + 2 * kv) * head_dim)
    cache = 2 * layers * kv * head_dim * length
    return 4 * (params + layer + cache + 3 * chunk * vocab)


def check_fits(config: Any, length: int) -> None:
    """Raises ValueError (before anything of ``length`` is allocated) when the estimated peak of a
    forward exceeds the memory this process can have (``posenc.limits.available_bytes``, the bound every
    refusal of posenc uses, not the memory free at this moment, so the answer is the same every run)."""
    need, have = forward_bytes(config, length), available_bytes()
    if need > have:
        raise ValueError(f"--to {length}: a forward of {length} tokens needs about {need / 2**30:.1f} GiB, "
                         f"{have / 2**30:.1f} GiB are available; give a smaller --to")


def passkey_ids(tokenizer: Any, length: int, depth: float, key: int) -> list[int]:
    """A prompt of exactly ``length`` tokens: intro, filler with the key's sentence at ``depth``
    (0: first, 1: last), the question."""
    def enc(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    intro, needle, question, filler = enc(INTRO), enc(NEEDLE.format(key=key)), enc(QUESTION), enc(FILLER * 8)
    room = length - len(intro) - len(needle) - len(question)
    if room < 0:
        raise ValueError(f"length must be at least {length - room} tokens for a passkey prompt, got {length}")
    body = (filler * (room // len(filler) + 1))[:room]
    at = int(round(depth * room))
    return intro + body[:at] + needle + body[at:] + question


def passkey_answer(model: Any, tokenizer: Any, ids: list[int]) -> tuple[str, int | None]:
    """The greedy continuation of ``ids`` (``ANSWER_TOKENS`` tokens) and the first number in it."""
    import torch

    with torch.inference_mode():
        prompt = torch.tensor([ids])
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=ANSWER_TOKENS,
                             do_sample=False, pad_token_id=tokenizer.eos_token_id)
    text = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
    found = re.search(r"\d+", text)
    return text, (int(found.group()) if found else None)


def passkey_key(trial: int, depth: float) -> int:
    """The trial's five-digit key at ``depth`` (a fixed function of both: the same on every rerun)."""
    rng = np.random.default_rng([trial, int(round(depth * 1000))])
    return int(rng.integers(10_000, 100_000))


def ppl(nll: np.ndarray) -> float:
    return math.exp(min(float(np.mean(nll)), 700.0))
