"""Positions of digits (``posenc.digit_positions``, ``posenc.coupled_positions`` and their NumPy
reference ``posenc.reference.digits``): Abacus as the official ``abacus.py`` computes it and position
coupling as the official addition task builds it, each re-stated here from its definition; random
batches against the reference; bad inputs."""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch

import posenc
from posenc.reference import digits as ref

DIGITS = b"0123456789"


# -- Abacus (McLeish et al., NeurIPS 2024) ---------------------------------------------------------

def abacus_positions(ids: np.ndarray, digit_ids, k: int) -> np.ndarray:
    """abacus.py's positions, re-stated: a token is a digit when its id is one of ``digit_ids``; a
    digit's position is its place in its block of consecutive digits, the block's first at 1; any
    other token is 0; ``k`` (the training shift) is added to the nonzero positions."""
    out = []
    for row in np.atleast_2d(ids):
        mask = np.isin(row, list(digit_ids))
        values = []
        for is_digit, block in itertools.groupby(mask):
            n = len(list(block))
            values += [i + k for i in range(1, n + 1)] if is_digit else [0] * n
        out.append(values)
    return np.array(out, dtype=np.int64).reshape(ids.shape)


def test_abacus_by_hand():
    # 12+345= written least significant first, as the paper does: 21+543=
    assert posenc.digit_positions(b"21+543=975", DIGITS).tolist() == [1, 2, 0, 1, 2, 3, 0, 1, 2, 3]
    assert posenc.digit_positions(b"21+543=", DIGITS, offset=10).tolist() == [11, 12, 0, 11, 12, 13, 0]
    assert posenc.digit_positions([5, 1, 2, 9, 2], [1, 2]).tolist() == [0, 1, 2, 0, 1]


@pytest.mark.parametrize("seed", range(8))
def test_digit_positions_are_abacus(seed):
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(12, 40))
    digit_ids = rng.choice(vocab, 10, replace=False)
    batch, length = int(rng.integers(1, 5)), int(rng.choice([1, 2, 33, 217]))
    ids = np.where(rng.random((batch, length)) < rng.uniform(0.2, 0.9), rng.choice(digit_ids, (batch, length)),
                   rng.integers(0, vocab, (batch, length)))
    k = int(rng.integers(0, 100))  # abacus.py: random.randint(0, max_k), max_k = 99
    expected = abacus_positions(ids, digit_ids, k)
    got = posenc.digit_positions(torch.from_numpy(ids), torch.from_numpy(digit_ids), offset=k)
    assert got.dtype == torch.int64
    np.testing.assert_array_equal(got.numpy(), expected)
    np.testing.assert_array_equal(ref.digit_positions(ids, digit_ids.tolist(), offset=k), expected)
    np.testing.assert_array_equal(posenc.digit_positions(ids[0].tolist(), digit_ids.tolist(), offset=k).numpy(),
                                  expected[0])


# -- position coupling (Cho et al., NeurIPS 2024) ----------------------------------------------------

def coupling_example(a: int, b: int, *, padding: bool, start: int) -> tuple[bytes, list[int]]:
    """One ``a+b=c`` as the official addition task with coupled positions writes it, and its
    positions, re-stated: the operands most significant first (zero-padded to the longer one's
    length with ``padding``), the sum reversed (zero-padded to one digit more than the longer
    operand); ``+`` and ``=`` at ``start``; the digit with ``m`` digits after it in an operand
    at ``start + 1 + m``; the sum's ``j``-th digit at ``start + 1 + j``."""
    width = max(len(str(a)), len(str(b)))
    sa, sb = (str(a).rjust(width, "0"), str(b).rjust(width, "0")) if padding else (str(a), str(b))
    sc = (str(a + b).rjust(width + 1, "0") if padding else str(a + b))[::-1]
    text = f"{sa}+{sb}={sc}".encode()
    positions = ([start + len(sa) - j for j in range(len(sa))] + [start]
                 + [start + len(sb) - j for j in range(len(sb))] + [start]
                 + [start + 1 + j for j in range(len(sc))])
    return text, positions


def test_coupling_by_hand():
    # 57 + 8 = 65: operands padded to 2 digits, the sum reversed and padded to 3 ("560")
    text, expected = coupling_example(57, 8, padding=True, start=1)
    assert text == b"57+08=560" and expected == [3, 2, 1, 3, 2, 1, 2, 3, 4]
    assert posenc.coupled_positions(text, DIGITS, plus=b"+", equals=b"=").tolist() == expected
    # the 5 of 57, the 0 of 08 and the 6 of 560 are the tens: all at 3


