"""Hugging Face interop: ``posenc.from_hf`` against transformers' own RoPE, a tiny Llama's logits,
legacy config fields, errors where transformers only warns, and the q/k layout conversion.

transformers is a test-only dependency: it is imported here, never by posenc.
"""

from __future__ import annotations

import logging
import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import posenc
from posenc.interop import HFRotaryEmbedding, from_hf, half_to_interleaved, hf_rope_spec, interleaved_to_half

transformers = pytest.importorskip("transformers")
from transformers import GPTNeoXConfig, LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding  # noqa: E402
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding  # noqa: E402

EPS32 = float(torch.finfo(torch.float32).eps)


@pytest.fixture(autouse=True)
def _quiet_transformers():
    """transformers logs warnings for the configs drawn here (e.g. a YaRN factor that differs from
    max_position_embeddings / original); they are what posenc turns into errors elsewhere."""
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def draw_rope_parameters(rng: random.Random, rotary_dim: int, max_positions: int) -> dict:
    """A random valid transformers ``rope_parameters`` dict (the new, v5 style)."""
    rope_type = rng.choice(["default", "linear", "dynamic", "yarn", "longrope", "llama3"])
    rp = {"rope_type": rope_type, "rope_theta": rng.choice([10000.0, 12345.0, 500000.0, 1e6])}
    factor = rng.choice([1.0, 2.0, 3.5, 4.0, 8.0, 16.0])
    original = max_positions // rng.choice([1, 2, 4])
    if rope_type in ("linear", "dynamic"):
        rp["factor"] = factor
    elif rope_type == "yarn":
        rp.update(factor=factor, original_max_position_embeddings=original)
        if rng.random() < 0.4:
            rp.update(beta_fast=rng.choice([8.0, 16.0, 32.0, 64.0]), beta_slow=rng.choice([0.5, 1.0, 2.0]))
        if rng.random() < 0.3:
            rp.update(mscale=rng.choice([0.707, 1.0]), mscale_all_dim=rng.choice([0.707, 1.0]))
        if rng.random() < 0.2:
            rp["attention_factor"] = rng.choice([1.0, 1.25])
        if rng.random() < 0.3:
            rp["truncate"] = False
    elif rope_type == "longrope":
        rp.update(short_factor=[rng.uniform(1.0, 2.0) for _ in range(rotary_dim // 2)],
                  long_factor=[rng.uniform(1.0, 16.0) for _ in range(rotary_dim // 2)],
                  original_max_position_embeddings=original)
        if rng.random() < 0.5:
            rp["factor"] = factor
        elif rng.random() < 0.5:
            rp["attention_factor"] = rng.choice([1.0, 1.1])
    elif rope_type == "llama3":
        rp.update(factor=factor, low_freq_factor=rng.choice([0.5, 1.0, 2.0]),
                  high_freq_factor=rng.choice([4.0, 8.0]), original_max_position_embeddings=max(8, original // 2))
    return rp


def draw_config(rng: random.Random):
    """A random config and transformers' rotary module for it: Llama (full rotation) or GPT-NeoX
    (partial rotation, whose default RoPE honours partial_rotary_factor)."""
    heads, head_dim = rng.choice([2, 4, 8]), rng.choice([16, 32, 64, 128])
    max_positions = rng.choice([64, 256, 512, 2048])
    if rng.random() < 0.3:
        partial = rng.choice([0.25, 0.5, 0.75])
        rp = draw_rope_parameters(rng, int(head_dim * partial), max_positions)
        rp["partial_rotary_factor"] = partial
        config = GPTNeoXConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                               max_position_embeddings=max_positions, rope_parameters=rp)
        return config, GPTNeoXRotaryEmbedding(config)
    rp = draw_rope_parameters(rng, head_dim, max_positions)
    config = LlamaConfig(hidden_size=heads * head_dim, num_attention_heads=heads, head_dim=head_dim,
                         max_position_embeddings=max_positions, rope_parameters=rp)
    return config, LlamaRotaryEmbedding(config)


def test_tables_and_attention_factor_equal_transformers_for_random_configs():
    rng = random.Random(1234)
    seen = set()
    for _ in range(36):
        config, theirs = draw_config(rng)
        rope = from_hf(config)
        ours = HFRotaryEmbedding(rope)
        assert ours.attention_scaling == pytest.approx(theirs.attention_scaling, rel=1e-12)
        max_positions = config.max_position_embeddings
        length = rng.choice([max_positions // 2, max_positions + 5, 2 * max_positions])  # both sides of L₀
        positions = torch.arange(length)[None]
        x = torch.zeros(1)
        their_cos, their_sin = theirs(x, positions)  # (1, L, rotary_dim) float32, from float32 angles
        our_cos, our_sin = ours(x, positions)
        assert our_cos.shape == their_cos.shape and our_cos.dtype == torch.float32
        # transformers' angles are float32: their error grows with the angle m·θ_i
        angle = positions[0, :, None].double() * rope.frequencies().double()
        tol = 8 * EPS32 * (1 + torch.cat((angle, angle), -1)) * max(1.0, theirs.attention_scaling)
        for mine, their in ((our_cos, their_cos), (our_sin, their_sin)):
            err = (mine[0].double() - their[0].double()).abs()
            assert torch.all(err <= tol), (config.rope_parameters, float((err / tol).max()))
        # the frequencies themselves agree to float32 rounding
        np.testing.assert_allclose(rope.frequencies().numpy(), theirs.inv_freq.double().numpy(), rtol=4 * EPS32)
        seen.add((config.rope_parameters["rope_type"], "partial_rotary_factor" in config.rope_parameters))
    assert {t for t, _ in seen} == {"default", "linear", "dynamic", "yarn", "longrope", "llama3"}
    assert any(partial for _, partial in seen)


LOGIT_CASES = {
    "default": {"rope_type": "default", "rope_theta": 10000.0},
    "linear": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
    "dynamic": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0},
    "yarn": {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16},
    "longrope": {"rope_type": "longrope", "rope_theta": 10000.0, "original_max_position_embeddings": 16,
                 "short_factor": [1.0 + 0.1 * i for i in range(8)], "long_factor": [1.0 + 0.5 * i for i in range(8)]},
    "llama3": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 16},
}


def tiny_llama(rope_parameters: dict) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                         rope_parameters=dict(rope_parameters), attn_implementation="eager")
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("rope_type", list(LOGIT_CASES))
def test_tiny_llama_logits_unchanged_with_posenc_rotary(rope_type):
    model = tiny_llama(LOGIT_CASES[rope_type])
    ids = torch.randint(0, 100, (2, 48), generator=torch.Generator().manual_seed(1))  # past L₀ and max positions
    with torch.no_grad():
        want = model(ids).logits
        model.model.rotary_emb = HFRotaryEmbedding(from_hf(model.config))
        got = model(ids).logits
        assert ((got - want).norm() / want.norm()).item() <= 1e-5
        assert ((got - want).abs().max() / want.abs().max()).item() <= 1e-5
        # the comparison is not vacuous: another base changes the logits
        wrong = posenc.build({**from_hf(model.config).spec, "base": 20000.0})
        model.model.rotary_emb = HFRotaryEmbedding(wrong)
        assert ((model(ids).logits - want).norm() / want.norm()).item() > 1e-4


def test_posenc_tables_are_closer_to_the_truth_than_transformers_at_32k():
    config = LlamaConfig(hidden_size=128, num_attention_heads=1, max_position_embeddings=65536)
    positions = torch.arange(32760, 32768)[None]
    their_cos, _ = LlamaRotaryEmbedding(config)(torch.zeros(1), positions)
    rope = from_hf(config)
    our_cos, _ = rope.cos_sin(positions[0])
    true_cos = torch.cos(positions[0, :, None].double() * rope.inv_freq)  # float64: ~1e-12 here
    assert (their_cos[0, :, :64].double() - true_cos).abs().max() > 1e-3
    assert (our_cos.double() - true_cos).abs().max() <= 1e-6


# -- config styles -------------------------------------------------------------------------------

def test_legacy_fields_objects_and_dicts_give_the_same_module():
    yarn = {"factor": 4.0, "original_max_position_embeddings": 1024, "beta_fast": 16.0}
    legacy = dict(hidden_size=256, num_attention_heads=4, max_position_embeddings=4096, rope_theta=500000.0,
                  rope_scaling={"type": "yarn", **yarn})
    new = dict(hidden_size=256, num_attention_heads=4, max_position_embeddings=4096,
               rope_parameters={"rope_type": "yarn", "rope_theta": 500000.0, **yarn})
    specs = [hf_rope_spec(c) for c in (legacy, new, LlamaConfig(**legacy), LlamaConfig(**new),
                                       LlamaConfig(**new).to_dict())]
    assert all(s == specs[0] for s in specs)
    assert specs[0] == {"scheme": "rope", "head_dim": 64, "base": 500000.0, "rotary_dim": 64, "layout": "half",
                        "scaling": {"type": "yarn", "factor": 4.0, "original_max_positions": 1024,
                                    "beta_fast": 16.0, "beta_slow": 1.0, "truncate": True}}
    assert posenc.from_hf(new).spec == posenc.build(specs[0]).spec  # the lazily wired top-level name


def test_legacy_partial_rotary_and_gpt_neox_names():
    spec = hf_rope_spec({"hidden_size": 256, "num_attention_heads": 4, "rotary_pct": 0.25,
                         "rotary_emb_base": 10000, "max_position_embeddings": 2048})
    assert (spec["head_dim"], spec["rotary_dim"], spec["base"], spec["scaling"]) == (64, 16, 10000.0, None)
    spec = hf_rope_spec({"hidden_size": 256, "num_attention_heads": 4, "partial_rotary_factor": 0.5,
                         "rope_theta": 1e6, "rope_scaling": {"rope_type": "linear", "factor": 2}})
    assert (spec["rotary_dim"], spec["base"], spec["scaling"]) == (32, 1e6, {"type": "linear", "factor": 2})
    assert hf_rope_spec({"head_dim": 64, "rope_parameters": {"rope_type": "default"}})["base"] == 10000.0


def test_phi3_style_longrope_top_level_original_length_and_implicit_factor():
    short, long = [1.0] * 48, [1.0 + i / 8 for i in range(48)]
    config = {"hidden_size": 3072, "num_attention_heads": 32, "max_position_embeddings": 131072,
              "original_max_position_embeddings": 4096, "rope_theta": 10000.0,
              "rope_scaling": {"type": "longrope", "short_factor": short, "long_factor": long}}
    rope = from_hf(config)
    assert rope.scaling.params["original_max_positions"] == 4096
    assert rope.attention_factor == pytest.approx(math.sqrt(1 + math.log(32) / math.log(4096)))
    assert rope.head_dim == 96


def test_deepseek_style_yarn_factor_from_lengths_and_mscale_pair():
    config = {"hidden_size": 512, "num_attention_heads": 4, "head_dim": 64, "max_position_embeddings": 163840,
              "rope_parameters": {"rope_type": "yarn", "rope_theta": 10000.0, "original_max_position_embeddings": 4096,
                                  "mscale": 1.0, "mscale_all_dim": 1.0, "beta_fast": 32, "beta_slow": 1}}
    rope = from_hf(config)
    assert rope.scaling.params["factor"] == 40.0 and rope.attention_factor == 1.0


def test_per_layer_rope_needs_a_layer_type():
    config = {"hidden_size": 256, "num_attention_heads": 4, "layer_types": ["sliding_attention", "full_attention"],
              "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                  "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}}}
    with pytest.raises(ValueError, match="pass layer_type"):
        from_hf(config)
    assert from_hf(config, layer_type="full_attention").spec["scaling"] == {"type": "linear", "factor": 8.0}
    assert from_hf(config, layer_type="sliding_attention").spec["base"] == 10000.0
    with pytest.raises(ValueError, match="layer_type must be one of"):
        from_hf(config, layer_type="global")


# -- errors where transformers warns ---------------------------------------------------------------

def base_config(**rope_parameters) -> dict:
    return {"hidden_size": 256, "num_attention_heads": 4, "max_position_embeddings": 4096,
            "rope_parameters": {"rope_theta": 10000.0, **rope_parameters}}


@pytest.mark.parametrize("rope_parameters, message, transformers_accepts", [
    ({"rope_type": "linear", "factor": 0.5}, "factor must be >= 1.0", True),
    ({"rope_type": "yarn", "factor": 4.0, "beta_fast": 1.0, "beta_slow": 8.0}, "beta_fast must be > beta_slow", True),
    ({"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 4.0, "high_freq_factor": 1.0,
      "original_max_position_embeddings": 1024}, "high_freq_factor must be >= low_freq_factor", True),
    ({"rope_type": "longrope", "short_factor": [1.0] * 31, "long_factor": [1.0] * 32,
      "original_max_position_embeddings": 1024}, "short_factor must have 32 entries", True),
    ({"rope_type": "llama3", "factor": 8.0}, "needs 'low_freq_factor', 'high_freq_factor'", False),
    ({"rope_type": "axial"}, "rope type must be one of 'default', 'linear', 'proportional', 'dynamic'", False),
])
def test_invalid_configs_raise_where_transformers_only_warns(rope_parameters, message, transformers_accepts):
    config = base_config(**rope_parameters)
    if transformers_accepts:
        LlamaConfig(**config)  # transformers builds it, with a logged warning at most
    with pytest.raises(ValueError, match=message):
        from_hf(config)


def test_odd_rotary_dimension_and_xpos_adapter_raise():
    with pytest.raises(ValueError, match="even rotary dimension"):
        from_hf({"hidden_size": 40, "num_attention_heads": 2, "partial_rotary_factor": 0.25})
    with pytest.raises(ValueError, match="xpos"):
        HFRotaryEmbedding(posenc.build({"scheme": "rope", "head_dim": 8, "scaling": {"type": "xpos"}}))
    with pytest.raises(TypeError, match="posenc 'rope' module"):
        HFRotaryEmbedding(torch.nn.Linear(2, 2))


def test_config_sizes_are_checked_not_truncated_or_divided_by_zero():
    with pytest.raises(ValueError, match="num_attention_heads must be >= 1"):
        from_hf({"hidden_size": 64, "num_attention_heads": 0})
    with pytest.raises(TypeError, match="head_dim must be an integer"):
        from_hf({"head_dim": 8.5})
    with pytest.raises(ValueError, match="partial_rotary_factor must be <= 1"):
        from_hf({"head_dim": 8, "partial_rotary_factor": 2.0})


# -- layout conversion ---------------------------------------------------------------------------

def _attention(x, wq, wk, wv, bq, bk, heads, kv_heads, head_dim, rope):
    """Self-attention of ``x [B, L, C]`` with rotary q and k (grouped-query when kv_heads < heads)."""
    b, length, _ = x.shape
    q = F.linear(x, wq, bq).view(b, length, heads, head_dim).transpose(1, 2)  # (B, H, L, D)
    k = F.linear(x, wk, bk).view(b, length, kv_heads, head_dim).transpose(1, 2)
    v = F.linear(x, wv).view(b, length, kv_heads, head_dim).transpose(1, 2)
    k, v = (t.repeat_interleave(heads // kv_heads, dim=1) for t in (k, v))
    return posenc.attention(q, k, v, rope, causal=True)


@pytest.mark.parametrize("heads, kv_heads, head_dim, rotary_dim", [(4, 4, 16, 16), (4, 2, 16, 8), (6, 3, 8, 8)])
def test_meta_and_transformers_layouts_give_the_same_attention(heads, kv_heads, head_dim, rotary_dim):
    g = torch.Generator().manual_seed(0)
    c = 32
    x = torch.randn(2, 13, c, generator=g, dtype=torch.float64)
    wq = torch.randn(heads * head_dim, c, generator=g, dtype=torch.float64) / c ** 0.5
    wk = torch.randn(kv_heads * head_dim, c, generator=g, dtype=torch.float64) / c ** 0.5
    wv = torch.randn(kv_heads * head_dim, c, generator=g, dtype=torch.float64) / c ** 0.5
    bq = torch.randn(heads * head_dim, generator=g, dtype=torch.float64)
    bk = torch.randn(kv_heads * head_dim, generator=g, dtype=torch.float64)
    spec = {"scheme": "rope", "head_dim": head_dim, "rotary_dim": rotary_dim, "base": 500.0}
    meta = _attention(x, wq, wk, wv, bq, bk, heads, kv_heads, head_dim,
                      posenc.build({**spec, "layout": "interleaved"}))
    hq = interleaved_to_half(wq, heads, head_dim, rotary_dim)
    hk = interleaved_to_half(wk, kv_heads, head_dim, rotary_dim)
    hbq = interleaved_to_half(bq, heads, head_dim, rotary_dim)
    hbk = interleaved_to_half(bk, kv_heads, head_dim, rotary_dim)
    half = _attention(x, hq, hk, wv, hbq, hbk, heads, kv_heads, head_dim, posenc.build({**spec, "layout": "half"}))
    torch.testing.assert_close(half, meta, rtol=1e-12, atol=1e-12)
    assert not torch.allclose(hq, wq)  # the permutation does something
    # and back
    assert torch.equal(half_to_interleaved(hq, heads, head_dim, rotary_dim), wq)
    assert torch.equal(half_to_interleaved(hbk, kv_heads, head_dim, rotary_dim), bk)


def test_layout_conversion_matches_the_transformers_conversion_script():
    """``convert_llama_weights_to_hf.permute``: view(H, D/2, 2, C).transpose(1, 2)."""
    heads, head_dim, c = 4, 8, 12
    w = torch.arange(heads * head_dim * c, dtype=torch.float32).view(heads * head_dim, c)
    want = w.view(heads, head_dim // 2, 2, c).transpose(1, 2).reshape(heads * head_dim, c)
    assert torch.equal(interleaved_to_half(w, heads, head_dim), want)
    rows = interleaved_to_half(torch.arange(8.0), 1, 8)
    assert rows.tolist() == [0, 2, 4, 6, 1, 3, 5, 7]


def test_layout_conversion_checks_its_arguments():
    with pytest.raises(ValueError, match="num_heads \\* head_dim = 32"):
        interleaved_to_half(torch.zeros(30, 4), 4, 8)
    with pytest.raises(ValueError, match="rotary_dim must be even"):
        interleaved_to_half(torch.zeros(32, 4), 4, 8, rotary_dim=5)
    with pytest.raises(TypeError, match="torch.Tensor"):
        half_to_interleaved(np.zeros((32, 4)), 4, 8)


# -- the rope-type table, p-RoPE (Gemma 4) and Cohere 2's pairs -------------------------------------

def test_the_rope_type_table_lists_every_type_transformers_registers():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from posenc.interop.hf import HF_ROPE_TYPES

    assert set(HF_ROPE_TYPES) == set(ROPE_INIT_FUNCTIONS) | {"default"}


def tiny_gemma4_config(rng: random.Random | None = None, **kw):
    """A tiny ``Gemma4TextConfig``: one sliding and one full-attention layer, the full one with its
    own head_dim (``global_head_dim``, in ``per_layer_config``) and p-RoPE."""
    from transformers import Gemma4TextConfig

    rope = {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1e6}}
    global_head_dim = 32
    if rng is not None:
        global_head_dim = rng.choice([16, 32, 64, 128])
        full = {"rope_type": "proportional", "rope_theta": rng.choice([100.0, 10000.0, 1e6]),
                "partial_rotary_factor": rng.choice([0.125, 0.25, 0.5, 0.75, 1.0])}
        if rng.random() < 0.5:
            full["factor"] = rng.choice([1.0, 2.0, 8.0])
        rope["full_attention"] = full
    return Gemma4TextConfig(vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=2, num_key_value_heads=1, head_dim=16, global_head_dim=global_head_dim,
                            layer_types=["sliding_attention", "full_attention"], hidden_size_per_layer_input=8,
                            vocab_size_per_layer_input=100, sliding_window=8, rope_parameters=rope, **kw)


def test_proportional_frequencies_equal_transformers_for_random_gemma4_configs():
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rng = random.Random(34)
    for _ in range(12):
        config = tiny_gemma4_config(rng)
        layer = config.per_layer_config["full_attention"]
        theirs, factor = ROPE_INIT_FUNCTIONS["proportional"](layer, None, layer_type="full_attention")
        rope = from_hf(config, layer_type="full_attention")
        rp = config.rope_parameters["full_attention"]
        assert rope.spec["partial_rotary"] == "proportional" and rope.head_dim == layer.head_dim
        assert rope.attention_factor == factor == 1.0
        np.testing.assert_allclose(rope.frequencies().numpy(), theirs.double().numpy(), rtol=4 * EPS32, atol=0)
        reference = posenc.reference.proportional_rope_inv_freq(layer.head_dim, rope.rotary_dim, rp["rope_theta"])
        np.testing.assert_allclose(reference / rp.get("factor", 1.0), theirs.double().numpy(), rtol=4 * EPS32)
        assert np.count_nonzero(theirs.numpy()) == rope.rotary_dim // 2


def test_tiny_gemma4_logits_unchanged_with_posenc_rotary():
    from transformers import Gemma4ForCausalLM

    torch.manual_seed(0)
    model = Gemma4ForCausalLM(tiny_gemma4_config(attn_implementation="eager")).eval()
    ids = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        model.model.rotary_emb = HFRotaryEmbedding.from_config(model.config)
        assert ((model(ids).logits - want).norm() / want.norm()).item() <= 1e-5
        # the comparison is not vacuous: another base on the p-RoPE layers changes the logits
        ropes = {t: m if t == "sliding_attention" else posenc.build({**m.spec, "base": 2 * m.base})
                 for t, m in model.model.rotary_emb.ropes.items()}
        model.model.rotary_emb = HFRotaryEmbedding(ropes)
        assert ((model(ids).logits - want).norm() / want.norm()).item() > 1e-4


def test_tiny_cohere2_logits_unchanged_with_posenc_rotary():
    """Cohere 2 rotates interleaved pairs (its ``rotate_half`` takes ``x[..., ::2]``): from_hf
    knows it (``HF_FAMILIES``), so the drop-in gives the model's logits (it was off by 0.86)."""
    from transformers import Cohere2Config, Cohere2ForCausalLM

    torch.manual_seed(0)
    config = Cohere2Config(vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                           layer_types=["sliding_attention", "full_attention"], attn_implementation="eager")
    model = Cohere2ForCausalLM(config).eval()
    ids = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        model.model.rotary_emb = HFRotaryEmbedding(from_hf(model.config))
        assert ((model(ids).logits - want).norm() / want.norm()).item() <= 1e-5


# -- dynamic NTK with a KV cache ------------------------------------------------------------------

DYNAMIC = {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 4.0}  # L₀ = max_position_embeddings = 32


def test_dynamic_ntk_through_patch_keys_rotated_once_or_at_every_step():
    """The named choice (posenc.encodings.rope, "Two cache semantics"), through ``patch`` with a
    left-padded batch whose prompt is inside L₀ and whose generation goes past it:
    ``patch(model, from_hf(config))`` (one rope, in the model's rotary module: keys rotated once)
    generates what transformers generates; ``patch(model, hf_layer_specs(config))`` (one rope per
    layer, through the attention function: keys rotated at every step) leaves it past L₀."""
    from posenc.interop import hf_layer_specs, patch, unpatch

    model = tiny_llama(DYNAMIC)
    ids = torch.randint(0, 100, (2, 29), generator=torch.Generator().manual_seed(3))
    mask = torch.ones_like(ids)
    mask[1, :5] = 0  # left padding

    def generated() -> tuple[torch.Tensor, torch.Tensor]:
        out = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False, pad_token_id=0,
                             output_logits=True, return_dict_in_generate=True)
        return out.sequences, torch.stack(out.logits)  # (steps, B, V)

    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    with torch.no_grad():
        want_ids, want = generated()
        patch(model, from_hf(model.config))
        assert isinstance(model.model.rotary_emb, HFRotaryEmbedding)
        got_ids, got = generated()
        assert torch.equal(got_ids, want_ids) and rel(got, want) <= 1e-5
        unpatch(model)
        patch(model, hf_layer_specs(model.config))
        every_step = generated()[1]
    assert rel(every_step[:2], want[:2]) <= 1e-5  # inside L₀ (29 + 2 < 32) the two agree
    assert rel(every_step[3:], want[3:]) > 1e-5  # past it, the cached keys' frequencies differ


def test_dynamic_ntk_through_the_attention_function_rotates_cached_keys_at_every_step():
    """The named choice (posenc.encodings.rope, "KV cache"): a rope that goes through patch's
    attention function (here one of the other layout than Llama's) keeps keys unrotated and
    rotates them all at every step with the frequencies of the current length, so in one layer
    decoding with the cache equals the full pass; transformers' cache (keys rotated once) does not."""
    from transformers import DynamicCache

    from posenc.interop import patch

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=2, max_position_embeddings=32, rope_parameters=dict(DYNAMIC))
    model = LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (1, 40), generator=torch.Generator().manual_seed(3))

    def full_and_decoded() -> tuple[torch.Tensor, torch.Tensor]:  # the last logits: one pass; 30, then 1 by 1
        for rope in getattr(model.model, "posenc_modules", ()):
            rope.reset_length()  # a new sequence (posenc's seen_length only grows)
        full = model(ids).logits[:, -1]
        for rope in getattr(model.model, "posenc_modules", ()):
            rope.reset_length()
        cache = DynamicCache(config=model.config)
        model(ids[:, :30], past_key_values=cache)
        for t in range(30, 40):
            last = model(ids[:, t:t + 1], past_key_values=cache, position_ids=torch.tensor([[t]])).logits[:, -1]
        return full, last

    rel = lambda a, b: ((a - b).norm() / b.norm()).item()  # noqa: E731
    with torch.no_grad():
        assert rel(*full_and_decoded()) > 1e-5  # transformers: keys rotated once differ from the full pass
        patch(model, {**from_hf(model.config).spec, "layout": "interleaved"})
        assert not isinstance(model.model.rotary_emb, HFRotaryEmbedding)
        assert rel(*full_and_decoded()) <= 1e-5


# -- families whose keys from_hf reads or refuses by name ----------------------------------------

def _relative_logits_change(model, replace) -> float:
    ids = torch.randint(0, 100, (2, 20), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        replace(model)
        return ((model(ids).logits - want).norm() / want.norm()).item()


@pytest.mark.parametrize("family", ["gptj", "codegen"])
def test_gptj_and_codegen_rotary_dim_and_table(family):
    """GPT-J and CodeGen: the top-level ``rotary_dim``, interleaved pairs and a ``(sin, cos)``
    half-width table (``sin_cos_half_width``)."""
    from transformers import CodeGenConfig, CodeGenForCausalLM, GPTJConfig, GPTJForCausalLM

    config_class, model_class = {"gptj": (GPTJConfig, GPTJForCausalLM), "codegen": (CodeGenConfig,
                                                                                    CodeGenForCausalLM)}[family]
    torch.manual_seed(0)
    config = config_class(vocab_size=100, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64,
                          bos_token_id=0, eos_token_id=0, attn_implementation="eager")
    assert hf_rope_spec(config)["rotary_dim"] == 8
    change = _relative_logits_change(model_class(config).eval(), lambda m: setattr(
        m.transformer, "rotary_emb", HFRotaryEmbedding(from_hf(m.config))))
    assert change <= 1e-5


def test_qwen3_5_text_takes_its_three_equal_rows_of_positions():
    from transformers import Qwen3_5ForCausalLM, Qwen3_5TextConfig

    torch.manual_seed(0)
    config = Qwen3_5TextConfig(vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                               layer_types=["linear_attention", "full_attention"], linear_num_key_heads=2,
                               linear_num_value_heads=2, linear_key_head_dim=16, linear_value_head_dim=16,
                               attn_implementation="eager")
    change = _relative_logits_change(Qwen3_5ForCausalLM(config).eval(), lambda m: setattr(
        m.model, "rotary_emb", HFRotaryEmbedding(from_hf(m.config))))
    assert change <= 1e-5
    image = torch.stack([torch.arange(4), torch.zeros(4, dtype=torch.long), torch.arange(4)])[:, None]  # (3, 1, 4)
    with pytest.raises(ValueError, match="rows that differ"):
        HFRotaryEmbedding(from_hf(config))(torch.zeros(1), image)


def test_granite_swa_bases_per_layer_in_hf_layer_specs():
    from transformers import GraniteSWAConfig, GraniteSWAForCausalLM

    from posenc.interop import hf_layer_specs

    config = GraniteSWAConfig(vocab_size=100, hidden_size=64, intermediate_size=64, num_hidden_layers=4,
                              num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                              layer_rope_theta=[10000.0, 0, 500000.0, 10000.0])
    specs = hf_layer_specs(config)
    assert [s.get("base", s["scheme"]) for s in specs] == [10000.0, "nope", 500000.0, 10000.0]
    with torch.device("meta"):
        rotaries = GraniteSWAForCausalLM(config).model.rotary_embs  # the model's own, one per base
    positions = torch.arange(30)[None]
    for theirs in rotaries:
        theirs = type(theirs)(theirs.config)  # built again off the meta device
        spec = next(s for s in specs if s.get("base") == theirs.config.rope_parameters["rope_theta"])
        ours = HFRotaryEmbedding(posenc.build(spec))(torch.zeros(1), positions)
        for mine, their in zip(ours, theirs(torch.zeros(1), positions)):
            torch.testing.assert_close(mine, their, rtol=0, atol=2e-6)
    with pytest.raises(ValueError, match="'layer_rope_theta' gives the layers their own bases"):
        from_hf(config)


@pytest.mark.parametrize("model_type, message", [
    ("deepseek_v4", "'compress_rope_theta' is refused"),
    ("roformer", "'rotary_value' is refused"),
    ("minimax_m3_vl_text", "'rotary_dim' = 64 is read for GPT-J and CodeGen"),
])
def test_families_with_keys_from_hf_cannot_honour_are_refused_by_name(model_type, message):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    with pytest.raises(ValueError, match=message):
        from_hf(CONFIG_MAPPING[model_type]())


def test_minimax_m3_rotary_dim_is_read_where_it_agrees_with_the_factor_its_model_reads():
    """MiniMax-M3's checkpoints give ``rotary_dim`` 64 and ``partial_rotary_factor`` 0.5 of a head of
    128; its model reads the factor. Equal, the key is read (the table is its rotary's); unequal
    (the config class's defaults: factor 1), refused (the test above)."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING
    from transformers.models.minimax_m3_vl.modeling_minimax_m3_vl import MiniMaxM3VLRotaryEmbedding

    config = CONFIG_MAPPING["minimax_m3_vl_text"](
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5})
    rope = from_hf(config)
    assert (rope.spec["rotary_dim"], rope.spec["head_dim"]) == (64, 128)
    positions = torch.arange(37)[None]
    for mine, theirs in zip(HFRotaryEmbedding(rope)(torch.zeros(1), positions),
                            MiniMaxM3VLRotaryEmbedding(config)(torch.zeros(1), positions)):
        torch.testing.assert_close(mine, theirs, rtol=0, atol=2e-6)
