"""``posenc.attention(..., attention_mask=...)`` and grouped key/value heads (GQA/MQA), on every
backend and kind, against the float64 reference (``posenc.reference.attention``, which repeats the
key/value heads and masks pairs the obvious way) and, for gradients, against the materialized path
(itself checked by finite differences). Blocks are made tiny so that many blocks, the ragged last
ones and the rows a padding mask hides whole are crossed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
import posenc.attn
import posenc.blockwise as bw
from conftest import assert_directional_gradients, small_module
from posenc.reference.attention import attention as reference_attention

H, D = 4, 8  # conftest's SMALL sizes
BIAS = ["alibi", "t5", "kerple", "fire"]
RELATIVE = ["shaw", "transformer_xl"]
CONTENT = ["fox", "cope", "stick_breaking"]


@pytest.fixture
def tiny_blocks(monkeypatch):
    """Blocks of 5 queries x 7 keys (4 queries per fused call), chunks of a few rows."""
    monkeypatch.setattr(bw, "BLOCK_Q", 5)
    monkeypatch.setattr(bw, "BLOCK_K", 7)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 4)
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * H * 23 * 3)


def _qkv(b, h, h_kv, lq, lk, *, seed=0, grad=False):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, n_h, n, D, generator=g, dtype=torch.float64, requires_grad=grad)
            for n_h, n in ((h, lq), (h_kv, lk), (h_kv, lk))]


def _left_padding(b, lk, pads):
    """``[B, Lk]`` bool: row ``i`` has ``pads[i]`` padding keys first (as a left-padded batch)."""
    mask = torch.ones(b, lk, dtype=torch.bool)
    for i, n in enumerate(pads):
        mask[i, :n] = False
    return mask


def _masks(b, lq, lk, seed):
    """The forms an attention mask takes: key padding (bool and 0/1), 4D bool, 4D additive."""
    g = torch.Generator().manual_seed(seed)
    pad = _left_padding(b, lk, [lk - lq + 3, 0])
    pairs = torch.rand(b, 1, lq, lk, generator=g) < 0.7
    pairs[0, 0, 1] = False  # a row hidden whole
    additive = torch.randn(b, H, lq, lk, generator=g, dtype=torch.float64)
    additive = additive.masked_fill(torch.rand(b, H, lq, lk, generator=g) < 0.3, torch.finfo(torch.float64).min)
    additive[1, 2, 0] = float("-inf")
    return {"padding": pad, "padding 0/1": pad.long(), "4D bool": pairs, "4D additive": additive}


def _reference_of(mask, lq, lk):
    """(allowed, added) of a mask as NumPy, from its definition (``posenc.masking``)."""
    m = mask.numpy()
    if m.ndim == 2:
        return (m != 0)[:, None, None, :], None
    if m.dtype == bool:
        return m, None
    hidden = m <= np.finfo(np.float64).min
    return ~hidden, np.where(hidden, 0.0, m)


def _reference(q, k, v, pe, mask, *, causal, q_positions, k_positions, scale):
    lq, lk = q.shape[2], k.shape[2]
    qn, kn, vn = (t.detach().numpy() for t in (q, k, v))
    allowed, added = (None, None) if mask is None else _reference_of(mask, lq, lk)
    bias = None
    kind = "none" if pe is None else pe.kind
    qp, kp = q_positions.numpy(), k_positions.numpy()
    if kind == "rotary":
        qn, kn = pe.reference(qn, qp, role="query"), pe.reference(kn, kp, role="key")
    elif kind == "bias":
        bias = pe.reference(qp, kp)
    elif kind == "relative":  # k repeated to the query heads: relative terms read keys per head
        kn_h = np.repeat(kn, q.shape[1] // k.shape[1], axis=1)
        bias = pe.reference(qn, kn_h, qp, kp)
    if added is not None:
        bias = added if bias is None else bias + added
    return reference_attention(qn, kn, vn, bias=bias, causal=causal, scale=scale, allowed=allowed)


MASKED_SCHEMES = [None, "rope", *BIAS, "transformer_xl"]


@pytest.mark.parametrize("h_kv", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("form", ["padding", "padding 0/1", "4D bool", "4D additive"])
@pytest.mark.parametrize("name", MASKED_SCHEMES, ids=[str(n) for n in MASKED_SCHEMES])
def test_masks_and_grouped_heads_equal_the_reference(name, form, h_kv, tiny_blocks):
    """Every backend, causal with a KV cache (Lq < Lk) at an offset: the float64 reference to 1e-12."""
    b, lq, lk = 2, 17, 23
    pe = None if name is None else small_module(name).double()
    q, k, v = _qkv(b, H, h_kv, lq, lk, seed=3)
    mask = _masks(b, lq, lk, seed=4)[form]
    kp = torch.arange(lk) + 5
    qp = kp[lk - lq:]
    want = _reference(q, k, v, pe, mask, causal=True, q_positions=qp, k_positions=kp, scale=0.4)
    backends = ["materialize", "chunked"] + (["blockwise"] if pe is not None and pe.kind != "rotary" else [])
    for backend in backends:
        got = posenc.attention(q, k, v, pe, causal=True, q_positions=qp, k_positions=kp, scale=0.4,
                               attention_mask=mask, backend=backend)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-12, err_msg=f"{name} {backend}")


@pytest.mark.parametrize("h_kv", [4, 2, 1], ids=["MHA", "GQA", "MQA"])
@pytest.mark.parametrize("name", [None, "rope", *BIAS, *RELATIVE])
def test_grouped_heads_without_a_mask_equal_the_reference(name, h_kv, tiny_blocks):
    """GQA alone: SDPA's own path (none, rotary), the Toeplitz tables per group member (ALiBi, T5,
    KERPLE at contiguous positions), the fused tiles (FIRE), and the repeat of relative kinds."""
    b, lq, lk = 2, 23, 23
    pe = None if name is None else small_module(name).double()
    q, k, v = _qkv(b, H, h_kv, lq, lk, seed=5)
    pos = torch.arange(lk)
    want = _reference(q, k, v, pe, None, causal=True, q_positions=pos, k_positions=pos, scale=0.4)
    if name == "shaw":  # Shaw's own reference adds its value term
        want = pe.reference_attention(q.numpy(), np.repeat(k.numpy(), H // h_kv, 1), np.repeat(v.numpy(), H // h_kv, 1),
                                      pos.numpy(), pos.numpy(), causal=True, scale=0.4)
    backends = ["auto"] if pe is None or pe.kind == "rotary" else ["materialize", "chunked", "blockwise"]
    for backend in backends:
        got = posenc.attention(q, k, v, pe, causal=True, scale=0.4, backend=backend)
        np.testing.assert_allclose(got.detach().numpy(), want, rtol=0, atol=1e-12, err_msg=f"{name} {backend}")


def _grads(pe, q, k, v, w, **kw):
    inputs = [q, k, v, *([] if pe is None else [p for p in pe.parameters() if p.requires_grad])]
    out = posenc.attention(q, k, v, pe, **kw)
    return [out, *torch.autograd.grad((out * w).sum(), inputs, allow_unused=True)]


@pytest.mark.parametrize("loop", [False, True], ids=["fused tiles", "online-softmax loop"])
@pytest.mark.parametrize("form", ["padding", "4D bool", "4D additive"])
@pytest.mark.parametrize("h_kv", [4, 2], ids=["MHA", "GQA"])
@pytest.mark.parametrize("name", BIAS)
def test_blockwise_gradients_with_masks_and_groups_equal_the_materialized_path(name, h_kv, form, loop,
                                                                               tiny_blocks, monkeypatch):
    """Output and gradients of q, k, v and every parameter, float64 to 1e-9; the loop (other
    devices' forward) is forced on the CPU to reach it."""
    if loop:
        monkeypatch.setattr(bw, "_fused_forward", lambda q, bias: False)
    b, lq, lk = 2, 17, 23
    pe = small_module(name).double()
    q, k, v = _qkv(b, H, h_kv, lq, lk, seed=6, grad=True)
    w = torch.randn(b, H, lq, D, dtype=torch.float64)
    mask = _masks(b, lq, lk, seed=7)[form]
    kw = {"causal": True, "scale": 0.4, "attention_mask": mask}
    want = _grads(pe, q, k, v, w, backend="materialize", **kw)
    for backend in ("blockwise", "chunked"):
        got = _grads(pe, q, k, v, w, backend=backend, **kw)
        for i, (a, e) in enumerate(zip(got, want)):
            assert torch.isfinite(a).all(), f"{name} {backend} gradient {i} not finite"
            torch.testing.assert_close(a, e, rtol=0, atol=1e-9, msg=lambda m: f"{name} {backend} #{i}: {m}")


@pytest.mark.parametrize("name", [None, "alibi", "t5"])
def test_materialized_gradients_with_a_padding_mask_and_groups_match_finite_differences(name):
    pe = None if name is None else small_module(name).double()
    q, k, v = _qkv(2, H, 2, 9, 9, seed=8, grad=True)
    mask = _left_padding(2, 9, [3, 0])
    w = torch.randn(2, H, 9, D, dtype=torch.float64)
    leaves = {"q": q, "k": k, "v": v, **({} if pe is None else dict(pe.named_parameters()))}

    def loss():
        return (posenc.attention(q, k, v, pe, causal=True, attention_mask=mask, backend="materialize") * w).sum()

    loss().backward()
    assert_directional_gradients(leaves, loss, seed=9)


def _without_pads(x, pad):
    return x[:, :, pad:]


@pytest.mark.parametrize("h_kv", [4, 2], ids=["MHA", "GQA"])
@pytest.mark.parametrize("name", ["rope", *BIAS, *RELATIVE, *CONTENT])
def test_a_left_padded_row_equals_the_same_row_without_its_padding(name, h_kv, tiny_blocks):
    """For every kind: a row with ``n`` padding keys first gives, at its real tokens, what the
    unpadded sequence gives (its positions counted from its first real token), and zeros at the
    padded queries (under the causal mask they see no key); every backend of the kind."""
    lk, pads = 21, [6, 0]
    pe = small_module(name).double()
    q, k, v = _qkv(2, H, h_kv, lk, lk, seed=10)
    mask = _left_padding(2, lk, pads)
    content = pe.kind == "content"
    hidden = (torch.randn(2, lk, pe.d_model, dtype=torch.float64) if getattr(pe, "reads_hidden", False) else None)
    positions = torch.stack([(torch.arange(lk) - n).clamp(min=0) for n in pads])  # (B, Lk)
    pos = {} if content else {"q_positions": positions, "k_positions": positions}
    backends = {"content": ["materialize", "chunked", "blockwise"], "rotary": ["materialize", "chunked"]}.get(
        pe.kind, ["materialize", "chunked", "blockwise"])
    for backend in backends:
        out = posenc.attention(q, k, v, pe, causal=True, attention_mask=mask, backend=backend,
                               hidden=hidden, **pos)
        for i, n in enumerate(pads):
            row = slice(i, i + 1)
            alone = posenc.attention(
                q[row, :, n:], k[row, :, n:], v[row, :, n:], pe, causal=True, backend="materialize",
                hidden=None if hidden is None else hidden[row, n:],
                **({} if content else {"q_positions": positions[row, n:], "k_positions": positions[row, n:]}))
            torch.testing.assert_close(out[row, :, n:], alone, rtol=0, atol=1e-10,
                                       msg=lambda m: f"{name} {backend} row {i}: {m}")
            assert (out[row, :, :n] == 0).all(), f"{name} {backend}: padded queries must give zeros"


@pytest.mark.parametrize("backend", ["materialize", "chunked", "blockwise"])
@pytest.mark.parametrize("name", [None, "alibi", "cope"])
def test_a_query_that_sees_no_key_gives_zeros_and_zero_gradients(name, backend, tiny_blocks):
    pe = None if name is None else small_module(name).double()
    q, k, v = _qkv(1, H, H, 11, 11, seed=11, grad=True)
    mask = torch.ones(1, 1, 11, 11, dtype=torch.bool)
    mask[..., 4, :] = False
    out = posenc.attention(q, k, v, pe, causal=True, attention_mask=mask, backend=backend)
    assert (out[:, :, 4] == 0).all()
    gq, gk, gv = torch.autograd.grad(out.sum(), [q, k, v])
    assert all(torch.isfinite(g).all() for g in (gq, gk, gv))
    assert (gq[:, :, 4] == 0).all()


@pytest.mark.slow
@pytest.mark.xdist_group("compile")  # on the worker that has paid inductor's start (imports, ISA probes)
def test_flex_takes_padding_and_grouped_heads():
    """FlexAttention (forward, compiled on the CPU): a padding mask and grouped heads, against the
    float64 reference in float32's rounding."""
    pe = small_module("alibi")
    b, lq, lk = 2, 160, 160
    q, k, v = (t.float() for t in _qkv(b, H, 2, lq, lk, seed=12))
    mask = _left_padding(b, lk, [37, 0])
    pos = torch.arange(lk)
    want = _reference(q.double(), k.double(), v.double(), pe.double(), mask, causal=True, q_positions=pos,
                      k_positions=pos, scale=None)
    with torch.no_grad():
        got = posenc.attention(q, k, v, pe.float(), causal=True, attention_mask=mask, backend="flex")
    np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=2e-5)


