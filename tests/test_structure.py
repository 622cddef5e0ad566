"""Positions from structure (``posenc.segment_positions`` and its token-by-token NumPy reference):
the rules on hand-worked examples, the vectorised builder against the reference on random streams
(levels, multi-token separators, documents, batches, odd lengths), cached decoding with a state
equal to the whole stream, BiPE's bilevel ids (He et al., ICML 2024) re-stated from the official
definition, bad inputs; and randomized positions (Ruoss et al., ACL 2023).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc.reference.positions import SegmentState

PARAGRAPHS_SENTENCES = [[b"\n\n"], [b".", b"\n"]]


def _both(tokens, separators, **kw):
    """The torch builder and the reference on the same input, checked equal (positions and state)."""
    expected, state_ref = ref.segment_positions(tokens, separators, **kw)
    got, state = posenc.segment_positions(tokens, separators, **kw)
    assert got.dtype == torch.int64 and expected.dtype == np.int64
    np.testing.assert_array_equal(got.numpy(), expected)
    assert state == state_ref
    return expected, state


# -- the rules, by hand ---------------------------------------------------------------------------

def test_one_level_separator_ends_its_segment():
    p, _ = _both(b"Hi. Yo.", [[b"."]])
    assert p.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [1, 3]]


def test_paragraphs_and_sentences_by_hand():
    text = b"A. B\n\nC."
    p, state = _both(text, PARAGRAPHS_SENTENCES)
    #          A          .          ' '        B          \n         \n         C          .
    assert p.tolist() == [[0, 0, 0], [0, 0, 1], [0, 1, 0], [0, 1, 1], [0, 1, 2], [0, 2, 0], [1, 0, 0], [1, 0, 1]]
    # the first \n ends a sentence; the second completes \n\n: the paragraph (the outer level wins) ends,
    # and the next paragraph's sentences count from 0 again
    assert state.ended == (1,) and state.indices == ((1, 0),) and state.offset == (1,) and state.tail == ((46,),)


def test_overlapping_occurrences_each_end_a_segment():
    p, _ = _both(b"a\n\n\nb", [[b"\n\n"]])
    assert p[:, 0].tolist() == [0, 0, 0, 1, 2]  # \n\n completes at the 2nd and again at the 3rd \n
    assert p[:, 1].tolist() == [0, 1, 2, 0, 0]


def test_code_blocks_and_lines():
    code = b"x = 1\ny = 2\n\ndef f():\n    pass\n"
    p, _ = _both(code, [b"\n\n", b"\n"])
    lines = code.split(b"\n")
    starts = [i for i in range(len(code)) if i == 0 or code[i - 1:i] == b"\n"]
    assert [p[i].tolist() for i in starts] == [[0, 0, 0], [0, 1, 0], [0, 2, 0], [1, 0, 0], [1, 1, 0]]
    assert p[starts[1] + len(lines[1]), 2] == len(lines[1])  # a line's \n is its last token


def test_token_ids_levels_and_a_token_at_the_start():
    p, _ = _both([7, 3, 7, 7, 9, 3, 7], [3, [9]])
    assert p.tolist() == [[0, 0, 0], [0, 0, 1], [1, 0, 0], [1, 0, 1], [1, 0, 2], [1, 1, 0], [2, 0, 0]]


def test_documents_restart_and_never_share_a_separator():
    tokens = b"a.b\nc.d"
    docs = [0, 0, 0, 0, 1, 1, 1]
    p, _ = _both(tokens, [[b"\nc"], [b"."]], document_ids=docs)
    assert p[4].tolist() == [0, 0, 0]  # a document's first token
    # \n|c spans the documents: not a separator; c. in document 1 is
    assert p[:, 0].tolist() == [0] * 7
    for start, stop in ((0, 4), (4, 7)):
        alone, _ = ref.segment_positions(tokens[start:stop], [[b"\nc"], [b"."]])
        np.testing.assert_array_equal(p[start:stop], alone)


# -- the vectorised builder against the reference -----------------------------------------------

def _random_separators(rng: np.random.Generator, vocab: int) -> list:
    """1-3 levels of ids and short byte strings over a small vocabulary (so that they occur), distinct."""
    seen, levels = set(), []
    for _ in range(int(rng.integers(1, 4))):
        level = []
        for _ in range(int(rng.integers(1, 3))):
            n = int(rng.choice([1, 1, 2, 3]))
            seq = tuple(int(x) for x in rng.integers(0, vocab, n))
            if seq in seen:
                continue
            seen.add(seq)
            level.append(seq[0] if n == 1 and rng.random() < 0.5 else bytes(seq))
        if level:
            levels.append(level if len(level) > 1 or rng.random() < 0.5 else level[0])
    return levels


@pytest.mark.parametrize("seed", range(12))
def test_torch_equals_the_reference_on_random_streams(seed):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(3, 7))
    separators = _random_separators(rng, vocab)
    length = int(rng.choice([0, 1, 2, 31, 217]))
    batch = [None, 1, 3][seed % 3]
    shape = (length,) if batch is None else (batch, length)
    tokens = rng.integers(0, vocab, shape)
    docs = np.sort(rng.integers(0, 4, shape), axis=-1)
    _both(tokens, separators)
    _both(torch.from_numpy(tokens).to(torch.int32), separators, document_ids=torch.from_numpy(docs))
    if batch is not None and length:
        _both(tokens, separators, document_ids=docs[0])  # [L] ids: the same documents in every row


@pytest.mark.parametrize("seed", range(10))
def test_cached_decoding_with_a_state_equals_the_whole_stream(seed):
    rng = np.random.default_rng(100 + seed)
    vocab = int(rng.integers(3, 6))
    separators = _random_separators(rng, vocab)
    batch, length = int(rng.integers(1, 4)), int(rng.integers(1, 90))
    tokens = rng.integers(0, vocab, (batch, length))
    docs = np.sort(rng.integers(0, 3, (batch, length)), axis=-1)
    whole, whole_state = ref.segment_positions(tokens, separators, document_ids=docs)
    cuts = sorted(set(rng.integers(0, length + 1, int(rng.integers(1, 6))).tolist()) | {length - 1})
    for builder in (posenc.segment_positions, ref.segment_positions):
        state, parts = None, []
        for lo, hi in zip([0, *cuts], [*cuts, length]):
            p, state = builder(tokens[:, lo:hi], separators, document_ids=docs[:, lo:hi], state=state)
            parts.append(np.asarray(p))
        np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
        assert state == whole_state


def test_decoding_one_token_at_a_time_finds_a_separator_split_across_calls():
    text = b"one\n\ntwo. three\n\nfour"
    whole, _ = ref.segment_positions(text, PARAGRAPHS_SENTENCES)
    state, rows = None, []
    for i in range(len(text)):
        p, state = posenc.segment_positions(text[i:i + 1], PARAGRAPHS_SENTENCES, state=state)
        rows.append(p)
    np.testing.assert_array_equal(torch.cat(rows).numpy(), whole)
    assert whole[text.index(b"four"), 0] == 2  # both \n\n found, each split over two calls


def test_the_reference_continues_a_torch_state_and_back():
    rng = np.random.default_rng(7)
    tokens = rng.integers(0, 4, (2, 60))
    separators = [[b"\x01\x02"], [3, b"\x00\x00"]]
    whole, _ = ref.segment_positions(tokens, separators)
    a, s = posenc.segment_positions(tokens[:, :25], separators)
    b, s = ref.segment_positions(tokens[:, 25:41], separators, state=s)
    c, _ = posenc.segment_positions(torch.from_numpy(tokens[:, 41:]), separators, state=s)
    np.testing.assert_array_equal(np.concatenate([a.numpy(), b, c.numpy()], axis=1), whole)


def test_without_document_ids_a_continued_stream_stays_in_its_document():
    tokens = b"a.b\nc.d.e"
    docs = [3, 3, 3, 4, 4, 4, 4, 4, 4]
    whole, _ = ref.segment_positions(tokens, [[b"."]], document_ids=docs)
    head, state = posenc.segment_positions(tokens[:5], [[b"."]], document_ids=docs[:5])
    rest, _ = posenc.segment_positions(tokens[5:], [[b"."]], state=state)  # continues document 4
    np.testing.assert_array_equal(torch.cat([head, rest]).numpy(), whole)


# -- BiPE (He et al., ICML 2024): get_bilevel_ids of the official code, re-stated -----------------

BIPE_SEPARATORS = (869, 13)
"""The Llama tokenizer's "▁." and "<0x0A>" (newline): the tokens ``get_bilevel_ids`` ends segments at."""


