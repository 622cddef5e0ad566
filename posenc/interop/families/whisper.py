"""Whisper: a speech encoder–decoder (``patching/stacks.py`` patches each stack as a model of its
own). The encoder (``WhisperEncoder``: two convolutions over the log-mel frames, then
``max_source_positions`` frames) adds a fixed sinusoidal table ``embed_positions`` (an
``nn.Embedding``, frozen), ``whisper``'s ``sinusoids(length, d)``: ``[sin(p·θ_i) | cos(p·θ_i)]``
with ``θ_i = exp(−i·ln(10000)/(d/2 − 1))``, sin half then cos half. That is posenc's ``sinusoidal``
of ``layout="half"`` with ``base = 10000^(d/(d−2))`` (``base^(−2i/d) = 10000^(−i/(d/2−1))``): not
Vaswani et al.'s frequencies at base 10000, the convention of OpenAI's Whisper (``sinusoids`` in its
``model.py``), named here. The decoder (``WhisperDecoder``) adds a learned table
(``WhisperPositionalEmbedding``, ``max_target_positions`` rows, no offset) counted from its cache's
length. The encoder's self-attention is bidirectional, the decoder's causal (each module's
``is_causal``); the decoder's cross-attention (``encoder_attn``) keeps transformers' SDPA.

Whisper computes its sinusoids in float32 (``torch.exp`` of float32 steps, float32 angles), posenc
in float64 then casts, so the two tables differ by the float32 rounding of the angles: the check
before replacing allows ``4·eps·N`` for ``N`` rows (at 1500 frames, about 7e-4), where any other
base or layout differs by order 1. Whisper's encoder has no padding (its frames are always
``max_source_positions``), so no padded encoder row arises."""

from __future__ import annotations

from typing import Any


def encoder_spec(config: Any) -> dict[str, Any]:
    """The encoder's fixed table as posenc's ``sinusoidal`` (``layout="half"``, ``base =
    10000^(d/(d−2))``)."""
    from posenc.interop.families.gpt2 import _get

    d = _get(config, "d_model", "hidden_size")
    if d < 4 or d % 2:
        raise ValueError(f"Whisper's sinusoids need an even d_model of at least 4, got {d}")
    return {"scheme": "sinusoidal", "d_model": d, "base": 10000.0 ** (d / (d - 2)), "layout": "half"}


def decoder_spec(config: Any) -> dict[str, Any]:
    """The decoder's learned table as posenc's ``learned``."""
    from posenc.interop.families.gpt2 import _get

    return {"scheme": "learned", "d_model": _get(config, "d_model", "hidden_size"),
            "max_positions": _get(config, "max_target_positions")}


def _family():
    from posenc.interop.families.record import Family

    stacks = (("Encoder", "encoder_layers", "encoder_attention_heads", encoder_spec),
              ("Decoder", "decoder_layers", "decoder_attention_heads"))
    return Family(rotary=None, positions="learned", layers="layers", attention="self_attn", table_holder="",
                  table_attr="embed_positions", own_spec=decoder_spec, stacks=stacks)
