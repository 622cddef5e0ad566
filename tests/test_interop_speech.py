"""``posenc.interop.patch`` on speech encoders (issue 51): wav2vec2 and HuBERT keep their
convolutional position embedding (``pos_conv_embed``) and take a posenc scheme in attention beside
it; their own encoding in attention is none (``hf_layer_specs``: ``nope``), so patching it leaves the
outputs equal, padded audio included. WavLM and wav2vec2-Conformer (its ``rotary_embedding_base``)
are refused by name. Each model is built tiny from its
config class with random weights."""

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

SPEECH = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4, conv_dim=(16, 16),
              conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4,
              vocab_size=12, feat_extract_norm="layer", do_stable_layer_norm=True)
SAMPLES = 1200  # 119 frames: (1200 - 10) // 5 + 1 = 239, then (239 - 3) // 2 + 1 = 119


def tiny_ctc(model_type: str):
    default = transformers.AutoConfig.for_model(model_type)
    config = type(default)(**{k: v for k, v in SPEECH.items() if hasattr(default, k)})
    torch.manual_seed(0)
    model = transformers.AutoModelForCTC.from_config(config).eval()
    return sharpened(model, causal=(False,))  # peaked attention rows: positions show


def _audio() -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of audio, the second padded after 800 samples."""
    x = torch.randn(2, SAMPLES, generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, SAMPLES, dtype=torch.long)
    mask[1, 800:] = 0
    x[1, 800:] = 0
    return x, mask


def _logits(model, x, mask) -> torch.Tensor:
    with torch.no_grad():
        return model(x, attention_mask=mask).logits.double()


@pytest.mark.parametrize("model_type", ["wav2vec2", "hubert"])
def test_a_speech_encoder_keeps_its_convolution_and_takes_a_scheme_in_attention(model_type):
    model = tiny_ctc(model_type)
    x, mask = _audio()
    expected = _logits(model, x, mask)
    specs = hf_layer_specs(model.config)
    assert specs == [{"scheme": "nope"}] * 2  # its positions are the convolution's, on the features
    posenc.interop.patch(model, specs)
    layers = [m for m in model.modules() if getattr(m, "is_causal", None) is False]
    assert layers and all(m.posenc_pe is not None for m in layers)  # through posenc's attention
    torch.testing.assert_close(_logits(model, x, mask), expected, rtol=1e-5, atol=1e-5)
    conv = model.base_model.encoder.pos_conv_embed.conv
    with torch.no_grad():  # the convolution is kept: it still acts while patched
        conv.bias.add_(1.0)
    assert not torch.allclose(_logits(model, x, mask), expected, atol=1e-3)
    with torch.no_grad():
        conv.bias.sub_(1.0)
    posenc.interop.patch(model, "alibi")
    alibi = _logits(model, x, mask)
    assert (alibi - expected).abs().max() > 1e-3
    posenc.interop.patch(model, "rope")
    rope = _logits(model, x, mask)
    posenc.interop.patch(model, "rope:base=20000")  # a doubled base: another model
    assert (_logits(model, x, mask) - rope).abs().max() > 1e-4
    model.train()
    labels = torch.tensor([[1, 2, 3, 4], [5, 6, -100, -100]])
    loss = model(x, attention_mask=mask, labels=labels).loss
    loss.backward()
    assert torch.isfinite(loss)
    posenc.interop.unpatch(model)
    model.eval()
    torch.testing.assert_close(_logits(model, x, mask), expected, rtol=0, atol=0)


def test_an_additive_scheme_beside_the_convolution_is_refused_by_name():
    model = tiny_ctc("wav2vec2")
    with pytest.raises(ValueError, match=r"model_type 'wav2vec2'.*no additive scheme.*pos_conv_embed"):
        posenc.interop.patch(model, "sinusoidal")


@pytest.mark.parametrize(("model_type", "what"), [("wavlm", "gated relative position bias"),
                                                  ("wav2vec2-conformer", "rotary_embedding_base")])
def test_a_speech_encoder_with_positions_inside_its_own_attention_is_refused_by_name(model_type, what):
    model = tiny_ctc(model_type)
    for call in (lambda: posenc.interop.patch(model, "alibi"), lambda: hf_layer_specs(model.config)):
        with pytest.raises(ValueError, match=rf"'{model_type}'.* not supported: .*{what}"):
            call()
