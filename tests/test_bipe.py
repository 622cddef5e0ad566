"""BiPE (``bipe``, ``bipe_bias``): bilevel positions from ``posenc.segment_positions``. The modules
against their float64 references (dtypes, odd lengths, offsets, batches), the official code's
definitions re-stated here (bilevel ids, the capped learned table, RoPE at the segment index,
ALiBi ×96 over segment indices), attention with positions from ``segment_positions``, cached
decoding equal to recomputing, gradients, ``posenc show bipe --text`` and bad input.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc.cli import main
from conftest import DTYPES, assert_close, attention_reference

SEPS = [[b".", b"\n"]]


def random_text(rng: random.Random, n: int) -> bytes:
    """Bytes with full stops and newlines at random places (segments of random lengths)."""
    return bytes(rng.choice(b"abc .\n" if rng.random() < 0.3 else b"abcdefgh ") for _ in range(n))


def bilevel_ids(ids: list[int], separators: set[int], train_scale: int) -> tuple[list[int], list[int]]:
    """The official ``get_bilevel_ids`` re-stated token by token: a separator is the last token of its
    segment; ``position_ids`` the segment index (uncapped), ``token_ids`` the offset capped at
    ``train_scale - 1``."""
    segment, offset, segments, offsets = 0, 0, [], []
    for t in ids:
        segments.append(segment)
        offsets.append(min(offset, train_scale - 1))
        if t in separators:
            segment, offset = segment + 1, 0
        else:
            offset += 1
    return offsets, segments


def official_slopes(n: int) -> list[float]:
    """ALiBi's slopes as the official code builds them (its ``get_slopes``), re-stated."""
    def power_of_2(m):
        start = 2 ** (-2 ** -(math.log2(m) - 3))
        return [start * start ** i for i in range(m)]
    if math.log2(n).is_integer():
        return power_of_2(n)
    p = 2 ** math.floor(math.log2(n))
    return power_of_2(p) + official_slopes(2 * p)[0::2][:n - p]


# -- the references ------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("length,offset", [(1, 0), (37, 0), (217, 500)])
def test_rotary_bipe_matches_its_reference(dtype, length, offset):
    rng = random.Random(length + offset)
    m = posenc.build({"scheme": "bipe", "d_model": 24, "head_dim": 16}).to(dtype)
    p, _ = posenc.segment_positions(random_text(rng, length), SEPS)
    p = p + torch.tensor([offset, 0])  # segments far from 0: the rotation is relative
    x = torch.randn(2, 3, length, 16).to(dtype)
    assert_close(m(x, p), m.reference(x.double().numpy(), p.numpy()), what=f"bipe {dtype}")
    assert_close(m.embedding(p), m.reference_embedding(p.numpy()), what="embedding")
    assert m.embedding(p).dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("inter", ["alibi", {"scheme": "t5", "num_buckets": 8}, "kerple"])
def test_bias_bipe_matches_its_reference_batched_and_with_fewer_queries(dtype, inter):
    rng = random.Random(7)
    m = posenc.build({"scheme": "bipe_bias", "d_model": 16, "num_heads": 4, "inter": inter,
                      "bias_scale": rng.uniform(0.5, 100)}).to(dtype)
    rows = [posenc.segment_positions(random_text(rng, 51), SEPS)[0] for _ in range(2)]
    p = torch.stack(rows)  # (2, 51, 2)
    assert_close(m(p[:, -5:], p), m.reference(p[:, -5:].numpy(), p.numpy()), what=str(inter))


def test_intra_parts_learned_capped_and_sinusoidal():
    rng = random.Random(3)
    p, _ = posenc.segment_positions(random_text(rng, 40) + b"x" * 30, SEPS)  # a long last segment
    learned = posenc.build({"scheme": "bipe", "d_model": 8, "head_dim": 8, "max_positions": 16})
    capped = p[:, 1].clamp(max=15)
    torch.testing.assert_close(learned.embedding(p), learned.intra.weight[capped], rtol=0, atol=0)
    assert int(p[:, 1].max()) > 15  # the cap was reached
    sin = posenc.build({"scheme": "bipe", "d_model": 8, "head_dim": 8, "intra": "sinusoidal", "max_positions": 16})
    assert_close(sin.embedding(p), ref.sinusoidal(p[:, 1].numpy(), 8))  # uncapped


# -- the official definitions -------------------------------------------------------------------

