"""The evaluation protocol (every length scores the same held-out targets), the block statistics,
and the generated tasks (answers checked against an independent computation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.stats import estimates as stats
from posenc.extrapolate import task_generators as T
from posenc.extrapolate.data import (DOC_BYTES, HELDOUT_DOCS, Corpus, Document, lcm_lengths, load_corpus, overlap,
                                     split, stdlib_files, substring_hashes, windows)
from posenc.extrapolate.distributed import Dist
from posenc.extrapolate.parts.lm import lm_block_nll
from posenc.extrapolate.model import GPTConfig, TinyGPT, token_nll

LENGTHS = [16, 24, 32, 64, 128]


def _scored(n: int, length: int, mode: str) -> list[int]:
    """Target indices (1..n) each window scores, in order."""
    out = []
    for w in windows(n, length, mode):
        out += [w.start + j + 1 for j in range(w.score_from, w.length)]
    return out


@pytest.mark.parametrize("mode", ["nonoverlap", "sliding"])
def test_every_length_scores_each_target_exactly_once(mode):
    n = lcm_lengths(LENGTHS) * 2
    for length in LENGTHS:
        scored = _scored(n, length, mode)
        assert sorted(scored) == list(range(1, n + 1)), length


def test_sliding_windows_give_every_later_target_half_a_window_of_context():
    n, length = 256, 32
    for w in windows(n, length, "sliding")[1:]:
        assert w.score_from == length // 2  # context of a scored target >= length/2 tokens
    with pytest.raises(ValueError, match="even"):
        windows(33 * 4, 33, "sliding")
    with pytest.raises(ValueError, match="multiple"):
        windows(100, 32, "nonoverlap")


def _random_docs(count: int, size: int, seed: int) -> list[bytes]:
    rng = np.random.default_rng(seed)
    return [bytes(rng.integers(97, 123, size, dtype=np.uint8)) for _ in range(count)]


def test_split_holds_out_a_multiple_of_every_length_and_keeps_documents_on_one_side():
    docs = _random_docs(40, 300, 0)
    corpus = Corpus(tuple(Document(f"d{i}", d) for i, d in enumerate(docs)), "test")
    lm = split(corpus, heldout_tokens=1000, lengths=[16, 24, 32])
    assert lm.n_heldout == 960  # the largest multiple of lcm(16, 24, 32) = 96 below 1000
    held, train = bytes(lm.heldout.tolist()), bytes(lm.train.tolist())
    names = lm.info["heldout_names"]
    assert lm.info["documents_heldout"] == len(names) >= HELDOUT_DOCS  # at most 1/8 of the stream per document
    for i, d in enumerate(docs):
        assert (f"d{i}" in names) != (d in train), i  # every document on exactly one side
    pieces = [held[i:i + 121] for i in range(0, 961, 121)]  # ceil(961 / 8) = 121 bytes from each document
    assert all(p in docs[int(n[1:])] for p, n in zip(pieces, names))
    assert lm.info["bytes_train"] == len(train) and lm.info["overlap_128"] == 0.0
    with pytest.raises(ValueError, match="need at least"):
        split(Corpus.from_bytes(b"x" * 2000, "small"), heldout_tokens=1000, lengths=[16, 24, 32])


def test_overlap_counts_every_heldout_string_found_in_training():
    """Against a brute-force set of substrings."""
    rng = np.random.default_rng(1)
    train = bytes(rng.integers(97, 100, 3000, dtype=np.uint8))  # 3 letters: many short repeats
    held = train[500:700] + bytes(rng.integers(97, 100, 300, dtype=np.uint8))
    for k in (4, 32, 128):
        seen = {train[i:i + k] for i in range(len(train) - k + 1)}
        expect = np.mean([held[i:i + k] in seen for i in range(len(held) - k + 1)])
        assert overlap(held, train, k) == pytest.approx(expect, abs=1e-12), k
    held = train[500:700] + b"Z" * 300  # no Z in training: only the 73 strings inside the copy match
    assert overlap(held, train, 128) == pytest.approx((200 - 127) / (500 - 127))
    with pytest.raises(ValueError, match="power of 2"):
        substring_hashes(b"abc", 3)


def test_draw_drops_copies_and_keeps_near_copies_out_of_the_heldout_stream(tmp_path):
    """A generated corpus with an exact copy, a near copy (one byte changed) and a document sharing
    20% of its bytes with another: the first two are dropped, the third is kept but never held out."""
    docs = _random_docs(60, DOC_BYTES - 1, 2)
    near = bytearray(docs[3])
    near[100] ^= 1
    shared = docs[5][:800] + _random_docs(1, DOC_BYTES - 801, 3)[0]  # 20% of it is docs[5]
    text = b"\n".join([*docs, docs[1], bytes(near), shared]) + b"\n"
    path = tmp_path / "corpus.txt"
    path.write_bytes(text)
    corpus = load_corpus(str(path), max_bytes=len(text), seed=0)
    assert corpus.dropped_exact == 1 and corpus.dropped_near == 1
    assert len(corpus.documents) == 61
    again = load_corpus(str(path), max_bytes=len(text), seed=0)
    other = load_corpus(str(path), max_bytes=len(text), seed=1)
    assert again.sha256 == corpus.sha256 != other.sha256  # the draw is fixed by the seed
    lm = split(corpus, heldout_tokens=8000, lengths=[16, 32])
    assert lm.info["overlap_128"] == 0.0
    tail = {d.name for d in corpus.documents[-5:]}
    assert set(lm.info["heldout_names"]) - tail, "held-out documents come from across the file, not its end"
    assert {docs[5], shared} <= {d.data[:-1] for d in corpus.documents}  # 20% shared is not a near copy
    # drawn first, the pair sharing 800 bytes still goes to training: it would contaminate the stream
    first = Corpus(tuple(Document(f"d{i}", d) for i, d in enumerate([docs[5], shared, *docs[7:20]])), "t")
    lm = split(first, heldout_tokens=8000, lengths=[16, 32])
    assert lm.info["heldout_names"][:2] == ["d2", "d3"] and lm.info["overlap_128"] == 0.0
    assert overlap(docs[5], shared, 128) > 0.15


def test_block_nll_equals_the_direct_computation():
    """The per-block means from windows equal the NLL computed window by window by hand."""
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=1, n_head=2, n_embd=16), {"scheme": "alibi", "num_heads": 2}).eval()
    g = torch.Generator().manual_seed(0)
    corpus = Corpus.from_bytes(bytes(torch.randint(0, 256, (4000,), generator=g).tolist()), "random", doc_bytes=64)
    lm = split(corpus, heldout_tokens=256, lengths=[16, 32])
    for mode, length in (("nonoverlap", 16), ("sliding", 32)):
        blocks = lm_block_nll(model, lm, length, mode, eval_tokens=64, dist=Dist())
        total = torch.zeros(lm.n_heldout + 1, dtype=torch.float64)
        with torch.no_grad():
            for w in windows(lm.n_heldout, length, mode):
                x = lm.heldout[w.start:w.start + length + 1].long().unsqueeze(0)
                nll = token_nll(model(x[:, :-1]), x[:, 1:])[0].double()
                total[w.start + 1 + w.score_from: w.start + 1 + length] = nll[w.score_from:]
        expect = total[1:].view(-1, lm.block).mean(1)
        torch.testing.assert_close(blocks, expect, rtol=1e-9, atol=1e-9)


def test_paired_difference_removes_the_texts_variation():
    """Blocks of very different difficulty: a constant gap between two schemes is measured exactly."""
    base = np.array([float(i % 7) for i in range(20)])
    table = stats.LMTable({"a": {"nonoverlap": {8: {0: base}}}, "b": {"nonoverlap": {8: {0: base + 0.1}}}}, {}, [8], 8)
    d = table.diff(("a", 8), ("b", 8))
    assert abs(d.mean + 0.1) < 1e-12 and d.se < 1e-12
    assert table.estimate("a", "nonoverlap", 8).se > 0.3  # the unpaired spread is large
    lo, hi = table.estimate("a", "nonoverlap", 8).ppl_interval()
    assert lo < math.exp(sum(base) / 20) < hi


def test_stdlib_corpus_is_found_and_a_missing_file_is_named():
    assert stdlib_files(), "the standard library's sources should be present"
    c = load_corpus(None, max_bytes=10_000)
    assert len(c) >= 10_000 and c.source.startswith("stdlib:")
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_corpus("/nonexistent/nope.txt", max_bytes=10)


def _answer(tokens: list[int], first: int) -> list[int]:
    return tokens[first:-1]


@pytest.mark.parametrize("task", T.ALGORITHMIC)
@pytest.mark.parametrize("n", [1, 3, 9])
def test_task_examples_are_right(task, n):
    g = torch.Generator().manual_seed(n)
    for _ in range(20):
        tokens, first = T.example(task, n, g)
        assert len(tokens) == T.seq_len(task, n)
        assert tokens[0] == T.TASK_TOKEN[task] and tokens[first - 1] == T.SEP and tokens[-1] == T.EOS
        prompt, answer = tokens[1:first - 1], _answer(tokens, first)
        if task == "copy":
            assert answer == prompt
        elif task == "reverse":
            assert answer == prompt[::-1]
        elif task == "sort":
            assert answer == sorted(prompt)
        elif task == "add":
            a, b = prompt[:n], prompt[n + 1:]
            assert prompt[n] == T.PLUS
            as_int = lambda ds: int("".join(map(str, ds[::-1])))  # noqa: E731  least-significant digit first
            assert as_int(answer) == as_int(a) + as_int(b)
        else:
            at = prompt.index(T.KEY)
            assert answer == prompt[at + 1: at + 1 + T.PASSKEY_DIGITS]
            assert sum(t in T.FILLERS for t in prompt) == 4 * n


def test_batches_mask_only_the_answer_and_eval_examples_are_fixed():
    b = T.collate([T.example("copy", 2, torch.Generator().manual_seed(0)), T.example("add", 3, torch.Generator())])
    # copy of 2: [COPY a b SEP a b EOS] -> targets a b SEP a b EOS; scored: a b EOS (the last three)
    assert b.mask[0].tolist()[:6] == [False, False, False, True, True, True]
    assert b.tokens[0, 7:].eq(T.PAD).all() and not b.mask[0, 6:].any()
    x, y = T.eval_batch("sort", 5, count=4, seed=0), T.eval_batch("sort", 5, count=4, seed=0)
    assert torch.equal(x.tokens, y.tokens)
    assert not torch.equal(x.tokens, T.eval_batch("sort", 5, count=4, seed=1).tokens)


def test_posenc_data_prints_the_split_and_its_contamination(capsys, tmp_path):
    import json

    from posenc.cli import main

    assert main(["data", "--profile", "smoke", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["profile"] == "smoke" and info["documents_heldout"] >= HELDOUT_DOCS
    assert 0.0 <= info["overlap_32"] <= 1.0 and info["overlap_128"] <= 0.01
    assert info["bytes_heldout"] == 257 and info["bytes_train"] > 3 * 257
    assert main(["data", "--profile", "smoke"]) == 0
    assert "overlap_128" in capsys.readouterr().out
    assert main(["data", "--corpus", str(tmp_path / "missing.txt")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "missing.txt" in err
