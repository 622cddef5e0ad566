"""Every entry point that takes ``[B, H, L, D]`` says so when it gets a ``[B, L, H, D]`` tensor (the
layout of a projection's ``view(B, L, H, D)``) and the other reading would fit (issue 39, item 3):
``posenc.apply_rotary`` (also given transformers' full-width cos), ``posenc.attention`` with and
without positions (a bias or content scheme's heads), and the Triton kernel's ``rotate``. The
modules' own calls are held to it in tests/test_cli_errors.py."""

from __future__ import annotations

import pytest
import torch

import posenc

B, L, H, D = 2, 11, 4, 8
HINT = "[B, H, L, D]"


def _blhd(seed: int = 0) -> torch.Tensor:
    return torch.randn(B, L, H, D, generator=torch.Generator().manual_seed(seed))  # (B, L, H, D)


def _cos_sin():
    return posenc.build({"scheme": "rope", "head_dim": D}).cos_sin(torch.arange(L))  # (L, D/2) each


@pytest.mark.parametrize("shape", ["L R", "1 L R", "B L R", "1 1 L R", "L D (transformers)"])
def test_apply_rotary_names_the_layout(shape):
    cos, sin = _cos_sin()
    if shape.startswith("L D"):
        cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)  # (L, D): transformers' [cos | cos]
    else:
        lead = {"L R": (), "1 L R": (1,), "B L R": (B,), "1 1 L R": (1, 1)}[shape]
        cos, sin = cos.expand(*lead, *cos.shape), sin.expand(*lead, *sin.shape)
    x = _blhd()
    with pytest.raises(ValueError) as e:
        posenc.apply_rotary(x, cos, sin)
    assert HINT in str(e.value) and "x.transpose(1, 2)" in str(e.value), str(e.value)
    if shape.startswith("L D"):
        assert "cos[..., :D // 2]" in str(e.value)
        cos, sin = cos[..., :D // 2], sin[..., :D // 2]
    if shape == "B L R":
        cos, sin = cos[:, None], sin[:, None]  # (B, 1, L, R): one table per sequence, for every head
    assert posenc.apply_rotary(x.transpose(1, 2), cos, sin).shape == (B, H, L, D)  # the hint works


@pytest.mark.parametrize("spec", ["rope", "alibi", "shaw", "nope", "t5"])
def test_attention_with_positions_names_the_layout(spec):
    pe = posenc.build({"scheme": spec, "head_dim": D} if spec in ("rope", "shaw") else
                      {"scheme": spec, "num_heads": H} if spec in ("alibi", "t5") else spec)
    q, k, v = _blhd(0), _blhd(1), _blhd(2)
    pos = torch.arange(L)
    with pytest.raises(ValueError) as e:
        posenc.attention(q, k, v, pe, q_positions=pos, k_positions=pos)
    assert HINT in str(e.value) and ".transpose(1, 2)" in str(e.value), str(e.value)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    assert posenc.attention(q, k, v, pe, q_positions=pos, k_positions=pos).shape == (B, H, L, D)


@pytest.mark.parametrize("spec", [{"scheme": "alibi", "num_heads": H}, {"scheme": "fox", "num_heads": H, "d_model": H * D}])
def test_attention_without_positions_names_the_layout_by_the_heads(spec):
    pe = posenc.build(spec)
    x = _blhd()
    hidden = {"hidden": torch.randn(B, L, H * D)} if pe.kind == "content" else {}
    with pytest.raises(ValueError) as e:
        posenc.attention(x, x, x, pe, causal=True, **hidden)
    assert "num_heads" in str(e.value) and HINT in str(e.value) and "q.transpose(1, 2)" in str(e.value), str(e.value)


def test_no_layout_hint_when_the_other_reading_does_not_fit_either():
    cos, sin = _cos_sin()
    with pytest.raises(ValueError) as e:
        posenc.apply_rotary(torch.randn(B, L + 1, H, D), cos, sin)
    assert "transpose" not in str(e.value)
    pe = posenc.build({"scheme": "alibi", "num_heads": H + 1})
    with pytest.raises(ValueError) as e:
        posenc.attention(*(torch.randn(B, H, L, D),) * 3, pe)
    assert "transpose" not in str(e.value)


def test_the_triton_rotate_names_the_layout():
    rotary_triton = pytest.importorskip("posenc.rotary_triton")
    cos, sin = posenc.build({"scheme": "rope", "head_dim": D}).cos_sin(torch.arange(5))  # (5, D/2): 5 tokens
    x = torch.randn(B, 5, 16, D)  # (B, L, H, D), H = 16 > 5 rows: the checks run before the kernel
    with pytest.raises(ValueError) as e:
        rotary_triton.rotate(x, cos, sin)
    assert HINT in str(e.value) and "x.transpose(1, 2)" in str(e.value), str(e.value)
    with pytest.raises(ValueError) as e:
        rotary_triton.rotate(torch.randn(B, 6, 16, D), cos, sin)  # dim 1 does not fit the tables either
    assert "transpose" not in str(e.value)
