"""``HF_FAMILIES``: the families ``posenc.interop.hf`` reads a config by, a view of the one table
``posenc.interop.families.FAMILIES`` (the rows with a rotary module); the rope keys each rope type takes are
``posenc.interop.hf.HF_ROPE_TYPES``. ``HFFamily`` is ``posenc.interop.families.Family``."""

from __future__ import annotations

from posenc.interop.families import _GEMMA3_THETAS, FAMILIES, HF_TABLES, Family  # noqa: F401

HFFamily = Family
HF_FAMILIES: dict[str, Family] = {t: f for t, f in FAMILIES.items() if f.positions == "rope" and f.rotary}
"""model type -> its :class:`Family` (a composite vision-language type names its text model's
rotary). A model type not listed is read as a Llama-style config, layout ``"half"``."""