def test_positions_and_embedding_equal_the_official_bilevel_ids():
    rng = random.Random(11)
    ids = [rng.choice([869, 13, 5, 6, 7, 8, 9]) for _ in range(300)]
    offsets, segments = bilevel_ids(ids, {869, 13}, train_scale=8)
    m = posenc.build({"scheme": "bipe", "d_model": 4, "head_dim": 8, "max_positions": 8})
    p, _ = posenc.segment_positions(torch.tensor(ids), [[869, 13]])
    assert p[:, 0].tolist() == segments
    assert m.intra_positions(p).tolist() == offsets
    torch.testing.assert_close(m.embedding(p), m.intra.weight[torch.tensor(offsets)], rtol=0, atol=0)


def test_bipe_rope_is_rope_at_the_segment_index():
    rng = random.Random(5)
    p, _ = posenc.segment_positions(random_text(rng, 90), SEPS)
    m = posenc.build({"scheme": "bipe", "d_model": 8, "head_dim": 16, "inter": {"scheme": "rope", "base": 500.0}})
    rope = posenc.build({"scheme": "rope", "head_dim": 16, "base": 500.0})
    x = torch.randn(1, 2, 90, 16)
    torch.testing.assert_close(m(x, p), rope(x, p[:, 0]), rtol=0, atol=0)


@pytest.mark.parametrize("heads", [8, 12])  # 12: the official config's heads, not a power of two
def test_bipe_alibi_attention_equals_the_official_mul96_bias(heads):
    rng = random.Random(heads)
    text = random_text(rng, 70)
    p, _ = posenc.segment_positions(text, SEPS)
    m = posenc.build({"scheme": "bipe_bias", "d_model": 8, "num_heads": heads, "bias_scale": 96.0}).double()
    q, k, v = (torch.randn(1, heads, 70, 8, dtype=torch.float64) for _ in range(3))
    out = posenc.attention(q, k, v, m, q_positions=p, k_positions=p, causal=True)
    # the official attention: scores + slope·96·seg_k (one row for all queries), then the causal mask
    slopes = torch.tensor(official_slopes(heads), dtype=torch.float64) * 96
    scores = q @ k.transpose(-1, -2) / math.sqrt(8) + slopes.view(-1, 1, 1) * p[:, 0].double().view(1, 1, -1)
    scores = scores.masked_fill(~torch.ones(70, 70, dtype=torch.bool).tril(), float("-inf"))
    torch.testing.assert_close(out, scores.softmax(-1) @ v, rtol=1e-10, atol=1e-10)


# -- attention, decoding, gradients ---------------------------------------------------------------

@pytest.mark.parametrize("spec", [{"scheme": "bipe", "d_model": 8, "head_dim": 8},
                                  {"scheme": "bipe_bias", "d_model": 8, "num_heads": 2, "bias_scale": 4.0}],
                         ids=["rotary", "bias"])
@pytest.mark.parametrize("backend", ["auto", "chunked", "materialize"])
def test_attention_with_segment_positions_matches_the_reference(spec, backend):
    rng = random.Random(1)
    p, _ = posenc.segment_positions(random_text(rng, 73), SEPS)
    m = posenc.build(spec)
    q, k, v = (torch.randn(2, 2, 73, 8) for _ in range(3))
    out = posenc.attention(q, k, v, m, q_positions=p, k_positions=p, causal=True, backend=backend)
    assert_close(out, attention_reference(q, k, v, m, q_positions=p, k_positions=p, causal=True), magnitude=10)


@pytest.mark.parametrize("spec", [{"scheme": "bipe", "d_model": 8, "head_dim": 8},
                                  {"scheme": "bipe_bias", "d_model": 8, "num_heads": 2, "inter": "kerple"}],
                         ids=["rotary", "bias"])
