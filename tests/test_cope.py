"""CoPE: parity with x-transformers' CoPE under its convention ("scaled"), with the paper's equations
("paper", alias "ram"), and with facebookresearch/RAM's ``ContextPosSelfAttn`` re-stated from its
definition (its default: "ram_code"; with ``--cope-nodiv``: "scaled"), random weights and several
shapes; every convention against the float64 reference (dtypes, documents, gradients); sizes
bounded at build time; its positions count what the gates fire on (``posenc show cope``)."""

from __future__ import annotations

import functools
import math

import pytest
import torch

import posenc
from conftest import DTYPES, assert_close, assert_directional_gradients
from posenc.cli import main
from posenc.encodings._base import to_numpy
from posenc.reference.cope import ALIASES, CONVENTIONS, FORMULAS, cope as cope_ref

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


@pytest.mark.parametrize("convention", ["paper", "ram"])
@pytest.mark.parametrize("shape", SHAPES)
def test_paper_convention_is_the_papers_equations(shape, convention):
    """The paper's ``g = σ(q·k)``, ``a = softmax(q·(k + e(p)))``, the score divided by ``√d`` as
    usual: ``attn_logits = q kᵀ + mask.log()``, ``+= q·e(p)`` (gates σ of the raw logits, reverse
    cumsum, clamp, interpolate ``q·pos_emb``), then ``/= √d``; one batch-head at a time. ``"ram"``
    (posenc's old name for it) builds the same model."""
    b, h, length, d, npos = shape
    m = _cope(d, npos, convention, seed=length + 1)
    assert m.convention == "paper"
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) * 2 for _ in range(3))
    pos_emb = m.pos_emb.detach().t().unsqueeze(0)  # (1, head_dim, npos_max)
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


def _rams_code(q, k, v, table, *, nodiv: bool):
    """RAM's ``ContextPosSelfAttn.forward`` re-stated from its definition (``projects/cope``, the
    default path: gates from the query and its own key, no ``--cope-sep-key``/``--cope-val-gates``),
    query by query in float64: ``gate_j = σ(q·k_j / √d)`` for the keys ``j ≤ i`` (the mask zeroes
    the others), ``p_j = min(Σ_{t ≥ j} gate_t, npos − 1)``, ``q·e`` interpolated at ``p_j``; then
    ``(q·k + q·e(p)) / √d`` or, with ``--cope-nodiv``, ``q·k / √d + q·e(p)``; softmax over ``j ≤ i``."""
    b, h, length, d = q.shape
    npos = table.shape[0]
    out = torch.empty_like(q)
    for bi in range(b):
        for hi in range(h):
            for i in range(length):
                qi, keys = q[bi, hi, i], k[bi, hi, :i + 1]  # (D,), (i + 1, D)
                raw = keys @ qi  # (i + 1,)
                gates = torch.sigmoid(raw / math.sqrt(d))
                counted = torch.stack([gates[j:].sum() for j in range(i + 1)]).clamp(max=npos - 1)
                at_integers = table @ qi  # (npos,): q·e[n]
                lower, frac = counted.floor(), counted - counted.floor()
                upper = counted.ceil()
                term = at_integers[upper.long()] * frac + at_integers[lower.long()] * (1 - frac)
                logits = raw / math.sqrt(d) + term if nodiv else (raw + term) / math.sqrt(d)
                out[bi, hi, i] = torch.softmax(logits, -1) @ v[bi, hi, :i + 1]
    return out


@pytest.mark.parametrize("nodiv", [False, True], ids=["default", "cope-nodiv"])
@pytest.mark.parametrize("shape", SHAPES)
def test_equals_rams_code(shape, nodiv):
    """``"ram_code"`` is what RAM's code computes by default (gates on ``q·k/√d``, ``q·e(p)`` added
    before dividing), so its released models reproduce; ``--cope-nodiv`` is ``"scaled"`` (alias
    ``"ram_nodiv"``). The two differ from each other and from ``"paper"`` at these inputs."""
    b, h, length, d, npos = shape
    q, k, v = (torch.randn(b, h, length, d, dtype=torch.float64) * 2 for _ in range(3))
    outs = {}
    for convention in ("scaled", "ram_nodiv") if nodiv else ("ram_code",):
        m = _cope(d, npos, convention, seed=length + 2)
        expected = _rams_code(q, k, v, m.pos_emb.detach(), nodiv=nodiv)
        outs[convention] = posenc.attention(q, k, v, m, causal=True)
        torch.testing.assert_close(outs[convention], expected, rtol=0, atol=1e-12)
    paper = _cope(d, npos, "paper", seed=length + 2)
    assert not torch.allclose(posenc.attention(q, k, v, paper, causal=True), expected, atol=1e-6)