def bipe_bilevel_ids(ids: np.ndarray, train_scale: int) -> tuple[np.ndarray, np.ndarray]:
    """BiPE's bilevel ids of a batch ``[B, L]``, re-stated from the official definition: a token is a
    separator when it is one of ``BIPE_SEPARATORS``; its segment ("position ids", the inter-segment
    positions) is the number of separators strictly before it in its row; its intra-segment position
    ("token ids") is its distance to the token after the last separator before it (the row's start
    if none), capped at ``train_scale - 1``. Each row is a sequence of its own."""
    sep = np.isin(ids, BIPE_SEPARATORS)
    segment = np.cumsum(sep, axis=1) - sep
    t = np.arange(ids.shape[1])
    last_sep = np.maximum.accumulate(np.where(sep, t, -1), axis=1)  # the last separator at or before t
    before = np.concatenate([np.full((ids.shape[0], 1), -1), last_sep[:, :-1]], axis=1)  # strictly before
    return np.minimum(t - before - 1, train_scale - 1), segment


def test_bipe_by_hand():
    ids = [[5, 869, 7, 13, 13, 9]]
    offsets, segments = bipe_bilevel_ids(np.array(ids), train_scale=1024)
    assert segments.tolist() == [[0, 0, 1, 1, 2, 3]] and offsets.tolist() == [[0, 1, 0, 1, 0, 0]]
    p, _ = posenc.segment_positions(ids, [list(BIPE_SEPARATORS)])
    assert p.tolist() == [[[0, 0], [0, 1], [1, 0], [1, 1], [2, 0], [3, 0]]]


