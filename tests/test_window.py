"""``posenc.attention(..., window=W)``: sliding-window (local) attention on every backend and every
kind with a softmax, against the float64 reference (``posenc.reference.visibility_mask``: a query
sees keys at most ``W − 1`` positions back), forward and gradients, with documents, padding,
grouped heads and a cache offset (``Lq < Lk``); and the backends read one definition of the mask.

The gradients are checked along random directions against central differences of the reference
(``assert_directional_gradients``). Blocks are tiny, so every backend's tiles, chunks and key
ranges are exercised at these small lengths.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import posenc
import posenc.attn
import posenc.blockwise as bw
import posenc.scores
from posenc import reference as ref
from conftest import assert_close, assert_directional_gradients, small_module

H, H_KV, D = 4, 2, 8
BACKENDS = ("materialize", "chunked", "blockwise")
SCHEMES = (None, "rope", "alibi", "t5", "transformer_xl")
# (causal, window, Lq, Lk, documents, padding): a cache offset everywhere but the last
CASES = {
    "documents+padding": (True, 3, 7, 12, [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2], True),
    "window-only": (True, 4, 9, 13, None, False),
    "bidirectional+padding": (False, 2, 10, 10, None, True),
}


@pytest.fixture(autouse=True)
def tiny_blocks(monkeypatch):
    monkeypatch.setattr(bw, "BLOCK_Q", 3)
    monkeypatch.setattr(bw, "BLOCK_K", 4)
    monkeypatch.setattr(bw, "FUSED_BLOCK_Q", 2)
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * H * 13 * 2)  # two query rows per chunk


def _inputs(lq: int, lk: int, padding: bool, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(2, H, lq, D, generator=g, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(2, H_KV, lk, D, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(2))
    keys = None
    if padding:  # row 0 left-padded by 3 (its first queries may see no key), row 1 whole
        keys = torch.ones(2, lk, dtype=torch.bool)
        keys[0, :3] = False
    return q, k, v, keys


def _reference(pe, q, k, v, *, causal, window, docs, keys) -> np.ndarray:
    """The float64 reference of ``posenc.attention`` at the default positions (keys ``0..Lk-1``,
    queries the last ``Lq``), the mask from ``ref.visibility_mask`` and the padding."""
    qn, kn, vn = (t.detach().numpy() for t in (q, k, v))
    lq, lk = qn.shape[2], kn.shape[2]
    qp, kp = np.arange(lk - lq, lk), np.arange(lk)
    allowed = ref.visibility_mask(lq, lk, causal=causal, window=window, document_ids=docs)
    if keys is not None:
        allowed = allowed & keys.numpy()[:, None, None, :]
    bias = None
    kind = "none" if pe is None else pe.kind
    if kind == "rotary":
        qn, kn = pe.reference(qn, qp, role="query"), pe.reference(kn, kp, role="key")
    elif kind == "bias":
        bias = pe.reference(qp, kp)
    elif kind == "relative":  # its term reads keys per query head
        bias = pe.reference(qn, np.repeat(kn, H // H_KV, axis=1), qp, kp)
    return ref.attention(qn, kn, vn, bias=bias, allowed=allowed, scale=0.5)


def _positions(lq, lk):
    """Explicit default positions, so that documents do not restart them (the reference's)."""
    return {"q_positions": torch.arange(lk - lq, lk), "k_positions": torch.arange(lk)}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("name", SCHEMES, ids=lambda n: n or "nope")
@pytest.mark.parametrize("backend", BACKENDS)
def test_window_matches_the_reference_forward_and_gradients(backend, name, case):
    causal, window, lq, lk, docs, padding = CASES[case]
    pe = None if name is None else small_module(name).double()
    q, k, v, keys = _inputs(lq, lk, padding)
    ids = None if docs is None else torch.tensor(docs)
    kw = dict(causal=causal, window=window, document_ids=ids, attention_mask=keys, scale=0.5, backend=backend,
              **_positions(lq, lk))
    out = posenc.attention(q, k, v, pe, **kw)
    want = _reference(pe, q, k, v, causal=causal, window=window, docs=docs, keys=keys)
    assert_close(out, want, what=f"{backend} {name} {case}")
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (out * w).sum().backward()
    wn = w.numpy()

    def loss():
        return float((_reference(pe, q, k, v, causal=causal, window=window, docs=docs, keys=keys) * wn).sum())

    assert_directional_gradients({"q": q, "k": k, "v": v}, loss, seed=5)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")  # eager on purpose, below
@pytest.mark.parametrize("name, window, docs, padding", [("alibi", 60, [0] * 100 + [1] * 70 + [2] * 30, True),
                                                         (None, 100, None, False)], ids=("alibi", "nope"))
def test_window_on_flex(monkeypatch, name, window, docs, padding):
    """FlexAttention's mask_mod and block tables with a window (forward, float32; ``flex_attention``
    run eagerly here, as compiling it is slow on the CPU), with documents, padding, grouped heads
    and a cache offset: 200 keys in two flex blocks, the first skipped (alibi: outside the window)
    or partial, the second partial or whole (nope)."""
    monkeypatch.setattr(posenc.attn, "_compiled_flex", lambda key: posenc.attn._flex_call)
    lq, lk = 5, 200
    pe = None if name is None else small_module(name)
    q, k, v, keys = _inputs(lq, lk, padding)
    q, k, v = (t.detach().float() for t in (q, k, v))
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, causal=True, window=window, scale=0.5, backend="flex",
                               document_ids=None if docs is None else torch.tensor(docs), attention_mask=keys,
                               **_positions(lq, lk))
    want = _reference(pe, q, k, v, causal=True, window=window, docs=docs, keys=keys)
    assert_close(out, want, what=f"flex {name}")


