"""Check before replacing: a model's own position encoding against posenc's reading of it.

``patch`` calls :func:`check_rotary` before it replaces or neutralises a model's rotary: the
model's own rotary module is called at a few positions (``PROBE`` of them, for each layer type it
takes) and its table compared with the table ``HFRotaryEmbedding`` builds from posenc's reading of
the config (``from_hf``); a difference is a ValueError naming the family and what differs (the
layout: pairs (2i, 2i+1) against (i, i + d/2); the rotary width; the attention factor; the base or
scaling). :func:`check_neutral` checks that the family's ``apply_rotary_pos_emb`` with cos 1 and
sin 0 is the identity (what neutralising relies on). The drop-in
``HFRotaryEmbedding(posenc.from_hf(config))`` is checked the same way by :func:`check_from_hf`,
against the rotary class of the config's own modeling module. Families without RoPE are checked
by what they hold: a learned table's shape, ALiBi's slopes (:func:`check_own`).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import torch
from torch import nn

from posenc.interop.configs import text_config

PROBE = 24  # positions 0..23: past every small model's sliding window, below any original length we build
RTOL = 1e-4  # of the table's largest entry: float32 angles at positions < 24 differ from float64 by < 1e-5


def _call(rotary: nn.Module, positions: torch.Tensor, layer_type: str | None, width: int) -> Any:
    x = torch.zeros(1, 1, positions.shape[-1], width)
    with torch.no_grad():
        if layer_type is not None:
            return rotary(x, positions, layer_type)
        return rotary(x, positions)


def _tables(out: Any) -> tuple[torch.Tensor, ...]:
    return (out,) if isinstance(out, torch.Tensor) else tuple(out)


def _describe(theirs: tuple[torch.Tensor, ...], ours: tuple[torch.Tensor, ...], rope: nn.Module) -> str | None:
    """None when the tables agree, else what differs."""
    if len(theirs) != len(ours) or any(a.is_complex() != b.is_complex() for a, b in zip(theirs, ours)):
        kind = "a complex freqs_cis" if theirs[0].is_complex() else f"{len(theirs)} tables (cos, sin)"
        return f"table: the model's rotary returns {kind}, posenc's table is {len(ours)} tensor(s)"
    if any(a.shape[-1] != b.shape[-1] for a, b in zip(theirs, ours)):
        return (f"rotary width: the model's table has {theirs[0].shape[-1]} columns, posenc's "
                f"{ours[0].shape[-1]} (rotary_dim {rope.spec.get('rotary_dim')}, head_dim {rope.spec.get('head_dim')})")
    theirs = tuple(a.to(torch.complex128 if a.is_complex() else torch.float64) for a in theirs)
    ours = tuple(b.to(a.dtype) for a, b in zip(theirs, ours))
    if theirs[0].shape != ours[0].shape:  # Qwen2-VL's [3, B, L, R]: text positions, equal rows
        theirs = tuple(a[0] if a.dim() == b.dim() + 1 else a for a, b in zip(theirs, ours))
    scale = max(float(a.abs().max()) for a in theirs) or 1.0
    worst = max(float((a - b).abs().max()) for a, b in zip(theirs, ours))
    if worst <= RTOL * scale:
        return None
    if len(theirs) == 2:
        cos, sin = theirs
        half = cos.shape[-1] // 2
        if torch.allclose(cos[..., 0::2], cos[..., 1::2]) and not torch.allclose(cos[..., :half], cos[..., half:]):
            return ("layout: the model pairs dimensions (2i, 2i+1) (its cos/sin repeat each entry, "
                    f"repeat_interleave), posenc's reading pairs (i, i + d/2) (layout {rope.spec.get('layout')!r})")
        if torch.allclose(cos[..., :half], cos[..., half:]) and torch.allclose(ours[0][..., 0::2], ours[0][..., 1::2]):
            return ("layout: the model pairs dimensions (i, i + d/2) (its cos/sin are cat(c, c)), posenc's reading "
                    "pairs (2i, 2i+1)")
        amp_t, amp_o = float((cos**2 + sin**2)[..., 0, :].max()), float((ours[0]**2 + ours[1]**2)[..., 0, :].max())
        if abs(amp_t - amp_o) > RTOL * max(amp_t, 1.0):
            return f"attention factor: the model's cos² + sin² is {amp_t:.6g}, posenc's {amp_o:.6g}"
        ang_t, ang_o = torch.atan2(sin, cos), torch.atan2(ours[1], ours[0])  # (.., L, R)
        col = int((ang_t[..., 1, :] - ang_o[..., 1, :]).abs().flatten(0, -2).max(0).values.argmax())
        return (f"base or scaling: the tables differ by up to {worst:.3g}; at position 1, column {col}: the model "
                f"turns {float(ang_t[..., 1, col].flatten()[0]):.6g} rad, posenc "
                f"{float(ang_o[..., 1, col].flatten()[0]):.6g} rad")
    return f"the tables differ by up to {worst:.3g} (of {scale:.3g})"


def _positions(rope: nn.Module, n: int) -> torch.Tensor:
    p = torch.arange(n).unsqueeze(0)  # (1, L)
    return p.expand(3, 1, n) if rope.name == "mrope" else p  # mrope: transformers' [3, B, L] rows (text)


def compare(rotary: nn.Module, ours: nn.Module, rope: nn.Module, layer_type: str | None, limit: int | None) -> str | None:
    """What differs between ``rotary``'s table and ``ours`` (an ``HFRotaryEmbedding``), or None."""
    n = PROBE if limit is None else max(2, min(PROBE, int(limit)))
    positions = _positions(rope, n)
    width = int(rope.spec.get("head_dim") or 2)
    try:
        theirs = _tables(_call(rotary, positions, layer_type, width))
    except KeyError as err:  # Laguna, Mellum: a rotary that holds fewer layer types than the config's rope parameters
        raise ValueError(f"posenc.interop: the model's rotary ({type(rotary).__name__}) has no table for layer type "
                         f"{layer_type!r} (KeyError {err}), which the config's rope parameters give; posenc cannot "
                         "check its reading of them") from None
    return _describe(theirs, _tables(_call(ours, positions, layer_type, width)), rope)


