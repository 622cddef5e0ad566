"""p-RoPE (``rope`` with ``partial_rotary="proportional"``; Barbero et al. 2025, Gemma 4's
full-attention layers) against its float64 reference, computed from ``head_dim``, ``rotary_dim``
and ``base`` (``posenc.reference.proportional_rope_inv_freq``), not from the module's tables.
transformers' ``proportional`` frequencies are checked in tests/test_hf.py."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from conftest import DTYPES, assert_close

import posenc
from posenc import reference as ref


def p_rope(head_dim=32, rotary_dim=8, base=10000.0, **kw):
    return posenc.build({"scheme": "rope", "head_dim": head_dim, "rotary_dim": rotary_dim, "base": base,
                         "partial_rotary": "proportional", **kw})


def test_reference_frequencies_are_the_whole_heads_with_the_rest_zero():
    freq = ref.proportional_rope_inv_freq(16, 6, 100.0)
    np.testing.assert_array_equal(freq[:3], 100.0 ** (-np.arange(0, 6, 2) / 16))  # over head_dim, not rotary_dim
    np.testing.assert_array_equal(freq[3:], 0.0)
    exact = ref.proportional_rope_inv_freq_exact(16, 6, 100.0)
    np.testing.assert_allclose(exact.astype(np.float64), freq, rtol=1e-15)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_module_matches_the_reference(dtype, layout):
    gen = torch.Generator().manual_seed(0)
    for scaling in (None, {"type": "linear", "factor": 4.0}):
        m = p_rope(layout=layout, base=1e6, scaling=scaling)
        x = torch.randn(2, 3, 37, 32, generator=gen).to(dtype)  # odd length
        p = torch.arange(37) + int(torch.randint(0, 10**6, (1,), generator=gen))  # an offset
        factor = 1.0 if scaling is None else scaling["factor"]
        want = ref.rope(x.double().numpy(), p.numpy(), ref.proportional_rope_inv_freq_exact(32, 8, 1e6) / factor,
                        layout=layout)
        assert_close(m(x, p), want)
        assert m.cos_sin(p)[0].shape == (37, 16)  # tables over the whole head, as transformers returns them


def test_pairs_past_the_rotated_width_pass_through_and_gradients_check():
    m = p_rope(head_dim=16, rotary_dim=4).double()
    x = torch.randn(1, 2, 9, 16, dtype=torch.float64, requires_grad=True)
    p = torch.arange(100, 109)
    y = m(x, p)
    kept = torch.tensor([i for i in range(16) if i % 8 >= 2])  # half layout: pairs (i, i + 8), i < 2 rotate
    assert torch.equal(y[..., kept], x[..., kept])
    small = x.detach()[:, :1, :3].clone().requires_grad_()
    assert torch.autograd.gradcheck(lambda t: m(t, p[:3]), (small,))


def test_conventions_differ_when_partial_and_agree_over_the_whole_head():
    x, p = torch.randn(1, 1, 5, 16, dtype=torch.float64), torch.arange(5)
    neox = posenc.build({"scheme": "rope", "head_dim": 16, "rotary_dim": 8}).double()
    assert (p_rope(16, 8).double()(x, p) - neox(x, p)).abs().max() > 0.1
    whole = posenc.build({"scheme": "rope", "head_dim": 16}).double()
    torch.testing.assert_close(p_rope(16, 16).double()(x, p), whole(x, p), rtol=0, atol=1e-15)


@pytest.mark.parametrize("kw, message", [
    ({"partial_rotary": "gemma"}, "partial_rotary must be one of"),
    ({"scaling": {"type": "yarn", "factor": 4, "original_max_positions": 16}}, "takes scaling None or 'linear'"),
    ({"axes": 2}, "is a one-axis rope"),
])
def test_bad_options_are_refused_by_name(kw, message):
    spec = {"scheme": "rope", "head_dim": 16, "rotary_dim": 8, "partial_rotary": "proportional", **kw}
    with pytest.raises(ValueError, match=message):
        posenc.build(spec)
