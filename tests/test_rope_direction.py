"""``rope``'s ``direction="clockwise"`` (NanoChat's rotation, ``R(−pθ)``) against its float64
reference, computed from the formula's inputs: RoPE with the negated frequencies ``−θ_i``, which
turns each pair by ``−p·θ_i`` (``posenc.reference.rope``'s own ``direction`` is checked against the
same), not from the module's tables. NanoChat itself is walked in tests/test_hf_walk.py."""

from __future__ import annotations

import mpmath
import pytest
import torch
from conftest import DTYPES, assert_close

import posenc
from posenc import reference as ref


def _negated(x, p, head_dim, rotary_dim, base, layout):
    """RoPE by the angles ``p·(−θ_i)``, θ_i = base^(−2i/rotary_dim) to 40 digits, in float64."""
    theta = ref.rope_inv_freq_exact(rotary_dim, base)
    with mpmath.workdps(60):  # negated at their own precision (mpmath rounds to the working one)
        negated = -theta
    return ref.rope(x, p, negated, layout=layout)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_clockwise_rope_turns_by_the_negated_angles(dtype, layout):
    gen = torch.Generator().manual_seed(0)
    m = posenc.build({"scheme": "rope", "head_dim": 16, "rotary_dim": 12, "base": 500.0, "layout": layout,
                      "direction": "clockwise"})
    x = torch.randn(2, 3, 37, 16, generator=gen).to(dtype)  # odd length, a partial rotary width
    p = torch.arange(37) + 1000  # an offset
    want = _negated(x.double().numpy(), p.numpy(), 16, 12, 500.0, layout)
    assert_close(m(x, p), want)
    assert_close(m.reference(x.double().numpy(), p.numpy()), want, dtype=torch.float64)
    cos, sin = m.cos_sin(p, torch.float64)
    ccw_cos, ccw_sin = posenc.build({**m.spec, "direction": "counterclockwise"}).cos_sin(p, torch.float64)
    assert torch.equal(cos, ccw_cos) and torch.equal(sin, -ccw_sin)  # the same cos, the other sign of sin


def test_clockwise_rope_with_a_scaling_and_its_gradient():
    scaling = {"type": "linear", "factor": 4.0}
    m = posenc.build({"scheme": "rope", "head_dim": 8, "scaling": scaling, "direction": "clockwise"}).double()
    x = torch.randn(1, 2, 5, 8, dtype=torch.float64, requires_grad=True)
    p = torch.arange(3, 8)
    want = ref.rope(x.detach().numpy(), p.numpy(), -ref.rope_inv_freq(8, 10000.0) / 4.0)
    assert_close(m(x, p), want, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda t: m(t, p), (x,))


def test_a_direction_not_known_is_refused_by_name():
    with pytest.raises(ValueError, match="direction.*'counterclockwise', 'clockwise'"):
        posenc.build({"scheme": "rope", "head_dim": 8, "direction": "anticlockwise"})
