"""``posenc.interop.patch(model, pe, context_parallel=...)``: a tiny Llama, each of 2 gloo ranks
holding its shard of every sequence (position_ids from ``shard_positions``, the loss over its
tokens), trains as one process on the whole sequence: the ranks' losses and parameter gradients
sum to the whole sequence's (float64), for ALiBi and FoX (the guide's recipe) on ring and ulysses;
and the same for the benchmark's decoder (``posenc extrapolate --context-parallel``'s step). One
spawn for the module."""

from __future__ import annotations

import json

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

transformers = pytest.importorskip("transformers")

import posenc  # noqa: E402
import posenc.interop  # noqa: E402

pytestmark = pytest.mark.xdist_group("heavy")

LENGTH, WORLD = 16, 2
CASES = [("alibi", "ring"), ("fox:gate=full", "ring"), ("fox:gate=full", "ulysses"), ("alibi", "ulysses")]
PADDED = [("alibi", "ring"), ("fox:gate=full", "ulysses")]  # with a key padding mask (left padding and a hole)
PAD = torch.ones(2, LENGTH, dtype=torch.long)
PAD[1, :3] = 0
PAD[0, 9] = 0
GPT_CASES = [("alibi", "ulysses"), ("fox:gate=full", "ulysses"), ("rope", "ring")]  # posenc extrapolate's decoder


def _model(spec, method):
    config = transformers.LlamaConfig(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    return posenc.interop.patch(model, spec, context_parallel=method).double()  # the scheme's parameters too


def _loss(model, ids, positions):
    """The summed next-token loss of the tokens at ``positions`` (the last position has no next token)."""
    logits = model(input_ids=ids[:, positions], position_ids=positions[None]).logits  # (B, Ll, V)
    keep = positions < LENGTH - 1
    return torch.nn.functional.cross_entropy(logits[:, keep].flatten(0, 1), ids[:, positions[keep] + 1].flatten(),
                                             reduction="sum")


def _worker(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=WORLD)
    torch.set_num_threads(1)
    found = {}
    try:
        ids = torch.randint(0, 50, (2, LENGTH), generator=torch.Generator().manual_seed(1))
        for spec, method in CASES:
            found[f"{spec} {method}"] = _case(spec, method, ids, rank)
        for spec, method in PADDED:
            found[f"padded {spec} {method}"] = _case(spec, method, ids, rank, pad=PAD)
        for spec, method in GPT_CASES:
            found[f"gpt {spec} {method}"] = _gpt_case(spec, method, ids, rank)
    finally:
        dist.destroy_process_group()
    with open(f"{out}.{rank}", "w") as f:
        json.dump(found, f)


def _padded_loss(model, ids, positions, pad):
    """``_loss`` with a key padding mask: the tokens whose input or next token is padding not scored."""
    logits = model(input_ids=ids[:, positions], position_ids=positions[None], attention_mask=pad[:, positions]).logits
    after = (positions + 1).clamp(max=LENGTH - 1)
    keep = (positions < LENGTH - 1)[None] & pad[:, positions].bool() & pad[:, after].bool()  # (B, Ll)
    nll = torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, after].flatten(), reduction="none")
    return (nll.view(keep.shape) * keep).sum()


def _case(spec, method, ids, rank, pad=None):
    sharded = _model(spec, method)
    shard = posenc.shard_positions(LENGTH, WORLD, rank)
    loss = _loss(sharded, ids, shard) if pad is None else _padded_loss(sharded, ids, shard, pad)
    loss.backward()
    total = loss.detach().clone()
    dist.all_reduce(total)
    grads = {n: p.grad.clone() for n, p in sharded.named_parameters() if p.grad is not None}
    for g in grads.values():  # the ranks' gradients add up to one process's (DDP averages: scale the loss by P)
        dist.all_reduce(g)
    whole = _model(spec, None)
    everywhere = torch.arange(LENGTH)
    expected = _loss(whole, ids, everywhere) if pad is None else _padded_loss(whole, ids, everywhere, pad)
    expected.backward()
    errors = {"loss": abs(float(total - expected)) / float(expected)}
    for n, p in whole.named_parameters():
        errors[n] = float((grads[n] - p.grad).abs().max() / p.grad.abs().max().clamp(min=1e-30))
    worst = max(errors, key=errors.get)
    return {"worst": worst, "error": errors[worst], "params": len(grads), "expected": len(list(whole.parameters()))}


