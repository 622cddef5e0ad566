"""``posenc.interop.patch`` on RoBERTa's family and the other BERT-like encoders (issue 51): RoBERTa
counts positions from its non-pad tokens past ``padding_idx`` (``create_position_ids_from_input_ids``),
read by posenc from the model's own call of its table; BERT's row serves ELECTRA, ERNIE, RoCBert,
MobileBERT and DistilBERT; ALBERT, whose layers are shared across depth, is refused by name. Each model
built tiny from its config class with random weights, padded rows included (pad tokens
``pad_token_id``, masked)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _patched_llama import sharpened  # noqa: E402
from posenc.interop.state import layer_state  # noqa: E402

LENGTH = 24
PAD = 1  # RoBERTa's pad_token_id: position 0 is the table's row 2
ENCODER = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4, vocab_size=64,
               max_position_embeddings=64, pad_token_id=PAD, embedding_size=32, hidden_dropout_prob=0.0)
ROBERTA = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm", "xlm-roberta-xl", "data2vec-text", "xmod")
BERT_LIKE = ("electra", "ernie", "roc_bert", "mobilebert", "distilbert")


def tiny(model_type: str, **extra):
    default = transformers.AutoConfig.for_model(model_type)
    config = type(default)(**{k: v for k, v in {**ENCODER, **extra}.items() if hasattr(default, k)})
    torch.manual_seed(0)
    model = transformers.AutoModelForMaskedLM.from_config(config).eval()
    if model_type == "xmod":
        model.set_default_language("en_XX")
    return sharpened(model)  # peaked attention rows: positions show


def _batch(left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows; the second padded after 15 real tokens (on the left with ``left``), pad tokens ``PAD``."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 60, (2, LENGTH), generator=g)
    mask = torch.ones(2, LENGTH, dtype=torch.long)
    pads = slice(0, LENGTH - 15) if left else slice(15, LENGTH)
    ids[1, pads], mask[1, pads] = PAD, 0
    return ids, mask


def _logits(model, ids, mask) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids, attention_mask=mask).logits.double()


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


@pytest.mark.parametrize("model_type", ROBERTA + BERT_LIKE)
@pytest.mark.parametrize("left", [False, True])
def test_own_table_through_posenc_leaves_the_logits_unchanged(model_type, left):
    """``patch(model, hf_layer_specs(config))``: the model's table (RoBERTa's rows past the padding
    row) as posenc's ``learned`` module, padded rows included; that module is the one in use
    (zeroing it changes the logits), and ``unpatch`` restores the model."""
    model = tiny(model_type)
    ids, mask = _batch(left)
    expected = _logits(model, ids, mask)
    posenc.interop.patch(model, hf_layer_specs(model.config))
    assert _rel(_logits(model, ids, mask), expected) < 1e-6
    (pe,) = [m for name, m in model.named_modules() if name.endswith("posenc_modules")][0]
    with torch.no_grad():
        pe.weight.zero_()
    assert _rel(_logits(model, ids, mask), expected) > 1e-3
    posenc.interop.unpatch(model)
    assert torch.equal(_logits(model, ids, mask), expected)


@pytest.mark.parametrize("model_type", ROBERTA)
def test_roberta_own_spec_is_its_table_past_the_padding_row(model_type):
    model = tiny(model_type)
    spec = hf_layer_specs(model.config)[0]
    assert spec == {"scheme": "learned", "d_model": 32, "max_positions": 64 - PAD - 1}


@pytest.mark.parametrize("model_type", ["roberta", "xlm-roberta-xl"])
def test_a_scheme_in_attention_gets_roberta_positions_counted_from_non_pad_tokens(model_type):
    """RoPE placed in RoBERTa runs in attention with RoBERTa's positions: the k-th non-pad token at
    ``k − 1`` (a left-padded row's first real token at 0), pad tokens at 0 (masked keys); it has an
    effect, and a left-padded row's real tokens equal the same tokens unpadded."""
    model = tiny(model_type)
    ids, mask = _batch(left=True)
    own = _logits(model, ids, mask)
    posenc.interop.patch(model, "rope")
    got = _logits(model, ids, mask)
    assert _rel(got, own) > 1e-3
    attention = next(m for m in model.modules() if layer_state(m) is not None)
    want = torch.stack([torch.arange(LENGTH), torch.cat([torch.zeros(LENGTH - 15), torch.arange(15)])]).long()
    assert torch.equal(layer_state(attention).key_positions, want)
    alone = _logits(model, ids[1:, LENGTH - 15:], mask[1:, LENGTH - 15:])
    assert _rel(got[1, LENGTH - 15:], alone[0]) < 1e-6


@pytest.mark.parametrize("model_type", ["roberta", "camembert"])
def test_an_additive_scheme_counts_from_non_pad_tokens_and_pads_keep_the_padding_row(model_type):
    """Sinusoidal (absolute, in the embeddings before the LayerNorm): a left-padded row's real tokens
    equal the same tokens unpadded only if positions count from the non-pad tokens (BERT's ``0..L-1``
    would shift them); pad tokens keep RoBERTa's padding row, as its own table gives it."""
    model = tiny(model_type)
    ids, mask = _batch(left=True)
    posenc.interop.patch(model, "sinusoidal")
    got = _logits(model, ids, mask)
    alone = _logits(model, ids[1:, LENGTH - 15:], mask[1:, LENGTH - 15:])
    assert _rel(got[1, LENGTH - 15:], alone[0]) < 1e-6
    table = model.base_model.embeddings.position_embeddings
    rows = table(torch.tensor([[PAD, PAD + 1]]))
    assert torch.equal(rows[0, 0], table.original.weight[PAD])
    assert not torch.equal(rows[0, 1], table.original.weight[PAD + 1])


@pytest.mark.parametrize("model_type", ["roberta", "electra", "distilbert"])
def test_alibi_trains_a_step_with_the_model_dropout(model_type):
    """ALiBi in place of the table: another model (logits differ), and a training step with the model's
    own attention dropout (0.1) runs and reaches every layer's weights."""
    model = tiny(model_type, attention_probs_dropout_prob=0.1, attention_dropout=0.1)
    ids, mask = _batch()
    own = _logits(model, ids, mask)
    posenc.interop.patch(model, "alibi")
    assert _rel(_logits(model, ids, mask), own) > 1e-3
    model.train()
    loss = model(input_ids=ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    assert torch.isfinite(loss)
    grads = [p.grad for n, p in model.named_parameters() if "layer" in n and "query" in n or "q_lin" in n]
    assert grads and all(g is not None and g.abs().sum() > 0 for g in grads)


def test_electra_additive_scheme_must_be_as_wide_as_its_table():
    model = tiny("electra", embedding_size=16)
    with pytest.raises(ValueError, match="16 wide.*d_model=32; give d_model=16"):
        posenc.interop.patch(model, "sinusoidal")
    posenc.interop.patch(model, "sinusoidal:d_model=16")


def test_albert_is_refused_by_name():
    model = tiny("albert")
    for call in (lambda: posenc.interop.patch(model, "alibi"), lambda: hf_layer_specs(model.config)):
        with pytest.raises(ValueError, match="ALBERT shares its layers across its depth"):
            call()


def test_roberta_table_whose_padding_row_is_not_the_config_s_is_refused():
    model = tiny("roberta")
    model.roberta.embeddings.position_embeddings.padding_idx = None
    with pytest.raises(ValueError, match="counts positions past its padding row"):
        posenc.interop.patch(model, hf_layer_specs(model.config))
