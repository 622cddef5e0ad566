"""Every registered scheme's torch module against its float64 reference, at float32, bfloat16 and
float16, at an odd length with offsets; dtype and device handling; and the basic schemes' claims
(nope, sinusoidal, learned, rope, alibi, t5) checked on the torch modules.

The generic tests loop over ``posenc.schemes()``: a new scheme joins them without edits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc import registry
from posenc import reference as ref
from conftest import (DTYPES, assert_close, module_args, positions, reference_output, schemes_of_kind,
                            small_module)

ALL = registry.schemes()
POSITIONED = [n for n in ALL if registry.get(n).kind != "content"]  # content schemes take no positions
LENGTH = 217  # odd, and not a multiple of any block size


# -- every scheme against its reference ---------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("offset", [0, 1000])
@pytest.mark.parametrize("name", ALL)
def test_module_matches_reference(name, dtype, offset):
    m = small_module(name).to(dtype)
    args = module_args(m, length=LENGTH, offset=offset, dtype=dtype)
    out = m(*args)
    assert out.dtype == dtype
    assert_close(out, reference_output(m, args), what=f"{name} at {dtype}, offset {offset}")


@pytest.mark.parametrize("name", ALL)
def test_module_matches_reference_with_batched_positions(name):
    m = small_module(name)
    args = module_args(m, length=LENGTH, offset=1000, batched=True)  # [B, L], different per row
    assert_close(m(*args), reference_output(m, args), what=name)


@pytest.mark.parametrize("name", schemes_of_kind("bias", "relative"))
def test_module_matches_reference_with_fewer_queries_than_keys(name):
    m = small_module(name)
    args = module_args(m, length=5, key_length=LENGTH, offset=33)
    assert_close(m(*args), reference_output(m, args), what=name)


@pytest.mark.parametrize("name", ALL)
def test_module_matches_reference_in_float64(name):
    m = small_module(name).double()
    offset = min(12345, getattr(m, "max_positions", 10**9) - LENGTH - 10)  # a learned table ends
    args = module_args(m, length=LENGTH, offset=offset, dtype=torch.float64)
    # float64 angles past 10^4 carry an error of a few ulp(angle); allow for it.
    assert_close(m(*args), reference_output(m, args), magnitude=1e5, what=name)


# -- dtype and device ---------------------------------------------------------------------------

def _floating_buffers(m):
    return {n: b for n, b in m.named_buffers() if b.is_floating_point() and not n.endswith("_probe")}


@pytest.mark.parametrize("name", ALL)
def test_tables_stay_float64_and_follow_the_module(name):
    m = small_module(name)
    tables = _floating_buffers(m)
    for n, b in tables.items():  # every float table that depends on position is float64
        assert b.dtype == torch.float64, f"{name}.{n} is {b.dtype}, not float64"
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        m = m.to(dtype)
        assert m.dtype == dtype
        assert all(p.dtype == dtype for p in m.parameters() if p.is_floating_point())
        assert all(b.dtype == torch.float64 for b in _floating_buffers(m).values())
    meta = small_module(name).to("meta", torch.bfloat16)  # follows the device, keeps float64
    assert meta.device.type == "meta" and meta.dtype == torch.bfloat16
    for n, b in _floating_buffers(meta).items():
        assert b.device.type == "meta" and b.dtype == torch.float64, f"{name}.{n}: {b.device} {b.dtype}"
    for p in meta.parameters():
        assert p.device.type == "meta"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ALL)
def test_module_on_cuda_matches_reference(name):
    m = small_module(name).to("cuda", torch.bfloat16)
    assert all(b.is_cuda and b.dtype == torch.float64 for b in _floating_buffers(m).values())
    args = module_args(m, length=LENGTH, offset=1000, dtype=torch.bfloat16)
    out = m(*(a.cuda() for a in args))
    assert out.is_cuda and out.dtype == torch.bfloat16
    assert_close(out, reference_output(m, args), what=f"{name} on cuda")


@pytest.mark.parametrize("name", POSITIONED)
def test_positions_of_any_integer_dtype_and_the_default_float32(name):
    m = small_module(name)
    args = module_args(m, length=9, offset=250)
    long_out = m(*args)
    assert long_out.dtype == torch.float32
    small_ints = tuple(a.to(torch.int16) if not a.is_floating_point() else a for a in args)
    torch.testing.assert_close(m(*small_ints), long_out, rtol=0, atol=0)


# -- nope ---------------------------------------------------------------------------------------

def test_nope_returns_its_input():
    x = torch.randn(2, 3, 5, 4)
    assert posenc.build("nope")(x, torch.arange(5)) is x
    assert posenc.build("nope").spec == {"scheme": "nope"}


# -- sinusoidal ---------------------------------------------------------------------------------

@given(d=st.sampled_from([2, 8, 30]), base=st.sampled_from([100.0, 10000.0]), start=st.integers(0, 10**6))
def test_sinusoidal_module_in_unit_interval_and_distinct(d, base, start):
    m = posenc.build({"scheme": "sinusoidal", "d_model": d, "base": base})
    pe = m(torch.arange(start, start + 64))
    assert pe.shape == (64, d) and pe.dtype == torch.float32
    assert pe.abs().max() <= 1.0
    assert_close(pe, ref.sinusoidal(np.arange(start, start + 64), d, base))
    if d >= 8:
        dist = torch.cdist(pe.double(), pe.double()) + torch.eye(64) * 10
        assert dist.min() > 1e-3


def test_sinusoidal_dot_product_depends_only_on_distance_in_torch():
    m = posenc.build({"scheme": "sinusoidal", "d_model": 64}).double()
    pe = m(torch.arange(300))
    gram = pe @ pe.T  # (300, 300): constant along every diagonal
    for k in (-120, -3, 0, 1, 77):
        diag = torch.diagonal(gram, k)
        assert (diag - diag[0]).abs().max() < 1e-10
    assert not torch.allclose(torch.diagonal(gram, 1)[0], torch.diagonal(gram, 2)[0])


# -- learned ------------------------------------------------------------------------------------

def test_learned_gathers_rows_and_gradients_reach_only_the_rows_used():
    m = small_module("learned", max_positions=10)
    p = torch.tensor([[1, 4, 4], [9, 0, 1]])
    out = m(p)
    torch.testing.assert_close(out, m.weight[p], rtol=0, atol=0)
    out.sum().backward()
    counts = torch.bincount(p.flatten(), minlength=10).float()
    torch.testing.assert_close(m.weight.grad, counts[:, None].expand(10, m.d_model))


def test_learned_state_dict_roundtrip():
    a, b = small_module("learned", seed=1), small_module("learned", seed=2)
    assert not torch.equal(a.weight, b.weight)
    b.load_state_dict(a.state_dict())
    p = torch.arange(50)
    torch.testing.assert_close(b(p), a(p), rtol=0, atol=0)


# -- rope ---------------------------------------------------------------------------------------

rope_specs = st.fixed_dictionaries({
    "head_dim": st.sampled_from([8, 16]), "layout": st.sampled_from(["half", "interleaved"]),
    "base": st.sampled_from([100.0, 10000.0, 500000.0]), "partial": st.booleans()})


def _rope(spec):
    spec = dict(spec)
    rotary_dim = spec["head_dim"] // 2 if spec.pop("partial") else None
    return posenc.build({"scheme": "rope", **spec, "rotary_dim": rotary_dim})


@given(spec=rope_specs, start=st.integers(0, 10**6), dtype=st.sampled_from(DTYPES))
def test_rope_matches_reference_and_preserves_norm(spec, start, dtype):
    m = _rope(spec)
    x = torch.randn(2, 3, 17, m.head_dim).to(dtype)
    p = positions(17, offset=start)
    y = m(x, p)
    assert y.dtype == dtype
    expected = m.reference(x.double().numpy(), p.numpy())
    assert_close(y, expected)
    norm = x.double().norm(dim=-1)
    assert_close(y.double().norm(dim=-1), norm.numpy(), dtype=dtype, magnitude=2 * float(norm.max()))
    torch.testing.assert_close(y[..., m.rotary_dim:], x[..., m.rotary_dim:], rtol=0, atol=0)


@given(spec=rope_specs, m_pos=st.integers(0, 10**5), n_pos=st.integers(0, 10**5), shift=st.integers(0, 10**5))
def test_rope_score_depends_only_on_distance_in_torch(spec, m_pos, n_pos, shift):
    rope = _rope(spec).double()
    q, k = torch.randn(1, 1, 1, rope.head_dim, dtype=torch.float64), torch.randn(1, 1, 1, rope.head_dim,
                                                                                 dtype=torch.float64)

    def score(i, j):
        return float((rope(q, torch.tensor([i])) * rope(k, torch.tensor([j]))).sum())

    assert score(m_pos, n_pos) == pytest.approx(score(m_pos + shift, n_pos + shift), abs=1e-9)


def test_rope_layouts_equal_up_to_a_fixed_permutation_in_torch():
    half = posenc.build({"scheme": "rope", "head_dim": 16, "rotary_dim": 12})
    inter = posenc.build({"scheme": "rope", "head_dim": 16, "rotary_dim": 12, "layout": "interleaved"})
    sigma = torch.cat([torch.arange(0, 12, 2), torch.arange(1, 12, 2), torch.arange(12, 16)])
    x, p = torch.randn(2, 3, 31, 16), torch.arange(500, 531)
    torch.testing.assert_close(half(x[..., sigma], p), inter(x, p)[..., sigma], rtol=0, atol=1e-6)
    assert not torch.allclose(half(x, p), inter(x, p), atol=1e-2)


def test_rope_batched_positions_rotate_each_sequence_at_its_own_positions():
    m = posenc.build({"scheme": "rope", "head_dim": 8})
    x, p = torch.randn(2, 3, 6, 8), positions(6, offset=40, batch=2)
    y = m(x, p)
    for b in range(2):
        torch.testing.assert_close(y[b:b + 1], m(x[b:b + 1], p[b]), rtol=0, atol=0)
    assert not torch.allclose(y[1], m(x[1:2], p[0])[0])


# -- alibi --------------------------------------------------------------------------------------

def test_alibi_module_slopes_and_bias():
    m = posenc.build({"scheme": "alibi", "num_heads": 8})
    assert m.slopes.dtype == torch.float64
    torch.testing.assert_close(m.slopes, torch.tensor([2.0 ** -i for i in range(1, 9)], dtype=torch.float64),
                               rtol=0, atol=0)
    qp, kp = torch.arange(300, 311), torch.arange(290, 320)
    bias = m(qp, kp)  # (8, 11, 30)
    dist = (kp[None, :] - qp[:, None]).abs().double()
    torch.testing.assert_close(bias.double(), -m.slopes[:, None, None] * dist, rtol=0, atol=1e-5)


# -- t5 -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bidirectional", [True, False])
def test_t5_module_buckets_equal_reference_far_past_max_distance(bidirectional):
    m = posenc.build({"scheme": "t5", "num_heads": 2, "num_buckets": 16, "max_distance": 50,
                      "bidirectional": bidirectional})
    r = torch.arange(-5000, 5001)
    b = m.bucket(r)
    np.testing.assert_array_equal(b.numpy(), ref.t5_bucket(r.numpy(), num_buckets=16, max_distance=50,
                                                            bidirectional=bidirectional))
    assert int(b.min()) >= 0 and int(b.max()) < 16
    past = b[r <= 0].flip(0)  # ordered by growing distance
    assert torch.all(past.diff() >= 0)


def test_t5_weight_grad_flows_through_the_bias():
    m = small_module("t5")
    bias = m(torch.arange(7), torch.arange(7))
    (bias * torch.randn_like(bias)).sum().backward()
    assert m.weight.grad is not None and m.weight.grad.abs().sum() > 0
