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
        last = pos[-1:]
        try:
            with torch.no_grad():
                if pe.kind == "additive":
                    pe(last)
                elif pe.kind in ("rotary", "none"):
                    pe(torch.zeros(1, 1, 1, cfg.head_dim, device=device), last)
                elif pe.kind == "bias":
                    pe(last, pos)
                elif pe.kind == "relative":
                    q = torch.zeros(1, cfg.n_head, 1, cfg.head_dim, device=device)
                    pe(q, torch.zeros(1, cfg.n_head, length, cfg.head_dim, device=device), last, pos)
                elif pe.kind == "content":  # PaTH refuses lengths past its bound
                    pe.check_length(length, length)
        except ValueError as e:
            return str(e).splitlines()[0]
    return None
