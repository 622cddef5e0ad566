"""Attention dropout through ``posenc.interop.patch``: a patched model trains with its own attention
dropout rate (GPT-2's ``attn_pdrop``, GPT-Neo's ``attention_dropout``, each 0.1 by default) and
runs none in eval, through the attention interface and through the families whose attention
computes itself (GPT-Neo, BLOOM, MPT, GPT-1)."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402

SIZES = {"vocab_size": 61, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64}


def _gpt2(**changes):
    config = transformers.GPT2Config(**{**SIZES, **changes}, attn_implementation="sdpa")
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(config)


def _gpt_neo(**changes):
    config = transformers.GPTNeoConfig(vocab_size=61, hidden_size=32, num_layers=2, num_heads=4,
                                       attention_types=[[["global", "local"], 1]], window_size=8,
                                       max_position_embeddings=64, **changes)
    torch.manual_seed(0)
    return transformers.GPTNeoForCausalLM(config)


def _logits(model, ids, seed):
    torch.manual_seed(seed)
    return model(ids).logits


@pytest.mark.parametrize("build, rate", [(_gpt2, "attn_pdrop"), (_gpt_neo, "attention_dropout")])
def test_a_patched_model_trains_with_its_own_attention_dropout_and_runs_none_in_eval(build, rate):
    ids = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(1))
    model = build(**{rate: 0.1, "resid_pdrop" if rate == "attn_pdrop" else "resid_dropout": 0.0,
                     "embd_pdrop" if rate == "attn_pdrop" else "embed_dropout": 0.0})
    posenc.interop.patch(model, "alibi")
    model.train()
    a, b, again = _logits(model, ids, 0), _logits(model, ids, 1), _logits(model, ids, 0)
    assert not torch.equal(a, b)  # dropout is on in training: another draw, another output
    assert torch.equal(a, again)  # the same seed, the same mask
    a.float().pow(2).mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    model.eval()
    with torch.no_grad():
        assert torch.equal(_logits(model, ids, 0), _logits(model, ids, 1))  # none in eval
    # without dropout in the model, training and eval give the same logits: the rate is the model's own
    quiet = build(**{rate: 0.0, "resid_pdrop" if rate == "attn_pdrop" else "resid_dropout": 0.0,
                     "embd_pdrop" if rate == "attn_pdrop" else "embed_dropout": 0.0})
    posenc.interop.patch(quiet, "alibi")
    with torch.no_grad():
        trained = _logits(quiet.train(), ids, 0)
        torch.testing.assert_close(trained, _logits(quiet.eval(), ids, 1), rtol=1e-5, atol=1e-6)


def test_a_patched_model_keeps_about_1_minus_p_of_its_attention_weights():
    """The model's rate reaches ``posenc.attention``: with p = 0.5 on a value of ones per key the
    dropped attention rows average 1 (the kept weights are scaled by 1/(1-p)) and spread as p says."""
    seen = {}
    import posenc

    real = posenc.attention

    def spy(*args, **kwargs):
        seen.setdefault("dropout_p", []).append(kwargs.get("dropout_p", 0.0))
        return real(*args, **kwargs)

    model = _gpt2(attn_pdrop=0.5, resid_pdrop=0.0, embd_pdrop=0.0)
    posenc.interop.patch(model, "alibi")
    ids = torch.randint(0, 61, (1, 16), generator=torch.Generator().manual_seed(2))
    try:
        posenc.attention = spy
        model.train()(ids)
        model.eval()(ids)
    finally:
        posenc.attention = real
    assert seen["dropout_p"] == [0.5, 0.5, 0.0, 0.0]  # two layers in training, then two in eval


def test_bert_trains_a_step_with_its_default_attention_dropout():
    """BERT's default ``attention_probs_dropout_prob`` (0.1) with ALiBi's bidirectional form in place
    of its learned table: a training step, another draw another output, eval deterministic."""
    config = transformers.BertConfig(vocab_size=61, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=48, max_position_embeddings=64, hidden_dropout_prob=0.0,
                                     attn_implementation="sdpa")
    assert config.attention_probs_dropout_prob == 0.1
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(config)
    posenc.interop.patch(model, "alibi")
    ids = torch.randint(0, 61, (2, 24), generator=torch.Generator().manual_seed(3))
    model.train()
    a, b = _logits(model, ids, 0), _logits(model, ids, 1)
    assert not torch.equal(a, b)
    a.pow(2).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)
    model.eval()
    with torch.no_grad():
        assert torch.equal(_logits(model, ids, 0), _logits(model, ids, 1))
