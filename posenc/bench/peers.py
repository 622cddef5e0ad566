"""The peers' rotations at their best, each a function ``x -> out`` built for one case:
transformers' ``apply_rotary_pos_emb`` (prefill, and a decoding step from position ids),
rotary-embedding-torch's ``rotate_queries_or_keys``, and on CUDA the two Triton kernels posenc's
own is measured against: Liger-Kernel's ``LigerRopeFunction`` and flash-attn's ``apply_rotary_emb``.

The peers are imported lazily, inside these functions: a missing peer raises ``ImportError``
here, which the caller reports ("not installed (name)"), and the benchmark goes on; a peer that
cannot do a case raises ``NotApplicable``, reported as "n/a (why)".

A peer that takes ``x`` in another memory layout than posenc's contiguous ``[B, H, L, D]`` has
its layout in ``INPUT_LAYOUTS``: the caller makes that tensor from ``x`` once, outside the timing,
so the timed call is the peer's kernel on its own layout, as a model would call it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from posenc.bench.profiles import RotaryCase


class NotApplicable(Exception):
    """The peer cannot do this case (its message says why)."""


def _hf_rotary(case: RotaryCase, x, positions):
    """transformers' Llama rotation at its best: cos/sin built once, as LlamaRotaryEmbedding does.

    ``apply_rotary_pos_emb`` rotates q and k in one call; it gets ``q = k = x`` and the caller
    halves the time. Partial rotary splits and concatenates as transformers' GPT-NeoX/Phi do.
    """
    import torch
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb  # noqa: F401 - a missing peer fails here

    rd = case.rotary_dim
    inv_freq = 1.0 / (10000.0 ** (torch.arange(0, rd, 2, dtype=torch.int64, device=x.device).float() / rd))
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
                                                  head_dim=rd)).to(x.device)
    position_ids = positions.expand(case.batch, -1)  # (B, L)

    def run(t):
        cos, sin = emb(t, position_ids)
        return _hf_rotate(t, cos, sin, rd)

    return run


def _ret_rotary(case: RotaryCase, x):
    """rotary-embedding-torch (interleaved pairs only), its frequency cache warmed by one call."""
    from rotary_embedding_torch import RotaryEmbedding

    rope = RotaryEmbedding(dim=case.rotary_dim, cache_max_seq_len=max(8192, case.offset + case.length)).to(x.device)
    rope.rotate_queries_or_keys(x, offset=case.offset)
    return lambda t: rope.rotate_queries_or_keys(t, offset=case.offset)


def blhd(t):
    """``[B, H, L, D]`` -> a contiguous ``[B, L, H, D]`` copy: flash-attn's layout. Always a copy:
    ``.contiguous()`` would return ``t``'s own memory where a dimension is 1 (L = 1 in a decoding step)."""
    import torch

    return t.transpose(1, 2).clone(memory_format=torch.contiguous_format)


def bhld_view_of_blhd(t):
    """A copy of ``[B, H, L, D]`` as a view of contiguous ``[B, L, H, D]`` memory: q and k in a
    transformers model (``q_proj(h).view(B, L, H, D).transpose(1, 2)``), the layout Liger-Kernel
    rotates in place. Always a copy, as ``blhd``: a peer that rotates in place never writes into ``t``."""
    return blhd(t).transpose(1, 2)


# peer: (the tensor it takes, made from x [B, H, L, D] once, outside the timing;
#        its output read back as [B, H, L, D], for the comparison with posenc)
INPUT_LAYOUTS = {
    "liger_kernel": (bhld_view_of_blhd, lambda out: out),
    "flash_attn": (blhd, lambda out: out.transpose(1, 2)),
}


def _liger_rotary(case: RotaryCase, x, cos, sin):
    """Liger-Kernel's Triton rotation, ``LigerRopeFunction`` (read in liger-kernel 0.8.5,
    ``liger_kernel/ops/rope.py``): ``apply(q, k, cos, sin)`` with q, k ``[B, H, L, D]`` and cos/sin
    ``[1, L, rotary_dim]``, the half layout's cos/sin with their halves repeated, as transformers
    builds them (``cos``, ``sin`` here: posenc's ``[L, rotary_dim/2]``, of x's dtype).

    It rotates q and k in one call (the caller halves the time: per tensor), **in place** when
    they are ``[B, H, L, D]`` views of ``[B, L, H, D]`` memory, as in transformers' models; given
    contiguous ``[B, H, L, D]`` it would first copy them into that layout. So q is x in that layout
    (``INPUT_LAYOUTS``, made once, outside the timing) and k a second tensor like it. Half layout
    only. Partial rotary: 0.8.5 rotates the first ``cos.shape[-1]`` dims of each head; releases
    whose ``forward`` takes no ``rotary_dim`` rotate whole heads (``NotApplicable``).
    """
    import inspect

    import torch
    from liger_kernel.ops.rope import LigerRopeFunction

    if (case.rotary_dim != case.head_dim
            and "rotary_dim" not in inspect.signature(LigerRopeFunction.forward).parameters):
        raise NotApplicable("this liger-kernel rotates whole heads only")
    cos2, sin2 = (torch.cat((t, t), dim=-1)[None].contiguous() for t in (cos, sin))  # (1, L, rd)
    k = bhld_view_of_blhd(x.detach())

    def run(q):
        out = LigerRopeFunction.apply(q, k, cos2, sin2)
        return out[0], out[1]  # some releases also return cos and sin

    return run


def _flash_rotary(case: RotaryCase, cos, sin):
    """flash-attn's Triton rotation, ``apply_rotary_emb`` (read in the flash-attention repository's
    sources of the 2.8 series, ``__version__`` 2.8.3: ``flash_attn/layers/rotary.py`` and its
    kernel ``flash_attn/ops/triton/rotary.py``): x ``[B, L, H, D]``, cos/sin tables ``[rows,
    rotary_dim/2]`` of x's dtype (it asserts both), token ``l`` at row ``l + seqlen_offsets``;
    ``interleaved=True`` for the interleaved layout.

    ``cos``, ``sin``: posenc's tables for positions ``0 .. offset + L - 1``, so a decoding step
    passes ``seqlen_offsets=offset`` as a KV cache does. It allocates its output
    (``inplace=False``), as the allocating ``apply_rotary`` does. x ``[B, H, L, D]`` becomes
    contiguous ``[B, L, H, D]`` once, outside the timing (``INPUT_LAYOUTS``): the timed call is
    flash-attn's kernel on its own layout, with no transpose.
    """
    from flash_attn.layers.rotary import apply_rotary_emb

    cos, sin = cos.contiguous(), sin.contiguous()
    interleaved = case.layout == "interleaved"
    return lambda t: apply_rotary_emb(t, cos, sin, interleaved=interleaved, inplace=False,
                                      seqlen_offsets=case.offset)
