"""The ``ssm`` layer: its float64 reference (a plain loop over time) against a closed form, and the
fast chunked scan against the reference at several dtypes, odd lengths, a carried state, with
gradients checked numerically."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close, tolerance

from posenc import reference as ref
from posenc.ssm import CHUNK, DiagonalSSM, diagonal_scan

ROOT = Path(__file__).resolve().parents[1]


def _layer(d_model=12, d_state=10, *, seed=0, dtype=torch.float64, **kw) -> DiagonalSSM:
    torch.manual_seed(seed)
    m = DiagonalSSM(d_model, d_state, **kw)
    with torch.no_grad():  # D and the biases away from their initial constants
        m.skip.normal_()
        m.in_proj.bias.normal_()
    return m.to(dtype)


def _x(m: DiagonalSSM, length: int, *, batch=2, seed=1, dtype=None) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, length, m.d_model, generator=g, dtype=torch.float64).to(dtype or m.skip.dtype)


# -- the reference -----------------------------------------------------------------------------

@pytest.mark.parametrize("length", [1, 9, 40])
def test_reference_scan_equals_the_unrolled_sum(length):
    """h_t = Σ_{s≤t} a^(t−s) v_s + a^(t+1) h_{−1}, computed with explicit powers."""
    rng = np.random.default_rng(length)
    a = rng.uniform(0.05, 0.999, size=5)
    v = rng.normal(size=(3, length, 5))
    h0 = rng.normal(size=(3, 5))
    t = np.arange(length)
    lag = t[:, None] - t[None, :]  # (L, L)
    powers = np.where(lag[..., None] >= 0, a ** np.maximum(lag, 0)[..., None], 0.0)  # (L, L, N)
    expected = np.einsum("tsn,bsn->btn", powers, v) + a ** (t[:, None] + 1) * h0[:, None, :]
    np.testing.assert_allclose(ref.ssm_scan(v, a, h0), expected, rtol=1e-12, atol=1e-12)


def test_reference_state_is_a_moving_average_and_order_matters():
    """With v = (1 − a)·u the state is an average of past inputs (|h| ≤ max|u|), and the same
    inputs in another order give another last state."""
    rng = np.random.default_rng(0)
    a = ref.ssm_decay(np.linspace(0.0, -6.9, 6))
    u = rng.normal(size=(50, 6))
    h = ref.ssm_scan((1 - a) * u, a)
    assert np.all(np.abs(h) <= np.abs(u).max(axis=0) + 1e-12)
    assert not np.allclose(ref.ssm_scan((1 - a) * u[::-1], a)[-1], h[-1])


def test_reference_needs_no_torch():
    code = textwrap.dedent("""
        import json, sys
        sys.modules["torch"] = None
        import numpy as np
        from posenc.reference import ssm
        y = ssm(np.ones((2, 5, 3)), np.ones((4, 3)), np.zeros(4), np.zeros(4), np.ones((3, 4)), np.zeros(3),
                np.ones(3))
        print(json.dumps({"shape": list(y.shape), "torch": [m for m in sys.modules if m.startswith("torch")
                                                            and sys.modules[m] is not None]}))
    """)
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.splitlines()[-1]) == {"shape": [2, 5, 3], "torch": []}


# -- the fast form against the reference -------------------------------------------------------

def _magnitude(m: DiagonalSSM, x: torch.Tensor) -> float:
    """The layer run on absolute values: a bound on every intermediate sum, the scale rounding acts on."""
    w = {k: np.abs(v) if k != "log_dt" else v for k, v in m.reference_weights().items()}
    return float(ref.ssm(np.abs(x.double().numpy()), **w).max())


@pytest.mark.parametrize("length", [5, CHUNK, 217])  # one short chunk, exactly one, several with a ragged end
def test_float64_equals_the_reference(length):
    m = _layer(chunk=CHUNK)
    x = _x(m, length)
    with torch.no_grad():
        y = m(x)
    np.testing.assert_allclose(y.numpy(), ref.ssm(x.numpy(), **m.reference_weights()), rtol=0, atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES)
def test_working_dtypes_match_the_reference(dtype):
    m = _layer(d_model=16, d_state=16, dtype=dtype)
    x = _x(m, 217, dtype=dtype)
    with torch.no_grad():
        y = m(x)
    assert y.dtype == dtype
    expected = ref.ssm(x.double().numpy(), **m.reference_weights())  # the rounded weights and inputs
    assert_close(y, expected, magnitude=_magnitude(m, x), what=f"ssm {dtype}")


def test_a_carried_state_continues_the_sequence():
    """Cut at step 100 (mid-chunk) with the first part's last state carried: the whole sequence."""
    m = _layer()
    x = _x(m, 217)
    with torch.no_grad():
        whole, last = m(x, return_state=True)
        first, state = m(x[:, :100], return_state=True)
        second, last2 = m(x[:, 100:], state, return_state=True)
    np.testing.assert_allclose(torch.cat([first, second], 1).numpy(), whole.numpy(), rtol=0, atol=1e-12)
    np.testing.assert_allclose(last2.numpy(), last.numpy(), rtol=0, atol=1e-12)
    expected = ref.ssm(x[:, 100:].numpy(), **m.reference_weights(), state=state.numpy())
    np.testing.assert_allclose(second.numpy(), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("chunk", [1, 3, 7, 500])
def test_every_chunk_length_gives_the_loop(chunk):
    torch.manual_seed(chunk)
    v = torch.randn(2, 23, 4, dtype=torch.float64)
    dt = torch.tensor([1e-3, 0.1, 1.0, 4.0], dtype=torch.float64)
    expected = ref.ssm_scan(v.numpy(), np.exp(-dt.numpy()))
    np.testing.assert_allclose(diagonal_scan(v, dt, chunk=chunk).numpy(), expected, rtol=0, atol=1e-12)


def test_causal_future_steps_change_nothing_before_them():
    m = _layer()
    x = _x(m, 150)
    x2 = x.clone()
    x2[:, 90:] += 1.0
    with torch.no_grad():
        y, y2 = m(x), m(x2)
    assert torch.equal(y[:, :90], y2[:, :90]) and not torch.allclose(y[:, 90:], y2[:, 90:])


# -- gradients ---------------------------------------------------------------------------------

def test_gradients_match_finite_differences_across_chunks():
    torch.manual_seed(0)
    v = torch.randn(1, 7, 2, dtype=torch.float64, requires_grad=True)
    dt = torch.tensor([0.05, 2.0], dtype=torch.float64, requires_grad=True)
    h0 = torch.randn(1, 2, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda v, dt, h0: diagonal_scan(v, dt, h0, chunk=3), (v, dt, h0))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gradient_flows_to_every_parameter(dtype):
    m = _layer(d_model=8, d_state=8, dtype=dtype)
    x = _x(m, 217, dtype=dtype).requires_grad_()
    m(x).square().mean().backward()
    for name, p in [*m.named_parameters(), ("x", x)]:
        assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().max() > 0, name
    assert m.log_dt.grad.abs().min() > 0  # every decay learns
    # the float32 gradient is the float64 one (the chunked form differentiates like the loop)
    if dtype == torch.float32:
        m64 = _layer(d_model=8, d_state=8)
        x64 = x.detach().double().requires_grad_()
        m64.load_state_dict({k: v.double() for k, v in m.state_dict().items()})
        m64(x64).square().mean().backward()
        scale = float(x64.grad.abs().max())
        assert float((x.grad.double() - x64.grad).abs().max()) <= 64 * tolerance(dtype, scale)


# -- bad input ---------------------------------------------------------------------------------

@pytest.mark.parametrize("kwargs, error, message", [
    ({"d_model": 0}, ValueError, "d_model must be >= 1, got 0"),
    ({"d_model": 4, "d_state": 2.5}, TypeError, "d_state must be an integer"),
    ({"d_model": 4, "dt_min": 0.0}, ValueError, "dt_min must be > 0.0"),
    ({"d_model": 4, "dt_min": 0.5, "dt_max": 0.1}, ValueError, "dt_max must be >= 0.5"),
    ({"d_model": 4, "chunk": 0}, ValueError, "chunk must be >= 1"),
])
def test_bad_settings_raise_naming_the_parameter(kwargs, error, message):
    with pytest.raises(error, match=message):
        DiagonalSSM(**kwargs)


def test_bad_input_raises_naming_it():
    m = DiagonalSSM(4, 3)
    with pytest.raises(ValueError, match=r"x must have shape \[B, L, 4\]"):
        m(torch.zeros(2, 5, 3))
    with pytest.raises(TypeError, match="x must be a floating-point tensor"):
        m(torch.zeros(2, 5, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"state must have shape \[2, 3\]"):
        m(torch.zeros(2, 5, 4), torch.zeros(3))


# -- a decay of exactly 0, empty input ---------------------------------------------------------

@pytest.mark.parametrize("dtype, log_dt", [(torch.float32, 89.0), (torch.float64, 89.0), (torch.float64, 800.0)],
                         ids=["float32-89", "float64-89", "float64-800"])
def test_a_decay_of_exactly_zero_is_exact(dtype, log_dt):
    """``log_dt`` = 89 (Δ = e^89, past float32's range) or 800 (past float64's): a = 0, so
    h_t = u_t; the output is the reference's (no NaN from Δ·0, no warning) and every gradient finite."""
    m = _layer(dtype=dtype)
    chosen = torch.randperm(m.d_state, generator=torch.Generator().manual_seed(2))[:4]  # some channels
    with torch.no_grad():
        m.log_dt[chosen] = log_dt
    x = _x(m, 2 * CHUNK + 5).requires_grad_()
    y = m(x)
    expected = ref.ssm(x.detach().double().numpy(), **m.reference_weights())
    assert_close(y.detach(), expected, magnitude=_magnitude(m, x.detach()), what=f"ssm {dtype} log_dt={log_dt}")
    assert torch.equal(m.decay()[chosen], torch.zeros(4, dtype=dtype))
    y.square().mean().backward()
    for name, p in [*m.named_parameters(), ("x", x)]:
        assert torch.isfinite(p.grad).all(), name
    assert torch.equal(m.log_dt.grad[chosen], torch.zeros(4, dtype=dtype))  # ∂a/∂log_dt = −a·Δ = 0


def test_scan_takes_no_decay_and_a_decay_of_zero():
    """dt = inf: h_t = v_t exactly; dt = 0: the running sum; a carried state decays likewise."""
    torch.manual_seed(0)
    v = torch.randn(2, 11, 2, dtype=torch.float64)
    h0 = torch.randn(2, 2, dtype=torch.float64)
    h = diagonal_scan(v, torch.tensor([float("inf"), 0.0], dtype=torch.float64), h0, chunk=4)
    assert torch.equal(h[..., 0], v[..., 0])
    torch.testing.assert_close(h[..., 1], v[..., 1].cumsum(1) + h0[:, 1:], rtol=0, atol=1e-12)


def test_an_empty_sequence_returns_the_state_before_it():
    """L = 0: an empty output, and the last state is h_{−1}: zeros, or the state given (float32)."""
    m = DiagonalSSM(4, 3)
    x = torch.zeros(2, 0, 4)
    y, last = m(x, return_state=True)
    assert y.shape == (2, 0, 4) and torch.equal(last, torch.zeros(2, 3))
    state = torch.randn(2, 3, dtype=torch.float64)
    y, last = m(x, state, return_state=True)
    assert y.shape == (2, 0, 4) and last.dtype == torch.float32 and torch.equal(last, state.float())
    assert m(x).shape == (2, 0, 4)


@pytest.mark.parametrize("v, dt, kw, error, message", [
    (torch.zeros(1, 5, 3), [1.0, 1.0, 1.0], {}, TypeError, r"dt must be a floating-point torch.Tensor \[N\].*got list"),
    ([[[0.0, 0.0, 0.0]]], torch.ones(3), {}, TypeError, r"v must be a floating-point torch.Tensor \[B, L, N\]"),
    (torch.zeros(1, 5, 3, dtype=torch.long), torch.ones(3), {}, TypeError, r"v must be .*got a torch.int64 tensor"),
    (torch.zeros(1, 5, 3), torch.ones(3, dtype=torch.long), {}, TypeError, r"dt must be .*got a torch.int64 tensor"),
    (torch.zeros(5, 3), torch.ones(3), {}, ValueError, r"v must have shape \[B, L, N\], got shape \[5, 3\]"),
    (torch.zeros(1, 5, 3), torch.ones(4), {}, ValueError, r"dt must have shape \[3\]"),
    (torch.zeros(1, 5, 3), torch.tensor([1.0, -0.5, 1.0]), {}, ValueError, r"dt must be >= 0 .*got -0.5"),
    (torch.zeros(1, 5, 3), torch.tensor([1.0, float("nan"), 1.0]), {}, ValueError, r"dt must be >= 0 .*got nan"),
    (torch.zeros(1, 5, 3), torch.ones(3), {"chunk": 0}, ValueError, r"chunk must be >= 1, got 0"),
    (torch.zeros(1, 5, 3), torch.ones(3), {"state": [0.0] * 3}, TypeError, r"state must be a floating-point"),
    (torch.zeros(1, 5, 3), torch.ones(3), {"state": torch.zeros(3)}, ValueError, r"state must have shape \[1, 3\]"),
], ids=["dt-list", "v-list", "v-int", "dt-int", "v-rank", "dt-shape", "dt-negative", "dt-nan", "chunk", "state-list",
        "state-shape"])
def test_scan_refuses_bad_input_naming_it(v, dt, kw, error, message):
    with pytest.raises(error, match=message):
        diagonal_scan(v, dt, **kw)
