"""``context_parallel_attention(method="ring" | "ulysses")`` on 2 and 4 gloo processes equal to
``posenc.attention`` on the whole sequence (float64: forward, and the gradients of q, k, v, the
layer input and the scheme's parameters) for every kind each method runs, with grouped heads,
packed documents and key padding (rows that see no key included); and each refusal names its reason
and the alternative.

Lean: one spawn per world size for the whole module (``results``); every case runs inside it and
each rank returns what it found."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import posenc
from conftest import schemes_of_kind, small_module
from posenc.parallel import _unsupported

pytestmark = pytest.mark.xdist_group("heavy")

LENGTH = 16  # a multiple of 2 * world_size for 2 and 4 ranks
TOL = 1e-10  # float64: the sharded sums differ from the whole one in rounding only

# one-axis schemes (context parallelism takes one position per token), content schemes included
KINDS = [None, *(n for n in schemes_of_kind("none", "rotary", "bias", "relative", "content")
                 if small_module(n).axes == 1)]
CASES = ("causal", "grouped", "documents", "bidirectional", "cached", "capped", "local")
# on 4 ranks: documents with padding, causal (every tile mode, empty rows), and queries after a cache;
# the other cases differ from their 2-rank runs by nothing more than the number of shards
FOUR_RANKS = ("documents", "cached")
CACHED = LENGTH // 2  # "cached": the queries are the last 8 of the 16 keys (prefill after a cache)
# "capped": a logit cap, sinks and a causal window; "local": a window both ways, no causality
EXTRAS = {"capped": {"softcap": 4.0, "window": 5}, "local": {"window": 3}}


def _build(name):
    if name is None:
        return None
    return small_module(name, seed=1).double()


def _inputs(name, case, world):
    """The whole sequence's tensors (the same on every rank) and the call's keywords."""
    g = torch.Generator().manual_seed(3)
    h_kv = 2 if case == "grouped" else 4
    q, grad = (torch.randn(2, 4, LENGTH, 8, generator=g, dtype=torch.float64) for _ in range(2))  # (B, H, L, D)
    k, v = (torch.randn(2, h_kv, LENGTH, 8, generator=g, dtype=torch.float64) for _ in range(2))
    hidden = torch.randn(2, LENGTH, 32, generator=g, dtype=torch.float64)  # (B, L, d_model)
    sinks = torch.randn(4, generator=g, dtype=torch.float64)
    docs = pad = None
    if case == "documents":  # two packings, and left padding: batch 1's first query sees no key
        docs = torch.tensor([[0] * 5 + [1] * 7 + [2] * 4, [0] * 9 + [1] * 7])
        pad = torch.ones(2, LENGTH, dtype=torch.bool)
        pad[1, :3] = False
        pad[0, 7] = False
    if case == "cached":  # the keys' padding; the queries (and their gradient) the last CACHED positions
        pad = torch.ones(2, LENGTH, dtype=torch.bool)
        pad[1, :3] = False
        q, grad = q[:, :, -CACHED:], grad[:, :, -CACHED:]
    extras = {**EXTRAS.get(case, {}), **({"sinks": sinks.requires_grad_(True)} if case == "capped" else {})}
    return q, k, v, grad, hidden, docs, pad, extras


def _expected(pe, q, k, v, hidden, docs, pad, causal, extras):
    """``posenc.attention`` on the whole sequence at its default positions: with documents, restarting
    at 0 in each one; after a cache, the last queries of the keys' ``0..L−1``."""
    everywhere = torch.arange(LENGTH)
    content = pe is not None and pe.kind == "content"
    where = {} if content or docs is not None else {"q_positions": everywhere[LENGTH - q.shape[2]:],
                                                     "k_positions": everywhere}
    return posenc.attention(q, k, v, pe, causal=causal, document_ids=docs, attention_mask=pad,
                            hidden=hidden if pe is not None and pe.reads_hidden else None, backend="materialize",
                            **where, **extras)