@pytest.mark.parametrize("seed", range(6))
def test_segment_positions_are_bipes_bilevel_ids(seed):
    rng = np.random.default_rng(200 + seed)
    batch, length = int(rng.integers(1, 5)), int(rng.choice([1, 17, 300]))
    ids = rng.integers(0, 32000, (batch, length))
    ids[rng.random((batch, length)) < rng.uniform(0.01, 0.3)] = rng.choice(BIPE_SEPARATORS)
    train_scale = int(rng.integers(2, 40))
    offsets, segments = bipe_bilevel_ids(ids, train_scale)
    p, _ = posenc.segment_positions(torch.from_numpy(ids), [list(BIPE_SEPARATORS)])
    assert p.shape == (batch, length, 2)
    np.testing.assert_array_equal(p[..., 0].numpy(), segments)
    np.testing.assert_array_equal(p[..., 1].clamp(max=train_scale - 1).numpy(), offsets)


# -- bad inputs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("separators, error, text", [
    ([], ValueError, "separators must name at least one level"),
    (b".", TypeError, "separators must be a list with one entry per level"),
    (13, TypeError, "separators must be a list"),
    ([[]], ValueError, "separators[0] must name at least one separator"),
    ([[b""]], ValueError, "separators[0][0] must be a non-empty byte string"),
    (["."], TypeError, "separators[0] must be a token id (an integer) or a byte string, got '.' (str); encode"),
    ([[b"."], [1.5]], TypeError, "separators[1][0] must be a token id"),
    ([[True]], TypeError, "separators[0][0] must be a token id"),
    ([[b"."], [b".", b"\n"]], ValueError, "separators[1][0]=b'.' is also a separator of level 0"),
])
def test_bad_separators_are_refused(separators, error, text):
    for builder in (posenc.segment_positions, ref.segment_positions):
        with pytest.raises(error, match=re.escape(text)):
            builder(b"a.b", separators)


@pytest.mark.parametrize("tokens, kw, error, text", [
    ("a.b", {}, TypeError, "tokens must be token ids or a byte string, got a str"),
    (torch.tensor([1.0, 2.0]), {}, TypeError, "tokens must have an integer dtype"),
    (np.array([1.0, 2.0]), {}, TypeError, "tokens must be integer token ids"),
    (torch.zeros(2, 2, 2, dtype=torch.long), {}, ValueError, "tokens must have shape [L] or [B, L], got shape [2, 2, 2]"),
    (b"a.b", {"document_ids": [0, 0]}, ValueError, "document_ids must have shape [3] (that of tokens), got shape [2]"),
    (b"a.b", {"document_ids": [[0, 0, 0]]}, ValueError, "document_ids must have shape [3]"),
    (np.zeros((2, 3), np.int64), {"document_ids": np.zeros((3, 3), np.int64)}, ValueError,
     "document_ids must have shape [3] or [2, 3]"),
    (b"a.b", {"document_ids": [0, 1, 0]}, ValueError, "document_ids must be non-decreasing along L"),
    (b"a.b", {"document_ids": [0.0, 0.0, 0.0]}, TypeError, "document_ids must hold integers"),
    (b"a.b", {"state": "abc"}, TypeError, "state must be the state a previous segment_positions call returned"),
])
def test_bad_tokens_documents_and_states_are_refused(tokens, kw, error, text):
    builders = [posenc.segment_positions] + ([ref.segment_positions] if not isinstance(tokens, torch.Tensor) else [])
    for builder in builders:
        with pytest.raises(error, match=re.escape(text)):
            builder(tokens, [[b"."]], **kw)


