"""Packed documents (issue 8, item 10): ``posenc.packing`` and ``posenc.attention(...,
document_ids=...)``. A packed batch equals its documents run one by one, for every scheme and
kind, causal or not, on every backend; bad input is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc.documents import cumsum_in_documents, positions_in_documents
from posenc.positions import text_positions
from posenc.reference.fox import cumsum_in_documents as cumsum_in_documents_ref
import posenc.attn
from conftest import schemes_of_kind, small_module

APPLIED = schemes_of_kind("none", "rotary", "bias", "relative")
ROWS = ([5, 11, 1, 6], [12, 1, 10])  # two rows of 23 tokens, one-token documents included


def test_a_running_sum_restarts_in_each_document():
    """``cumsum_in_documents`` (the scan) is each document's own running sum (the float64
    reference, a loop over documents): a non-finite value stays in its document."""
    torch.manual_seed(0)
    docs = torch.stack([posenc.packing(r).document_ids for r in ROWS])  # (2, 23)
    x = torch.randn(2, 3, 23, dtype=torch.float64)
    x[0, 1, 7], x[1, 0, 3], x[1, 2, 5] = float("inf"), float("nan"), float("-inf")
    got = cumsum_in_documents(x, positions_in_documents(docs).unsqueeze(1))
    expected = cumsum_in_documents_ref(x.numpy(), docs.numpy())
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-14, atol=1e-14)
    assert torch.isfinite(got[0, 1, 16:]).all() and torch.isfinite(got[1, :, 12:]).all()
    one = torch.zeros(23, dtype=torch.long)  # a single document is the plain running sum
    torch.testing.assert_close(cumsum_in_documents(x[:1, :1], positions_in_documents(one)), x[:1, :1].cumsum(-1))


def test_packing_gives_positions_document_ids_and_cu_seqlens():
    pack = posenc.packing([3, 2, 4])
    assert pack.positions.tolist() == [0, 1, 2, 0, 1, 0, 1, 2, 3]
    assert pack.document_ids.tolist() == [0, 0, 0, 1, 1, 2, 2, 2, 2]
    assert pack.cu_seqlens.tolist() == [0, 3, 5, 9] and pack.cu_seqlens.dtype == torch.int32
    assert pack.max_seqlen == 4 and pack.lengths == [3, 2, 4]
    same = posenc.packing(cu_seqlens=torch.tensor([0, 3, 5, 9], dtype=torch.int32))
    for name in ("positions", "document_ids", "cu_seqlens"):
        assert torch.equal(getattr(same, name), getattr(pack, name))


def _packed_vs_separate(pe, *, causal, backend, explicit, dtype=torch.float64):
    h, d = (getattr(pe, "num_heads", None) or 4), (getattr(pe, "head_dim", None) or 8)
    packs = [posenc.packing(lengths) for lengths in ROWS]
    length = sum(ROWS[0])
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, h, length, d, generator=g, dtype=torch.float64).to(dtype) for _ in range(3))
    docs = torch.stack([p.document_ids for p in packs])  # (2, L)
    kw = {}
    if explicit:
        pos = text_positions(torch.stack([p.positions for p in packs]), getattr(pe, "axes", 1))  # (2, L[, A])
        kw = {"q_positions": pos, "k_positions": pos}
    out = posenc.attention(q, k, v, pe, causal=causal, backend=backend, document_ids=docs, **kw)
    for row, pack in enumerate(packs):
        for start, stop in zip(pack.cu_seqlens.tolist(), pack.cu_seqlens.tolist()[1:]):
            s = slice(start, stop)
            alone = posenc.attention(q[row:row + 1, :, s], k[row:row + 1, :, s], v[row:row + 1, :, s], pe,
                                     causal=causal, backend=backend)
            torch.testing.assert_close(out[row:row + 1, :, s], alone, msg=f"row {row} document {start}:{stop}")


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("name", APPLIED)
def test_a_packed_batch_equals_its_documents_one_by_one(name, causal, monkeypatch):
    """Materialized and chunked (chunks of 3 queries: a chunk spans documents), with the
    positions given and with the default ones (restarting in each document)."""
    monkeypatch.setattr(posenc.attn, "CHUNK_ELEMENTS", 2 * 4 * 23 * 3)
    pe = small_module(name).double()
    for backend, explicit in (("materialize", True), ("chunked", False)):
        _packed_vs_separate(pe, causal=causal, backend=backend, explicit=explicit)


@pytest.mark.xdist_group("compile")
def test_flex_keeps_attention_inside_documents():
    """FlexAttention with a document mask_mod and a block mask over 128-token blocks that are
    empty, partial and full: rows of 311 tokens packed differently, float32, ALiBi, causal; and
    rows of 120, where all keys fit in one block (there compiled CPU flex with a document mask is
    wrong in torch 2.13, and posenc takes chunked). Without a bias: tests/flex_loop.py."""
    name, causal = "alibi", True
    pe = small_module(name)
    for rows in (([100, 150, 61], [200, 5, 106]), ([40, 30, 50], [1, 119])):
        _flex_vs_separate(pe, rows, causal)


def _flex_vs_separate(pe, rows, causal):
    packs = [posenc.packing(lengths) for lengths in rows]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 4, sum(rows[0]), 8, generator=g) for _ in range(3))
    docs = torch.stack([p.document_ids for p in packs])
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, causal=causal, backend="flex", document_ids=docs)
        for row, pack in enumerate(packs):
            for start, stop in zip(pack.cu_seqlens.tolist(), pack.cu_seqlens.tolist()[1:]):
                s = slice(start, stop)
                alone = posenc.attention(q[row:row + 1, :, s], k[row:row + 1, :, s], v[row:row + 1, :, s], pe,
                                         causal=causal, backend="materialize")
                torch.testing.assert_close(out[row:row + 1, :, s], alone, rtol=1e-5, atol=1e-5)


# -- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, match", [
    (lambda: posenc.packing([3, 0, 2]), ValueError, r"doc_lengths\[1\] must be >= 1.*empty.*got 0"),
    (lambda: posenc.packing([]), ValueError, r"doc_lengths must name at least one document"),
    (lambda: posenc.packing(cu_seqlens=[0, 3, 3]), ValueError, r"cu_seqlens must be strictly increasing"),
    (lambda: posenc.packing(cu_seqlens=[1, 3]), ValueError, r"cu_seqlens must start at 0"),
    (lambda: posenc.packing([3], cu_seqlens=[0, 3]), TypeError, r"exactly one"),
    (lambda: posenc.packing(), TypeError, r"exactly one"),
    (lambda: posenc.packing([2.5]), TypeError, r"doc_lengths\[0\] must be an integer"),
    (lambda: posenc.packing("abc"), TypeError, r"doc_lengths must be a list of integers"),
])
def test_packing_refuses_bad_input(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize("ids, error, match", [
    (torch.tensor([0, 0, 1, 0, 1, 1]), ValueError, r"document_ids must be non-decreasing"),
    (torch.tensor([0, 0, 1, 1]), ValueError, r"document_ids has length 4 but the tensor has length 6"),
    (torch.zeros(6), TypeError, r"document_ids must have an integer dtype"),
    ([0, 0, 0, 1, 1, 1], TypeError, r"document_ids must be an integer torch.Tensor"),
    (torch.zeros(1, 1, 6, dtype=torch.long), ValueError, r"document_ids must have shape \[L\] or \[B, L\]"),
])
def test_attention_refuses_bad_document_ids(ids, error, match):
    q = torch.randn(1, 4, 6, 8)
    with pytest.raises(error, match=match):
        posenc.attention(q, q, q, small_module("alibi"), document_ids=ids)


def test_document_ids_need_queries_among_the_keys():
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 4, 4, 8)
    with pytest.raises(ValueError, match=r"document_ids needs Lq <= Lk"):
        posenc.attention(q, k, k, None, document_ids=torch.zeros(4, dtype=torch.long))
