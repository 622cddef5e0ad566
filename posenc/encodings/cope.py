"""CoPE, contextual position encoding (Golovneva et al. 2024, "Contextual Position Encoding:
Learning to Count What's Important", arXiv:2405.18719; official code facebookresearch/RAM,
``projects/cope``; x-transformers' ``CoPE``).

A key's position is the number of gates the query opens between it and the query:

    g_ij = σ(γ · q_i·k_j),   p_ij = min(Σ_{t=j..i} g_it, npos_max − 1)
    s_ij = (q_i·k_j + q_i·e(p_ij)) · scale,   e(p) = (p − ⌊p⌋) e[⌈p⌉] + (1 − p + ⌊p⌋) e[⌊p⌋]

with ``e [npos_max, head_dim]`` learned (zeros at first, as in both codes: CoPE starts as NoPE).
If the gates fire on spaces, ``p`` counts words; on full stops, sentences. ``convention`` says
where the scale enters (``posenc.reference.cope``):

- ``"paper"`` (default): the paper's equations, ``γ = 1`` (gates on the raw ``q·k``), the score
  as above;
- ``"ram_code"``: what facebookresearch/RAM's code computes (its default): ``γ = scale`` (gates
  on ``q·k/√d``), the score as above (``q·e(p)`` added before dividing) — RAM's released models;
- ``"scaled"`` (the paper's appendix, x-transformers, RAM's ``--cope-nodiv``): ``γ = scale`` and
  ``s_ij = q_i·k_j · scale + q_i·e(p_ij)``.

To load one of RAM's models: ``convention="ram_code"`` (``"scaled"`` if it was trained with
``--cope-nodiv``), ``npos_max`` its ``--cope-npos`` (block size + 1 when unset), and this
``pos_emb`` its layer's ``pos_emb[0].T`` (RAM stores ``[1, head_dim, npos]``). RAM's
``--cope-sep-key`` and ``--cope-val-gates`` (gates from another key projection, or from the
values) are not implemented.

``"ram"`` (posenc's earlier name for ``"paper"``) and ``"ram_nodiv"`` are accepted as aliases;
``self.convention`` holds the formula's name. Sizes are bounded at build time (``check_memory``:
the ``[npos_max, head_dim]`` table), before anything is allocated.

Logit cap and sinks (Gemma 2, GPT-OSS; ``posenc.rowwise``): the cap bounds ``q_i·k_j · scale``,
then the position term is added (``q_i·e(p_ij) · scale``, or unscaled under ``"scaled"``); the
gates still read the uncapped ``q·k`` (they are CoPE's own sigmoid, not the softmax's logits).

The gate sum runs from the query backwards along its row, so blocks of rows are independent
(``posenc.rowwise``): the sum is a reverse cumulative sum over the keys the block reads, in
float64 (a sum of up to ``Lk`` gates whose near end must keep its digits), with the future keys'
and other documents' gates set to 0 (positions restart at each document's first token). The
interpolation ``q_i·e(p)`` reads ``q_i·e[0 … npos_max − 1]`` (``[B, H, c, npos_max]``) at ``⌊p⌋``
and ``⌈p⌉``; the gradient reaches the gates through ``p − ⌊p⌋``, as in both codes.
"""

from __future__ import annotations

import torch
from torch import nn

from posenc._validate import check_choice, check_int
from posenc.encodings._base import to_numpy
from posenc.limits import Dim, Rows, check_memory
from posenc.reference.cope import CONVENTIONS, GATES_SCALED, TERM_SCALED, cope as cope_ref, cope_positions, formula
from posenc.registry import register
from posenc.rowwise import RowwiseEncoding, cap_scores, softmax_rows

SENTENCE = "The cat sat on the mat. It purred. Then it slept"
MAX_TEXT = 2000  # characters of a typed sentence (posenc show cope --text)


