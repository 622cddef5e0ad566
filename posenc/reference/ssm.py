"""A diagonal linear state-space layer (S4D, Gu et al. 2022, arXiv:2206.11893; the diagonal,
non-selective form of Mamba, Gu & Dao 2023, arXiv:2312.00752): the specification, as a plain
loop over time.

    u_t = W_in x_t + b_in                                  (N channels)
    a_n = exp(−Δ_n),  Δ_n = exp(log_dt_n) > 0              (per-channel decay, 0 ≤ a_n ≤ 1)
    h_t = a ⊙ h_{t−1} + (1 − a) ⊙ u_t,   h_{−1} = state (0 by default)
    y_t = W_out h_t + b_out + D ⊙ x_t

The update is the zero-order-hold discretisation of dh/dt = −h + u with step Δ_n (S4D with
A = −1): each channel is an exponential moving average of its input with a time scale of
1/Δ_n steps, so |h_t| never exceeds the largest |u_s| seen. No position enters anywhere; the
order of the inputs does, through the powers a^(t−s) that weigh u_s in h_t.
"""

from __future__ import annotations

import numpy as np


LOG_DT_MAX = 709.0
"""``exp(709) ≈ 8.2e307`` is finite in float64 (``exp(710)`` overflows, with a warning); ``a =
exp(−Δ)`` is exactly 0 from Δ ≈ 745 on, so ``log_dt`` clamped here gives every decay unchanged."""


def ssm_decay(log_dt) -> np.ndarray:
    """``a = exp(−exp(log_dt))``, ``[N]`` float64, each in [0, 1] (exactly 0 for a large ``log_dt``)."""
    log_dt = np.asarray(log_dt, dtype=np.float64)
    if log_dt.ndim != 1:
        raise ValueError(f"log_dt must have shape [N], got shape {list(log_dt.shape)}")
    return np.exp(-np.exp(np.minimum(log_dt, LOG_DT_MAX)))


def ssm_scan(v, decay, state=None) -> np.ndarray:
    """Every state of ``h_t = decay ⊙ h_{t−1} + v_t``: ``v [..., L, N]`` -> ``[..., L, N]`` float64.

    ``state [..., N]`` is ``h_{−1}`` (zeros by default), so a sequence cut in two and scanned with
    the first half's last state carried over equals the whole.
    """
    v = np.asarray(v, dtype=np.float64)
    decay = np.asarray(decay, dtype=np.float64)
    if v.ndim < 2:
        raise ValueError(f"v must have shape [..., L, N], got shape {list(v.shape)}")
    if decay.shape != v.shape[-1:]:
        raise ValueError(f"decay must have shape [{v.shape[-1]}], got shape {list(decay.shape)}")
    h = np.zeros(v.shape[:-2] + v.shape[-1:]) if state is None else np.array(state, dtype=np.float64)
    if h.shape != v.shape[:-2] + v.shape[-1:]:
        raise ValueError(f"state must have shape {list(v.shape[:-2] + v.shape[-1:])}, got shape {list(h.shape)}")
    out = np.empty_like(v)
    for t in range(v.shape[-2]):
        h = decay * h + v[..., t, :]
        out[..., t, :] = h
    return out


def ssm(x, w_in, b_in, log_dt, w_out, b_out, skip, state=None) -> np.ndarray:
    """The layer's output ``y [..., L, C]`` for ``x [..., L, C]`` (float64).

    Weights as ``torch.nn.Linear`` stores them: ``w_in [N, C]``, ``b_in [N]``, ``w_out [C, N]``,
    ``b_out [C]``; ``log_dt [N]``, ``skip [C]`` (D); ``state [..., N]`` is ``h_{−1}``.
    """
    x = np.asarray(x, dtype=np.float64)
    a = ssm_decay(log_dt)
    u = x @ np.asarray(w_in, dtype=np.float64).T + np.asarray(b_in, dtype=np.float64)  # (..., L, N)
    h = ssm_scan((1.0 - a) * u, a, state)  # (..., L, N)
    return (h @ np.asarray(w_out, dtype=np.float64).T + np.asarray(b_out, dtype=np.float64)
            + np.asarray(skip, dtype=np.float64) * x)
