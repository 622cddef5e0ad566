"""The same answer every time (issue 39): every number posenc prints or returns from analysis, computed
twice in one process and once more in a process with another thread count, is the same to the bit.

``numbers()`` computes them all: each public function of ``posenc.analysis``, the key numbers of every
registered scheme (``posenc show``; the explorer's table, ``id="key-numbers"``, prints the same rows
for its schemes and is held to them by tests/test_explorer_browser.py), ``posenc show``/``compare``/``demo``
as printed, and the report's demonstrations (``posenc.extrapolate.demos``). Arrays and floats are
compared by their bits, so the tolerance is zero. A few computations are sized past torch's parallel
grain (32768 elements) and OpenBLAS's threading, so another thread count splits their work differently.

The package's calls into LAPACK or into torch paths documented as nondeterministic (found by grep:
``torch.linalg.*``, ``np.linalg.*`` but ``norm``, ``scatter_add``, ``index_add_``): ``linear_map``'s
least squares (LAPACK ``gelsd`` on one thread: threaded BLAS changes its last bits with the thread
count; a table of shuffled sinusoid columns makes it nearly rank-deficient), Shaw's value term
(``scatter_add`` on CPU) and the language benchmark's per-block sums (``index_add_`` in
``posenc/extrapolate/parts/lm.py``) are in ``numbers()``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from posenc import analysis, registry
from posenc.reference import sinusoidal_inv_freq

ROOT = Path(__file__).resolve().parents[1]


def _bits(value: Any) -> Any:
    """``value`` as JSON data that is equal exactly when the values are equal to the bit."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu().numpy()
    if isinstance(value, (np.ndarray, np.generic)):
        a = np.ascontiguousarray(value)
        return [a.dtype.str, list(a.shape), hashlib.sha256(a.tobytes()).hexdigest()]
    if isinstance(value, float):
        return value.hex()
    if dataclasses.is_dataclass(value):
        return {f.name: _bits(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _bits(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_bits(v) for v in value]
    return value


def _printed(argv: list[str]) -> str:
    """What ``posenc ARGV`` prints."""
    from posenc.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return out.getvalue()


def _torch_reductions() -> dict[str, Any]:
    """Shaw's value term (``scatter_add`` on CPU) and per-block sums by ``index_add_`` as the language
    benchmark takes them, at sizes torch splits over threads."""
    g = torch.Generator().manual_seed(0)
    shaw = analysis.build("shaw", dim=32)
    p = torch.rand(2, 2, 128, 128, generator=g, dtype=torch.float64)  # (B, H, Lq, Lk)
    pos = torch.arange(128)
    sums = torch.zeros(64, dtype=torch.float64).index_add_(0, torch.randint(0, 64, (100_000,), generator=g),
                                                           torch.rand(100_000, generator=g, dtype=torch.float64))
    return {"shaw value_term": shaw.value_term(p, pos, pos), "index_add_ block sums": sums}


def _analysis() -> dict[str, Any]:
    """Each public function of ``posenc.analysis``, on small tables and one past the parallel grain."""
    tab = analysis.table("sinusoidal", length=128, dim=64)
    big = analysis.table("sinusoidal", length=2048, dim=64)  # (2048, 64): 131072 cells
    learned = analysis.table({"scheme": "learned", "d_model": 64, "max_positions": 300}, length=300, dim=64)
    shuffled = tab[:, np.random.default_rng(0).permutation(64)]  # no pair layout: the least squares
    yarn = {"scheme": "rope", "head_dim": 64, "scaling": {"type": "yarn", "factor": 4, "original_max_positions": 64}}
    out: dict[str, Any] = {
        "table rope": analysis.table("rope", length=96, dim=32),
        "cosine_similarity_matrix": analysis.cosine_similarity_matrix(tab),
        "similarity_vs_distance": [analysis.similarity_vs_distance(t) for t in (tab, big)],
        "nearest_neighbour_distances": analysis.nearest_neighbour_distances(tab, chunk=50),
        "min_fingerprint_distance": [analysis.min_fingerprint_distance(t) for t in (tab, big, learned)],
        "wavelengths, turns": [analysis.wavelengths(analysis.inv_freq("rope")), analysis.turns(analysis.inv_freq("rope"), 128)],
        "spectrum": analysis.spectrum(yarn),
        "rotary_scores": analysis.rotary_scores("rope", max_distance=127),
        "rope_decay_bound": analysis.rope_decay_bound(dim=64, max_distance=127),
        "score_term": analysis.score_term("alibi", np.arange(64), np.arange(64)),
        "bias_maps": analysis.bias_maps("t5", length=32),
        "content_weights": analysis.content_weights("fox", length=32, dim=32, num_heads=2),
        "grid_map": analysis.grid_map("sinusoidal:axes=2", grid=(6, 7), dim=32),
        "grid_numbers": analysis.grid_numbers(analysis.grid_map("rope:axes=2", grid=(6, 7), dim=32)),
        "score_vs_distance": [analysis.score_vs_distance(s, length=64, dim=32, num_heads=2)
                              for s in ("sinusoidal", "rope", "alibi", "shaw", "cope", "nope")],
    }
    for name, t in (("sinusoidal", tab), ("sinusoidal 2048", big), ("learned", learned), ("shuffled", shuffled)):
        out[f"linear_map {name}"] = [analysis.linear_map(t, k) for k in (1, 7)]
    return out


def numbers() -> dict[str, Any]:
    """Every number of the analysis, the commands and the report's demonstrations, as ``_bits``."""
    from posenc import demo
    from posenc.extrapolate import demos

    out = {**_analysis(), **_torch_reductions()}
    out["key_numbers"] = {s: analysis.key_numbers(s, length=40, dim=16, num_heads=2) for s in registry.schemes()}
    out["show sinusoidal"] = _printed(["show", "sinusoidal", "--length", "128", "--dim", "64"])
    out["show learned"] = _printed(["show", "learned", "--length", "100", "--dim", "16"])
    out["show grid"] = _printed(["show", "rope:axes=2", "--grid", "6x7", "--dim", "32"])
    out["compare"] = _printed(["compare", "sinusoidal", "learned", "rope", "alibi", "--length", "128", "--dim", "32"])
    # `posenc demo order` is this table over every scheme (6 s): the kinds and a recurrent layer here
    out["demo order"] = demo.format_order_table(demo.order_demo(["nope", "sinusoidal", "rope", "alibi", "t5", "ssm"]))
    out["report: linear map"] = demos._linear_map_note()
    return json.loads(json.dumps(_bits(out)))


@pytest.fixture(scope="module")
def first() -> dict[str, Any]:
    return numbers()


def test_every_number_is_the_same_on_a_second_call(first):
    second = numbers()
    assert first.keys() == second.keys()
    assert [k for k in first if first[k] != second[k]] == []


def test_every_number_is_the_same_on_another_thread_count(first):
    threads = 1 if torch.get_num_threads() > 1 else 2
    env = {**os.environ, "PYTHONPATH": str(ROOT), **{v: str(threads) for v in
           ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}}
    code = ("import importlib.util, json, sys, torch; torch.set_num_threads(int(sys.argv[1])); "
            "spec = importlib.util.spec_from_file_location('determinism', sys.argv[2]); "
            "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m); "
            "sys.stdout.write(json.dumps([torch.get_num_threads(), m.numbers()]))")
    run = subprocess.run([sys.executable, "-c", code, str(threads), __file__], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    got_threads, other = json.loads(run.stdout.splitlines()[-1])
    assert got_threads == threads != torch.get_num_threads()
    assert [k for k in first if first[k] != other.get(k)] == []


# -- linear_map: exact on rotation tables ------------------------------------------------------

@pytest.mark.parametrize("length, dim", [(66, 64), (128, 64), (130, 128), (1000, 32), (4096, 16), (16384, 8)])
def test_linear_map_of_a_sinusoidal_table_is_its_rotation_to_1e_12(length, dim):
    tab = analysis.table("sinusoidal", length=length, dim=dim)
    theta = sinusoidal_inv_freq(dim, 10000.0)
    for k in sorted({1, min(7, length - dim - 1), length - dim - 1}):
        m, residual = analysis.linear_map(tab, k)
        assert residual < 1e-12, (k, residual)
        c, s = np.cos(k * theta), np.sin(k * theta)  # the rotation by kθ_i of each (sin, cos) pair
        assert np.abs(m[0::2, 0::2] - np.diag(c)).max() < 1e-12 and np.abs(m[0::2, 1::2] - np.diag(s)).max() < 1e-12
        assert np.abs(m[1::2, 0::2] + np.diag(s)).max() < 1e-12 and np.abs(m[1::2, 1::2] - np.diag(c)).max() < 1e-12
        assert np.count_nonzero(m) == 2 * dim
        again = analysis.linear_map(tab, k)
        assert again[1] == residual and np.array_equal(again[0], m)


@pytest.mark.parametrize("spec", ["sinusoidal:layout=half", "sinusoidal:axes=2,layout=half", "sinusoidal:axes=4",
                                  "rope", "rope:scaling=yarn,factor=4,original_max_positions=64"])
def test_linear_map_is_exact_on_every_pair_layout_of_a_rotation_table(spec):
    tab = analysis.table(spec, length=200, dim=64)
    for k in (1, 13):
        assert analysis.linear_map(tab, k)[1] < 1e-12


def test_linear_map_of_other_tables_is_the_least_squares_fit():
    rng = np.random.default_rng(0)
    tab = analysis.table("sinusoidal", length=128, dim=64)[:, rng.permutation(64)]  # nearly rank-deficient
    m, residual = analysis.linear_map(tab, 1)
    assert residual < 1e-11
    noise = rng.standard_normal((100, 8))
    m, residual = analysis.linear_map(noise, 1)
    best = np.linalg.lstsq(noise[:-1], noise[1:], rcond=None)[0]
    assert np.allclose(m, best.T) and residual > 0.1
