"""CoPE, contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important", arXiv:2405.18719).

A key's position is counted from the query backwards, by gates the query opens on the keys:

    g_ij = σ(γ · q_i·k_j),   p_ij = min(Σ_{t=j..i} g_it, npos_max − 1)
    e(p) = (p − ⌊p⌋) e[⌈p⌉] + (1 − (p − ⌊p⌋)) e[⌊p⌋]        (learned e [npos_max, D], interpolated)

and the score gains ``q_i·e(p_ij)``. The conventions differ in where the scale (``1/√d``) enters:
on the gates (``γ``), and whether ``q_i·e(p_ij)`` is added before the scores are divided or after:

- ``"paper"``: gates ``σ(q·k)``, score ``(q·k + q·e(p)) · scale`` — the paper's equations (§3), with
  the usual ``1/√d`` on the whole score;
- ``"ram_code"``: gates ``σ(q·k · scale)``, score ``(q·k + q·e(p)) · scale`` — what
  facebookresearch/RAM's ``projects/cope`` computes by default (``ContextPosSelfAttn``: the gates
  on the divided logits, ``q·e(p)`` added before dividing), so RAM's released models reproduce;
- ``"scaled"``: gates ``σ(q·k · scale)``, score ``q·k · scale + q·e(p)`` — the paper's appendix
  code, x-transformers' ``CoPE``, and RAM run with ``--cope-nodiv``.

Two aliases are accepted (``ALIASES``): ``"ram"`` is ``"paper"`` (posenc's name for it before
RAM's code was told apart from the paper; a spec that says ``"ram"`` builds the model it always
did), and ``"ram_nodiv"`` is ``"scaled"``. Then ``o_i = Σ_{j≤i} softmax_j(s_ij) v_j``.
"""

from __future__ import annotations

import numpy as np

from posenc.reference.attention import causal_mask, logit_cap, masked_attention

FORMULAS = ("paper", "ram_code", "scaled")
ALIASES = {"ram": "paper", "ram_nodiv": "scaled"}
CONVENTIONS = FORMULAS + tuple(ALIASES)  # every accepted name: the formulas, then their aliases
GATES_SCALED = {"paper": False, "ram_code": True, "scaled": True}  # σ(q·k · scale), else σ(q·k)
TERM_SCALED = {"paper": True, "ram_code": True, "scaled": False}  # q·e(p) added before dividing by √d


def formula(convention: str) -> str:
    """The formula a convention's name stands for (``"ram"`` -> ``"paper"``); ValueError if unknown."""
    if not isinstance(convention, str) or convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {', '.join(map(repr, CONVENTIONS))} "
                         f"(aliases: {', '.join(f'{a!r} = {f!r}' for a, f in ALIASES.items())}), got {convention!r}")
    return ALIASES.get(convention, convention)


def cope_positions(q, k, *, npos_max: int, convention: str = "paper", scale: float | None = None,
                   document_ids=None) -> np.ndarray:
    """``p [B, H, Lq, Lk]``: each key's contextual position seen from each query (0 where masked)."""
    convention = formula(convention)
    q, k = np.asarray(q, dtype=np.float64), np.asarray(k, dtype=np.float64)
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) * (scale if GATES_SCALED[convention] else 1.0)
    gates = np.where(causal_mask(lq, lk, document_ids), 1.0 / (1.0 + np.exp(-logits)), 0.0)
    return np.minimum(np.cumsum(gates[..., ::-1], axis=-1)[..., ::-1], npos_max - 1)


def cope(q, k, v, pos_emb, *, convention: str = "paper", scale: float | None = None, document_ids=None,
         softcap: float | None = None, sinks=None) -> np.ndarray:
    """Causal CoPE attention; ``pos_emb [npos_max, D]``. ``softcap``: ``c · tanh(q·k·scale / c)``, then
    the position term added (the gates read the uncapped ``q·k``); ``sinks [H]``: one more logit
    per head in each row's softmax, of value 0."""
    convention = formula(convention)
    q, k, e = (np.asarray(t, dtype=np.float64) for t in (q, k, pos_emb))
    lq, lk = q.shape[2], k.shape[2]
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    p = cope_positions(q, k, npos_max=e.shape[0], convention=convention, scale=scale, document_ids=document_ids)
    lo, hi = np.floor(p).astype(np.int64), np.ceil(p).astype(np.int64)
    w = p - lo
    qe = np.einsum("bhqd,pd->bhqp", q, e)  # (B, H, Lq, npos_max): q_i·e[p] at every integer p
    term = np.take_along_axis(qe, hi, -1) * w + np.take_along_axis(qe, lo, -1) * (1 - w)
    s = np.einsum("bhqd,bhkd->bhqk", q, k)
    scores = logit_cap(s * scale, softcap) + (term * scale if TERM_SCALED[convention] else term)
    return masked_attention(scores, v, causal_mask(lq, lk, document_ids), sinks=sinks)
