"""Evaluation: per-token NLL by length on the fixed held-out stream, and exact-match accuracy of
the tasks by size. A length a scheme cannot run at (a learned table past its rows) is reported
as such: ``cannot_run`` asks the pe modules alone, so a real error in the model still raises.
"""

from __future__ import annotations

import torch

from posenc.extrapolate import tasks as T
from posenc.extrapolate.data import LMData, windows
from posenc.extrapolate.distributed import Dist, all_sum
from posenc.extrapolate.model import TinyGPT, token_nll
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
        except ValueError as e:
            return str(e).splitlines()[0]
    return None


@torch.no_grad()
def lm_block_nll(model: TinyGPT, data: LMData, length: int, mode: str, *, eval_tokens: int,
                 dist: Dist) -> torch.Tensor:
    """Mean NLL (nats/token) of each block of ``data.block`` held-out targets: ``[N / block]``.

    Every length and mode scores the same targets ``1..N``; ranks split the windows.
    """
    model.eval()
    n = data.n_heldout
    sums = torch.zeros(n // data.block, dtype=torch.float64)
    ws = windows(n, length, mode)[dist.rank::dist.world]
    per_batch = max(1, eval_tokens // length)
    span = torch.arange(length + 1)
    for i in range(0, len(ws), per_batch):
        group = ws[i:i + per_batch]
        idx = torch.tensor([w.start for w in group]).unsqueeze(1) + span  # (b, T+1) stream indices
        x = data.heldout[idx].long().to(dist.device)
        nll = token_nll(model(x[:, :-1]), x[:, 1:]).double().cpu()  # (b, T)
        scored = torch.arange(length) >= torch.tensor([w.score_from for w in group]).unsqueeze(1)  # (b, T)
        block = (idx[:, 1:] - 1) // data.block  # (b, T): block of each target
        sums.index_add_(0, block[scored], nll[scored])
    return all_sum(sums, dist) / data.block


@torch.no_grad()
def task_scores(model: TinyGPT, task: str, size: int, *, count: int, dist: Dist, batch: int = 64) -> dict[str, float]:
    """Exact matches (``correct`` of ``count``), the fraction of answer tokens right
    (``token_acc``) and which examples were right (``hits``: "0"/"1" per example, so two schemes
    can be compared example by example) on the ``count`` fixed examples of ``task`` at ``size``."""
    model.eval()
    b = T.eval_batch(task, size, count=count, seed=0)
    tokens, mask = b.tokens[dist.rank::dist.world], b.mask[dist.rank::dist.world]
    sums = torch.zeros(3, dtype=torch.float64)  # exact matches, right answer tokens, answer tokens
    exact = torch.zeros(tokens.shape[0], dtype=torch.bool)  # (count / world,): this rank's examples
    for i in range(0, tokens.shape[0], batch):
        x = tokens[i:i + batch].to(dist.device)
        m = mask[i:i + batch].to(dist.device)
        hit = model(x[:, :-1]).argmax(-1) == x[:, 1:]  # (b, T)
        right = (hit | ~m).all(dim=1)  # (b,)
        exact[i:i + batch] = right.cpu()
        sums += torch.stack([right.sum(), (hit & m).sum(), m.sum()]).double().cpu()
    sums = all_sum(sums, dist)
    every = torch.zeros(count, dtype=torch.float64)
    every[dist.rank::dist.world] = exact.double()
    every = all_sum(every, dist)  # (count,): example i right, in the fixed order of ``eval_batch``
    return {"correct": int(sums[0]), "count": count, "token_acc": round(float(sums[1] / sums[2]), 5),
            "hits": "".join("1" if v > 0.5 else "0" for v in every.tolist())}