def nll(logits, targets):
    """``token_nll`` in float64 (the benchmark's casts to float32)."""
    return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)


def _gpt_case(spec, method, ids, rank):
    """The benchmark's decoder (``posenc extrapolate --context-parallel``'s training step): the shards
    of a batch whose length does not divide by ``2·world`` (padded with unscored tokens), losses and
    gradients summed over the ranks, against one process on the whole batch."""
    from posenc.extrapolate.context_parallel import shard_batch, sum_gradients
    from posenc.extrapolate.distributed import Dist
    from posenc.extrapolate.model import GPTConfig, TinyGPT
    from posenc.extrapolate.plan import resolve_scheme

    cfg = GPTConfig(vocab_size=50, n_layer=2, n_head=2, n_embd=16, mlp_ratio=2)
    sized = resolve_scheme(spec, cfg, max_positions=LENGTH)[1]  # the benchmark's sizing of a SPEC

    def model():
        torch.manual_seed(0)
        return TinyGPT(cfg, sized).double()

    tokens = ids[:, :LENGTH - 2]  # (B, T + 1): T = 13 tokens scored, padded to 16
    mask = torch.ones(2, tokens.shape[1] - 1, dtype=torch.bool)
    mask[1, :4] = False  # a masked task loss
    sharded = model()
    inputs, targets, scored, positions = shard_batch(tokens, mask, Dist(rank, WORLD, context_parallel=method))
    loss = (nll(sharded(inputs, positions, context_parallel=method), targets) * scored).sum()
    loss.backward()
    params = [p for p in sharded.parameters()]
    sum_gradients(params, Dist(rank, WORLD, context_parallel=method))
    total = loss.detach().clone()
    dist.all_reduce(total)
    whole = model()
    expected = (nll(whole(tokens[:, :-1]), tokens[:, 1:]) * mask).sum()
    expected.backward()
    errors = {"loss": abs(float(total - expected)) / float(expected)}
    for (n, p), mine in zip(whole.named_parameters(), params):
        errors[n] = float((mine.grad - p.grad).abs().max() / p.grad.abs().max().clamp(min=1e-30))
    worst = max(errors, key=errors.get)
    return {"worst": worst, "error": errors[worst], "params": len(params), "expected": len(list(whole.parameters()))}


@pytest.fixture(scope="module")
def found(tmp_path_factory):
    where = tmp_path_factory.mktemp("cp_patch")
    # forked, not spawned: a spawned rank imports torch, transformers, posenc and this module again
    mp.start_processes(_worker, args=(str(where / "store"), str(where / "found")), nprocs=WORLD, join=True,
                       start_method="fork")
    return [json.loads((where / f"found.{r}").read_text()) for r in range(WORLD)]


@pytest.mark.slow
@pytest.mark.parametrize("spec, method", CASES)
def test_a_patched_llama_on_two_ranks_trains_as_one_process(found, spec, method):
    _every_rank_as_one_process(found, f"{spec} {method}")


@pytest.mark.slow
@pytest.mark.parametrize("spec, method", PADDED)
def test_a_patched_llama_with_key_padding_on_two_ranks_trains_as_one_process(found, spec, method):
    _every_rank_as_one_process(found, f"padded {spec} {method}")


@pytest.mark.slow
@pytest.mark.parametrize("spec, method", GPT_CASES)
def test_the_benchmark_decoder_on_two_ranks_trains_as_one_process(found, spec, method):
    _every_rank_as_one_process(found, f"gpt {spec} {method}")


def test_context_parallel_takes_a_method_name():
    with pytest.raises(ValueError, match="context_parallel must be one of"):
        posenc.interop.patch(torch.nn.Linear(1, 1), "alibi", context_parallel="zigzag")  # checked first


def _every_rank_as_one_process(found, case: str) -> None:
    for rank, f in enumerate(found):
        got = f[case]
        assert got["params"] == got["expected"], got  # every parameter got its gradient
        assert got["error"] < 1e-10, (rank, got)
