"""The order demonstration: without position only a permutation, with it different outputs."""

from __future__ import annotations

import numpy as np
import pytest

from posenc import analysis, demo, registry


@pytest.fixture(scope="module")
def rows():
    return demo.order_demo()


@pytest.mark.xdist_group("demo")  # `rows` is built once per worker: one worker
def test_one_row_per_registered_scheme_then_the_recurrent_layers(rows):
    assert [r["scheme"] for r in rows] == [*registry.schemes(), "gru", "ssm"]
    assert all(r["kind"] == registry.get(r["scheme"]).kind for r in rows[:-2])
    assert [r["kind"] for r in rows[-2:]] == ["recurrent", "recurrent"]


@pytest.mark.xdist_group("demo")  # `rows` is built once per worker: one worker
def test_nope_only_permutes_and_every_positional_scheme_separates(rows):
    for r in rows:
        kind = r["kind"]
        if kind == "none":
            assert r["permutation_only"] and r["distance"] < 1e-12
        elif r["scheme"] == "pope":  # δ = 0 at build: Σ μμ cos((t − s)θ) is even in t − s, so, as a symmetric
            assert r["permutation_only"], r  # bias, it cannot tell a sentence from its reversal unmasked
            assert r["distance_start"] > 1e-6, r
        elif kind in ("additive", "rotary"):
            assert not r["permutation_only"] and r["distance"] > 1e-6, r
        elif kind == "recurrent":  # no position at all, yet not a permutation: the state knows order
            assert not r["permutation_only"] and min(r["distance"], r["distance_start"]) > 1e-3, r
            assert r["distance_causal"] == r["distance"]  # a recurrence is causal by construction
        elif kind == "bias":
            # the second sentence is the first reversed: a bias of |i − j| alone cannot tell them apart
            maps = analysis.bias_maps(r["scheme"], length=3, num_heads=demo.NUM_HEADS, dim=demo.D_MODEL)
            symmetric = np.allclose(maps, maps.transpose(0, 2, 1))
            assert r["permutation_only"] == symmetric, r
        elif kind != "content":  # content: causal below (DAPE over a symmetric bias is only permuted
            assert r["distance"] > 1e-6, r  # without a mask, as its bias is)
        assert r["distance_causal"] > 1e-6  # a causal mask alone reveals order, even to NoPE


def test_permutation_is_exact_without_position():
    """NoPE's outputs for the second sentence are the first's, reordered word by word."""
    import torch

    from posenc.demo import SENTENCES, _outputs, _weights

    emb, proj = _weights(3)
    pe = analysis.build("nope")
    a, b = (_outputs(s, pe, emb, proj, causal=False) for s in SENTENCES)
    assert all(torch.allclose(a[w], b[w], atol=1e-12) for w in SENTENCES[0])
    assert not torch.allclose(a["dog"], a["man"])  # and the words themselves differ


def test_start_token_breaks_the_reversal_symmetry():
    """After "<s>" the sentences are no longer reversals: every scheme tells them apart, NoPE cannot."""
    rows = {r["scheme"]: r for r in demo.order_demo(["nope", "alibi", "kerple", "rope"], seed=1)}
    assert rows["nope"]["distance_start"] < 1e-9
    for name in ("alibi", "kerple", "rope"):
        assert rows[name]["distance_start"] > 1e-3, name


@pytest.mark.xdist_group("demo")  # `rows` is built once per worker: one worker
def test_seeded_and_formatted(rows):
    again = demo.order_demo(["sinusoidal", "rope:base=100"], seed=0)
    assert again[0]["distance"] == next(r["distance"] for r in rows if r["scheme"] == "sinusoidal")
    assert again[1]["label"] == "rope (base=100)"
    text = demo.format_order_table(rows)
    lines = text.splitlines()
    assert lines[0].split()[:2] == ["scheme", "kind"]
    for r in rows:
        assert any(line.startswith(r["label"] + " ") for line in lines)


@pytest.mark.parametrize("name", ["gru", "ssm"])
def test_recurrent_outputs_differ_beyond_a_permutation(name):
    """The same word gets another output after another prefix; the first word's output is the
    layer's on that word alone, so it equals the last word's only if order did not matter."""
    import torch

    from posenc.demo import SENTENCES, _recurrent_layer, _recurrent_outputs, _weights

    emb, _ = _weights(2)
    layer = _recurrent_layer(name, 2)
    with torch.no_grad():
        a, b = (_recurrent_outputs(s, layer, emb) for s in SENTENCES)
        alone = _recurrent_outputs(("dog",), layer, emb)["dog"]
    assert torch.allclose(a["dog"], alone, atol=1e-12)  # first in "dog bites man": nothing before it
    assert not torch.allclose(b["dog"], alone, atol=1e-3)  # last in "man bites dog": its prefix changed it
    assert not torch.allclose(a["bites"], b["bites"])  # the middle word too: "dog" vs "man" before it


def test_recurrent_rows_are_named_in_the_table_with_the_reason():
    text = demo.format_order_table(demo.order_demo(["nope", "gru", "ssm"]))
    assert "gru, ssm: no positional encoding, yet the outputs differ" in text
    assert "state at step t is built from the steps before it in order" in text


def test_the_table_defines_every_column_and_says_why_nope_separates_under_a_causal_mask():
    text = demo.format_order_table(demo.order_demo(["nope", "rope", "alibi"]))
    header = text.splitlines()[0].split("  ")
    columns = [c.strip() for c in header if c.strip()][2:]
    assert columns == [name for name, _ in demo.COLUMNS] == ["distance", "only permuted?", "with <s>", "causal"]
    for name in columns:  # each column defined in the output itself
        assert f"\n{name}: " in text, name
    assert "a causal decoder counts how many tokens precede it" in text
    assert "not comparable across schemes" in text