@pytest.mark.parametrize("backend", BACKENDS)
def test_window_on_a_content_scheme(backend):
    """FoX (a content scheme: its own softmax) with a window, documents, grouped heads and a cache
    offset, against ``reference.fox`` with its window, forward and gradients."""
    pe = small_module("fox", gate="bias_only").double()
    lq, lk, window = 7, 12, 3
    docs = [0, 0, 0, 0, 1, 1, 1, 1, 1, 2, 2, 2]
    q, k, v, _ = _inputs(lq, lk, False)
    out = posenc.attention(q, k, v, pe, causal=True, window=window, document_ids=torch.tensor(docs), scale=0.5,
                           backend=backend)

    def reference():
        kn, vn = (np.repeat(t.detach().numpy(), H // H_KV, axis=1) for t in (k, v))
        return pe.reference(q.detach().numpy(), kn, vn, scale=0.5, document_ids=np.array(docs), window=window)

    assert_close(out, reference(), what=f"fox {backend}")
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    (out * w).sum().backward()
    assert_directional_gradients({"q": q, "k": k, "v": v}, lambda: float((reference() * w.numpy()).sum()), seed=5)


def test_window_is_checked_and_refused_where_it_cannot_apply():
    q = k = v = torch.randn(1, H, 5, D)
    with pytest.raises(TypeError, match="window must be an int"):
        posenc.attention(q, k, v, window=True)
    with pytest.raises(ValueError, match="window must be >= 1"):
        posenc.attention(q, k, v, window=0)
    with pytest.raises(ValueError, match="window needs Lq <= Lk"):
        posenc.attention(torch.randn(1, H, 6, D), k, v, window=2)
    with pytest.raises(ValueError, match="stick_breaking' takes no window=.*no softmax"):
        posenc.attention(q, k, v, small_module("stick_breaking"), causal=True, window=2)


def test_window_of_the_whole_length_changes_nothing():
    """A window as long as the keys hides nothing: the same numbers as no window (SDPA's path)."""
    q, k, v, _ = _inputs(6, 9, False)
    pe = small_module("rope").double()
    with torch.no_grad():
        torch.testing.assert_close(posenc.attention(q, k, v, pe, causal=True, window=9),
                                   posenc.attention(q, k, v, pe, causal=True), rtol=0, atol=1e-12)


# -- one definition of the mask ------------------------------------------------------------------

BACKEND_MODULES = ("attn.py", "blockwise.py", "rowwise.py", "scores.py")
# comparisons that decide which key a query sees: a key index against a query's (causal, window),
# document ids against each other, and the removed per-backend helpers that held them
OWN_MASKS = (re.compile(r"arange\([^()]*\)\s*(<=|>=|<|>)|\b(ki|kv_idx)\s*(<=|>=|<|>)\s*(qi|q_idx)"),
             re.compile(r"(docs|kdoc|ids)\[[^\]]*\]\s*=="),
             re.compile(r"def (_causal_allowed|_allowed|_visible|_block_mask|_key_end|_masked|block_mask)\("))


def test_no_backend_derives_its_own_mask():
    """The backends read ``posenc.masking.Visibility``; none compares key and query indices or
    documents itself (grep level). The patterns do find the comparisons in masking.py."""
    root = Path(posenc.__file__).parent
    for name in BACKEND_MODULES:
        text = (root / name).read_text(encoding="utf-8")
        found = [p.pattern for p in OWN_MASKS if p.search(text)]
        assert not found, f"posenc/{name} derives a mask itself ({found}): read posenc.masking.Visibility"
    masking = (root / "masking.py").read_text(encoding="utf-8")
    assert OWN_MASKS[1].search(masking) and "offsets_allowed" in masking
