"""Context parallelism: ``shard_positions`` (head-tail as PyTorch's load balancer, contiguous), every
rotary and bias scheme at a shard's positions equal to the rows of the unsharded result, and
``context_parallel_attention`` on 2 gloo processes equal to the unsharded attention (and its
float64 reference) for every kind, with gradients."""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import posenc
from conftest import assert_close, attention_reference, on_axes, schemes_of_kind, small_module

pytestmark = pytest.mark.xdist_group("heavy")

LENGTH = 24  # a multiple of 2 * world_size for world sizes 2 and 3


def test_head_tail_gives_rank_r_chunks_r_and_2w_minus_1_minus_r():
    assert posenc.shard_positions(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert posenc.shard_positions(8, 2, 1).tolist() == [2, 3, 4, 5]
    assert posenc.shard_positions(12, 3, 1).tolist() == [2, 3, 8, 9]
    assert posenc.shard_positions(8, 2, 1, balance="contiguous").tolist() == [4, 5, 6, 7]
    assert posenc.shard_positions(6, 1, 0).tolist() == [0, 1, 2, 3, 4, 5] == \
        posenc.shard_positions(6, 1, 0, balance="contiguous").tolist()


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("balance", ["head_tail", "contiguous"])
def test_shards_cover_the_sequence_once_and_head_tail_balances_causal_work(world, balance):
    length = 2 * world * 5
    shards = [posenc.shard_positions(length, world, r, balance=balance) for r in range(world)]
    assert all(s.dtype == torch.int64 and len(s) == length // world for s in shards)
    assert sorted(torch.cat(shards).tolist()) == list(range(length))
    work = [int((s + 1).sum()) for s in shards]  # causal (query, key) pairs per rank
    assert (len(set(work)) == 1) == (balance == "head_tail" or world == 1)


def test_head_tail_equals_pytorchs_context_parallel_load_balancer():
    balancer = pytest.importorskip("torch.distributed.tensor.experimental._context_parallel._load_balancer")
    for world in (1, 2, 3, 4):
        indices = balancer._HeadTailLoadBalancer(4 * world, world, "cpu")._generate_indices()[0]
        ours = torch.cat([posenc.shard_positions(4 * world, world, r) for r in range(world)])
        assert indices.tolist() == ours.tolist()


def test_bad_arguments_name_the_parameter():
    for call, name in [(lambda: posenc.shard_positions(10, 2, 0), "length must be a multiple of 4"),
                       (lambda: posenc.shard_positions(9, 2, 0, balance="contiguous"), "length must be a multiple of 2"),
                       (lambda: posenc.shard_positions(8, 2, 2), "rank must be <= 1"),
                       (lambda: posenc.shard_positions(8, 0, 0), "world_size must be >= 1"),
                       (lambda: posenc.shard_positions(8, 2, 0, balance="zigzag"), "balance")]:
        with pytest.raises(ValueError, match=name):
            call()
    with pytest.raises(TypeError, match="length"):
        posenc.shard_positions(8.0, 2, 0)
    q = torch.randn(1, 2, 4, 8)
    with pytest.raises(ValueError, match="initialized torch.distributed"):
        posenc.context_parallel_attention(q, q, q, positions=torch.arange(4))
    with pytest.raises(TypeError, match="positions must be an integer"):
        posenc.context_parallel_attention(q, q, q, positions=torch.arange(4.0))
    axial = [n for n in posenc.schemes() if getattr(small_module(n), "axes", 1) > 1]
    for name in axial[:1]:
        with pytest.raises(ValueError, match="one position per token"):
            posenc.context_parallel_attention(q, q, q, small_module(name), positions=torch.arange(4))


@pytest.mark.parametrize("balance", ["head_tail", "contiguous"])
@pytest.mark.parametrize("name", schemes_of_kind("rotary", "bias"))
def test_rotary_and_bias_at_shard_positions_are_rows_of_the_unsharded_result(name, balance):
    """A scheme of several axes (images, video) is sharded by token: its ``[L, A]`` positions' rows."""
    pe = small_module(name)
    everything = on_axes(pe, torch.arange(LENGTH))  # (L,) or (L, A)
    x = torch.randn(2, 4, LENGTH, 8)  # (B, H, L, D)
    full = pe(x, everything, role="key") if pe.kind == "rotary" else pe(everything, everything)
    for world in (2, 3):
        for rank in range(world):
            p = posenc.shard_positions(LENGTH, world, rank, balance=balance)
            if pe.kind == "rotary":
                torch.testing.assert_close(pe(x[:, :, p], everything[p], role="key"), full[:, :, p], rtol=0,
                                           atol=1e-6)
            else:  # this rank's query rows against every key
                torch.testing.assert_close(pe(everything[p], everything), full[:, p], rtol=0, atol=0)


# -- across ranks (2 gloo processes) --------------------------------------------------------------

# one-axis schemes: context_parallel_attention takes one position per token (it refuses several axes)
KINDS = [None, *(n for n in schemes_of_kind("rotary", "bias", "relative") if small_module(n).axes == 1)]


def _worker(rank: int, world: int, store: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    try:
        for name in KINDS:
            _check(name, True, "head_tail", rank, world)
            _check(name, False, "contiguous", rank, world)
    finally:
        dist.destroy_process_group()


def _check(name, causal, balance, rank, world):
    pe = None if name is None else small_module(name, seed=1)
    g = torch.Generator().manual_seed(2)  # the same full tensors on every rank
    q, k, v, grad = (torch.randn(2, 4, LENGTH, 8, generator=g) for _ in range(4))  # (B, H, L, D)
    p = posenc.shard_positions(LENGTH, world, rank, balance=balance)
    what = f"{name} causal={causal} {balance} rank {rank}"
    full = [t.clone().requires_grad_(True) for t in (q, k, v)]
    expected = posenc.attention(*full, pe, causal=causal)
    local = [t[:, :, p].clone().requires_grad_(True) for t in (q, k, v)]
    out = posenc.context_parallel_attention(*local, pe, positions=p, causal=causal)
    want = attention_reference(q, k, v, pe, causal=causal)[:, :, p.numpy()]
    # each rank's rows merge ``world`` partial softmaxes (one rounding of the normaliser per merge): the
    # tolerance of one attention per merged part (seen: 6.4e-7 against 6.2e-7 for one, Transformer-XL, Intel CPU)
    assert_close(out, want, magnitude=world * float(np.abs(want).max()), what=what)
    _near(out, expected[:, :, p], 1e-5, what)
    # gradients: each rank's loss is its rows' part of the full loss; the all-gather's backward sums
    # the key/value gradients of every rank's queries back to the keys' owner
    full_grads = torch.autograd.grad(expected, full, grad)
    local_grads = torch.autograd.grad(out, local, grad[:, :, p])
    for wanted, got, t in zip(full_grads, local_grads, "qkv"):
        _near(got, wanted[:, :, p], 1e-5, f"d{t} {what}")


def _near(got, wanted, tol, what):
    """(torch.testing.assert_close would import torch.distributed.tensor once a group exists: seconds.)"""
    err = float((got - wanted).abs().max())
    assert got.shape == wanted.shape and err <= tol * max(1.0, float(wanted.abs().max())), f"{what}: {err:.3g}"


@pytest.mark.slow
def test_attention_across_two_gloo_ranks_equals_the_unsharded_attention(tmp_path):
    # forked, not spawned: a spawned rank imports torch, posenc and this module again (about 2 s of CPU each)
    mp.start_processes(_worker, args=(2, str(tmp_path / "store")), nprocs=2, join=True, start_method="fork")