@register("cope", kind="content")
class CoPE(RowwiseEncoding):
    """Positions counted by gates the query opens on the keys, from the query backwards (CoPE)."""

    takes_softcap = takes_sinks = takes_dropout = True

    def __init__(self, *, head_dim: Dim, npos_max: Rows = 64, convention: str = "paper") -> None:
        super().__init__()
        self.head_dim = check_int("head_dim", head_dim, min=1)
        self.npos_max = check_int("npos_max", npos_max, min=1)
        self.convention = formula(check_choice("convention", convention, CONVENTIONS))
        larger = ("npos_max", self.npos_max) if self.npos_max >= self.head_dim else ("head_dim", self.head_dim)
        check_memory(*larger, self.npos_max * self.head_dim,
                     what=f"its table of npos_max × head_dim = {self.npos_max} × {self.head_dim} float32")
        self.pos_emb = nn.Parameter(torch.zeros(self.npos_max, self.head_dim))  # (npos_max, D)

    def positions(self, q, k, allowed, scale):
        """``(s, p)``: the raw scores ``q·k`` and the positions ``p [B, H, c, n]`` in float64."""
        s = torch.matmul(q, k.transpose(-1, -2))  # (B, H, c, n)
        gates = torch.sigmoid(s * scale if GATES_SCALED[self.convention] else s)
        if allowed is not None:
            gates = gates.masked_fill(~allowed, 0.0)
        p = torch.flip(torch.cumsum(torch.flip(gates.double(), (-1,)), -1), (-1,))
        return s, p.clamp(max=self.npos_max - 1)

    def rows(self, q, k, v, state, q0, allowed, scale, softcap=None, sinks=None, dropout=None):
        s, p = self.positions(q, k, allowed, scale)
        lo = p.floor()
        w = (p - lo).to(q.dtype)
        qe = torch.matmul(q, self.pos_emb.to(q.dtype).t())  # (B, H, c, npos_max)
        term = qe.gather(-1, p.ceil().long()) * w + qe.gather(-1, lo.long()) * (1 - w)
        if softcap is None:  # the formula in the order it always ran (earlier results keep their bits)
            scores = (s + term) * scale if TERM_SCALED[self.convention] else s * scale + term
        else:  # the cap bounds q·k·scale; the position term q·e(p) is added after it, as a bias
            scores = cap_scores(s * scale, softcap) + (term * scale if TERM_SCALED[self.convention] else term)
        return softmax_rows(scores, v, allowed, sinks, dropout)

    def sentence_positions(self, text: str, marks: str) -> torch.Tensor:
        """The positions ``p [len(text)]`` the last character gives every character when the gates
        fire (``σ(±40)``: 1 or 0 to float64 precision) exactly on the characters in ``marks``: CoPE
        counting words (marks " ") or sentences (marks ".") instead of tokens."""
        fires = torch.tensor([ch in marks for ch in text], dtype=torch.float64)  # (L,)
        k = torch.zeros(1, 1, len(text), self.head_dim, dtype=torch.float64)
        k[..., 0] = fires * 80 - 40  # q·k = ±40 with q = e_0
        q = torch.zeros(1, 1, 1, self.head_dim, dtype=torch.float64)
        q[..., 0] = 1.0
        convention, self.convention = self.convention, "paper"  # gates on the raw q·k
        try:
            _, p = self.positions(q, k, None, 1.0)
        finally:
            self.convention = convention
        return p[0, 0, 0]

    def describe(self, *, text: str | None = None) -> list[tuple[str, str]]:
        text = SENTENCE if text is None else text
        if not isinstance(text, str) or not text.strip() or len(text) > MAX_TEXT:
            raise ValueError(f"text must be a non-empty sentence of at most {MAX_TEXT} characters, got {text!r:.80}")
        words = torch.tensor([ch not in " ." for ch in text])
        by_space, by_stop = self.sentence_positions(text, " "), self.sentence_positions(text, ".")
        rows = [("contextual positions", f"of each word of {text!r}, from its last character, when the gates fire "
                                         f"on spaces (words) or on full stops (sentences); clamped at "
                                         f"npos_max - 1 = {self.npos_max - 1}")]
        start = 0
        for i, ch in enumerate(text + " "):
            if i < len(text) and words[i]:
                continue
            if i > start:  # a word text[start:i]; its first character's positions
                rows.append((f"  {text[start:i]!r}", f"token {len(text) - 1 - start:>4}   word {float(by_space[start]):6.2f}"
                                                      f"   sentence {float(by_stop[start]):5.2f}"))
            start = i + 1
        return rows

    def reference(self, q, k, v, hidden=None, *, scale=None, document_ids=None, softcap=None, sinks=None):
        return cope_ref(q, k, v, to_numpy(self.pos_emb), convention=self.convention, scale=scale,
                        document_ids=document_ids, softcap=softcap, sinks=sinks)

    def reference_positions(self, q, k, *, scale=None, document_ids=None):
        return cope_positions(q, k, npos_max=self.npos_max, convention=self.convention, scale=scale,
                              document_ids=document_ids)
