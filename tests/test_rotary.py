"""``posenc.apply_rotary`` and the rope module's ``out=``: every eager kernel of ``posenc/rotary.py``
(complex, addcmul, partner, in place, the plain expression) is reached here, at sizes above its
threshold, and checked against the float64 reference at float32, bfloat16 and float16, an odd
length (217), offsets and partial rotary; gradients and ``torch.compile`` with ``out=``."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc import rotary
from conftest import DTYPES, assert_close, module_args, reference_output, schemes_of_kind, small_module

LENGTH = 217
OFFSET = 1000


@pytest.fixture
def kernels(monkeypatch):
    """The names of the eager kernels run during the test, in order."""
    seen: list[str] = []
    real = rotary._kernel

    def spy(*args):
        seen.append(real(*args))
        return seen[-1]

    monkeypatch.setattr(rotary, "_kernel", spy)
    return seen


def _case(dtype, layout, partial, *, batch=2, heads=3, length=LENGTH, head_dim=32):
    rd = head_dim // 2 if partial else head_dim
    m = posenc.build({"scheme": "rope", "head_dim": head_dim, "rotary_dim": rd, "layout": layout})
    torch.manual_seed(0)
    x = torch.randn(batch, heads, length, head_dim).to(dtype)  # (B, H, L, D)
    p = torch.arange(length) + OFFSET
    return m, x, p, m.reference(x.double().numpy(), p.numpy())


def _expected_kernel(dtype, layout, mode, numel, partial):
    if mode == "inplace":
        return "inplace"
    if layout == "half" and (numel < rotary.HALF_FUSED_MIN_ELEMENTS or (partial and dtype.itemsize < 4)):
        return "halves"
    if layout == "interleaved" and dtype in (torch.float32, torch.float64):
        return "complex"
    return "addcmul" if layout == "half" and dtype.itemsize >= 4 else "partner"


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("partial", [False, True], ids=["full", "partial"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("mode", ["alloc", "out", "inplace"])
def test_every_kernel_matches_the_reference(mode, dtype, layout, partial, size, kernels):
    """Both sides of ``HALF_FUSED_MIN_ELEMENTS``: 2x3x217x32 below it, 2x19x217x32 above it."""
    m, x, p, expected = _case(dtype, layout, partial, heads=3 if size == "small" else 19)
    assert (x.numel() < rotary.HALF_FUSED_MIN_ELEMENTS) == (size == "small")
    before = x.clone()
    if mode == "alloc":
        y = m(x, p)
    elif mode == "out":
        out = torch.full_like(x, float("nan"))
        y = m(x, p, out=out)
        assert y is out
    else:
        y = m(x, p, out=x)
        assert y is x
    assert kernels == [_expected_kernel(dtype, layout, mode, x.numel(), partial)]
    assert y.dtype == dtype and y.shape == x.shape
    assert_close(y, expected, what=f"{mode} {layout}")
    torch.testing.assert_close(y[..., m.rotary_dim:], before[..., m.rotary_dim:], rtol=0, atol=0)
    if mode != "inplace":
        torch.testing.assert_close(x, before, rtol=0, atol=0)  # the input is left alone


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_kernels_take_non_contiguous_inputs_and_outputs(layout, kernels):
    """``x`` as ``[B, L, H, D].transpose(1, 2)`` (a q from a fused projection) and an ``out`` of
    other strides: the complex view is refused where strides forbid it, the result is the same."""
    m, x, p, expected = _case(torch.float32, layout, partial=True)
    xt = x.transpose(1, 2).contiguous().transpose(1, 2)
    out = torch.empty(x.shape[0], x.shape[2], x.shape[1], x.shape[3]).transpose(1, 2)
    assert_close(m(xt, p, out=out), expected)
    odd = torch.empty(x.shape[:-1] + (x.shape[-1] + 1,))[..., 1:]  # storage offset 1: no complex view
    assert_close(m(x, p, out=odd), expected)
    assert kernels[-1] == ("partner" if layout == "interleaved" else "halves")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_cos_that_needs_a_gradient_takes_the_plain_expression_into_out(layout, kernels):
    """cos/sin that need a gradient (or cos/sin that broadcast x) run the plain expression, then
    copy into ``out``: no fused kernel, same result, and the gradient reaches cos."""
    m, x, p, expected = _case(torch.float32, layout, partial=False, batch=1, heads=2, length=1)
    out = torch.empty_like(x)
    cos, sin = m.cos_sin(p)
    cos.requires_grad_(True)
    assert_close(posenc.apply_rotary(x, cos, sin, layout=layout, out=out), expected)
    assert kernels == [] and out.grad_fn is not None
    (grad,) = torch.autograd.grad(out.sum(), cos)
    assert grad.abs().sum() > 0


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("mode", ["out", "inplace"])
def test_gradients_through_out_equal_the_conjugate_rotation(layout, mode):
    """d/dx Σ g·R(θ)x = R(−θ)g, in float64, through ``out=`` and an in-place rotation of a non-leaf."""
    m, x, p, _ = _case(torch.float64, layout, partial=True)
    leaf = x.clone().requires_grad_(True)
    g = torch.randn_like(x)
    src = leaf * 1.0  # a non-leaf: in-place is allowed on it
    y = m(src, p, out=src if mode == "inplace" else torch.empty_like(x))
    (grad,) = torch.autograd.grad(y, leaf, g)
    cos, sin = m.cos_sin(p, torch.float64)
    freq = m.inv_freq.numpy()
    back = ref.rope(g.numpy(), p.numpy(), -freq, layout=layout)  # rotation by −θ
    np.testing.assert_allclose(grad.numpy(), back, rtol=0, atol=1e-12)
    np.testing.assert_allclose(grad.numpy(), posenc.apply_rotary(g, cos, -sin, layout=layout).numpy(),
                               rtol=0, atol=1e-12)


def test_in_place_rotation_of_a_leaf_that_requires_grad_is_refused_by_pytorch():
    m, x, p, _ = _case(torch.float32, "half", partial=False)
    x.requires_grad_(True)
    with pytest.raises(RuntimeError, match="leaf"):
        m(x, p, out=x)


def test_out_under_torch_compile_fullgraph():
    """Into ``out`` and in place; the compiled graph runs the plain expression, then copies."""
    torch._dynamo.reset()
    m, x, p, expected = _case(torch.float32, "half", partial=True, length=13)

    def rotate(t, positions, out):
        return m(t, positions, out=out)

    fn = torch.compile(rotate, fullgraph=True, backend="aot_eager")
    out = torch.empty_like(x)
    y = fn(x, p, out)
    assert_close(out, expected)
    assert_close(y, expected)
    inplace = x.clone()
    fn(inplace, p, inplace)
    assert_close(inplace, expected)


def test_bad_out_names_the_parameter():
    x, cos = torch.randn(2, 3, 5, 8), torch.randn(5, 4)
    with pytest.raises(TypeError, match="out must be a torch.Tensor"):
        posenc.apply_rotary(x, cos, cos, out=np.zeros((2, 3, 5, 8)))
    for bad in (torch.empty(2, 3, 5, 7), torch.empty(2, 3, 5, 8, dtype=torch.float64)):
        with pytest.raises(ValueError, match="out must have the shape, dtype and device of x"):
            posenc.apply_rotary(x, cos, cos, out=bad)
    memory = torch.randn(2 * 3 * 5 * 8 + 1)
    x, shifted = memory[:-1].view(2, 3, 5, 8), memory[1:].view(2, 3, 5, 8)  # one element apart
    with pytest.raises(ValueError, match="out must be x itself"):
        posenc.apply_rotary(x, cos, cos, out=shifted)


# pope (``widens``) returns a wider tensor than x: its out= (never in place) is in test_pope.py
@pytest.mark.parametrize("name", [n for n in schemes_of_kind("rotary") if not getattr(small_module(n), "widens", False)])
def test_every_rotary_module_takes_out_and_rotates_in_place(name):
    """Every registered rotary scheme (one axis or several) that keeps x's width writes into ``out=``
    and rotates in place, with the allocating call's result and the float64 reference's."""
    m = small_module(name)
    x, p = module_args(m, length=13, offset=5)
    out = torch.full_like(x, float("nan"))
    assert m(x, p, out=out, role="key") is out
    assert_close(out, reference_output(m, (x, p)))
    torch.testing.assert_close(out, m(x, p, role="key"))
    inplace = x.clone()
    assert m(inplace, p, out=inplace, role="key") is inplace
    torch.testing.assert_close(inplace, out, rtol=0, atol=4 * torch.finfo(x.dtype).eps * float(x.abs().max()))


# -- a decoding step: the table's row, and cos/sin shared by q and k -------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("positions", [[4095], [[4095]], [[7], [300]]], ids=["[1]", "[1,1]", "[2,1]"])
def test_one_token_per_sequence_matches_the_reference(dtype, positions):
    """One token at an offset (a decoding step), by its row of the table (``[1]``) or a gather."""
    m = posenc.build({"scheme": "rope", "head_dim": 16})
    p = torch.tensor(positions)
    x = torch.randn(p.shape[0] if p.dim() == 2 else 3, 4, 1, 16).to(dtype)  # (B, H, 1, D)
    assert_close(m(x, p), m.reference(x.double().numpy(), p.numpy()))


@pytest.mark.parametrize("scheme", ["rope", "mrope"])
@pytest.mark.parametrize("change", ["numpy", "data", "in_place"])
def test_positions_changed_behind_torchs_back_give_fresh_results(scheme, change):
    """A decoding loop that keeps one positions buffer and writes into it where torch's version
    counter does not see it (NumPy memory, ``.data``): every call reads the new values (issue 22)."""
    m = posenc.build({"scheme": scheme, "head_dim": 16})
    shape = (1,) if scheme == "rope" else (1, 3)
    array = np.full(shape, 9, dtype=np.int64)
    p = torch.from_numpy(array)  # shares memory with the array
    q, k = torch.randn(2, 4, 1, 16), torch.randn(2, 4, 1, 16)
    m(q, p)
    m(k, p)  # q then k at one step: the pattern a reuse cache served
    if change == "numpy":
        array += 90
    elif change == "data":
        p.data.add_(90)
    else:
        p.add_(90)
    assert int(p.reshape(-1)[0]) == 99
    assert_close(m(k, p), m.reference(k.double().numpy(), array.copy()))


def test_cos_sin_returns_the_callers_own_tensors():
    """Editing what ``cos_sin`` returned changes neither the cached table nor a later rotation."""
    m = posenc.build({"scheme": "rope", "head_dim": 16})
    x, p = torch.randn(1, 2, 1, 16), torch.tensor([5])
    expected = m(x, p).clone()
    cos, sin = m.cos_sin(p)
    cos.fill_(7.0)
    sin.fill_(7.0)
    torch.testing.assert_close(m(x, torch.tensor([5])), expected, rtol=0, atol=0)
