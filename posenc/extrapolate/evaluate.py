"""Whether a model can run at a length: a length a scheme cannot run at (a learned table past its
rows) is reported as such, never a crash. ``cannot_run`` asks the pe modules alone, so a real error
in the model still raises. What each part measures is in that part (``posenc.extrapolate.parts``).
"""

from __future__ import annotations

import torch

from posenc.extrapolate.model import TinyGPT
from posenc.positions import text_positions


def cannot_run(model: TinyGPT, length: int) -> str | None:
    """Why the model's positional encoding cannot run at ``length`` positions (None if it can)."""
    cfg = model.cfg
    for pe in model.pes:
        device = getattr(pe, "device", torch.device("cpu"))
        pos = text_positions(torch.arange(length, device=device), getattr(pe, "axes", 1))  # text: every axis alike
        try:
            with torch.no_grad():
                pe.check_runs_at(pos, head_dim=cfg.head_dim, num_heads=cfg.n_head)  # the kind's own call
        except ValueError as e:
            return str(e).splitlines()[0]
    return None
