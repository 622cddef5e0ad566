"""Stick-breaking attention (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention: An
Efficient Implementation and In-depth Study", arXiv:2410.17980; code shawntan/stickbreaking-attention).

No softmax and no positional encoding: walking from the query back to the first key, each key
takes the share ``σ(z_ij)`` of the stick the nearer keys left,

    z_ij = q_i·k_j · scale,   A_ij = σ(z_ij) · Π_{j<t<i} (1 − σ(z_it)),   o_i = Σ_j A_ij v_j + (1 − Σ_j A_ij) v_i

so nearer keys come first: order, and so position, is in the weights themselves. Computed in log
space: ``log A_ij = log σ(z_ij) + Σ_{j<t<i} log σ(−z_it)``, the sum a reverse cumulative sum along
the query's row (``logsigmoid`` never overflows; the product of many survivals never underflows
to a wrong 0 before the exp). The leftover mass ``1 − Σ_j A_ij`` goes to the query's own value,
as in the repository's ``sb_ref.py`` and its tests (``o + rem · v``). ``attend_current``: keys
``j < i`` (False, the repository's default) or ``j ≤ i`` (True). Packed documents: keys of
another document are absent (no share, no survival factor); a document's first token, with no
key, returns its own value. A logit cap (Gemma 2) bounds ``z = c·tanh(q·k·scale / c)``; sinks are
refused (no softmax to join).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from posenc._validate import check_bool
from posenc.reference.stick_breaking import stick_breaking as sb_ref
from posenc.registry import register
from posenc.rowwise import RowwiseEncoding, cap_scores


@register("stick_breaking", kind="content")
class StickBreaking(RowwiseEncoding):
    """Stick-breaking weights instead of softmax: nearer keys take their share first (no PE)."""

    takes_softcap = takes_dropout = True  # dropout: on the stick shares, not on the leftover
    no_sinks_reason = ("stick-breaking has no softmax for a sink to join: its weights are shares of a stick and "
                       "the leftover goes to the query's own value")
    takes_window = False
    no_window_reason = ("stick-breaking has no softmax for a window to restrict: its weights are shares of a stick "
                        "that already fall with the mass the nearer keys take, and the share a window cut would go "
                        "to the query's own value, a different formula rather than a mask")

    def __init__(self, *, attend_current: bool = False) -> None:
        super().__init__()
        self.attend_current = check_bool("attend_current", attend_current)

    def weights(self, q, k, q0, allowed, scale, softcap=None):
        """``A [B, H, c, n]`` of a block of rows (queries at key indices ``q0 …``)."""
        c, n = q.shape[2], k.shape[2]
        if not self.attend_current:  # the query's own key is not among its keys
            own = torch.arange(n, device=q.device) == torch.arange(q0, q0 + c, device=q.device).unsqueeze(-1)
            allowed = ~own if allowed is None else allowed & ~own
        z = cap_scores(torch.matmul(q, k.transpose(-1, -2)) * scale, softcap)  # (B, H, c, n)
        log_keep = F.logsigmoid(-z).masked_fill(~allowed, 0.0)  # log(1 − σ(z)) of the keys there
        after = torch.flip(torch.cumsum(torch.flip(log_keep, (-1,)), -1), (-1,)) - log_keep  # Σ_{t>j}
        return torch.exp(F.logsigmoid(z) + after).masked_fill(~allowed, 0.0)

    def rows(self, q, k, v, state, q0, allowed, scale, softcap=None, dropout=None):
        a = self.weights(q, k, q0, allowed, scale, softcap)
        own = v[:, :, q0:q0 + q.shape[2]]  # (B, H, c, Dv): the queries' own values
        # attention dropout (posenc.dropout) on the shares; the leftover from the shares undropped
        return torch.matmul(a if dropout is None else dropout(a), v) + (1.0 - a.sum(-1, keepdim=True)) * own

    def reference(self, q, k, v, hidden=None, *, scale=None, document_ids=None, softcap=None):
        return sb_ref(q, k, v, scale=scale, attend_current=self.attend_current, document_ids=document_ids,
                      softcap=softcap)