def check_rotary(name: str, rotary: nn.Module, config: Any, from_hf: Any, rope_layer_types: Any, wrapper: Any) -> None:
    """The model's ``rotary`` module against posenc's reading of ``config`` (``HFRotaryEmbedding``
    of ``from_hf``, one per layer type), at positions ``0..PROBE-1``; ValueError naming the family
    (``name``) and what differs. ``from_hf``, ``rope_layer_types`` and ``wrapper``
    (``HFRotaryEmbedding``) are ``posenc.interop.hf``'s, passed in (imports run one way)."""
    HFRotaryEmbedding = wrapper  # noqa: N806

    text = text_config(config)
    present = getattr(text, "layer_types", None)  # the model's rotary holds the layer types its layers have
    types = [t for t in rope_layer_types(config) if present is None or t in present] or [None]
    limit = getattr(text, "max_position_embeddings", None)
    for layer_type in types:
        rope = from_hf(config, layer_type=layer_type)
        ours = HFRotaryEmbedding({layer_type: rope} if layer_type is not None else rope)
        diff = compare(rotary, ours, rope, layer_type, limit)
        if diff is not None:
            where = f" (layer type {layer_type!r})" if layer_type is not None else ""
            raise ValueError(f"posenc.interop: {name}'s own rotary{where} is not what posenc reads from its config: "
                             f"{diff}; refused rather than run a different model")