def _case(name, case, method, group):
    """One comparison on this rank: None when equal, else what differs. What the whole sequence refuses
    (FoPE's coefficient sets with 2 key heads) the sharded call must refuse too."""
    pe = _build(name)
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    causal = case not in ("bidirectional", "local")
    q, k, v, grad, hidden, docs, pad, extras = _inputs(name, case, world)
    reads = pe is not None and pe.reads_hidden
    full = [t.clone().requires_grad_(True) for t in (q, k, v, hidden)]
    params = [p for p in pe.parameters() if p.requires_grad] if pe is not None else []
    params += [extras["sinks"]] if "sinks" in extras else []
    p = posenc.shard_positions(LENGTH, world, rank, balance="head_tail" if causal else "contiguous")
    # the queries' positions: the keys' (p), or after a cache the last CACHED positions, sharded alike
    qp = p if case != "cached" else posenc.shard_positions(CACHED, world, rank) + LENGTH - CACHED
    local = [q[:, :, qp - (LENGTH - q.shape[2])].clone().requires_grad_(True)]
    local += [t[:, :, p].clone().requires_grad_(True) for t in (k, v)] + [hidden[:, p].clone().requires_grad_(True)]

    def sharded():
        return posenc.context_parallel_attention(
            *local[:3], pe, positions=qp, causal=causal, method=method, group=group,
            document_ids=None if docs is None else docs[:, p], attention_mask=None if pad is None else pad[:, p],
            hidden=local[3] if reads else None, k_positions=p if case == "cached" else None, **extras)

    try:
        expected = _expected(pe, *full[:3], full[3] if reads else None, docs, pad, causal, extras)
    except ValueError as error:
        with pytest.raises(ValueError, match=str(error)[:30]):
            sharded()
        return None
    out = sharded()
    rows = qp - (LENGTH - q.shape[2])  # this rank's query rows of the whole
    local_grads = torch.autograd.grad(out, local[:3] + local[3:] * reads + params, grad[:, :, rows])
    sharded_param_grads = [g.clone() for g in local_grads[3 + reads:]]
    for g in sharded_param_grads:  # each rank's loss is its rows' part: the parameters' gradients add up
        dist.all_reduce(g, group=group)
    full_grads = torch.autograd.grad(expected, full[:3] + full[3:] * reads + params, grad)
    names = [n for n, t in pe.named_parameters() if t.requires_grad] if pe is not None else []
    names += ["sinks"] if "sinks" in extras else []
    pairs = [("out", out, expected[:, :, rows])]
    pairs += [(f"d{t}", got, want[:, :, r]) for t, got, want, r in zip("qkv", local_grads, full_grads, (rows, p, p))]
    pairs += [("dhidden", local_grads[3], full_grads[3][:, p])] if reads else []
    pairs += [(f"d{n}", got, want) for n, got, want in zip(names, sharded_param_grads, full_grads[3 + reads:])]
    for what, got, want in pairs:
        got, want = got.detach(), want.detach()
        err = float((got - want).abs().max()) if got.numel() else 0.0
        if got.shape != want.shape or not err <= TOL * max(1.0, float(want.abs().max())):
            return f"{what}: error {err:.3g}"
    return None


def _runs_on(name, case, method, world) -> bool:
    pe = _build(name)
    if _unsupported(pe, method) is not None:
        return False
    if case in ("bidirectional", "local") and pe is not None and pe.kind == "content":
        return False  # content schemes count positions from each query backwards
    if case == "cached" and pe is not None and pe.kind == "content":
        return False  # refused by name (_refusals): a content scheme reads queries and keys as one sequence
    if case == "capped" and pe is not None and pe.name == "fox":
        return False  # refused by name (_refusals): fox's ring/ulysses form drops c_i
    return not (method == "ulysses" and case == "grouped" and 2 % world)


