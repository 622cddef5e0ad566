"""The content kind (positions that depend on the tokens: fox, cope, dape, stick_breaking, path):
what a scheme reads is declared and checked, every backend is the materialized path with its
gradients, packed documents restart the count, decoding with a cache equals recomputation, and
the blockwise backend trains in bounded memory (a fresh process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import posenc
import posenc.rowwise as rowwise
from conftest import schemes_of_kind, small_module

CONTENT = schemes_of_kind("content")
ROOT = Path(__file__).resolve().parents[1]


def _module(name: str, seed: int = 0):
    m = small_module(name, seed=seed).double()
    with torch.no_grad():  # every parameter away from its start (CoPE's table starts at zeros)
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


def _inputs(m, lq: int, lk: int, *, batch: int = 2, seed: int = 0, grad: bool = False):
    g = torch.Generator().manual_seed(seed)
    h, d = getattr(m, "num_heads", None) or 4, getattr(m, "head_dim", None) or 8
    q = torch.randn(batch, h, lq, d, generator=g, dtype=torch.float64)
    k, v = (torch.randn(batch, h, lk, d, generator=g, dtype=torch.float64) for _ in range(2))
    hidden = torch.randn(batch, lk, m.d_model, generator=g, dtype=torch.float64) if m.reads_hidden else None
    tensors = [q, k, v] + ([hidden] if hidden is not None else [])
    for t in tensors:
        t.requires_grad_(grad)
    return q, k, v, hidden


def test_only_large_blocks_give_their_memory_back(monkeypatch):
    """glibc's ``malloc_trim`` costs about a millisecond: after a small block (a training step of
    the benchmark's model) it is not called, after blocks of ``TRIM_ELEMENTS`` scores it is, in the
    blockwise forward and backward and the chunked forward."""
    calls = []

    class Libc:
        def malloc_trim(self, pad):
            calls.append(pad)

    monkeypatch.setattr(rowwise, "_LIBC", Libc())
    monkeypatch.setattr(rowwise, "ROW_TRIM", True)
    m = _module("fox")
    q, k, v, hidden = _inputs(m, 16, 16, grad=True)
    posenc.attention(q, k, v, m, hidden=hidden, causal=True).sum().backward()  # materialized: 2·4·16·16 scores
    assert calls == []
    monkeypatch.setattr(rowwise, "TRIM_ELEMENTS", 2 * 4 * 4 * 12)  # blocks of 4 rows that read 12 keys or more
    monkeypatch.setattr(rowwise, "ROW_ELEMENTS", 2 * 4 * 16 * 4)
    posenc.attention(q, k, v, m, hidden=hidden, causal=True, backend="blockwise").sum().backward()
    assert len(calls) == 2 + 2  # the blocks of rows 8–11 and 12–15, forward and backward
    with torch.no_grad():
        posenc.attention(q, k, v, m, hidden=hidden, causal=True, backend="chunked")
    assert len(calls) == 4 + 2


@pytest.mark.parametrize("name", CONTENT)
def test_blockwise_output_and_gradients_equal_the_materialized_path(name, monkeypatch):
    """float64, several row blocks, packed documents and Lq < Lk: the output and the gradients into
    q, k, v, hidden and every parameter agree to 1e-9 (the backward recomputes each block)."""
    m = _module(name)
    docs = torch.tensor([0] * 8 + [1] * 10 + [2] * 5)
    results = {}
    for backend in ("materialize", "blockwise"):
        monkeypatch.setattr(rowwise, "ROW_ELEMENTS", 2 * 4 * 23 * 4)  # blocks of 4 rows
        q, k, v, hidden = _inputs(m, 17, 23, grad=True)
        m.zero_grad()
        out = posenc.attention(q, k, v, m, hidden=hidden, causal=True, document_ids=docs, backend=backend)
        out.backward(torch.cos(torch.arange(out.numel(), dtype=torch.float64)).view_as(out))
        inputs = [q, k, v] + ([hidden] if hidden is not None else [])
        results[backend] = [out.detach()] + [t.grad for t in inputs] + [p.grad.clone() for p in m.parameters()]
    for a, b in zip(*results.values()):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-9)


@pytest.mark.parametrize("name", CONTENT)
def test_packed_documents_equal_each_document_alone(name):
    """Gates, counts, survivals and positions restart at each document: the packed output equals
    each document attended alone."""
    m = _module(name)
    q, k, v, hidden = _inputs(m, 21, 21, seed=1)
    sizes = [6, 9, 6]
    docs = torch.repeat_interleave(torch.arange(3), torch.tensor(sizes))
    with torch.no_grad():
        packed = m(q, k, v, hidden, document_ids=docs)
        start = 0
        for n in sizes:
            part = slice(start, start + n)
            alone = m(q[:, :, part], k[:, :, part], v[:, :, part], None if hidden is None else hidden[:, part])
            torch.testing.assert_close(packed[:, :, part], alone, rtol=0, atol=1e-12)
            start += n


@pytest.mark.parametrize("name", CONTENT)
def test_decoding_with_a_cache_equals_recomputation(name):
    """One query at a time over the cached keys, values and hidden states equals the full pass."""
    m = _module(name)
    q, k, v, hidden = _inputs(m, 12, 12, seed=2)
    with torch.no_grad():
        full = posenc.attention(q, k, v, m, hidden=hidden, causal=True)
        for t in range(12):
            step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], m, causal=True,
                                    hidden=None if hidden is None else hidden[:, :t + 1])
            torch.testing.assert_close(step[:, :, 0], full[:, :, t], rtol=0, atol=1e-12)


# every content scheme, and stick-breaking's other reading (the query's own key among its keys)
VARIANTS = [(n, {}) for n in CONTENT] + [("stick_breaking", {"attend_current": True})]


def _variant(name, options):
    m = small_module(name, **options).double()
    with torch.no_grad():
        for p in m.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return m


@pytest.mark.parametrize("name, options", VARIANTS, ids=[f"{n}{''.join(f':{k}={v}' for k, v in o.items())}"
                                                         for n, o in VARIANTS])
@pytest.mark.parametrize("backend", ["auto", "materialize", "chunked", "blockwise"])
def test_a_block_that_sees_every_key_decodes_as_recomputing(name, options, backend, monkeypatch):
    """A decoding step (``Lq = 1``) sees every key: its block's visibility is still a bool map (never
    None) that the scheme's ``rows`` reads, and each step through the cache equals the full pass
    (stick-breaking with ``attend_current=True`` negated a None map: a TypeError at the first token)."""
    m = _variant(name, options)
    q, k, v, hidden = _inputs(m, 6, 6, seed=4)
    seen = []
    rows = m.rows
    monkeypatch.setattr(m, "rows", lambda *a, **kw: seen.append(a[5]) or rows(*a, **kw))
    with torch.no_grad():
        full = posenc.attention(q, k, v, m, hidden=hidden, causal=True, backend="materialize")
        for t in range(6):
            step = posenc.attention(q[:, :, t:t + 1], k[:, :, :t + 1], v[:, :, :t + 1], m, causal=True,
                                    hidden=None if hidden is None else hidden[:, :t + 1], backend=backend)
            torch.testing.assert_close(step[:, :, 0], full[:, :, t], rtol=0, atol=1e-12)
    assert seen and all(isinstance(a, torch.Tensor) and a.dtype == torch.bool for a in seen)


def test_what_a_scheme_reads_is_declared_and_checked():
    q = k = v = torch.randn(1, 4, 6, 8)
    fox = posenc.build({"scheme": "fox", "num_heads": 4, "d_model": 16})
    with pytest.raises(ValueError, match="reads the layer's input: pass hidden="):
        posenc.attention(q, k, v, fox, causal=True)
    with pytest.raises(ValueError, match=r"hidden must have shape \[B=1, Lk=6, 16\]"):
        posenc.attention(q, k, v, fox, causal=True, hidden=torch.randn(1, 5, 16))
    with pytest.raises(ValueError, match="last dimension 16"):
        posenc.attention(q, k, v, fox, causal=True, hidden=torch.randn(1, 6, 12))
    hidden = torch.randn(1, 6, 16)
    for pe in (posenc.build({"scheme": "cope", "head_dim": 8}), posenc.build({"scheme": "alibi", "num_heads": 4}),
               posenc.build({"scheme": "fox", "num_heads": 4, "gate": "bias_only"}), None):
        with pytest.raises(ValueError, match="hidden"):
            posenc.attention(q, k, v, pe, causal=True, hidden=hidden)
    with pytest.raises(ValueError, match="takes no q_positions"):
        posenc.attention(q, k, v, fox, causal=True, hidden=hidden, q_positions=torch.arange(6))
    with pytest.raises(ValueError, match="needs causal=True"):
        posenc.attention(q, k, v, fox, hidden=hidden)
    with pytest.raises(ValueError, match="num_heads=4 but q has 2 heads"):
        posenc.attention(q[:, :2], k[:, :2], v[:, :2], fox, causal=True, hidden=hidden)
    with pytest.raises(ValueError, match="backend='flex' needs a scheme whose score is elementwise"):
        posenc.attention(q, k, v, posenc.build("stick_breaking"), causal=True, backend="flex")
    with pytest.raises(ValueError, match="backend must be one of"):
        fox(q, k, v, hidden, backend="flex")  # the module's own backends; flex is posenc.attention's


@pytest.mark.slow
def test_blockwise_training_memory_is_bounded_in_a_fresh_process():
    """fwd+bwd at L=1024 (2 heads, head_dim 16, float32) on the blockwise backend with blocks of 64
    rows: after a warm-up call, the peak rises by less than eight [H, L, L] float32 maps for fox,
    cope, dape (kerple) and stick_breaking together (measured: 5.5). The materialized path holds
    about eleven such maps for fox or stick_breaking alone, and one of dape's [L, L, hidden=32]
    activations is sixteen."""
    code = r"""
