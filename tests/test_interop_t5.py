"""``posenc.interop.patch`` on T5, mT5 and UMT5 (issue 51): T5's bucketed relative bias, computed in
the first layer of each stack and shared by the others (UMT5: one per layer), the encoder's
bidirectional buckets and the decoder's causal ones, unscaled logits. Each model is built tiny from
its config class with random weights (its bias tables made large, so that positions show), 30
encoder tokens with a padded row and 25 decoder tokens (past ``max_distance`` 12): its own encoding
through posenc (``hf_layer_specs(model)``) leaves the logits equal, a doubled table and another
scheme change them, cross-attention is untouched, LongT5 is refused by name."""

from __future__ import annotations

import numpy as np
import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402
from posenc.reference import t5_bucket  # noqa: E402

TINY = dict(vocab_size=64, d_model=32, d_kv=8, d_ff=32, num_layers=2, num_decoder_layers=3, num_heads=4,
            relative_attention_num_buckets=8, relative_attention_max_distance=12, dropout_rate=0.0,
            decoder_start_token_id=0, pad_token_id=0)
TYPES = ("t5", "mt5", "umt5")


def tiny_seq2seq(model_type: str, **changes):
    config = transformers.AutoConfig.for_model(model_type, **{**TINY, **changes})
    torch.manual_seed(0)
    model = transformers.AutoModelForSeq2SeqLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name:
                p.mul_(20)  # random tables of std 1/sqrt(d_model)·factor: made large enough to show
    return model


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, 60, (2, 30), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 20:] = 0  # the second row right-padded after 20 tokens
    return ids, mask, torch.randint(3, 60, (2, 25), generator=g)


def _logits(model, ids, mask, dec) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask, decoder_input_ids=dec).logits.double()


def _self_attentions(model):
    return [m for n, m in model.named_modules() if n.endswith("SelfAttention")]


