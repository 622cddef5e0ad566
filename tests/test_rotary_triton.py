"""The Triton RoPE kernel (``posenc/rotary_triton.py``) on the CPU through Triton's interpreter
(``TRITON_INTERPRET=1``), at small sizes, against the float64 reference: both layouts, partial
rotary, float32/bfloat16/float16, position offsets, packed sequences (``cu_seqlens``), in place,
into ``out``, and its backward (the rotation by −θ); plus the dispatch from ``posenc.apply_rotary``
and the rope module. Skipped, with the reason, only when Triton does not import."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc import rotary
from conftest import DTYPES, assert_close

triton = pytest.importorskip("triton", reason="Triton does not import here: its kernel cannot be tested")

LENGTH = 21  # odd, and not a multiple of the kernel's BLOCK_L (two blocks, the second partial)

# The interpreter runs every program in Python: each dtype and layout at least once, partial rotary
# in half of the cases, rather than the full product.
CASES = [(torch.float32, "half", False), (torch.float32, "interleaved", True),
         (torch.bfloat16, "half", True), (torch.bfloat16, "interleaved", False),
         (torch.float16, "interleaved", True), (torch.float16, "half", False)]


@pytest.fixture
def kernel(monkeypatch):
    """``posenc.rotary_triton`` reloaded under the interpreter, with CPU tensors dispatched to it."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import posenc.rotary_triton as module

    module = importlib.reload(module)  # @triton.jit reads TRITON_INTERPRET when it decorates
    monkeypatch.setattr(rotary, "TRITON_ON_CPU", True)
    monkeypatch.setattr(rotary, "_TRITON", module)
    yield module
    monkeypatch.delenv("TRITON_INTERPRET")
    importlib.reload(module)


def _rope(layout, partial, head_dim=16):
    return posenc.build({"scheme": "rope", "head_dim": head_dim, "rotary_dim": head_dim // 2 if partial else None,
                         "layout": layout})


@pytest.mark.parametrize("dtype, layout, partial", CASES, ids=str)
def test_module_on_the_kernel_matches_the_reference(kernel, dtype, layout, partial, monkeypatch):
    """The rope module at an offset, allocating, into ``out`` and in place: every call goes through
    the kernel (``rotate`` is spied on), and every result equals the float64 reference."""
    calls = []
    real = kernel.rotate
    monkeypatch.setattr(kernel, "rotate", lambda *a, **k: calls.append(1) or real(*a, **k))
    m = _rope(layout, partial)
    assert {c[0] for c in CASES} == set(DTYPES)
    x = torch.randn(2, 2, LENGTH, 16).to(dtype)  # (B, H, L, D)
    p = torch.arange(LENGTH) + 1000
    expected = m.reference(x.double().numpy(), p.numpy())
    assert_close(m(x, p), expected, what="alloc")
    out = torch.full_like(x, float("nan"))
    assert m(x, p, out=out) is out
    assert_close(out, expected, what="out")
    inplace = x.clone()
    assert m(inplace, p, out=inplace) is inplace
    assert_close(inplace, expected, what="in place")
    batched = torch.stack([p, p + 7])  # [B, L] positions: one cos/sin table per sequence
    assert_close(m(x, batched), m.reference(x.double().numpy(), batched.numpy()), what="batched positions")
    assert len(calls) == 4


def _tables(rd, rows, dtype=torch.float32):
    inv_freq = ref.rope_inv_freq(rd)
    angles = ref.rope_angles(np.arange(rows), inv_freq)  # (rows, R) float64
    return (torch.from_numpy(np.cos(angles)).to(dtype), torch.from_numpy(np.sin(angles)).to(dtype), inv_freq)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_offsets_per_sequence_and_packed_sequences(kernel, layout):
    rd, d = 8, 12  # partial rotary
    cos, sin, inv_freq = _tables(rd, 64)
    x = torch.randn(3, 1, LENGTH, d)  # (B, H, L, D)
    offsets = torch.tensor([0, 5, 20])
    y = kernel.rotate(x, cos, sin, layout=layout, seqlen_offsets=offsets)
    for b in range(3):
        want = ref.rope(x[b].double().numpy(), np.arange(LENGTH) + int(offsets[b]), inv_freq, layout=layout)
        assert_close(y[b], want, what=f"sequence {b}")
    # packed: three sequences of lengths 5, 17, 1 in one [T, H, D], each from position offset 3
    lengths = [5, 17, 1]
    cu = torch.tensor([0, 5, 22, 23], dtype=torch.int32)
    packed = torch.randn(sum(lengths), 1, d)  # (T, H, D)
    out = kernel.rotate(packed, cos, sin, layout=layout, cu_seqlens=cu, seqlen_offsets=3)
    for s, n in enumerate(lengths):
        rows = packed[cu[s]:cu[s + 1]].transpose(0, 1).double().numpy()  # (H, n, D)
        want = ref.rope(rows, np.arange(n) + 3, inv_freq, layout=layout)
        assert_close(out[cu[s]:cu[s + 1]].transpose(0, 1), want, what=f"packed sequence {s}")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_backward_is_the_conjugate_rotation_and_in_place_marks_dirty(kernel, layout):
    rd, d = 8, 12
    cos, sin, inv_freq = _tables(rd, 64)
    leaf = torch.randn(2, 1, LENGTH, d, requires_grad=True)
    g = torch.randn(2, 1, LENGTH, d)
    for inplace in (False, True):
        src = leaf * 1.0
        y = kernel.rotate(src, cos, sin, layout=layout, seqlen_offsets=4, out=src if inplace else None)
        (grad,) = torch.autograd.grad(y, leaf, g)
        want = ref.rope(g.double().numpy(), np.arange(LENGTH) + 4, -inv_freq, layout=layout)  # by −θ
        assert_close(grad, want, what=f"grad in_place={inplace}")
    with pytest.raises(RuntimeError, match="leaf"):
        kernel.rotate(leaf, cos, sin, layout=layout, out=leaf)


def test_bad_arguments_name_the_parameter(kernel):
    cos, sin, _ = _tables(8, 16)
    x = torch.randn(1, 2, 10, 8)
    with pytest.raises(ValueError, match="positions reach 16"):
        kernel.rotate(x, cos, sin, seqlen_offsets=7)
    with pytest.raises(TypeError, match="cu_seqlens must be an int32"):
        kernel.rotate(x[0].transpose(0, 1), cos, sin, cu_seqlens=torch.tensor([0, 10]))
    with pytest.raises(ValueError, match="layout"):
        kernel.rotate(x, cos, sin, layout="neox")
    with pytest.raises(ValueError, match="cos and sin must not require grad"):
        kernel.rotate(x, cos.requires_grad_(True), sin)


def test_float64_stays_on_the_exact_torch_path(kernel):
    """The kernel computes in float32: float64 inputs keep the torch rotation (exact in float64)."""
    x = torch.randn(1, 2, 8, 16, dtype=torch.float64)
    cos, sin = torch.rand(8, 8, dtype=torch.float64), torch.rand(8, 8, dtype=torch.float64)
    assert rotary._triton_tables(x, cos, sin) is None
    assert rotary._triton_tables(x.float(), cos.float(), sin.float()) is not None  # float32: the kernel
