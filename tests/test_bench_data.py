"""The evaluation protocol (every length scores the same held-out targets), the block statistics,
and the generated tasks (answers checked against an independent computation)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from posenc.bench import stats
from posenc.bench import tasks as T
from posenc.bench.data import Corpus, lcm_lengths, load_corpus, split, stdlib_files, windows
from posenc.bench.distributed import Dist
from posenc.bench.evaluate import lm_block_nll
from posenc.bench.model import GPTConfig, TinyGPT, token_nll

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


def test_split_holds_out_a_multiple_of_every_length_and_keeps_the_rest_for_training():
    data = bytes(range(256)) * 40
    lm = split(Corpus(data, "test"), heldout_tokens=1000, lengths=[16, 24, 32])
    assert lm.n_heldout == 960  # the largest multiple of lcm(16, 24, 32) = 96 below 1000
    assert bytes(lm.train.tolist()) + bytes(lm.heldout.tolist()) == data
    with pytest.raises(ValueError, match="need at least"):
        split(Corpus(data[:2000], "small"), heldout_tokens=1000, lengths=[16, 24, 32])


def test_block_nll_equals_the_direct_computation():
    """The per-block means from windows equal the NLL computed window by window by hand."""
    torch.manual_seed(0)
    model = TinyGPT(GPTConfig(n_layer=1, n_head=2, n_embd=16), {"scheme": "alibi", "num_heads": 2}).eval()
    g = torch.Generator().manual_seed(0)
    corpus = Corpus(bytes(torch.randint(0, 256, (4000,), generator=g).tolist()), "random")
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
    table = stats.LMTable({"a": {"nonoverlap": {8: [base]}}, "b": {"nonoverlap": {8: [base + 0.1]}}}, {}, [8], 8)
    d = table.diff(("a", 8), ("b", 8))
    assert abs(d.mean + 0.1) < 1e-12 and d.se < 1e-12
    assert table.estimate("a", "nonoverlap", 8).se > 0.3  # the unpaired spread is large
    lo, hi = table.estimate("a", "nonoverlap", 8).ppl_interval()
    assert lo < math.exp(sum(base) / 20) < hi


def test_stdlib_corpus_is_found_and_a_missing_file_is_named():
    assert stdlib_files(), "the standard library's sources should be present"
    c = load_corpus(None, max_bytes=10_000)
    assert len(c) == 10_000 and c.source.startswith("stdlib:")
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        load_corpus("/nonexistent/nope.txt", max_bytes=10)


def _answer(tokens: list[int], first: int) -> list[int]:
    return tokens[first:-1]


@pytest.mark.parametrize("task", T.TASKS)
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