def test_t5_buckets_are_transformers_but_where_float32_rounds_a_whole_number_otherwise():
    """posenc's ``t5_bucket`` against transformers' ``T5Attention._relative_position_bucket`` over a
    random draw of (num_buckets, max_distance, bidirectional), at every distance in ``−3M..3M``:
    equal (relative distance ``j − i``, the upper half of the buckets for ``j > i`` when
    bidirectional, only the past when causal, exact below ``max_exact``, logarithmic to
    ``max_distance``, truncated) except where the logarithm's real value is a whole number, which T5's
    float32 log and posenc's float64 log may round to either side."""
    from transformers.models.t5.modeling_t5 import T5Attention

    rng = np.random.default_rng(0)
    differing = 0
    for _ in range(300):
        bidirectional = bool(rng.integers(2))
        num_buckets = int(rng.integers(4, 130))
        side = num_buckets // 2 if bidirectional else num_buckets
        max_distance = int(rng.integers(side // 2 + 1, 600))
        r = torch.arange(-3 * max_distance - 3, 3 * max_distance + 4)
        theirs = T5Attention._relative_position_bucket(r, bidirectional=bidirectional, num_buckets=num_buckets,
                                                       max_distance=max_distance).numpy()
        ours = t5_bucket(r.numpy(), num_buckets=num_buckets, max_distance=max_distance, bidirectional=bidirectional)
        n = np.abs(r.numpy()) if bidirectional else np.maximum(-r.numpy(), 0)
        exact = side // 2
        value = np.log(np.maximum(n, 1) / exact) / np.log(max_distance / exact) * (side - exact)  # float64
        whole = (n >= exact) & (np.abs(value - np.round(value)) < 1e-4) & (exact + np.round(value) <= side - 1)
        assert np.array_equal(theirs[~whole], ours[~whole]), (num_buckets, max_distance, bidirectional)
        assert (np.abs(theirs - ours) <= 1).all()
        differing += int((theirs != ours).any())
    assert differing < 30  # rare
    for bidirectional in (True, False):  # T5's own 32 buckets to 128: equal everywhere
        r = torch.arange(-600, 601)
        assert np.array_equal(T5Attention._relative_position_bucket(r, bidirectional=bidirectional).numpy(),
                              t5_bucket(r.numpy(), bidirectional=bidirectional))


def test_hf_layer_specs_of_t5_are_its_buckets_encoder_then_decoder():
    model = tiny_seq2seq("t5")
    specs = hf_layer_specs(model)
    assert [s["bidirectional"] for s in specs] == [True] * 2 + [False] * 3
    assert {s["scheme"] for s in specs} == {"t5"} and specs[0]["num_buckets"] == 8 and specs[0]["max_distance"] == 12
    assert specs[0] is specs[1] and specs[2] is specs[4]  # one table per stack, as T5 shares it
    assert hf_layer_specs(model.config) == specs  # the config says as much (is_encoder_decoder)
    umt5 = hf_layer_specs(tiny_seq2seq("umt5"))
    assert umt5[0] == umt5[1] and umt5[0] is not umt5[1]  # UMT5: a table per layer
    encoder = transformers.T5EncoderModel(model.config.__class__(**TINY))
    assert [s["bidirectional"] for s in hf_layer_specs(encoder)] == [True, True]


@pytest.mark.parametrize("model_type", TYPES)
def test_t5_runs_its_own_buckets_through_posenc_unchanged(model_type):
    model = tiny_seq2seq(model_type)
    ids, mask, dec = _batch()
    expected = _logits(model, ids, mask, dec)
    posenc.interop.patch(model, hf_layer_specs(model))
    assert all(m.posenc_pe is not None and m.posenc_pe.name == "t5" for m in _self_attentions(model))
    assert len(model.posenc_modules) == (5 if model_type == "umt5" else 2)  # T5 shares one table per stack
    scale = expected.abs().max()
    assert (_logits(model, ids, mask, dec) - expected).abs().max() / scale < 1e-5
    with torch.no_grad():
        for m in model.posenc_modules:
            m.weight.mul_(2)
    assert (_logits(model, ids, mask, dec) - expected).abs().max() / scale > 1e-2  # the tables are what run
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask, dec), expected)


def test_a_t5_encoder_runs_its_own_buckets_through_posenc_unchanged():
    config = transformers.T5Config(**TINY)
    torch.manual_seed(0)
    model = transformers.T5EncoderModel(config).eval()
    with torch.no_grad():
        model.encoder.block[0].layer[0].SelfAttention.relative_attention_bias.weight.mul_(20)
    ids, mask, _ = _batch()
    with torch.no_grad():
        expected = model(input_ids=ids, attention_mask=mask).last_hidden_state
        posenc.interop.patch(model, hf_layer_specs(model))
        got = model(input_ids=ids, attention_mask=mask).last_hidden_state
    assert (got - expected).abs().max() / expected.abs().max() < 1e-5


def test_alibi_in_t5_is_bidirectional_in_the_encoder_causal_in_the_decoder_and_leaves_cross_attention():
    model = tiny_seq2seq("t5")
    ids, mask, dec = _batch()
    expected = _logits(model, ids, mask, dec)
    posenc.interop.patch(model, "alibi")
    base = _logits(model, ids, mask, dec)
    assert (base - expected).abs().max() / expected.abs().max() > 1e-2  # another scheme has an effect
    for layer in model.decoder.block:  # cross-attention has no positions: left as it was
        cross = layer.layer[1].EncDecAttention
        assert "posenc_pe" not in cross.__dict__ and "posenc_layer" not in cross.__dict__
    later = ids.clone()
    later[:, 19] = (later[:, 19] + 1 - 3) % 57 + 3  # the encoder's last real token of row 1
    changed = _logits(model, later, mask, dec)
    assert (changed - base)[:, 0].abs().max() > 1e-6  # every decoder position sees it, through the encoder
    later_dec = dec.clone()
    later_dec[:, -1] = (later_dec[:, -1] + 1 - 3) % 57 + 3
    causal = _logits(model, ids, mask, later_dec)
    assert torch.allclose(causal[:, :-1], base[:, :-1], rtol=0, atol=1e-6)  # the decoder is causal
    padded = ids.clone()
    padded[1, 25] = (padded[1, 25] + 1 - 3) % 57 + 3  # a padded key of row 1
    assert torch.allclose(_logits(model, padded, mask, dec)[1], base[1], rtol=0, atol=1e-6)


