"""posenc: the positional encodings of transformers, exact, fast, safe and visible.

    import torch, posenc
    rope = posenc.build({"scheme": "rope", "head_dim": 64})
    q = rope(q, torch.arange(L))                              # (B, H, L, D)
    out = posenc.attention(q, k, v, posenc.build({"scheme": "alibi", "num_heads": 8}), causal=True)

``posenc.reference`` (NumPy float64, the specification) imports without torch; everything else
imports torch on first use. Subpackages and modules are attributes too, imported on first use:
after ``import posenc``, ``posenc.interop.resize_grid(...)`` or ``posenc.scaling.SCALINGS`` work
without importing ``posenc.interop`` or ``posenc.scaling`` first.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# name -> module that defines it; resolved on first access so that `import posenc.reference`
# never needs torch.
_LAZY = {
    "build": "posenc.registry",
    "schemes": "posenc.registry",
    "register": "posenc.registry",
    "KINDS": "posenc.registry",
    "attention": "posenc.attn",
    "packing": "posenc.documents",
    "apply_rotary": "posenc.rotary",
    "from_hf": "posenc.interop.hf",
    "shard_positions": "posenc.parallel",
    "context_parallel_attention": "posenc.parallel",
    "grid_positions": "posenc.positions",
    "segment_positions": "posenc.positions",
    "randomized_positions": "posenc.positions",
    "digit_positions": "posenc.digits",
    "coupled_positions": "posenc.digits",
    "mrope_positions": "posenc.encodings.mrope",
}

__all__ = ["__version__", *_LAZY]


def _submodules() -> list[str]:
    """posenc's public subpackages and modules (``interop``, ``reference``, ``scaling``, ...)."""
    import pkgutil

    return sorted(i.name for i in pkgutil.iter_modules(__path__) if not i.name.startswith("_"))


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif not name.startswith("_") and name in _submodules():
        value = importlib.import_module(f"posenc.{name}")  # as `import posenc.NAME` would
    else:
        raise AttributeError(f"module 'posenc' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__) | set(_submodules()))
