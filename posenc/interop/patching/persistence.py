"""Persistence: a patch recorded in ``model.config.posenc`` (``{"modules": [spec, ...], "layers":
[index, ...]}``: each distinct module's spec, and which one each layer runs), which
``save_pretrained`` writes to ``config.json``, and :func:`from_pretrained`, which loads such a model,
patches it again and loads the posenc parameters from its safetensors files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from torch import nn

RECORD = "posenc"  # the config attribute that records a patch: {"modules": [spec, ...], "layers": [index, ...]}


def record(model: nn.Module, modules: list) -> None:
    """Writes the patch of ``modules`` (one per attention layer) into ``model.config``."""
    unique = list({id(m): m for m in modules}.values())
    setattr(model.config, RECORD, {"modules": [m.spec for m in unique],
                                   "layers": [next(i for i, u in enumerate(unique) if u is m) for m in modules]})


def forget(model: nn.Module) -> None:
    """Removes the record of a patch from ``model.config``."""
    if hasattr(model.config, RECORD):
        delattr(model.config, RECORD)


def read_record(path: Path) -> dict[str, Any]:
    """The patch ``path/config.json`` records; ValueError when it records none."""
    config = json.loads((path / "config.json").read_text())
    found = config.get(RECORD)
    if (not isinstance(found, Mapping) or not isinstance(found.get("modules"), list)
            or not isinstance(found.get("layers"), list)):
        raise ValueError(f"{path / 'config.json'} records no posenc patch (no '{RECORD}': "
                         "{'modules': [spec, ...], 'layers': [index, ...]})")
    return found


def load_parameters(model: nn.Module, path: Path) -> None:
    """The posenc parameters (``*.posenc_modules.*``) of the patched ``model`` loaded from the
    safetensors files in ``path``; ValueError naming those it lacks."""
    from safetensors.torch import load_file

    ours = {}
    for file in sorted(path.glob("*.safetensors")):
        ours.update({k: v for k, v in load_file(str(file)).items() if ".posenc_modules." in k})
    missing = [k for k, _ in model.named_parameters() if ".posenc_modules." in k and k not in ours]
    if missing:
        raise ValueError(f"{path} lacks the posenc parameters {missing[:4]} of the patch its config records")
    model.load_state_dict(ours, strict=False)