def test_cached_decoding_equals_recomputing(spec):
    rng = random.Random(2)
    text = random_text(rng, 60)
    m = posenc.build(spec).double()
    whole, _ = posenc.segment_positions(text, SEPS)
    q, k, v = (torch.randn(1, 2, 60, 8, dtype=torch.float64) for _ in range(3))
    full = posenc.attention(q, k, v, m, q_positions=whole, k_positions=whole, causal=True)
    prompt = 41
    p, state = posenc.segment_positions(text[:prompt], SEPS)
    prefill = posenc.attention(q[:, :, :prompt], k[:, :, :prompt], v[:, :, :prompt], m, q_positions=p,
                               k_positions=p, causal=True)
    torch.testing.assert_close(prefill, full[:, :, :prompt], rtol=1e-12, atol=1e-12)
    for i in range(prompt, 60, 3):  # a few tokens at a time, positions continued with the state
        step, state = posenc.segment_positions(text[i:i + 3], SEPS, state=state)
        p = torch.cat([p, step])
        n = p.shape[0]
        out = posenc.attention(q[:, :, i:n], k[:, :, :n], v[:, :, :n], m, q_positions=step, k_positions=p,
                               causal=True)
        torch.testing.assert_close(out, full[:, :, i:n], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(p, whole, rtol=0, atol=0)


def test_gradients_reach_the_intra_table_and_a_learned_inter_bias():
    rng = random.Random(4)
    p, _ = posenc.segment_positions(random_text(rng, 20), SEPS)
    m = posenc.build({"scheme": "bipe_bias", "d_model": 4, "num_heads": 2, "inter": "kerple",
                      "max_positions": 6}).double()
    m.embedding(p).sum().backward()
    counts = torch.bincount(p[:, 1].clamp(max=5), minlength=6).double()
    torch.testing.assert_close(m.intra.weight.grad, counts[:, None].expand(6, 4))
    q, k, v = (torch.randn(1, 2, 20, 4, dtype=torch.float64, requires_grad=True) for _ in range(3))

    def f(q, k, v):
        return posenc.attention(q, k, v, m, q_positions=p, k_positions=p, causal=True)

    assert torch.autograd.gradcheck(f, (q, k, v))
    f(q, k, v).sum().backward()
    assert all(par.grad is not None and bool(par.grad.abs().sum() > 0) for par in m.inter.parameters())
    r = posenc.build({"scheme": "bipe", "d_model": 4, "head_dim": 4}).double()
    assert torch.autograd.gradcheck(lambda q, k, v: posenc.attention(q, k, v, r, q_positions=p, k_positions=p,
                                                                     causal=True), (q, k, v))


# -- show and bad input ------------------------------------------------------------------------------

def test_show_bipe_text_prints_each_tokens_segment_and_offset(capsys):
    assert main(["show", "bipe", "--text", "Hi. Yo\nok"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if "segment" in line and "offset" in line
            and line.lstrip().startswith("'")]
    assert [(r[-3], r[-1]) for r in rows] == [("0", "0"), ("0", "1"), ("0", "2"), ("1", "0"), ("1", "1"),
                                             ("1", "2"), ("1", "3"), ("2", "0"), ("2", "1")]


@pytest.mark.parametrize("spec,names", [
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "inter": "alibi"}, ["inter", "alibi", "bipe_bias"]),
    ({"scheme": "bipe_bias", "d_model": 8, "num_heads": 2, "inter": "rope"}, ["inter", "rope", "bipe"]),
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "intra": "rope"}, ["intra", "additive"]),
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "inter": "hirope"}, ["inter", "one-axis"]),
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "inter": {"scheme": "rope", "head_dim": 4}}, ["inter", "head_dim"]),
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "inter": {"scheme": "rope", "bse": 2.0}}, ["inter", "bse"]),
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "inter": 3}, ["inter"]),
    ({"scheme": "bipe_bias", "d_model": 8, "num_heads": 2, "bias_scale": 0.0}, ["bias_scale"]),
    ({"scheme": "bipe", "d_model": 8, "head_dim": 8, "max_positions": 0}, ["max_positions"]),
])
def test_bad_specs_are_refused_naming_the_parameter(spec, names):
    with pytest.raises((ValueError, TypeError)) as e:
        posenc.build(spec)
    for name in names:
        assert name in str(e.value), f"{name!r} not in: {e.value}"


def test_bad_positions_are_refused_naming_them():
    m = posenc.build({"scheme": "bipe", "d_model": 8, "head_dim": 8})
    with pytest.raises(ValueError, match="positions must have shape"):
        m(torch.randn(1, 1, 5, 8), torch.arange(5))  # one axis: (segment, offset) needed
    with pytest.raises(ValueError, match="positions must have shape"):
        m.embedding(torch.arange(5))
    with pytest.raises(TypeError, match="positions must have an integer dtype"):
        m.embedding(torch.zeros(5, 2))
    with pytest.raises(ValueError, match="non-negative"):
        m.embedding(torch.tensor([[0, -1]]))
