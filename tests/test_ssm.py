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
