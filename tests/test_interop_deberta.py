"""``posenc.interop.patch`` on DeBERTa-v2/v3 (issue 51): its disentangled attention, which computes
itself outside transformers' attention interface, runs through a forward of posenc's; its own
encoding (``hf_layer_specs``: ``deberta`` started from the layer and the encoder's table) leaves the
logits equal, another scheme and a doubled table change them, a training step runs; DeBERTa v1 and
the settings posenc does not reproduce are refused by name. Built tiny with random weights (its
attention projections sharpened), 40 tokens (past ``position_buckets`` 8) with a padded row."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402

V3 = dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=32,
          max_position_embeddings=64, relative_attention=True, pos_att_type=["p2c", "c2p"], max_relative_positions=64,
          position_buckets=8, position_biased_input=False, norm_rel_ebd="layer_norm", share_att_key=True,
          hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def tiny_deberta(**changes):
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(**{**V3, **changes})).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("query_proj.weight", "key_proj.weight", "rel_embeddings.weight")):
                p.mul_(8)  # random small weights leave attention almost uniform
    return model


def _batch():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (2, 40), generator=g)
    mask = torch.ones_like(ids)
    mask[1, 29:] = 0
    return ids, mask


def _logits(model, ids, mask):
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=mask).logits.double()
    return torch.cat([out[0], out[1, :29]])  # the real tokens (a padded query's row is the model's own affair)


@pytest.mark.parametrize("share_att_key", [True, False])
def test_deberta_v3_runs_its_disentangled_attention_through_posenc_unchanged(share_att_key):
    model = tiny_deberta(share_att_key=share_att_key)
    ids, mask = _batch()
    expected = _logits(model, ids, mask)
    specs = hf_layer_specs(model.config)
    assert [s["scheme"] for s in specs] == ["deberta", "deberta"]  # not a rope read from a config without one
    posenc.interop.patch(model, specs)
    layers = [layer.attention.self for layer in model.deberta.encoder.layer]
    assert all(a.posenc_pe is not None and a.posenc_pe.name == "deberta" for a in layers)
    scale = expected.abs().max()
    assert (_logits(model, ids, mask) - expected).abs().max() / scale < 1e-5
    with torch.no_grad():
        for a in layers:
            a.posenc_pe.rel_embeddings.mul_(2)
    assert (_logits(model, ids, mask) - expected).abs().max() / scale > 1e-3  # the table is what runs
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask), expected)


def test_alibi_in_deberta_replaces_its_relative_terms_bidirectionally():
    model = tiny_deberta()
    ids, mask = _batch()
    expected = _logits(model, ids, mask)
    posenc.interop.patch(model, "alibi")
    base = _logits(model, ids, mask)
    assert (base - expected).abs().max() / expected.abs().max() > 1e-3
    later = ids.clone()
    later[0, -1] = (later[0, -1] + 1 - 3) % 57 + 3
    assert (_logits(model, later, mask)[0] - base[0]).abs().max() > 1e-6  # the first token sees the last
    from posenc.interop.classify import classify
    from posenc.interop.families import FAMILIES

    assert classify(model.deberta.encoder.layer[0].attention.self, FAMILIES["deberta-v2"]) == "bidirectional"


def test_deberta_trains_a_step_with_its_default_dropout_and_alibi():
    model = tiny_deberta(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1).train()
    ids, mask = _batch()
    posenc.interop.patch(model, "alibi")
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert model.deberta.encoder.layer[0].attention.self.query_proj.weight.grad.abs().sum() > 0


def test_deberta_settings_posenc_does_not_reproduce_are_refused_by_name():
    with pytest.raises(ValueError, match="position_biased_input=True"):
        posenc.interop.patch(tiny_deberta(position_biased_input=True), "alibi")
    with pytest.raises(ValueError, match="relative_attention=False"):
        hf_layer_specs(tiny_deberta(relative_attention=False).config)
    model = tiny_deberta(hidden_dropout_prob=0.1).train()
    posenc.interop.patch(model, hf_layer_specs(model.config))
    ids, mask = _batch()
    with pytest.raises(ValueError, match="pos_dropout"):
        model(input_ids=ids, attention_mask=mask)
    config = transformers.DebertaConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                        intermediate_size=32, relative_attention=True)
    with pytest.raises(ValueError, match="DeBERTa v1"):
        posenc.interop.patch(transformers.DebertaForMaskedLM(config), "alibi")
    with pytest.raises(ValueError, match="DeBERTa v1"):
        hf_layer_specs(config)


def test_a_config_without_share_att_key_and_buckets_reads_as_transformers_reads_it():
    """DebertaV2Config leaves out ``share_att_key``, ``position_buckets`` and ``norm_rel_ebd`` unless
    given; transformers' attention reads them with ``getattr(config, key, default)`` (False, -1,
    "none"). posenc's own spec read a missing ``share_att_key`` as True, so ``patch`` kept a
    deberta module of random, tied projections in place of the model's: logits off by about 3e-4."""
    v3 = {k: v for k, v in V3.items() if k not in ("share_att_key", "position_buckets", "norm_rel_ebd",
                                                    "max_relative_positions")}
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(**v3)).eval()
    assert not hasattr(model.config, "share_att_key")
    ids, mask = _batch()
    expected = _logits(model, ids, mask)
    posenc.interop.patch(model, hf_layer_specs(model.config))
    assert (_logits(model, ids, mask) - expected).abs().max() / expected.abs().max() < 1e-5
