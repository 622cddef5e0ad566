"""``posenc.interop.patch`` on vision transformers (issue 51, "vision encoders take 2D positions"):
ViT, DeiT, DINOv2, DINOv2 with registers and SigLIP's vision tower, each built tiny from its config
class with random weights (a 4 × 4 patch grid of 8-pixel patches). Their own learned table through
posenc (``hf_layer_specs``) leaves the logits equal, at the model's image size and at another one
(``interpolate_pos_encoding``); posenc's 2D schemes get the patch grid's (row, column), prefix
tokens at (0, 0), and change the outputs; a one-axis scheme is refused by name, and so are BEiT's and
Swin's relative tables. DINOv3's RoPE is posenc's dinov3."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc  # noqa: E402
import posenc.interop  # noqa: E402
from posenc.interop.hf import hf_layer_specs  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from _patched_llama import sharpened  # noqa: E402

VISION = dict(num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4, image_size=32,
              patch_size=8, num_labels=3)
CLASSES = {"vit": "ViTForImageClassification", "deit": "DeiTForImageClassification",
           "dinov2": "Dinov2ForImageClassification",
           "dinov2_with_registers": "Dinov2WithRegistersForImageClassification",
           "siglip": "SiglipForImageClassification"}
PREFIX = {"vit": 1, "deit": 2, "dinov2": 1, "dinov2_with_registers": 5, "siglip": 0}  # class, distillation, registers


def tiny_vision(model_type: str):
    default = transformers.AutoConfig.for_model(model_type)
    if model_type == "siglip":  # its vision tower's config inside SiglipConfig
        config = type(default)(vision_config=VISION)
    else:
        config = type(default)(**{k: v for k, v in VISION.items() if hasattr(default, k)})
    torch.manual_seed(0)
    model = getattr(transformers, CLASSES[model_type])(config).eval()
    with torch.no_grad():  # DeiT's table starts at zeros: random rows, so that each row shows
        for name, p in model.named_parameters():
            if name.endswith(("position_embeddings", "position_embedding.weight")):
                p.normal_(generator=torch.Generator().manual_seed(1))
    return model


def _images(height: int = 32, width: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(2, 3, height, width, generator=torch.Generator().manual_seed(seed))


def _resize_kw(model_type: str) -> dict:
    """ViT, DeiT and SigLIP need ``interpolate_pos_encoding=True`` for another size; DINOv2 always resizes."""
    return {} if model_type.startswith("dinov2") else {"interpolate_pos_encoding": True}


def _logits(model, images, **kw) -> torch.Tensor:
    with torch.no_grad():
        return model(images, **kw).logits.double()


@pytest.mark.parametrize("model_type", list(CLASSES))
def test_a_vision_transformer_runs_its_own_table_through_posenc_unchanged(model_type):
    model = tiny_vision(model_type)
    images, other = _images(), _images(48, 40, seed=1)  # a 6 × 5 grid: the table resized
    expected, expected_other = _logits(model, images), _logits(model, other, **_resize_kw(model_type))
    specs = hf_layer_specs(model.config)
    assert specs == [{"scheme": "learned", "d_model": 32, "grid": [4, 4]}] * 2
    names = sorted(model.state_dict())
    posenc.interop.patch(model, specs)
    assert set(names) <= set(model.state_dict())  # the model's table stays where it keeps it
    torch.testing.assert_close(_logits(model, images), expected, rtol=0, atol=0)
    torch.testing.assert_close(_logits(model, other, **_resize_kw(model_type)), expected_other, rtol=0, atol=0)
    (pe,) = [p for name, p in model.named_parameters() if "posenc_modules" in name]  # the patch grid's rows
    with torch.no_grad():  # not vacuous: posenc's table is the one the model reads
        pe.mul_(2)
    assert not torch.allclose(_logits(model, images), expected)
    posenc.interop.unpatch(model)
    assert not any("forward" in vars(m) for m in model.modules())  # the embeddings' own forward again
    torch.testing.assert_close(_logits(model, images), expected, rtol=0, atol=0)


SCHEMES = ["rope:axes=2", "rope_mixed", "dinov3", "sinusoidal:axes=2"]
CASES = [("vit", s) for s in SCHEMES] + [(t, SCHEMES[i % 4]) for i, t in enumerate(list(CLASSES)[1:])]


@pytest.mark.parametrize(("model_type", "scheme"), CASES)
def test_a_2d_scheme_changes_a_vision_transformer_and_trains_at_another_size(model_type, scheme):
    model = tiny_vision(model_type)
    images, other = _images(), _images(48, 40, seed=1)
    own = _logits(model, images)
    posenc.interop.patch(model, scheme)
    placed = _logits(model, images)
    assert not torch.allclose(placed, own)
    (module,) = [m for name, m in model.named_modules() if name.endswith("posenc_modules")][0]
    spec = module.spec
    posenc.interop.patch(model, {**spec, "base": 2 * spec["base"]})  # a doubled base: another model
    assert not torch.allclose(_logits(model, images), placed)
    model.train()
    loss = model(other, labels=torch.tensor([0, 1]), **_resize_kw(model_type)).loss
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.classifier.parameters())


def _spy(pe) -> list:
    """Every ``positions`` the rotary ``pe`` is called with."""
    seen, forward = [], pe.forward

    def spy(x, positions, **kw):
        seen.append(positions)
        return forward(x, positions, **kw)

    pe.forward = spy
    return seen


@pytest.mark.parametrize("model_type", ["dinov2_with_registers", "deit", "siglip"])
def test_prefix_tokens_sit_at_the_origin_and_patches_at_their_row_and_column(model_type):
    model = tiny_vision(model_type)
    pe = posenc.build({"scheme": "rope", "head_dim": 8, "axes": 2})
    posenc.interop.patch(model, pe)
    seen = _spy(pe)
    _logits(model, _images(48, 40), **_resize_kw(model_type))  # a 6 × 5 grid
    grid = posenc.grid_positions((6, 5))  # (30, 2): (r, c) row-major
    want = torch.cat([grid.new_zeros(PREFIX[model_type], 2), grid])  # (L, 2)
    assert seen and all(torch.equal(p[0].cpu().long(), want) and p.shape[-1] == 2 for p in seen)


def test_dinov3_gets_the_patch_centres_of_the_grid_it_is_given():
    model = tiny_vision("vit")
    pe = posenc.build({"scheme": "dinov3", "head_dim": 8})
    posenc.interop.patch(model, pe)
    seen = _spy(pe)
    _logits(model, _images(48, 40), interpolate_pos_encoding=True)
    want = torch.cat([torch.zeros(1, 2, dtype=torch.float64), pe.coordinates(6, 5)])  # class token at (0, 0)
    assert seen and all(torch.equal(p[0].cpu(), want) for p in seen)  # real coordinates, not truncated to indices


@pytest.mark.parametrize("scheme", ["alibi", "rope", "learned:max_positions=17"])
def test_a_one_axis_scheme_is_refused_by_name_on_a_vision_transformer(scheme):
    model = tiny_vision("vit")
    with pytest.raises(ValueError, match=r"model_type 'vit'.*2D schemes"):
        posenc.interop.patch(model, scheme)
    assert getattr(model, "_posenc_original", None) is None


def tiny_dinov3(**kw):
    config = transformers.DINOv3ViTConfig(**{k: v for k, v in VISION.items() if k != "num_labels"},
                                          num_register_tokens=2, **kw)
    torch.manual_seed(0)
    model = transformers.DINOv3ViTModel(config).eval()
    return sharpened(model, causal=(False,))  # peaked attention rows: positions show


def _hidden(model, images) -> torch.Tensor:
    with torch.no_grad():
        return model(images).last_hidden_state.double()


def test_dinov3_runs_its_own_rope_through_posenc_unchanged_and_a_doubled_base_differs():
    """DINOv3's RoPE is posenc's dinov3 (base rope_theta, its augmentations): equal up to float32
    rounding of the angles (transformers forms them in float32), at its size and another; the class
    and register tokens stay unrotated (at (0, 0)); a doubled base changes the outputs."""
    model = tiny_dinov3()
    images, other = _images(), _images(48, 40, seed=1)
    expected, expected_other = _hidden(model, images), _hidden(model, other)
    specs = hf_layer_specs(model.config)
    assert specs == [{"scheme": "dinov3", "head_dim": 8, "base": 100.0, "rescale": 2.0}] * 2
    posenc.interop.patch(model, specs)
    assert all(m.posenc_pe is not None for m in model.modules() if getattr(m, "is_causal", None) is False)
    torch.testing.assert_close(_hidden(model, images), expected, rtol=0, atol=1e-5)
    torch.testing.assert_close(_hidden(model, other), expected_other, rtol=0, atol=1e-5)
    posenc.interop.patch(model, [{**s, "base": 200.0} for s in specs])
    assert (_hidden(model, images) - expected).abs().max() > 1e-3
    posenc.interop.unpatch(model)
    torch.testing.assert_close(_hidden(model, images), expected, rtol=0, atol=0)


def test_dinov3_draws_its_coordinate_augmentations_as_the_model_does_in_training():
    model = tiny_dinov3(pos_embed_shift=0.1, pos_embed_jitter=1.2).train()
    images = _images()
    torch.manual_seed(5)
    expected = model(images).last_hidden_state
    torch.manual_seed(6)
    assert (model(images).last_hidden_state - expected).abs().max() > 1e-3  # the draws matter
    posenc.interop.patch(model, hf_layer_specs(model.config))
    torch.manual_seed(5)
    out = model(images).last_hidden_state
    torch.testing.assert_close(out, expected, rtol=0, atol=1e-5)
    out.pow(2).mean().backward()


@pytest.mark.parametrize("scheme", ["rope_mixed", "sinusoidal:axes=2"])
def test_dinov3_takes_another_2d_scheme_and_trains(scheme):
    model = tiny_dinov3()
    images = _images(48, 40)
    own = _hidden(model, images)
    posenc.interop.patch(model, scheme)
    assert not torch.allclose(_hidden(model, images), own)
    model.train()
    model(images).last_hidden_state.pow(2).mean().backward()
    assert all(p.grad is not None for name, p in model.named_parameters() if "posenc_modules" in name)


def test_dinov3_refuses_a_rotary_that_is_not_posencs_reading_of_its_config():
    model = tiny_dinov3()
    model.rope_embeddings.inv_freq.mul_(1.5)  # another model than its config says
    with pytest.raises(ValueError, match=r"dinov3_vit.*differs from posenc's dinov3"):
        posenc.interop.patch(model, "rope_mixed")


def _tiny_image_model(model_type: str):
    default = transformers.AutoConfig.for_model(model_type)
    sizes = dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2,
                 num_hidden_layers=2, hidden_size=32, intermediate_size=32, num_attention_heads=4,
                 use_relative_position_bias=True)
    if model_type.startswith("swin"):  # num_heads per stage (num_attention_heads is its alias)
        sizes = {k: v for k, v in sizes.items() if k not in ("num_attention_heads", "num_hidden_layers", "hidden_size")}
    config = type(default)(**{k: v for k, v in sizes.items() if hasattr(default, k)})
    return transformers.AutoModelForImageClassification.from_config(config)


@pytest.mark.parametrize(("model_type", "what"), [("beit", "relative position bias"), ("data2vec-vision", "relative"),
                                                  ("swin", "windowed attention"), ("swinv2", "continuous position")])
def test_a_windowed_or_relative_table_of_a_vision_model_is_refused_by_name(model_type, what):
    model = _tiny_image_model(model_type)
    for call in (lambda: posenc.interop.patch(model, "rope_mixed"), lambda: hf_layer_specs(model.config)):
        with pytest.raises(ValueError, match=rf"'{model_type}'.* not supported: .*{what}"):
            call()
    assert getattr(model, "_posenc_original", None) is None


def test_siglips_vision_model_alone_and_a_baseline_built_from_the_same_config():
    """SigLIP's vision model on its own (``siglip_vision_model``) takes its table through posenc
    unchanged and a 2D scheme; a baseline built from the same config object runs as itself."""
    config = transformers.SiglipVisionConfig(**{k: v for k, v in VISION.items() if k != "num_labels"})
    torch.manual_seed(0)
    model, baseline = transformers.SiglipVisionModel(config).eval(), transformers.SiglipVisionModel(config).eval()
    images = _images()
    with torch.no_grad():
        expected, base = model(images).pooler_output, baseline(images).pooler_output
    posenc.interop.patch(model, hf_layer_specs(model.config))
    with torch.no_grad():
        torch.testing.assert_close(model(images).pooler_output, expected, rtol=0, atol=0)
    posenc.interop.patch(model, "rope_mixed")
    with torch.no_grad():
        assert not torch.allclose(model(images).pooler_output, expected)
        torch.testing.assert_close(baseline(images).pooler_output, base, rtol=0, atol=0)  # untouched
