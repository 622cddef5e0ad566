"""CoPE: parity with x-transformers' CoPE under its convention ("scaled") and with the official
code's formula (facebookresearch/RAM ``projects/cope``) under the other ("ram"), random weights and
several shapes; its positions count what the gates fire on (``posenc show cope``)."""

from __future__ import annotations

import functools
import math

import pytest
import torch

import posenc
from posenc.cli import main

SHAPES = [(1, 2, 7, 8, 3), (2, 3, 16, 4, 9), (1, 1, 33, 16, 40)]  # B, H, L, D, npos_max


def _cope(d: int, npos: int, convention: str, seed: int):
    torch.manual_seed(seed)
    m = posenc.build({"scheme": "cope", "head_dim": d, "npos_max": npos, "convention": convention}).double()
    with torch.no_grad():
        m.pos_emb.normal_()
    return m


@pytest.mark.parametrize("shape", SHAPES)
def test_equals_x_transformers_cope(shape):
    """x-transformers' Attend with its CoPE module (the appendix's convention: gates and the CoPE
    term on the scaled, masked scores), the same random embedding table."""
    from x_transformers.attend import Attend
    from x_transformers.x_transformers import CoPE as XCoPE

    b, h, length, d, npos = shape
    m = _cope(d, npos, "scaled", seed=length)
    peer = XCoPE(dim=d, heads=h, max_pos=npos).double()
    with torch.no_grad():
        peer.pos_emb.copy_(m.pos_emb)
    attend = Attend(causal=True, cope=peer).double()
    attend.attn_fn = functools.partial(torch.softmax, dim=-1)  # its softmax runs in float32; compare in float64
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) * 2 for _ in range(3))
    expected, _ = attend(q, k, v)
    torch.testing.assert_close(posenc.attention(q, k, v, m, causal=True), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_equals_the_official_formula(shape):
    """RAM's ``SelfAttn`` + ``CoPE``: ``attn_logits = q kᵀ + mask.log()``, ``+= cope(q, attn_logits)``
    (gates σ of the raw logits, reverse cumsum, clamp, interpolate ``q·pos_emb``), then ``/= √d``;
    one batch-head at a time, as its [batch, seq, head_dim] layout takes them."""
    b, h, length, d, npos = shape
    m = _cope(d, npos, "ram", seed=length + 1)
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) * 2 for _ in range(3))
    pos_emb = m.pos_emb.detach().t().unsqueeze(0)  # RAM's (1, head_dim, npos_max)
    mask = torch.ones(length, length, dtype=torch.float64).tril()
    expected = torch.empty_like(q)
    for bi in range(b):
        for hi in range(h):
            query, key, val = q[bi, hi][None], k[bi, hi][None], v[bi, hi][None]
            logits = torch.bmm(query, key.transpose(-1, -2)) + mask.log()
            gates = torch.sigmoid(logits)
            pos = gates.flip(-1).cumsum(dim=-1).flip(-1).clamp(max=npos - 1)
            pos_ceil, pos_floor = pos.ceil().long(), pos.floor().long()
            logits_int = torch.matmul(query, pos_emb)
            w = pos - pos_floor
            logits = logits + logits_int.gather(-1, pos_ceil) * w + logits_int.gather(-1, pos_floor) * (1 - w)
            expected[bi, hi] = torch.bmm(torch.softmax(logits / math.sqrt(d), dim=-1), val)[0]
    torch.testing.assert_close(posenc.attention(q, k, v, m, causal=True), expected, rtol=0, atol=1e-12)


def test_positions_count_what_the_gates_fire_on():
    m = posenc.build({"scheme": "cope", "head_dim": 4, "npos_max": 64})
    text = "ab cd. ef gh."
    spaces = [sum(ch == " " for ch in text[j:]) for j in range(len(text))]
    stops = [sum(ch == "." for ch in text[j:]) for j in range(len(text))]
    torch.testing.assert_close(m.sentence_positions(text, " "), torch.tensor(spaces, dtype=torch.float64))
    torch.testing.assert_close(m.sentence_positions(text, "."), torch.tensor(stops, dtype=torch.float64))


def test_show_cope_counts_words_and_sentences_of_a_typed_sentence(capsys):
    assert main(["show", "cope", "--length", "16", "--text", "One two. Three four five."]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in out.splitlines() if line.startswith("  '")}
    # 'One': 24 tokens back from the last character, 4 spaces and 2 full stops after it
    assert rows["'One'"][1:] == ["token", "24", "word", "4.00", "sentence", "2.00"]
    assert rows["'Three'"][1:] == ["token", "15", "word", "2.00", "sentence", "1.00"]
    with pytest.raises(SystemExit) as e:
        main(["show", "cope", "--text", " "])
    assert e.value.code == 2
    assert "--text must be a non-empty sentence" in capsys.readouterr().err


def test_convention_is_checked():
    with pytest.raises(ValueError, match="convention must be one of"):
        posenc.build({"scheme": "cope", "head_dim": 4, "convention": "paper"})
