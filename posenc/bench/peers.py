"""The peers' rotations at their best, each a function ``x -> out`` built for one case:
transformers' ``apply_rotary_pos_emb`` (prefill, and a decoding step from position ids) and
rotary-embedding-torch's ``rotate_queries_or_keys``.

The peers are imported lazily, inside these functions: a missing peer raises ``ImportError``
here, which the caller reports, and the benchmark goes on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from posenc.bench.rotary import RotaryCase


def _hf_rotary(case: RotaryCase, x, positions):
    """transformers' Llama rotation at its best: cos/sin built once, as LlamaRotaryEmbedding does.

    ``apply_rotary_pos_emb`` rotates q and k in one call; it gets ``q = k = x`` and the caller
    halves the time. Partial rotary splits and concatenates as transformers' GPT-NeoX/Phi do.
    """
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: F401 - a missing peer fails here

    rd = case.rotary_dim
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    freqs = positions[None, :, None].float() * inv_freq  # (1, L, rd/2)
    emb = torch.cat((freqs, freqs), dim=-1)  # (1, L, rd)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)

    def run(t):
        return _hf_rotate(t, cos, sin, rd)

    return run


def _hf_rotate(t, cos, sin, rd: int):
    """transformers' ``apply_rotary_pos_emb`` on q = k = ``t``, rotating the first ``rd`` dims
    (partial rotary as its models do: rotate a slice, concatenate the rest)."""
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    if rd == t.shape[-1]:
        return apply_rotary_pos_emb(t, t, cos, sin)
    rot, rest = t[..., :rd], t[..., rd:]
    q, k = apply_rotary_pos_emb(rot, rot, cos, sin)
    return torch.cat((q, rest), dim=-1), torch.cat((k, rest), dim=-1)


def _hf_step(case: RotaryCase, x, positions):
    """A decoding step in transformers: ``LlamaRotaryEmbedding`` turns the position ids into cos/sin
    (once per step, for q and k), then ``apply_rotary_pos_emb`` rotates q and k (``q = k = x``)."""
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rd = case.rotary_dim
    emb = LlamaRotaryEmbedding(config=LlamaConfig(hidden_size=case.heads * rd, num_attention_heads=case.heads,
                                                  head_dim=rd))
    position_ids = positions.expand(case.batch, -1)  # (B, L)

    def run(t):
        cos, sin = emb(t, position_ids)
        return _hf_rotate(t, cos, sin, rd)

    return run


def _ret_rotary(case: RotaryCase, x):
    """rotary-embedding-torch (interleaved pairs only), its frequency cache warmed by one call."""
    from rotary_embedding_torch import RotaryEmbedding

    rope = RotaryEmbedding(dim=case.rotary_dim, cache_max_seq_len=max(8192, case.offset + case.length))
    rope.rotate_queries_or_keys(x, offset=case.offset)
    return lambda t: rope.rotate_queries_or_keys(t, offset=case.offset)