import json, torch, posenc, posenc.rowwise as rowwise
from posenc.bench.memory import peak_rss_gb
rowwise.ROW_ELEMENTS = 1 << 17
torch.manual_seed(0)
h, L, d = 2, 1024, 16
q, k, v = (torch.randn(1, h, L, d, requires_grad=True) for _ in range(3))
hidden = torch.randn(1, L, 64, requires_grad=True)
specs = [{"scheme": "fox", "num_heads": h, "d_model": 64}, {"scheme": "cope", "head_dim": d},
         {"scheme": "dape", "num_heads": h}, {"scheme": "stick_breaking"}]
pes = [posenc.build(s) for s in specs]
def run(pe, n):
    out = posenc.attention(q[:, :, :n], k[:, :, :n], v[:, :, :n], pe, causal=True, backend="blockwise",
                           hidden=hidden[:, :n] if pe.reads_hidden else None)
    out.sum().backward()
for pe in pes:
    run(pe, 64)
before = peak_rss_gb()
for pe in pes:
    run(pe, L)
print(json.dumps({"rise_gb": peak_rss_gb() - before}))
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rise = json.loads(proc.stdout.splitlines()[-1])["rise_gb"]
    one_map = 2 * 1024 * 1024 * 4 / 2**30  # 8 MB
    assert rise < 8 * one_map, f"peak rose by {rise:.3f} GB"