@pytest.mark.parametrize("scheme", ["alibi", "t5"])
def test_t5_trains_a_step_with_its_default_dropout_and_a_posenc_scheme(scheme):
    model = tiny_seq2seq("t5", dropout_rate=0.1).train()
    ids, mask, dec = _batch()
    posenc.interop.patch(model, scheme)
    loss = model(input_ids=ids, attention_mask=mask, labels=dec).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert model.encoder.block[0].layer[0].SelfAttention.q.weight.grad.abs().sum() > 0
    if scheme == "t5":
        assert model.posenc_modules[0].weight.grad.abs().sum() > 0


def test_longt5_is_refused_by_name():
    config = transformers.LongT5Config(**{k: v for k, v in TINY.items()}, encoder_attention_type="local")
    model = transformers.LongT5ForConditionalGeneration(config)
    with pytest.raises(ValueError, match="LongT5LocalAttention"):
        posenc.interop.patch(model, "alibi")
    with pytest.raises(ValueError, match="local"):
        hf_layer_specs(model.config)


def test_t5_buckets_that_float32_rounds_otherwise_are_refused_by_name():
    """9 causal buckets to 128: T5's float32 log puts distance 64 in bucket 8, posenc's float64 in 7."""
    model = tiny_seq2seq("t5", relative_attention_num_buckets=9, relative_attention_max_distance=128)
    with pytest.raises(ValueError, match="float32"):
        posenc.interop.patch(model, "alibi")


@pytest.mark.parametrize(("model_type", "scheme"), [("t5", "own"), ("t5", "alibi"), ("t5", "rope"), ("umt5", "t5")])
def test_t5_generates_greedily_through_the_cache_as_recomputing_each_step(model_type, scheme):
    """Greedy ``generate`` through transformers' ``EncoderDecoderCache`` equals recomputing the whole
    decoder sequence at every step (the padded encoder row included), logits and tokens; the scheme
    has an effect (its logits are not the unpatched model's), and T5's own buckets through posenc
    generate what the model generates. (Two decoder layers: transformers' ``generate`` sizes T5's
    cache by ``num_layers``, and fails on a decoder with more layers, patched or not.)"""
    model = tiny_seq2seq(model_type, num_decoder_layers=2)
    ids, mask, dec = _batch()
    steps = 6
    kw = dict(input_ids=ids, attention_mask=mask, decoder_input_ids=dec[:, :6], max_new_tokens=steps,
              do_sample=False, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        own = model.generate(**kw)
        posenc.interop.patch(model, hf_layer_specs(model) if scheme == "own" else scheme)
        cached = model.generate(**kw)
        seq = cached.sequences[:, : cached.sequences.shape[1] - steps]  # the start token, then the prefix
        for step in range(steps):  # from scratch: every decoder token recomputed
            logits = model(input_ids=ids, attention_mask=mask, decoder_input_ids=seq).logits[:, -1]
            scale = logits.abs().max()
            assert (cached.logits[step] - logits).abs().max() / scale < 1e-5, step
            seq = torch.cat([seq, cached.sequences[:, seq.shape[1]:seq.shape[1] + 1]], dim=1)
            assert torch.equal(seq[:, -1], logits.argmax(-1))
    assert torch.equal(cached.sequences, seq)
    moved = max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(cached.logits, own.logits))
    if scheme == "own":
        assert moved < 1e-5 and torch.equal(cached.sequences, own.sequences)
    else:
        assert moved > 1e-2  # the scheme placed is what runs