def check_neutral(name: str, apply: Any, table: Any, num_heads: int, head_dim: int) -> None:
    """``apply_rotary_pos_emb(q, k, cos 1, sin 0)`` (or ``(x, cos 1, sin 0)``, one tensor at a time:
    Gemma 4's) returns ``q, k`` (the model's rotary then does
    nothing and posenc's attention gives the positions); ValueError naming the family if not."""
    tables = _tables(table)
    if len(tables) != 2 or apply is None:
        return  # a family's own apply (complex freqs_cis, a row of FAMILIES): tested in its family's tests
    cos, sin = torch.ones_like(tables[0]), torch.zeros_like(tables[1])
    for width in dict.fromkeys((head_dim, cos.shape[-1])):
        q = torch.randn(1, num_heads, cos.shape[-2], width, generator=torch.Generator().manual_seed(0))
        try:
            got = apply(q, q.clone(), cos, sin)
        except (RuntimeError, TypeError, ValueError, IndexError):
            try:  # an apply of one tensor at a time, apply(x, cos, sin) (Gemma 4's)
                got = (apply(q, cos, sin), q)
            except (RuntimeError, TypeError, ValueError, IndexError):
                continue
        if isinstance(got, tuple) and len(got) >= 2 and all(isinstance(g, torch.Tensor) and g.shape == q.shape
                                                            and torch.equal(g, q) for g in got[:2]):
            return
        raise ValueError(f"posenc.interop: {name}'s apply_rotary_pos_emb with cos 1, sin 0 is not the identity; "
                         "posenc cannot switch its rotary off")
    raise ValueError(f"posenc.interop: {name}'s apply_rotary_pos_emb{inspect.signature(apply)} does not take "
                     "(q, k, cos, sin) with its rotary's tables; posenc cannot check that cos 1, sin 0 switches it off")