@pytest.mark.parametrize("convention", FORMULAS)
@pytest.mark.parametrize("dtype", (torch.float64, *DTYPES), ids=str)
def test_every_convention_equals_the_reference(convention, dtype):
    """Module = float64 reference (on the inputs rounded to ``dtype``), packed documents and
    ``Lq < Lk``, every backend; the tolerance of ``dtype``."""
    m = _cope(8, 6, convention, seed=3)
    g = torch.Generator().manual_seed(4)
    q = torch.randn(2, 3, 9, 8, generator=g, dtype=torch.float64).to(dtype)
    k, v = (torch.randn(2, 3, 14, 8, generator=g, dtype=torch.float64).to(dtype) for _ in range(2))
    docs = torch.tensor([0] * 6 + [1] * 8)
    expected = cope_ref(to_numpy(q), to_numpy(k), to_numpy(v), to_numpy(m.pos_emb), convention=convention,
                        document_ids=docs.numpy())
    m = m.to(dtype)
    for backend in ("materialize", "chunked", "blockwise"):
        with torch.no_grad():
            out = posenc.attention(q, k, v, m, causal=True, document_ids=docs, backend=backend)
        assert out.dtype == dtype
        # float64 to rounding; the others computed in float32 on scores of size ~8, cast at the end
        assert_close(out, expected, magnitude=None if dtype == torch.float64 else 8.0, what=f"{convention} {backend}")


@pytest.mark.parametrize("convention", FORMULAS)
def test_gradients_of_every_convention_are_the_references(convention):
    """The gradients into q, k, v and the table (blockwise, packed documents) equal the central
    differences of the float64 reference along random directions."""
    m = _cope(4, 5, convention, seed=5)
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 2, 10, 4, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    docs = torch.tensor([0] * 4 + [1] * 6)
    weights = torch.randn(1, 2, 10, 4, generator=g, dtype=torch.float64)
    out = posenc.attention(q, k, v, m, causal=True, document_ids=docs, backend="blockwise")
    (out * weights).sum().backward()

    def loss():
        ref = cope_ref(to_numpy(q), to_numpy(k), to_numpy(v), to_numpy(m.pos_emb), convention=convention,
                       document_ids=docs.numpy())
        return float((ref * weights.numpy()).sum())

    assert_directional_gradients({"q": q, "k": k, "v": v, "pos_emb": m.pos_emb}, loss, seed=7)


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


def test_convention_is_checked_and_its_aliases_name_formulas():
    with pytest.raises(ValueError, match="convention must be one of 'paper', 'ram_code', 'scaled', 'ram', "
                                         "'ram_nodiv'; got 'Ram'"):
        posenc.build({"scheme": "cope", "head_dim": 4, "convention": "Ram"})
    with pytest.raises(ValueError, match="convention must be one of"):
        cope_ref(torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), torch.zeros(1, 1, 2, 4), torch.zeros(3, 4),
                 convention="x_transformers")
    assert CONVENTIONS == FORMULAS + tuple(ALIASES) and set(ALIASES.values()) <= set(FORMULAS)
    for name in CONVENTIONS:
        m = posenc.build({"scheme": "cope", "head_dim": 4, "convention": name})
        assert m.convention == ALIASES.get(name, name) and posenc.build(m.spec).convention == m.convention
    assert posenc.build({"scheme": "cope", "head_dim": 4}).spec["convention"] == "paper"  # the default, as before


@pytest.mark.parametrize("key", ["npos_max", "head_dim"])
@pytest.mark.parametrize("value", [2**63, 10**12])
def test_sizes_are_bounded_before_anything_is_allocated(key, value, monkeypatch):
    """``npos_max`` or ``head_dim`` too large for memory: a ValueError naming the parameter, its
    value and the bound (the process's memory), before the table is allocated (not torch's
    ``zeros(): Overflow``, nor the registry's "not enough memory" with the whole spec)."""
    spec = {"scheme": "cope", "head_dim": 4, "npos_max": 4, key: value}

    def refuse(*args, **kwargs):
        raise AssertionError("allocated before the sizes were checked")

    monkeypatch.setattr(torch, "zeros", refuse)
    with pytest.raises(ValueError) as e:
        posenc.build(spec)
    message = str(e.value)
    assert message.startswith(f"{key}={value} needs ") and "of memory this process can use" in message
    assert "{" not in message  # no spec dump