def _worker(rank: int, store: str, out: str) -> None:
    """4 processes: ranks 0-1 and 2-3 run the 2-rank cases as two groups (ring, ulysses), then all 4 run
    the 4-rank ones (``FOUR_RANKS``)."""
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=4)
    torch.set_num_threads(1)
    pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
    three = dist.new_group([0, 1, 2])
    found = {2: {}, 4: {}, 3: {}}
    try:
        if rank < 3:
            found[3] = _three_ranks(three)
        _run(found[2], pairs[rank // 2], methods=[("ring", "ulysses")[rank // 2]], cases=CASES)
        _run(found[4], None, methods=("ring", "ulysses"), cases=FOUR_RANKS)
        found[2]["refusals"] = _refusals(pairs[rank // 2])
        found[4]["refusals"] = _refusals(None)
        found[2]["extra refusals"] = _extra_refusals(pairs[rank // 2])
    finally:
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(found, f)


def _run(found: dict, group, *, methods, cases) -> None:
    world = dist.get_world_size(group)
    for method in methods:
        for name in KINDS:
            for case in cases:
                if _runs_on(name, case, method, world):
                    try:
                        found[f"{method} {name} {case}"] = _case(name, case, method, group)
                    except Exception as error:  # noqa: BLE001 - reported by the test, with its case
                        found[f"{method} {name} {case}"] = f"{type(error).__name__}: {error}"


def _refusals(group):
    """The messages of what each method refuses."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    q = torch.randn(1, 4, LENGTH // world, 8)
    p = posenc.shard_positions(LENGTH, world, rank)
    messages = []
    for name, method in (("stick_breaking", "ring"), ("path", "ulysses"), ("fox", "allgather")):
        pe = small_module(name)
        try:
            posenc.context_parallel_attention(q, q, q, pe, positions=p, causal=True, method=method, group=group,
                                              hidden=torch.randn(1, LENGTH // world, 32) if pe.reads_hidden else None)
            messages.append(None)
        except ValueError as error:
            messages.append(str(error))
    try:
        posenc.context_parallel_attention(q, q[:, :3], q[:, :3], positions=p, causal=True, method="ulysses",
                                          group=group)
        messages.append(None)
    except ValueError as error:
        messages.append(str(error))
    return messages


def _extra_refusals(group):
    """The messages of a cache, a logit cap and a window where they are not taken."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    q = torch.randn(1, 4, LENGTH // world, 8)
    p = posenc.shard_positions(LENGTH, world, rank)
    fox = small_module("fox")
    calls = [dict(pe=fox, method="ring", k_positions=p), dict(pe=fox, method="ulysses", softcap=3.0),
             dict(pe=None, method="allgather", window=4)]
    messages = []
    for call in calls:
        try:
            posenc.context_parallel_attention(q, q, q, positions=p, causal=True, group=group, **call)
            messages.append(None)
        except ValueError as error:
            messages.append(str(error))
    return messages


ODD = 30  # a multiple of 2 * 3: head-tail shards on 3 ranks
# on 3 ranks, ring only (ulysses needs H % 3 == 0): Dual Chunk Attention with chunks shorter than the
# sequence (positions past a chunk are remapped, so it is not translation invariant), packed documents
# and padding; FoX's key column; a bias scheme in a causal window; NoPE's query temperature (by absolute position)
THREE = {"dual_chunk": ({"chunk_size": 8, "local_size": 2}, {}), "fox": ({}, {}), "alibi": ({}, {"window": 7}),
         "nope_temperature": ({}, {})}


def _three_ranks(group) -> dict:
    """Ring on 3 ranks against ``posenc.attention`` at the same (global) positions: forward and q, k, v
    gradients, float64, ``{scheme: None or what differs}``."""
    rank = dist.get_rank(group)
    g = torch.Generator().manual_seed(5)
    q, k, v, grad = (torch.randn(2, 4, ODD, 8, generator=g, dtype=torch.float64) for _ in range(4))
    docs = torch.tensor([[0] * 7 + [1] * 11 + [2] * 12, [0] * 13 + [1] * 17])
    pad = torch.ones(2, ODD, dtype=torch.bool)
    pad[1, :3] = False
    p = posenc.shard_positions(ODD, 3, rank)
    found = {}
    for name, (options, extras) in THREE.items():
        try:
            found[name] = _three_ranks_case(small_module(name, seed=1, **options).double(), (q, k, v, grad),
                                            docs, pad, p, extras, group)
        except Exception as error:  # noqa: BLE001 - reported by the test, with its case
            found[name] = f"{type(error).__name__}: {error}"
    return found


def _three_ranks_case(pe, tensors, docs, pad, p, extras, group):
    q, k, v, grad = tensors
    hidden = torch.randn(2, ODD, 32, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    read = {"hidden": hidden} if pe.reads_hidden else {}
    full = [t.clone().requires_grad_(True) for t in (q, k, v)]
    # the default positions, restarting at 0 in each document (Dual Chunk Attention past its chunk and
    # NoPE's query temperature read them)
    want = posenc.attention(*full, pe, causal=True, document_ids=docs, attention_mask=pad, backend="materialize",
                            **extras, **read)
    local = [t[:, :, p].clone().requires_grad_(True) for t in (q, k, v)]
    got = posenc.context_parallel_attention(*local, pe, positions=p, causal=True, method="ring", group=group,
                                            document_ids=docs[:, p], attention_mask=pad[:, p], **extras,
                                            **({"hidden": hidden[:, p]} if read else {}))
    grads = torch.autograd.grad(got, local, grad[:, :, p])
    wants = torch.autograd.grad(want, full, grad)
    errors = [float((got - want[:, :, p]).abs().max())]
    errors += [float((a - b[:, :, p]).abs().max()) for a, b in zip(grads, wants)]
    return None if max(errors) <= TOL * 10 else f"out, dq, dk, dv errors {errors}"


@pytest.fixture(scope="module")
def spawned(tmp_path_factory):
    """One spawn of 4 processes for the module: ``{world: [each rank's findings]}``."""
    where = tmp_path_factory.mktemp("cp")
    # forked, not spawned: a spawned rank imports torch, posenc and this module again (about 2 s of CPU each)
    mp.start_processes(_worker, args=(str(where / "store"), str(where / "found")), nprocs=4, join=True,
                       start_method="fork")
    found = [json.loads((where / f"found.{r}").read_text()) for r in range(4)]
    return {2: [found[r]["2"] for r in range(4)], 4: [found[r]["4"] for r in range(4)],
            3: [found[r]["3"] for r in range(3)]}


@pytest.fixture(params=[2, 4], ids=lambda w: f"{w} ranks")
def results(request, spawned):
    return request.param, spawned[request.param]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["ring", "ulysses"])
def test_sharded_attention_equals_the_whole_sequence_forward_and_gradients(results, method):
    world, found = results
    failed = {f"{key} (rank {r})": why for r, f in enumerate(found) for key, why in f.items()
              if key.startswith(method + " ") and why is not None}
    assert not failed, failed
    ran = {key for f in found for key in f if key.startswith(method + " ")}
    wanted = [str(n) for n in KINDS if _unsupported(_build(n), method) is None]
    assert {f"{method} {n} {case}" for n in wanted for case in (CASES if world == 2 else FOUR_RANKS)
            if _runs_on(None if n == "None" else n, case, method, world)} <= ran
    assert set(RUNS[method]) <= set(wanted) and not set(REFUSED[method]) & set(wanted), wanted


# what the table of posenc/parallel.py's docstring says runs (or is refused) on each method
RUNS = {"ring": ["None", "nope", "nope_temperature", "alibi", "fire", "kerple", "t5", "rope", "fope", "pope",
                 "deberta", "shaw", "dual_chunk", "transformer_xl", "fox"],
        "ulysses": ["None", "nope", "nope_temperature", "alibi", "fire", "kerple", "t5", "rope", "shaw", "dual_chunk",
                    "cope", "stick_breaking", "fox"]}
REFUSED = {"ring": ["stick_breaking", "cope", "path", "dape"],
           "ulysses": ["fope", "pope", "transformer_xl", "deberta", "path", "dape"]}


CONTENT = set(schemes_of_kind("content"))


@pytest.mark.slow
def test_each_method_runs_what_the_docs_say_and_refuses_the_rest_by_name(results):
    world, found = results
    ring_content = [n for n in CONTENT if _unsupported(small_module(n), "ring") is None]
    assert ring_content == ["fox"]
    for messages in (f["refusals"] for f in found):
        stick, path, fox, heads = messages
        assert "method='ring' cannot run 'stick_breaking'" in stick and "use method='ulysses'" in stick
        assert "method='ulysses' cannot run 'path'" in path and "posenc.attention on one device" in path
        assert "method='allgather' cannot run 'fox'" in fox and "method='ring' or method='ulysses'" in fox
        assert f"H_kv=3 must both be multiples of {world}" in heads and "use method='ring'" in heads


@pytest.mark.slow
def test_a_cache_a_cap_and_a_window_are_refused_by_name_where_not_taken(spawned):
    for messages in (f["extra refusals"] for f in spawned[2]):
        cache, cap, window = messages
        assert "k_positions (keys of a cache) cannot run 'fox'" in cache and "k_positions=None" in cache
        assert "softcap and sinks with fox: posenc.attention on one device" in cap
        assert "method='allgather' takes no window" in window and "use method='ring' or 'ulysses'" in window


@pytest.mark.slow
def test_ring_on_an_odd_number_of_ranks_equals_the_whole_sequence(spawned):
    """3 ranks: Dual Chunk Attention with documents and padding, FoX, ALiBi in a window, NoPE's query
    temperature (ring reads each tile's visibility from the whole sequence's ``Visibility``, and the
    scheme the positions ``posenc.attention`` gives it by default: restarting in each document)."""
    for r, found in enumerate(spawned[3]):
        assert set(found) == set(THREE), found
        failed = {name: why for name, why in found.items() if why is not None}
        assert not failed, f"rank {r}: {failed}"