def _modeling_rotary(config: Any) -> nn.Module | None:
    """The text rotary class of ``config``'s own modeling module, built from it; None if there is none."""
    module_name = type(config).__module__
    if not module_name.startswith("transformers.models.") or ".configuration_" not in module_name:
        return None
    try:
        modeling = importlib.import_module(module_name.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    classes = [c for n, c in vars(modeling).items() if n.endswith("RotaryEmbedding") and isinstance(c, type)
               and c.__module__ == modeling.__name__ and not any(t in n for t in ("Vision", "Audio", "Visual"))]
    for cls in classes:
        try:
            return cls(config=config)
        except Exception:  # a rotary of another sub-model (its config lacks fields): try the next
            continue
    return None


def check_from_hf(config: Any, rope: nn.Module, layer_type: str | None, wrapper: Any) -> None:
    """``HFRotaryEmbedding(rope)`` (``rope = from_hf(config)``) against the rotary class of the
    config's own modeling module, when ``config`` is a transformers config object (a dict has no
    modeling module: ``patch`` checks the model itself); ValueError naming the family if they differ."""
    if isinstance(config, dict):
        return
    text = text_config(config)
    rotary = _modeling_rotary(text)
    if rotary is None:
        return
    HFRotaryEmbedding = wrapper  # noqa: N806  (posenc.interop.hf's, passed in: imports run one way)
    sig = inspect.signature(rotary.forward).parameters
    if (layer_type is not None) != ("layer_type" in sig):
        return  # one table per layer type on one side only: from_config's business
    present = getattr(text, "layer_types", None)
    if layer_type is not None and present is not None and layer_type not in present:
        return  # rope parameters for a kind of layer the model has none of (Laguna's sliding_attention): never run
    ours = HFRotaryEmbedding({layer_type: rope} if layer_type is not None else rope)
    diff = compare(rotary, ours, rope, layer_type, getattr(text, "max_position_embeddings", None))
    if diff is not None:
        raise ValueError(f"posenc.from_hf: {type(config).__name__} (model_type {getattr(config, 'model_type', None)!r})"
                         f": its model's rotary is not what posenc reads from the config: {diff}; "
                         "HFRotaryEmbedding(from_hf(config)) would run a different model, so it is refused")


def check_own(name: str, family: Any, decoder: nn.Module, attentions: list[nn.Module], config: Any) -> None:
    """A family without RoPE: its own encoding is what ``family.own_spec(config)`` says (a learned
    table of that shape; ALiBi with posenc's slopes); ValueError naming the family if not."""
    from posenc.interop.families.record import own_spec_of, table_offset

    spec = own_spec_of(family, config, decoder)
    if family.positions == "learned" and spec["scheme"] == "sinusoidal":  # a fixed table: its values checked
        check_sinusoidal_table(name, getattr(decoder, family.table_attr), spec, table_offset(family, config))
    elif family.positions == "learned":
        table = getattr(decoder, family.table_attr)
        want = (spec["max_positions"] + table_offset(family, config), spec["d_model"])
        if tuple(table.weight.shape) != want:
            raise ValueError(f"posenc.interop: {name}'s position table {family.table_attr} is "
                             f"{list(table.weight.shape)}, not [max_positions, d_model] = {list(want)}")
        offset = table_offset(family, config)
        if getattr(table, "offset", offset) != offset:  # BART's embed_positions keeps its own
            raise ValueError(f"posenc.interop: {name}'s position table {family.table_attr} reads row position + "
                             f"{table.offset}, not + {offset}; refused rather than run a different model")
        if callable(family.table_offset) and getattr(table, "padding_idx", None) != offset - 1:
            raise ValueError(f"posenc.interop: {name} counts positions past its padding row (row {offset - 1} of "
                             f"{family.table_attr}, read from its config), but the table's padding_idx is "
                             f"{getattr(table, 'padding_idx', None)}; refused rather than run a different model")
    elif family.positions == "alibi":
        from posenc.reference import alibi_slopes

        theirs = family.slopes(attentions[0]).double()
        ours = torch.from_numpy(alibi_slopes(spec["num_heads"]))
        if theirs.shape != ours.shape or not torch.allclose(theirs, ours, rtol=1e-6, atol=0):
            raise ValueError(f"posenc.interop: {name}'s ALiBi slopes {theirs.tolist()} are not posenc's "
                             f"{ours.tolist()}; refused rather than run a different model")


def check_sinusoidal_table(name: str, table: nn.Embedding, spec: dict[str, Any], offset: int = 0) -> None:
    """A model's fixed sinusoidal table (Marian's, Pegasus's, Whisper's encoder's) equals posenc's
    ``spec`` at every row from ``offset`` on, within the rounding of its angles in its dtype (``4·eps·N``
    for ``N`` rows: Whisper computes its angles in float32, posenc in float64; another base or layout
    differs by order 1); ValueError naming the model and the largest difference."""
    from posenc.encodings.sinusoidal import Sinusoidal

    rows = table.weight.detach()[offset:]  # (N, C)
    if rows.shape[1] != spec["d_model"]:
        raise ValueError(f"posenc.interop: {name}'s position table is {rows.shape[1]} wide, not d_model="
                         f"{spec['d_model']}")
    ours = Sinusoidal(**{k: v for k, v in spec.items() if k != "scheme"}).double()(torch.arange(rows.shape[0]))  # (N, C)
    worst = float((rows.double().cpu() - ours).abs().max())
    # 4 eps of the dtype, times the largest angle (position N - 1 at frequency 1): a table computed in its dtype
    # (Whisper's float32 angles) differs from posenc's float64 one by the rounding of its angles
    if worst > 4 * torch.finfo(rows.dtype).eps * rows.shape[0]:
        raise ValueError(f"posenc.interop: {name}'s position table differs from posenc's {spec} by up to {worst:.3g}; "
                         "refused rather than run a different model")


def check_temperature(name: str, family: Any, attention: nn.Module, specs: list[dict[str, Any]]) -> None:
    """The model's own query temperature (``family.query_temperature.model_scale``: Ministral 3's
    ``get_llama_4_attn_scale``) against the ``τ`` of posenc's reading (the ``query_temperature`` of
    ``hf_layer_specs``), at the positions around its first steps; ValueError naming the family if
    they differ (checked before ``patch`` switches the model's off)."""
    from posenc.encodings.nope_temperature import temperature_scale

    t = next((s["query_temperature"] for s in specs if s.get("query_temperature")), None)
    if t is None:
        raise ValueError(f"posenc.interop: {name}'s attention scales its queries by position "
                         f"({family.query_temperature.key}), which posenc's reading of its config does not give")
    step = int(t["floor_scale"])
    p = torch.tensor(sorted({q for k in range(4) for q in (k * step - 1, k * step, k * step + 1) if q >= 0}))
    with torch.no_grad():
        theirs = family.query_temperature.model_scale(attention, p.unsqueeze(0)).double()  # (L,)
    ours = temperature_scale(p, t["attn_scale"], t["floor_scale"], t["position_offset"])
    if theirs.shape != ours.shape or not torch.allclose(theirs, ours, rtol=1e-6, atol=0):
        raise ValueError(f"posenc.interop: {name}'s query temperature at positions {p.tolist()} is "
                         f"{theirs.tolist()}, posenc's reading of its config {ours.tolist()} ({t}); refused rather "
                         "than run a different model")
