"""Classifying attention: what kind of attention each layer runs, read from the model, never assumed.

- at ``patch``: :func:`is_cross_attention` (a layer's attention to another sequence, left untouched),
  :func:`classify` (``"causal"``, ``"bidirectional"`` or None from the module's ``is_causal``) and
  :func:`check_classified` (every module ``patch`` replaces says which, or it is refused naming the
  module);
- at each call: :func:`attention_kind` (the call's own ``is_causal`` keyword, as SDPA reads it,
  wins over the module's): posenc's attention runs causally or not as the call says.

Bidirectional self-attention (BERT-style encoders, ModernBERT, EuroBERT, NomicBERT, GTE, Jina
Embeddings v3, ESM-C, a Gemma 3 with ``use_bidirectional_attention``) runs ``posenc.attention`` with
``causal=False``, the model's own padding mask and its local windows (the model's mask, built from
its config; never a default). Each scheme takes its bidirectional form there: ALiBi's
``−m·|i − j|`` is already symmetric (MosaicBERT's encoder ALiBi, Portes et al. 2023,
arXiv:2312.17482); posenc's ``t5`` buckets default to ``bidirectional=True``, T5's encoder's
(Raffel et al. 2020, arXiv:1910.10683).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from posenc.interop.families.record import Family

KINDS = ("causal", "bidirectional")


def attention_kind(module: nn.Module, call: Mapping[str, Any]) -> str:
    """``"causal"`` or ``"bidirectional"``: the call's ``is_causal`` keyword when it has one, else the
    module's ``is_causal`` (transformers' attention modules all set it); only ``False`` is
    bidirectional (a family's own ``forward`` that predates the flag, Falcon's, BLOOM's, is causal)."""
    causal = call["is_causal"] if "is_causal" in call else getattr(module, "is_causal", True)
    return "bidirectional" if causal is False else "causal"


_CROSS_NAMES = ("cross_attn", "cross_attention", "crossattention", "encoder_attn", "encoder_attention")


def is_cross_attention(name: str, attention: nn.Module) -> bool:
    """Whether ``attention`` (the child ``name`` of its layer) attends to another sequence (an
    encoder's, an image's): its own ``is_cross_attention`` flag (GPT-2's), a class named
    ``...CrossAttention`` (Mllama's), or a child named as transformers names them
    (``encoder_attn``: BART, Whisper; ``crossattention``: BERT). Its keys carry no positions of the
    queries' sequence, so ``patch`` leaves it untouched."""
    if getattr(attention, "is_cross_attention", False) is True:
        return True
    return "CrossAttention" in type(attention).__name__ or name.rpartition(".")[2] in _CROSS_NAMES


def classify(attention: nn.Module, family: Family) -> str | None:
    """What an attention module is, read from the module (transformers sets ``is_causal`` on every
    attention module that calls its attention interface): ``"causal"`` (``is_causal`` True, or a
    family whose attention runs posenc's own causal ``forward``: Falcon, BLOOM, MPT, GPT-Neo),
    ``"bidirectional"`` (``is_causal`` False: ModernBERT, EuroBERT, NomicBERT, GTE, Gemma 3 with
    ``use_bidirectional_attention``; or a family whose posenc ``forward`` runs an encoder's attention,
    ``Family.encoder``: DeBERTa-v2, whose mask is its padding alone), None when the module does not
    say (no ``is_causal``)."""
    causal = getattr(attention, "is_causal", None)
    if isinstance(causal, bool):
        return "causal" if causal else "bidirectional"
    if family.forward is None:
        return None
    return "bidirectional" if family.encoder else "causal"  # DeBERTa-v2's own forward: an encoder's


def check_classified(attentions: list[nn.Module], paths: list[str], family: Family, name: str) -> None:
    """Every attention module ``patch`` replaces is self-attention whose kind the model says, causal
    or bidirectional; one that does not say (no ``is_causal``) refused naming its module and class."""
    for attention, path in zip(attentions, paths):
        if classify(attention, family) is None:
            raise ValueError(f"posenc.interop.patch: {name}'s attention {path} ({type(attention).__name__}) has no "
                             "is_causal attribute: posenc cannot tell causal from bidirectional attention, and "
                             "never assumes it")
