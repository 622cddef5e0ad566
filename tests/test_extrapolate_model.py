"""The benchmark's model: any registered scheme plugs in, attention stays causal, RoPE scalings swap
in without touching the weights, and a length a scheme cannot run at is reported, not crashed."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import posenc
from posenc.extrapolate.driver import resolve_scheme
from posenc.extrapolate.evaluate import cannot_run
from posenc.extrapolate.model import GPTConfig, TinyGPT

CFG = GPTConfig(vocab_size=32, n_layer=2, n_head=2, n_embd=16, mlp_ratio=2)


def _model(name: str, cfg: GPTConfig = CFG, max_positions: int = 24, arch: str = "transformer") -> TinyGPT:
    torch.manual_seed(0)
    _, spec = resolve_scheme(name, cfg, max_positions=max_positions)
    return TinyGPT(cfg, spec, arch=arch).eval()


CONTENT = [n for n in posenc.schemes() if posenc.registry.get(n).kind == "content"]


@pytest.mark.parametrize("name", posenc.schemes())
def test_every_scheme_is_causal(name):
    """Changing token t changes no logit before t, and does change the logits at t (position-aware or not)."""
    model = _model(name)
    x = torch.randint(0, CFG.vocab_size, (2, 20), generator=torch.Generator().manual_seed(1))
    y = x.clone()
    y[:, 12] = (y[:, 12] + 1) % CFG.vocab_size
    with torch.no_grad():
        a, b = model(x), model(y)
    assert a.shape == (2, 20, CFG.vocab_size)
    torch.testing.assert_close(a[:, :12], b[:, :12], rtol=0, atol=1e-5)
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-4


@pytest.mark.parametrize("name", CONTENT)
def test_content_schemes_train_in_the_model(name):
    """A content scheme's parameters (FoX's gate, CoPE's embeddings, DAPE's MLP, PaTH's
    reflections) get a gradient through the model, and one optimizer step lowers the loss."""
    model = _model(name).train()
    x = torch.randint(0, CFG.vocab_size, (4, 17), generator=torch.Generator().manual_seed(4))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
        loss.backward()
        losses.append(float(loss.detach()))
        for p in model.pes.parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().max() > 0, name
        opt.step()
    assert losses[1] < losses[0], (name, losses)


def test_fox_reads_the_attention_blocks_input_and_no_positions():
    """FoX's full gate reads LN(x), the attention block's input (``hidden=``): the model's first
    block equals ``posenc.attention`` called with it, and shifting positions changes nothing."""
    model = _model("fox")
    assert model.pes[0].reads_hidden and model.pe_spec["d_model"] == CFG.n_embd
    x = torch.randint(0, CFG.vocab_size, (2, 9), generator=torch.Generator().manual_seed(5))
    block, pe = model.blocks[0], model.pes[0]
    with torch.no_grad():
        h = block.ln_1(model.tok_emb(x))  # (B, L, C)
        q, k, v = (t.view(2, 9, CFG.n_head, CFG.head_dim).transpose(1, 2)  # (B, H, L, D)
                   for t in block.attn.qkv(h).split(CFG.n_embd, 2))
        want = block.attn.proj(posenc.attention(q, k, v, pe, causal=True, hidden=h, backend="materialize")
                               .transpose(1, 2).reshape(2, 9, CFG.n_embd))
        torch.testing.assert_close(block.attn(h, torch.arange(9), pe), want)
        torch.testing.assert_close(model(x, torch.arange(9)), model(x, torch.arange(9) + 7), rtol=0, atol=0)


def test_path_cannot_run_past_its_bound():
    path = _model("path:max_length=24")
    assert cannot_run(path, 24) is None
    reason = cannot_run(path, 25)
    assert reason is not None and "max_length=24" in reason
    assert cannot_run(_model("fox"), 1000) is None


def test_positions_matter_except_for_nope():
    """Without a causal mask difference, shifting every position changes the output of a scheme that
    uses absolute positions and leaves a relative one unchanged; NoPE ignores positions."""
    x = torch.randint(0, CFG.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    pos = torch.arange(10)
    with torch.no_grad():
        for name, moves in (("sinusoidal", True), ("rope", False), ("alibi", False), ("nope", False)):
            model = _model(name)
            diff = (model(x, pos) - model(x, pos + 5)).abs().max()
            assert (diff > 1e-4) == moves, (name, float(diff))


def test_resolve_fills_sizes_and_makes_t5_causal():
    label, spec = resolve_scheme("t5", CFG, max_positions=24)
    assert label == "t5" and spec["num_heads"] == CFG.n_head and spec["bidirectional"] is False
    label, spec = resolve_scheme("rope:base=500", CFG, max_positions=24)
    assert spec["head_dim"] == CFG.head_dim and spec["base"] == 500.0 and "500" in label
    _, spec = resolve_scheme("learned", CFG, max_positions=24)
    assert spec["max_positions"] == 24 and spec["d_model"] == CFG.n_embd
    with pytest.raises(ValueError, match="unknown scheme"):
        resolve_scheme("nosuchscheme", CFG, max_positions=24)


def test_mismatched_sizes_raise():
    with pytest.raises(ValueError, match="head_dim"):
        TinyGPT(CFG, {"scheme": "rope", "head_dim": CFG.head_dim * 2})
    with pytest.raises(ValueError, match="num_heads"):
        TinyGPT(CFG, {"scheme": "alibi", "num_heads": CFG.n_head + 1})
    with pytest.raises(ValueError, match="d_model"):
        TinyGPT(CFG, {"scheme": "sinusoidal", "d_model": CFG.n_embd * 2})
    with pytest.raises(ValueError, match="multiple of n_head"):
        GPTConfig(n_embd=10, n_head=4)


def test_learned_cannot_run_past_its_table_and_others_can():
    learned = _model("learned", max_positions=24)
    assert cannot_run(learned, 24) is None
    reason = cannot_run(learned, 25)
    assert reason is not None and "max_positions=24" in reason
    for name in ("rope", "alibi", "t5", "sinusoidal", "nope"):
        assert cannot_run(_model(name), 1000) is None, name


def test_rope_scaling_swaps_frequencies_not_weights():
    model = _model("rope")
    x = torch.randint(0, CFG.vocab_size, (1, 40), generator=torch.Generator().manual_seed(3))
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():
        before = model(x)
        model.set_pe({**model.pe_spec, "scaling": {"type": "linear", "factor": 4.0}})
        after = model(x)
    assert model.pe_spec["scaling"]["factor"] == 4.0
    assert (before - after).abs().max() > 1e-4
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, weights[k], rtol=0, atol=0)


def test_pe_per_layer_gives_each_layer_its_own_table():
    cfg = dataclasses.replace(CFG, pe_per_layer=True)
    shared, per_layer = _model("learned", CFG), _model("learned", cfg)
    assert len(shared.pes) == 1 and len(per_layer.pes) == cfg.n_layer
    assert per_layer.num_params() == shared.num_params() + (cfg.n_layer - 1) * 24 * cfg.n_embd


# -- the hybrid: ssm blocks in place of every other attention block ----------------------------

def test_hybrid_alternates_ssm_and_attention_blocks_and_shares_the_rest():
    from posenc.extrapolate.model import Block, SSMBlock

    cfg = dataclasses.replace(CFG, n_layer=4)
    model = _model("rope", cfg, arch="hybrid")
    assert [type(b) for b in model.blocks] == [SSMBlock, Block, SSMBlock, Block]
    assert model.arch == "hybrid" and _model("rope", cfg).arch == "transformer"
    per_layer = _model("learned", dataclasses.replace(cfg, pe_per_layer=True), arch="hybrid")
    assert len(per_layer.pes) == 2  # one table per attention block, none for the ssm blocks


@pytest.mark.parametrize("name", ["nope", "rope", "sinusoidal"])
def test_hybrid_is_causal(name):
    model = _model(name, arch="hybrid")
    x = torch.randint(0, CFG.vocab_size, (2, 150), generator=torch.Generator().manual_seed(1))  # several ssm chunks
    y = x.clone()
    y[:, 100] = (y[:, 100] + 1) % CFG.vocab_size
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :100], b[:, :100], rtol=0, atol=1e-5)
    assert (a[:, 100:] - b[:, 100:]).abs().max() > 1e-4


def test_nope_hybrid_ignores_positions_but_not_order():
    """No position enters a NoPE hybrid (shifting them changes nothing), yet a token's logits
    depend on the order of the tokens before it, which a NoPE transformer sees only through the
    causal mask."""
    x = torch.randint(0, CFG.vocab_size, (1, 10), generator=torch.Generator().manual_seed(2))
    swapped = x.clone()
    swapped[0, [2, 5]] = x[0, [5, 2]]
    model = _model("nope", arch="hybrid")
    pos = torch.arange(10)
    with torch.no_grad():
        assert (model(x, pos) - model(x, pos + 5)).abs().max() < 1e-6
        assert (model(x)[0, -1] - model(swapped)[0, -1]).abs().max() > 1e-4


def test_hybrid_needs_two_blocks_and_a_known_arch():
    with pytest.raises(ValueError, match="arch='hybrid' needs n_layer >= 2.*got n_layer=1"):
        TinyGPT(dataclasses.replace(CFG, n_layer=1), {"scheme": "nope"}, arch="hybrid")
    with pytest.raises(ValueError, match="arch must be one of 'transformer', 'hybrid', 'llama'; got 'mamba'"):
        TinyGPT(CFG, {"scheme": "nope"}, arch="mamba")