def test_auto_picks_no_flex_for_a_mask_alone_on_the_cpu():
    q, k, v = _qkv(1, H, H, 2048, 2048, seed=0)
    mask = posenc.masking.check_attention_mask(torch.ones(1, 2048, dtype=torch.bool), b=1, h=H, lq=2048, lk=2048,
                                               device="cpu")
    with torch.no_grad():
        assert posenc.attn._choose_backend("auto", q.float(), k.float(), v.float(), None, None, mask) == "chunked"


@pytest.mark.parametrize("mask, error, words", [
    (torch.ones(2, 22, dtype=torch.bool), ValueError, "[B=2, Lk=23]"),
    (torch.ones(2, 23), TypeError, "bool or 0/1 integers"),
    (torch.full((2, 23), 2), ValueError, "only 0 (padding) and 1"),
    (torch.ones(2, 3, 17, 23, dtype=torch.bool), ValueError, "H=4 or 1"),
    (torch.ones(2, 1, 16, 23, dtype=torch.bool), ValueError, "Lq=17"),
    (torch.ones(17, 23, dtype=torch.bool).unsqueeze(0), ValueError, "[B, Lk] or a 4D mask"),
    (torch.ones(2, 1, 17, 23, dtype=torch.int32), TypeError, "bool (True: may see) or floating point"),
    (torch.full((2, 1, 17, 23), float("nan")), ValueError, "NaN"),
    ([[1] * 23] * 2, TypeError, "torch.Tensor"),
])
def test_bad_masks_are_refused_naming_the_shapes(mask, error, words):
    q, k, v = _qkv(2, H, H, 17, 23)
    with pytest.raises(error, match="attention_mask") as info:
        posenc.attention(q, k, v, causal=True, attention_mask=mask)
    assert words in str(info.value)


@pytest.mark.parametrize("h_kv", [3, 0, 8])
def test_key_value_heads_must_divide_the_query_heads(h_kv):
    q = torch.randn(1, 4, 5, D)
    k = v = torch.randn(1, h_kv, 5, D)
    with pytest.raises(ValueError, match=r"H_kv dividing H; got \[1, 4, 5, 8\], \[1, %d" % h_kv):
        posenc.attention(q, k, v)


def test_content_schemes_refuse_an_additive_mask():
    pe = small_module("cope").double()
    q, k, v = _qkv(1, H, H, 5, 5)
    mask = torch.zeros(1, 1, 5, 5, dtype=torch.float64)
    mask[..., 0] = 0.5
    with pytest.raises(ValueError, match="additive mask"):
        posenc.attention(q, k, v, pe, causal=True, attention_mask=mask)
