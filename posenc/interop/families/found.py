"""A family's record found from its modeling module, for a model type without a row of ``FAMILIES``:
what its ``apply_rotary_pos_emb`` rotates, and multi-head latent attention.

**The pairs its apply rotates, and which way.** Most families take transformers' ``rotate_half``
table ``cat(c, c)`` and rotate pairs (i, i + d/2); some take the same table and rotate pairs (2i, 2i+1)
(GLM-style, ERNIE 4.5: ``cos[..., :d/2].repeat_interleave(2)``); NanoChat's ``rotate_half`` returns
``(x2, -x1)``, so its apply turns each pair clockwise, by minus the table's angle. The table alone
cannot tell them apart, so :func:`apply_rotation` calls the modeling module's
``apply_rotary_pos_emb`` on a probe and compares it with the four rotations (two layouts, two
directions); the one it equals is the record's ``layout`` and ``direction`` (none of them: no
record, and ``patch``'s own checks refuse the model by name).

**Multi-head latent attention** (MLA: DeepSeek-V2/V3 and the families built like it: AXK, GLM-4
MoE Lite, Youtu, LongCat-Flash, MiniCPM 3, ...): a config with
``qk_nope_head_dim`` and ``qk_rope_head_dim`` (each q/k head is ``[nope part, rope part]``, the
rotary ``qk_rope_head_dim`` wide) and a modeling module whose attention rotates the rope part.

The pairs it rotates are read from the attention's own ``forward``: one that calls
``apply_rotary_pos_emb_interleave`` only if ``config.rope_interleave`` is set reads that key
(DeepSeek-V3, AXK-1), one that calls it unconditionally rotates pairs (2i, 2i+1) (AXK-2,
LongCat-Flash), one that calls only ``apply_rotary_pos_emb`` rotates (i, i + d/2) (MiniCPM 3). A
model type with a row of ``FAMILIES`` keeps its row. A config class without a modeling module of its
own (Sarvam-MLA's) is read from the module of the causal LM transformers builds for its model type
(``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``: DeepSeek-V3's)."""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any

import torch

from posenc.interop.configs import text_config
from posenc.interop.families.record import Family


def _attention_source(config_module: str) -> str | None:
    """The source of the MLA attention's ``forward`` in the config's own modeling module, or None."""
    modeling = _modeling(config_module)
    if modeling is None:
        return None
    for name, cls in vars(modeling).items():
        if not (isinstance(cls, type) and name.endswith("Attention") and cls.__module__ == modeling.__name__):
            continue
        try:
            source = inspect.getsource(cls.forward)
        except (OSError, TypeError):
            continue
        if "qk_rope_head_dim" in source or "q_rot" in source:
            return source
    return None


def _rotations(q: torch.Tensor, angles: torch.Tensor) -> dict[tuple[str, str], torch.Tensor]:
    """``q [1, 1, L, D]`` rotated by ``angles [L, D/2]`` on pairs (i, i + d/2) and on (2i, 2i+1),
    each counterclockwise (by the angles) and clockwise (by their negatives)."""
    found = {}
    for direction, sign in (("counterclockwise", 1.0), ("clockwise", -1.0)):
        cos, sin = angles.cos(), sign * angles.sin()
        a, b = q[..., : q.shape[-1] // 2], q[..., q.shape[-1] // 2:]
        found["half", direction] = torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)
        x, y = q[..., 0::2], q[..., 1::2]
        found["interleaved", direction] = torch.stack([x * cos - y * sin, y * cos + x * sin], dim=-1).flatten(-2)
    return found


def apply_rotation(apply: Any, width: int = 8) -> tuple[str, str] | None:
    """``(layout, direction)``: the pairs ``apply(q, k, cos, sin)`` rotates when given
    transformers' ``rotate_half`` table (``"half"`` or ``"interleaved"``) and the way it turns them
    by the table's angles (``"counterclockwise"``, or ``"clockwise"``: NanoChat's ``rotate_half``
    returns ``(x2, -x1)``); ``("neither", "")`` when it rotates otherwise; None when it takes no such call."""
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 5, width, generator=gen, dtype=torch.float64)  # (B, H, L, D)
    angles = torch.rand(5, width // 2, generator=gen, dtype=torch.float64) * 3  # (L, D/2)
    table = torch.cat([angles, angles], dim=-1).unsqueeze(0)  # (1, L, D): cat(c, c)
    try:
        got = apply(q, q.clone(), table.cos(), table.sin())[0]
    except (RuntimeError, TypeError, ValueError, IndexError):
        return None
    if not isinstance(got, torch.Tensor) or got.shape != q.shape:
        return None
    found = [name for name, want in _rotations(q, angles).items() if torch.allclose(got.double(), want, atol=1e-9)]
    return found[0] if len(found) == 1 else ("neither", "")


def apply_layout(apply: Any, width: int = 8) -> str | None:
    """The pairs of :func:`apply_rotation` (``"half"``, ``"interleaved"`` or ``"neither"``), or None."""
    found = apply_rotation(apply, width)
    return None if found is None else found[0]


def _modeling(config_module: str) -> Any:
    """The modeling module beside a config's module (``configuration_x`` -> ``modeling_x``); for a
    config module ``"<configuration module>|<model type>"`` without one (Sarvam-MLA's config, whose
    model is DeepSeek-V3's), the module of the causal LM transformers builds for the model type."""
    config_module, _, model_type = config_module.partition("|")
    if not config_module.startswith("transformers.models.") or ".configuration_" not in config_module:
        return None
    try:
        return importlib.import_module(config_module.replace(".configuration_", ".modeling_"))
    except ImportError:
        pass
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    name = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.get(model_type)
    try:
        return importlib.import_module(getattr(transformers, name).__module__) if isinstance(name, str) else None
    except (ImportError, AttributeError):
        return None


@functools.lru_cache(maxsize=None)
def _record(config_module: str, mla: bool) -> Family | None:
    if not mla:
        apply = getattr(_modeling(config_module), "apply_rotary_pos_emb", None)
        found = apply_rotation(apply) if callable(apply) else None
        if found is None or found[0] == "neither" or found == ("half", "counterclockwise"):
            return None  # no record: the common pattern, or a rotation structure.find refuses by name
        return Family(rotary=None, layout=found[0], direction=found[1])
    source = _attention_source(config_module)
    if source is None:
        return None
    interleaved = "apply_rotary_pos_emb_interleave" in source
    key = "rope_interleave" if interleaved and "rope_interleave" in source else None
    return Family(layout="interleaved" if interleaved and key is None else "half", interleave_key=key,
                  head_dim=("qk_nope_head_dim", "qk_rope_head_dim"), rope_part="qk_rope_head_dim")


def found_family(config: Any) -> Family | None:
    """The record of a transformers config object without a row, found from its modeling module:
    MLA (a config with ``qk_nope_head_dim`` and ``qk_rope_head_dim`` and an MLA attention), or an
    ``apply_rotary_pos_emb`` that rotates pairs (2i, 2i+1) from the ``rotate_half`` table; None
    for a dict (no modeling module) and for the common pattern."""
    if isinstance(config, dict):
        return None
    text = text_config(config)
    mla = getattr(text, "qk_nope_head_dim", None) is not None and getattr(text, "qk_rope_head_dim", None) is not None
    return _record(f"{type(text).__module__}|{getattr(text, 'model_type', '')}", mla)