def test_a_state_of_another_stream_is_refused():
    _, state = posenc.segment_positions(b"a.b", [[b"."]], document_ids=[2, 2, 2])
    for builder in (posenc.segment_positions, ref.segment_positions):
        with pytest.raises(ValueError, match=r"state comes from another separators set"):
            builder(b"c", [[b"!"]], state=state)
        with pytest.raises(ValueError, match=re.escape("state continues tokens of shape [L], but tokens has shape [2, L]")):
            builder(np.zeros((2, 3), np.int64), [[b"."]], state=state)
        with pytest.raises(ValueError, match="row 0 ended in document 2, but this call starts it at document 1"):
            builder(b"c", [[b"."]], document_ids=[1], state=state)
    assert isinstance(state, SegmentState)


# -- randomized positions (Ruoss et al., ACL 2023) --------------------------------------------------

def test_randomized_positions_are_sorted_distinct_and_in_range():
    p = posenc.randomized_positions(40, 2048, batch=64, seed=3)
    assert p.dtype == torch.int64 and p.shape == (64, 40)
    assert bool((p.diff(dim=-1) > 0).all())  # sorted and distinct
    assert int(p.min()) >= 0 and int(p.max()) < 2048
    assert len({tuple(r) for r in p.tolist()}) == 64  # one sample per row
    one = posenc.randomized_positions(7, 9, seed=0)
    assert one.shape == (7,) and bool((one.diff() > 0).all()) and int(one.max()) < 9
    assert posenc.randomized_positions(5, 5, batch=2, seed=1).tolist() == [list(range(5))] * 2
    assert posenc.randomized_positions(0, 5).shape == (0,)


def test_randomized_positions_are_seeded():
    a = posenc.randomized_positions(10, 100, batch=3, seed=11)
    assert torch.equal(a, posenc.randomized_positions(10, 100, batch=3, seed=11))
    assert not torch.equal(a, posenc.randomized_positions(10, 100, batch=3, seed=12))
    g1, g2 = torch.Generator().manual_seed(5), torch.Generator().manual_seed(5)
    first = posenc.randomized_positions(10, 100, generator=g1)
    assert torch.equal(first, posenc.randomized_positions(10, 100, generator=g2))
    assert not torch.equal(posenc.randomized_positions(10, 100, generator=g1), first)  # the generator advanced


def test_randomized_positions_are_uniform():
    """Every position is drawn with probability L/M, and every L-subset is equally likely: chi-square
    statistics on a fixed seed, below the 0.1% critical value of their degrees of freedom."""
    rows = 6000
    p = posenc.randomized_positions(3, 10, batch=rows, seed=0)
    counts = np.bincount(p.flatten().numpy(), minlength=10)
    expected = rows * 3 / 10
    assert ((counts - expected) ** 2 / expected).sum() < 27.88  # chi-square, 9 degrees of freedom, p = 0.001
    pairs = posenc.randomized_positions(2, 5, batch=rows, seed=1)
    codes = (pairs[:, 0] * 5 + pairs[:, 1]).numpy()
    subsets = np.array([np.sum(codes == i * 5 + j) for i in range(5) for j in range(i + 1, 5)])
    assert subsets.sum() == rows
    assert ((subsets - rows / 10) ** 2 / (rows / 10)).sum() < 27.88  # 10 subsets: 9 degrees of freedom


def test_randomized_positions_transform_any_schemes_positions():
    pack = posenc.packing([4, 6])
    sample = posenc.randomized_positions(6, 64, seed=2)
    moved = sample[pack.positions]  # per-document positions through one increasing sample
    assert moved[:4].tolist() == sample[:4].tolist() and moved[4:].tolist() == sample.tolist()


@pytest.mark.parametrize("args, kw, error, text", [
    ((5, 4), {}, ValueError, "length=5 must be <= max_positions=4"),
    ((-1, 4), {}, ValueError, "length must be >= 0"),
    ((2, 0), {}, ValueError, "max_positions must be >= 1"),
    ((2.0, 4), {}, TypeError, "length must be an integer"),
    ((2, 4), {"batch": 0}, ValueError, "batch must be >= 1"),
    ((2, 4), {"seed": 1, "generator": torch.Generator()}, TypeError, "generator or seed, not both"),
    ((2, 4), {"generator": 3}, TypeError, "generator must be a torch.Generator"),
    ((2, 4), {"seed": -1}, ValueError, "seed must be >= 0"),
    ((2, 1 << 50), {}, ValueError, "max_positions=1125899906842624 needs"),
])
def test_randomized_positions_refuse_bad_arguments(args, kw, error, text):
    with pytest.raises(error, match=re.escape(text)):
        posenc.randomized_positions(*args, **kw)