@pytest.mark.parametrize("seed", range(8))
def test_coupled_positions_are_the_official_addition_positions(seed):
    rng = np.random.default_rng(50 + seed)
    padding = bool(seed % 2)
    bos, eos, pad = 20, 21, 22
    rows, expected = [], []
    for _ in range(int(rng.integers(1, 5))):
        a, b = (int("".join(map(str, rng.integers(0, 10, int(rng.integers(1, 25)))))) for _ in range(2))
        start = 1 + int(rng.integers(0, 30))
        text, pos = coupling_example(a, b, padding=padding, start=start)
        rows.append(([bos] + list(text) + [eos], [0] + pos + [0], start))
    length = max(len(r[0]) for r in rows) + int(rng.integers(0, 3))
    starts = {s for *_, s in rows}
    for start in starts:  # one offset per call: rows drawn with this start
        chosen = [r for r in rows if r[2] == start]
        ids = np.array([t + [pad] * (length - len(t)) for t, _, _ in chosen])
        want = np.array([p + [0] * (length - len(p)) for _, p, _ in chosen])
        digit_ids = list(DIGITS)
        got = posenc.coupled_positions(torch.from_numpy(ids), digit_ids, plus=ord("+"), equals=ord("="),
                                       offset=start - 1)
        np.testing.assert_array_equal(got.numpy(), want)
        np.testing.assert_array_equal(
            ref.coupled_positions(ids, digit_ids, plus=ord("+"), equals=ord("="), offset=start - 1), want)


def test_a_sums_positions_hold_while_it_is_decoded():
    text, _ = coupling_example(987654321, 123456789, padding=True, start=1)
    whole = posenc.coupled_positions(text, DIGITS, plus=b"+", equals=b"=")
    for n in range(text.index(b"=") + 1, len(text) + 1):
        assert torch.equal(posenc.coupled_positions(text[:n], DIGITS, plus=b"+", equals=b"="), whole[:n])


@pytest.mark.parametrize("seed", range(6))
def test_torch_equals_the_reference_on_random_streams(seed):
    rng = np.random.default_rng(90 + seed)
    ids = rng.integers(0, 14, (int(rng.integers(1, 4)), int(rng.choice([0, 1, 40, 217]))))
    digit_ids = list(range(10))
    offset = int(rng.integers(0, 50))
    np.testing.assert_array_equal(posenc.digit_positions(ids, digit_ids, offset=offset).numpy(),
                                  ref.digit_positions(ids, digit_ids, offset=offset))
    np.testing.assert_array_equal(
        posenc.coupled_positions(ids, digit_ids, plus=10, equals=11, offset=offset).numpy(),
        ref.coupled_positions(ids, digit_ids, plus=10, equals=11, offset=offset))


# -- bad inputs -----------------------------------------------------------------------------------

@pytest.mark.parametrize("call, error, text", [
    (lambda f: f(b"1+2", b""), ValueError, "digit_ids must name at least one token id"),
    (lambda f: f(b"1+2", "0123456789"), TypeError, "digit_ids must be a list of token ids or a byte string"),
    (lambda f: f(b"1+2", 5), TypeError, "digit_ids must be a list"),
    (lambda f: f(b"1+2", [1.5]), TypeError, "digit_ids must be a 1-D list of integer token ids"),
    (lambda f: f(b"1+2", DIGITS, offset=-1), ValueError, "offset must be >= 0"),
    (lambda f: f(b"1+2", DIGITS, offset=1.0), TypeError, "offset must be an integer"),
    (lambda f: f(b"1+2", DIGITS, offset=2 ** 63 - 2), ValueError, "offset must be <="),
    (lambda f: f("1+2", DIGITS), TypeError, "tokens must be token ids or a byte string"),
    (lambda f: f(np.zeros((1, 1, 2), np.int64), DIGITS), ValueError, "tokens must have shape [L] or [B, L]"),
])
@pytest.mark.parametrize("name", ["digit", "coupled"])
def test_bad_arguments_are_refused(call, error, text, name):
    for module in (posenc, ref):
        fn = getattr(module, f"{name}_positions")
        f = fn if name == "digit" else (lambda *a, fn=fn, **kw: fn(*a, plus=b"+", equals=b"=", **kw))
        with pytest.raises(error, match=re.escape(text)):
            call(f)


@pytest.mark.parametrize("kw, error, text", [
    ({"plus": b"++"}, ValueError, "plus must be one token"),
    ({"plus": 1.0}, TypeError, "plus must be an integer"),
    ({"equals": None}, TypeError, "equals must be an integer"),
    ({"equals": b"+"}, ValueError, "must be distinct tokens"),
    ({"plus": b"1"}, ValueError, "must be distinct tokens"),
])
def test_coupling_operators_are_checked(kw, error, text):
    args = {"plus": b"+", "equals": b"=", **kw}
    for fn in (posenc.coupled_positions, ref.coupled_positions):
        with pytest.raises(error, match=re.escape(text)):
            fn(b"1+2=3", DIGITS, **args)
