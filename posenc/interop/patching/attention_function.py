"""The runtime attention function ``"posenc"`` that ``patch`` registers with transformers'
``AttentionInterface`` (:func:`posenc_attention`), and what it reads at each call: the layer's
:class:`~posenc.interop.state.LayerState` (the positions the decoder's call recorded, the keys'
positions kept across cached calls, MLA's rope part, context parallelism), the call's ``is_causal``
(``posenc.interop.classify``), its sliding window and mask.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.interop.classify import attention_kind
from posenc.interop.state import LayerState, layer_state


def _grow(state: LayerState, name: str, new: torch.Tensor, lq: int, lk: int) -> torch.Tensor:
    """The layer's record ``name`` (``"key_positions"``, ``"hidden"``) of every key so far
    (``[B, Lk, ...]``): ``new`` (the queries') appended to what earlier calls kept (its newest
    ``Lk − Lq`` entries: a sliding-window layer's cache drops the oldest keys), restarted when this
    call has no past keys; a second call of the layer in one forward (DiffLlama calls the attention
    function twice; the decoder's call counts the forwards, ``step``) finds its keys already there."""
    step = getattr(state.positions, "step", None)  # the decoder's forward calls so far
    if lk == lq:
        whole = new
    else:
        past = getattr(state, name)
        if step is not None and getattr(state, name + "_step") == step and past is not None:
            return past  # the layer's second call this step (DiffLlama's two attention maps): already appended
        if past is not None and past.shape[1] > lk - lq:  # a sliding-window cache keeps only the newest keys
            past = past[:, past.shape[1] - (lk - lq):]
        if past is None or past.shape[1] != lk - lq or past.shape[0] != new.shape[0]:
            raise RuntimeError(f"posenc.interop: the cache holds {lk - lq} past keys but this layer kept "
                               f"{None if past is None else past.shape[1]} of them; patched models decode with "
                               "transformers' DynamicCache in order (no beam search, no static cache)")
        whole = torch.cat([past, new], dim=1)
    setattr(state, name, whole)
    setattr(state, name + "_step", step)
    return whole


def _one_row(p: torch.Tensor, pe: Any) -> torch.Tensor:
    """Multimodal RoPE's rows ``[A, B, L]`` as one position per token ``[B, L]``: the rows must be
    equal (text); image or video tokens, whose rows differ, are refused."""
    if p.shape[0] > 1 and not bool((p == p[:1]).all()):
        raise ValueError(f"posenc.interop: the model's position_ids have {p.shape[0]} rows that differ (image or "
                         f"video tokens: time, height, width), but pe {getattr(pe, 'name', None)!r} takes one "
                         "position per token; patch this model with mrope, or give it text-only inputs")
    return p[0]


def _query_positions(module: nn.Module, pe: Any, position_ids: torch.Tensor | None, b: int, lq: int, lk: int,
                     device: torch.device) -> torch.Tensor:
    """The queries' positions: those the model's rotary was called with this forward (what its own
    RoPE would have used; Llama 4's layers do not pass them on), else the layer's ``position_ids``,
    else the last ``Lq`` of ``0..Lk-1``. ``[B, Lq]``, or ``[B, Lq, A]`` for a scheme of ``A`` axes.

    Multimodal RoPE's ``[A, B, L]`` rows (Qwen2-VL: time, height, width; ``[1, B, L]`` when
    decoding) go to an ``A``-axis scheme (``mrope``) as they are; a one-axis scheme takes them
    where the rows are equal (text), and image or video tokens, whose rows differ, are refused."""
    state = layer_state(module)
    seen = None if state is None else getattr(state.positions, "position_ids", None)
    p = seen if seen is not None else position_ids
    if p is None:
        p = torch.arange(lk - lq, lk, device=device).unsqueeze(0)
    p = p.to(device)
    if not (p.is_floating_point() and getattr(pe, "real_positions", False)):  # dinov3's patch coordinates stay real
        p = p.long().clamp(min=0)  # OPT's padding tokens at -1 (masked keys: any position does)
    if p.shape[-1] > lq:  # the rotary called with every key's position (Qwen4-Exp's, for its indexer): the last Lq
        p = p[..., p.shape[-1] - lq:]
    axes = getattr(pe, "axes", 1)
    if p.dim() == 3:  # (A, B, L): multimodal RoPE's rows
        if axes > 1:
            if p.shape[0] not in (1, axes):
                raise ValueError(f"pe {pe.name!r} takes {axes} position axes but the model's position_ids have "
                                 f"{p.shape[0]} rows (shape {list(p.shape)})")
            return p.expand(axes, -1, -1).permute(1, 2, 0).expand(b, lq, axes)  # (B, Lq, A)
        p = _one_row(p, pe)
    if axes > 1:  # text: the same position on every axis
        return p.unsqueeze(-1).expand(b, lq, axes)
    return p.expand(b, lq)  # (B, Lq)


def _rope_part_first(x: torch.Tensor, width: int, interleaved: bool) -> torch.Tensor:
    """An MLA head ``[nope part, rope part]`` (``x [B, H, L, D]``, the rope part its last ``width``
    dims) as ``[rope part, nope part]``, the rope part in the model's own pair order: the model's
    interleaved apply with cos 1, sin 0 left it de-interleaved (``x[0::2], x[1::2]``), which is
    undone. The same permutation of q and k leaves every ``q·k`` as it was."""
    nope, rope = x[..., : x.shape[-1] - width], x[..., x.shape[-1] - width:]
    if interleaved:  # (a_0 .. a_{w/2-1}, b_0 .. b_{w/2-1}) -> (a_0, b_0, a_1, b_1, ...)
        rope = torch.stack((rope[..., : width // 2], rope[..., width // 2:]), dim=-1).flatten(-2)
    return torch.cat([rope, nope], dim=-1)  # (B, H, L, D)


def posenc_attention(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     **kwargs) -> tuple[torch.Tensor, None]:
    """transformers' attention function ``"posenc"``: ``query [B, H, Lq, D]``, ``key, value [B, H_kv,
    Lk, D]`` (grouped heads as they are) -> ``([B, Lq, H, D], None)`` through ``posenc.attention``
    with the layer's ``posenc_pe``, causal or not as the call says (``posenc.interop.classify``:
    the call's ``is_causal``, else the module's), the model's mask and scale, the keys' positions, and
    the family's softmax terms: Gemma 2's ``softcap`` and GPT-OSS's ``s_aux`` (its sinks) as
    ``posenc.attention``'s ``softcap=`` and ``sinks=``, and the model's attention ``dropout`` (its own
    rate in training, 0 in eval, as transformers passes it) as ``dropout_p=``. A sliding-window
    layer's ``sliding_window`` (Mistral, Gemma 2/3, Qwen 2, GPT-OSS, Cohere 2, ...) is
    ``posenc.attention``'s ``window=``, and
    the model's 4D mask is dropped when it says nothing more (no padding): every backend then
    skips the keys outside the window (``_window``, ``_beyond_window``). A module ``patch`` left as it
    was that calls the interface too (cross-attention: BERT's ``crossattention``, its keys an
    encoder's) runs transformers' own SDPA attention, with the mask ``sdpa_mask`` built for it."""
    import posenc

    state = layer_state(module)
    if state is None:  # a module patch left as it was (cross-attention: no positions of the queries' sequence)
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)  # the mask is sdpa_mask's (registered with "posenc")
    causal = attention_kind(module, kwargs) == "causal"  # the call's own is_causal, as SDPA reads it, else the module's
    # Gemma 2's logit cap (its scaling is query_pre_attn_scalar^-1/2, passed as scaling) and
    # GPT-OSS's sinks (the layer's sinks parameter [H], passed as s_aux): posenc.attention's own
    terms = {"softcap": kwargs["softcap"]} if kwargs.get("softcap") is not None else {}
    if dropout:  # the model's own rate, which transformers passes in training only (0 in eval)
        terms["dropout_p"] = float(dropout)
    if kwargs.get("s_aux") is not None:
        terms["sinks"] = kwargs["s_aux"]
    pe = module.posenc_pe  # None: no position in attention (NoPE, or an additive scheme on the embeddings)
    b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
    extra: dict[str, Any] = {}
    if pe is None or not pe.counts_positions_from_tokens:  # positions but for a content scheme's
        q_pos = _query_positions(module, pe, kwargs.get("position_ids"), b, lq, lk, query.device)  # (B, Lq[, A])
        k_pos = _grow(state, "key_positions", q_pos, lq, lk)  # (B, Lk[, A])
        extra = {"q_positions": q_pos, "k_positions": k_pos}
    if pe is not None and pe.reads_hidden:
        extra["hidden"] = _grow(state, "hidden", state.input, lq, lk)
    mask = attention_mask
    if mask is not None and mask.dim() == 4 and mask.shape[-1] != lk:  # a static cache's padded keys
        raise ValueError(f"posenc.interop: the attention mask covers {mask.shape[-1]} keys but the layer has {lk}; "
                         "static caches are not supported (use DynamicCache)")
    window = _window(pe, kwargs.get("sliding_window"))
    if window is not None and causal:
        terms["window"] = window
        mask = _beyond_window(mask, lq, lk, window)
    elif window is not None:  # a bidirectional local layer (ModernBERT's): the model's mask holds the window
        mask, terms["window"] = _beyond_symmetric_window(mask, lq, lk, window)
    pe_arg = None if getattr(pe, "name", None) == "nope" else pe
    part = state.rope_part  # MLA (DeepSeek-V3): (rope width, interleaved)
    if part is not None:
        width = part[0]
        query, key = _rope_part_first(query, *part), _rope_part_first(key, *part)
        if pe is not None and pe.rotates and pe.head_dim == width < query.shape[-1]:  # the rope part only
            # posenc.attention's own rotation step (RotaryEncoding.rotate: observe, keys, queries)
            q_rope, k_rope = pe.rotate(query[..., :width], key[..., :width], extra["q_positions"], extra["k_positions"])
            key = torch.cat([k_rope, key[..., width:]], dim=-1)
            query = torch.cat([q_rope, query[..., width:]], dim=-1)
            pe_arg = None
    method = state.context_parallel
    if method is not None and not causal:
        raise ValueError(f"posenc.interop: {type(module).__name__} is bidirectional (is_causal=False); "
                         f"context_parallel={method!r} runs causal attention only")
    if method is not None and "dropout_p" in terms:
        raise ValueError(f"posenc.interop: context_parallel={method!r} has no attention dropout; set the model's "
                         f"attention dropout to 0 (got {terms['dropout_p']}) or call model.eval()")
    if method is not None:  # each rank holds its shard of the sequence (patch(..., context_parallel=))
        out = _sharded(module, pe, pe_arg, query, key, value, extra, kwargs.get("position_ids"), scaling, terms,
                       method)
        return out.transpose(1, 2).contiguous(), None
    out = posenc.attention(query, key, value, pe_arg, causal=causal, scale=scaling, attention_mask=mask, **extra,
                           **terms)
    return out.transpose(1, 2).contiguous(), None


class _ShardPadding:
    """The ``attention_mask`` the decoder was called with under ``patch(..., context_parallel=)``: a 2D
    key padding mask ``[B, Ll]`` of the rank's tokens, or None. The model's own 4D mask is made for
    the shard alone (causality by local index; transformers reads a packing into the shard's jumping
    position_ids), so ``_sharded`` takes the padding from here instead of from that mask."""

    mask: torch.Tensor | None = None

    def hook(self, module: nn.Module, args: tuple, kwargs: dict) -> None:
        mask = kwargs.get("attention_mask", args[1] if len(args) > 1 else None)
        if mask is not None and (not isinstance(mask, torch.Tensor) or mask.dim() != 2):
            raise ValueError("patch(..., context_parallel=) takes a key padding attention_mask [B, Ll] of the shard's "
                             f"tokens (1: a token, 0: padding), got "
                             f"{list(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__}; "
                             "a 4D mask (another visibility) is not taken: pack documents instead")
        self.mask = mask


def _sharded(module, pe, pe_arg, query, key, value, extra, position_ids, scaling, terms, method):
    """``posenc.context_parallel_attention`` of a rank's shard (``patch(..., context_parallel=method)``):
    the shard's global positions are the ``position_ids`` the model was called with (one row for
    the batch; ``posenc.shard_positions``), causal over the whole sequence, with the family's logit
    cap, sinks and sliding window (``terms``) and the model's 2D key padding mask of the shard's
    tokens (``_ShardPadding``); the model's own 4D mask, made for the shard alone, is not used."""
    import posenc

    b, lq, lk = query.shape[0], query.shape[2], key.shape[2]
    if lq != lk:
        raise ValueError(f"context_parallel={method!r} runs whole sequences without a cache (training, prefill); "
                         f"got {lq} queries over {lk} keys")
    positions = _query_positions(module, pe, position_ids, b, lq, lk, query.device)  # (B, Lq)
    if positions.dim() != 2 or not bool((positions == positions[:1]).all()):
        raise ValueError(f"context_parallel={method!r} takes position_ids [1, Ll] (one row for the batch): "
                         "this rank's global positions, posenc.shard_positions(L, world_size, rank)")
    padding = layer_state(module).shard_padding
    pad = None if padding is None else padding.mask
    if pad is not None and tuple(pad.shape) != (b, lq):
        raise ValueError(f"context_parallel={method!r}: the attention_mask must be [B, Ll] = [{b}, {lq}], the shard's "
                         f"tokens' padding, got {list(pad.shape)}")
    return posenc.context_parallel_attention(query, key, value, pe_arg, positions=positions[0], causal=True,
                                             scale=scaling, method=method, hidden=extra.get("hidden"),
                                             attention_mask=pad, **terms)


def _window(pe: Any, sliding_window: Any) -> int | None:
    """The layer's sliding window for ``posenc.attention``'s ``window=`` (transformers passes a
    sliding layer's ``sliding_window`` to the attention function: query ``i`` sees keys ``j`` with
    ``j > i - W``, posenc's ``window=W``); None for a full layer, or for a content scheme whose rows
    take no window (stick-breaking), which keeps the window of the model's 4D mask alone."""
    if sliding_window is None or isinstance(sliding_window, bool) or not isinstance(sliding_window, int):
        return None
    if getattr(pe, "kind", None) == "content" and not getattr(pe, "takes_window", True):
        return None
    return sliding_window


def _beyond_window(mask: torch.Tensor | None, lq: int, lk: int, window: int) -> torch.Tensor | None:
    """The model's 4D bool mask ``[B, 1, Lq, Lk]`` (True: attend), or None when it says no more than
    causality and the window (no padding): posenc's ``causal=True, window=W`` then decide alone and
    its backends skip the key blocks outside the window. A mask that differs from them (padding, a
    window of another size) is kept and combined with them."""
    if mask is None or mask.dtype != torch.bool or mask.dim() != 4:
        return mask
    d = torch.arange(lk, device=mask.device) - torch.arange(lq, device=mask.device).unsqueeze(1) - (lk - lq)  # (Lq, Lk)
    if torch.equal(mask, ((d <= 0) & (d > -window)).expand_as(mask)):
        return None
    return mask


def _beyond_symmetric_window(mask: torch.Tensor | None, lq: int, lk: int,
                             window: int) -> tuple[torch.Tensor | None, int | None]:
    """A bidirectional local layer's visibility, as the model builds it: its own 4D mask (the
    window from its config: ModernBERT's ``|i − j| <= local_attention // 2``, passed to the attention
    function as ``sliding_window = local_attention // 2 + 1``), never a window assumed from that
    keyword alone. Where the model's bool mask ``[B, 1, Lq, Lk]`` is exactly posenc's non-causal
    ``window=W`` (``|i − j| <= W − 1``), it is dropped for ``window=W`` (every backend skips the key
    blocks outside it); otherwise it is kept, and no window added: ``(mask, window or None)``."""
    if mask is None or mask.dtype != torch.bool or mask.dim() != 4 or lq != lk:
        return mask, None
    d = torch.arange(lk, device=mask.device) - torch.arange(lq, device=mask.device).unsqueeze(1)  # (Lq, Lk)
    if torch.equal(mask, (d.abs() <= window - 1).expand_as(mask)):
        return None, window
    return mask, None


def _keep_input(module: nn.Module, args: tuple, kwargs: dict) -> None:
    """A forward pre-hook: the layer's input (``hidden_states``), for schemes that read it."""
    layer_state(module).input = kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]
