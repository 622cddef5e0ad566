"""transformers families through ``posenc.from_hf`` / ``HFRotaryEmbedding``: for each family a tiny
random model built from its config class (nothing downloaded), its rotary replaced by posenc's at
``HF_FAMILIES[model_type].rotary``, logits equal to the unmodified model's (float32, ≤ 1e-5
relative); ``config.json``-style dicts read as transformers reads them; unknown rope keys refused;
Llama 4's NoPE layers as ``nope_temperature``; LongRoPE and dynamic NTK switching per call.

transformers is a test-only dependency: it is imported here, never by posenc.
"""

from __future__ import annotations

import logging
import random

import pytest
import torch

import posenc
from posenc.interop import HF_FAMILIES, HFRotaryEmbedding, from_hf, hf_layer_specs, hf_rope_spec, rope_layer_types

transformers = pytest.importorskip("transformers")
T = transformers

VOCAB, LENGTH = 100, 40


@pytest.fixture(autouse=True)
def _quiet_transformers():
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def _base(rng: random.Random) -> float:
    return float(rng.choice([500.0, 2000.0, 10000.0, 123456.0]))


def _family_configs(rng: random.Random) -> dict:
    """family -> (config class, causal LM class, config kwargs), tiny and with drawn rope settings."""
    small = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                 max_position_embeddings=64)
    return {
        "gpt_neox": (T.GPTNeoXConfig, T.GPTNeoXForCausalLM,
                     dict(small, num_hidden_layers=2, rotary_pct=rng.choice([0.25, 0.5]), rotary_emb_base=_base(rng))),
        "falcon": (T.FalconConfig, T.FalconForCausalLM,
                   dict(small, num_hidden_layers=2, rope_theta=_base(rng))),
        "gpt_oss": (T.GptOssConfig, T.GptOssForCausalLM,
                    dict(small, num_hidden_layers=2, head_dim=16, num_key_value_heads=2, num_local_experts=4,
                         num_experts_per_tok=2, sliding_window=8,
                         rope_parameters={"rope_type": "yarn", "rope_theta": _base(rng), "factor": 4.0,
                                          "original_max_position_embeddings": 16, "beta_fast": 32.0,
                                          "beta_slow": 1.0, "truncate": False})),
        "llama4_text": (T.Llama4TextConfig, T.Llama4ForCausalLM,
                        dict(small, num_hidden_layers=4, head_dim=16, num_key_value_heads=2, num_local_experts=2,
                             intermediate_size_mlp=128, floor_scale=rng.choice([3, 5, 7]),
                             attn_scale=rng.uniform(0.1, 0.5),
                             # Llama 4 Scout's scaling: llama3 with equal factors
                             rope_parameters={"rope_type": "llama3", "rope_theta": _base(rng), "factor": 16.0,
                                              "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                                              "original_max_position_embeddings": 16})),
        "gemma3_text": (T.Gemma3TextConfig, T.Gemma3ForCausalLM,
                        dict(small, num_hidden_layers=6, head_dim=16, num_key_value_heads=2, sliding_window=8,
                             query_pre_attn_scalar=16, rope_theta=_base(rng), rope_local_base_freq=_base(rng) / 7,
                             rope_scaling={"rope_type": "linear", "factor": rng.choice([2.0, 8.0])})),
        "deepseek_v3": (T.DeepseekV3Config, T.DeepseekV3ForCausalLM,
                        dict(small, num_hidden_layers=2, num_key_value_heads=4, qk_rope_head_dim=8,
                             qk_nope_head_dim=8, v_head_dim=16, kv_lora_rank=16, q_lora_rank=32, n_routed_experts=4,
                             num_experts_per_tok=2, first_k_dense_replace=1, moe_intermediate_size=32, n_group=1,
                             topk_group=1, rope_interleave=rng.random() < 0.5,
                             rope_parameters={"rope_type": "yarn", "rope_theta": _base(rng), "factor": 4.0,
                                              "original_max_position_embeddings": 16, "mscale": 1.0,
                                              "mscale_all_dim": rng.choice([0.5, 1.0])})),
        # MLA with a complex freqs_cis on pairs (2i, 2i+1); dense layers only (no experts: faster)
        "deepseek_v2": (T.DeepseekV2Config, T.DeepseekV2ForCausalLM,
                        dict(small, num_hidden_layers=2, num_key_value_heads=4, qk_rope_head_dim=8, head_dim=8,
                             qk_nope_head_dim=8, v_head_dim=16, kv_lora_rank=16, q_lora_rank=32, n_routed_experts=4,
                             num_experts_per_tok=2, first_k_dense_replace=2, moe_intermediate_size=32, n_group=1,
                             topk_group=1, rope_parameters={"rope_type": "yarn", "rope_theta": _base(rng),
                                                            "factor": 4.0, "original_max_position_embeddings": 16})),
        "cohere": (T.CohereConfig, T.CohereForCausalLM, dict(small, num_hidden_layers=2, rope_theta=_base(rng))),
        "phi3": (T.Phi3Config, T.Phi3ForCausalLM,
                 dict(small, num_hidden_layers=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                      original_max_position_embeddings=16,
                      rope_parameters={"rope_type": "longrope", "rope_theta": _base(rng),
                                       "short_factor": [rng.uniform(1.0, 2.0) for _ in range(8)],
                                       "long_factor": [rng.uniform(1.0, 8.0) for _ in range(8)]})),
    }


FAMILIES = list(_family_configs(random.Random(0)))


def tiny_model(family: str, seed: int = 0):
    config_cls, model_cls, kwargs = _family_configs(random.Random(seed))[family]
    config = config_cls(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return model_cls(config).eval()


def _set(model, path: str, module) -> None:
    *parents, name = path.split(".")
    owner = model
    for p in parents:
        owner = getattr(owner, p)
    assert hasattr(owner, name), f"{type(model).__name__} has no {path}"
    setattr(owner, name, module)


def _ids(length: int = LENGTH, batch: int = 2, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


def relative_difference(got: torch.Tensor, want: torch.Tensor) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


def posenc_logits_difference(family: str, seed: int = 0) -> tuple[float, float]:
    """(max relative logits difference with posenc's rotary, the same with a wrong base)."""
    model = tiny_model(family, seed)
    ids = _ids()
    path = HF_FAMILIES[model.config.model_type].rotary
    with torch.no_grad():
        want = model(ids).logits
        _set(model, path, HFRotaryEmbedding.from_config(model.config))
        got = model(ids).logits
        # not vacuous: another base changes the logits
        ropes = ({t: from_hf(model.config, layer_type=t) for t in rope_layer_types(model.config)}
                 or {None: from_hf(model.config)})
        wrong = {t: posenc.build({**r.spec, "base": r.spec["base"] * 3}) for t, r in ropes.items()}
        for t, r in wrong.items():
            r.hf_table = ropes[t].hf_table
        _set(model, path, HFRotaryEmbedding(wrong[None] if None in wrong else wrong))
        off = model(ids).logits
    return relative_difference(got, want), relative_difference(off, want)


@pytest.mark.parametrize("family", FAMILIES)
def test_tiny_model_logits_unchanged_with_posenc_rotary(family):
    same, wrong = posenc_logits_difference(family, seed=FAMILIES.index(family))
    assert same <= 1e-5, same
    assert wrong > 1e-4, wrong


def test_documented_one_liner_fits_each_family_with_one_rope():
    """``HFRotaryEmbedding(from_hf(config))`` carries the family's table (GPT-OSS half width,
    Llama 4 complex, Cohere interleaved, DeepSeek-V3 rotate_half with interleaved pairs)."""
    for family in ("gpt_oss", "llama4_text", "cohere", "deepseek_v3"):
        model = tiny_model(family, seed=3)
        ids = _ids(seed=4)
        with torch.no_grad():
            want = model(ids).logits
            _set(model, HF_FAMILIES[family].rotary, HFRotaryEmbedding(from_hf(model.config)))
            assert relative_difference(model(ids).logits, want) <= 1e-5, family


# -- tables against transformers' rotary modules ------------------------------------------------

def test_tables_have_the_shape_and_dtype_of_transformers_rotary():
    positions = torch.arange(LENGTH)[None].expand(2, -1)
    x = torch.zeros(1)
    for family in ("gpt_oss", "llama4_text", "cohere"):
        model = tiny_model(family)
        theirs = model.model.rotary_emb(x, positions)
        ours = HFRotaryEmbedding(from_hf(model.config))(x, positions)
        if family == "llama4_text":
            assert ours.dtype == theirs.dtype == torch.complex64 and ours.shape == theirs.shape
            torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-5)
        else:
            for mine, their in zip(ours, theirs):
                assert mine.shape == their.shape and mine.dtype == their.dtype
                torch.testing.assert_close(mine, their, rtol=0, atol=1e-5)


def test_gemma3_rotary_takes_a_layer_type_as_transformers():
    model = tiny_model("gemma3_text")
    ours = HFRotaryEmbedding.from_config(model.config)
    assert ours.layer_types == ["full_attention", "sliding_attention"] == sorted(set(model.config.layer_types))
    positions = torch.arange(LENGTH)[None]
    for layer_type in ours.layer_types:
        their_cos, their_sin = model.model.rotary_emb(torch.zeros(1), positions, layer_type)
        our_cos, our_sin = ours(torch.zeros(1), positions, layer_type)
        torch.testing.assert_close(our_cos, their_cos, rtol=0, atol=1e-5)
        torch.testing.assert_close(our_sin, their_sin, rtol=0, atol=1e-5)
    with pytest.raises(ValueError, match="one rope per layer type .*pass layer_type"):
        ours(torch.zeros(1), positions)
    with pytest.raises(ValueError, match="layer_type must be one of"):
        ours(torch.zeros(1), positions, "chunked_attention")


def test_deepseek_interleaved_layout_is_the_rotation_the_model_applies():
    """With ``rope_interleave`` the spec's layout is interleaved: posenc's rope rotates the pairs
    (2i, 2i+1) that transformers' ``apply_rotary_pos_emb_interleave`` rotates with its own table
    (which then writes them de-interleaved, the same permutation for q and k: scores are equal)."""
    from transformers.models.deepseek_v3.modeling_deepseek_v3 import apply_rotary_pos_emb_interleave

    for interleave in (True, False):
        _, _, kwargs = _family_configs(random.Random(5))["deepseek_v3"]
        config = T.DeepseekV3Config(**{**kwargs, "rope_interleave": interleave})
        rope = from_hf(config)
        assert rope.layout == ("interleaved" if interleave else "half") and rope.hf_table == "rotate_half"
        if not interleave:
            continue
        q = torch.randn(2, 4, LENGTH, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
        positions = torch.arange(LENGTH)[None].expand(2, -1)
        cos, sin = HFRotaryEmbedding(rope)(q, positions)
        theirs, _ = apply_rotary_pos_emb_interleave(q, q, cos, sin)
        ours = rope(q, positions)  # the attention factor included
        torch.testing.assert_close(torch.cat((ours[..., 0::2], ours[..., 1::2]), -1), theirs, rtol=1e-12, atol=1e-12)


# -- config.json dicts ---------------------------------------------------------------------------

def gemma3_json(rng: random.Random, **extra) -> dict:
    """A Gemma 3 text ``config.json`` as shipped (legacy keys, no layer_types)."""
    return {"model_type": "gemma3_text", "hidden_size": 64, "num_attention_heads": 4, "head_dim": 16,
            "num_hidden_layers": 12, "max_position_embeddings": 4096, "sliding_window_pattern": 6,
            "rope_theta": _base(rng) * 10, "rope_local_base_freq": _base(rng),
            "rope_scaling": {"factor": rng.choice([2.0, 8.0]), "rope_type": "linear"}, **extra}


def test_gemma3_config_json_gives_the_local_base_to_sliding_layers():
    rng = random.Random(7)
    shipped = gemma3_json(rng)
    with pytest.raises(ValueError, match="one RoPE per layer type .*'sliding_attention'.*pass layer_type"):
        from_hf(shipped)
    local = from_hf(shipped, layer_type="sliding_attention").spec
    full = from_hf(shipped, layer_type="full_attention").spec
    assert (local["base"], local["scaling"]) == (shipped["rope_local_base_freq"], None)
    assert (full["base"], full["scaling"]) == (shipped["rope_theta"],
                                               {"type": "linear", "factor": shipped["rope_scaling"]["factor"]})
    # as transformers reads the same file, and as the composite (multimodal) config.json nests it
    theirs = T.Gemma3TextConfig(**{k: v for k, v in shipped.items() if k != "model_type"})
    composite = {"model_type": "gemma3", "text_config": shipped}
    for layer_type in ("sliding_attention", "full_attention"):
        want = hf_rope_spec(shipped, layer_type=layer_type)
        assert hf_rope_spec(theirs, layer_type=layer_type) == want
        assert hf_rope_spec(theirs.to_dict(), layer_type=layer_type) == want
        assert hf_rope_spec(composite, layer_type=layer_type) == want
    specs = hf_layer_specs(shipped)
    assert [s["base"] for s in specs] == [local["base"]] * 5 + [full["base"]] + [local["base"]] * 5 + [full["base"]]
    assert hf_layer_specs(theirs) == specs
    assert rope_layer_types(shipped) == ["full_attention", "sliding_attention"]


def test_gemma3_config_json_without_bases_uses_transformers_defaults():
    shipped = gemma3_json(random.Random(8))
    del shipped["rope_theta"], shipped["rope_local_base_freq"]
    theirs = T.Gemma3TextConfig(**{k: v for k, v in shipped.items() if k != "model_type"})
    for layer_type, base in (("sliding_attention", 10000.0), ("full_attention", 1e6)):
        assert hf_rope_spec(shipped, layer_type=layer_type)["base"] == base
        assert hf_rope_spec(theirs, layer_type=layer_type) == hf_rope_spec(shipped, layer_type=layer_type)


def test_deepseek_config_json_reads_qk_rope_head_dim():
    """DeepSeek-V3's config.json has qk_rope_head_dim and no head_dim (hidden/heads is not it)."""
    _, _, kwargs = _family_configs(random.Random(9))["deepseek_v3"]
    config = T.DeepseekV3Config(**kwargs)
    shipped = {k: v for k, v in config.to_dict().items() if k != "head_dim"}
    assert hf_rope_spec(shipped) == hf_rope_spec(config)
    assert hf_rope_spec(shipped)["head_dim"] == hf_rope_spec(shipped)["rotary_dim"] == 8


def test_gpt_neox_config_json_without_rotary_pct_rotates_a_quarter():
    shipped = {"model_type": "gpt_neox", "hidden_size": 256, "num_attention_heads": 4,
               "max_position_embeddings": 2048, "rotary_emb_base": 10000}
    theirs = T.GPTNeoXConfig(hidden_size=256, num_attention_heads=4, max_position_embeddings=2048)
    assert hf_rope_spec(shipped)["rotary_dim"] == hf_rope_spec(theirs)["rotary_dim"] == 16


@pytest.mark.parametrize("config, key", [
    ({"hidden_size": 64, "num_attention_heads": 4, "rope_scaling": {
        "type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8,
        "original_max_position_embeddings": 16, "long_mscale": 1.2, "short_mscale": 1.2}}, "long_mscale"),
    ({"hidden_size": 64, "num_attention_heads": 4, "rope_parameters": {
        "rope_type": "linear", "factor": 2.0, "low_freq_factor": 1.0}}, "low_freq_factor"),
    ({"hidden_size": 64, "num_attention_heads": 4, "rope_embedding_base": 1e6}, "rope_embedding_base"),
    ({"hidden_size": 64, "num_attention_heads": 4, "rotary_dim": 8}, "rotary_dim"),  # GPT-J
    ({"model_type": "gemma3", "text_config": {"hidden_size": 64, "num_attention_heads": 4,
                                               "rope_local_scaling": {"factor": 2}}}, "rope_local_scaling"),
])
def test_a_rope_key_from_hf_does_not_read_is_an_error_naming_it(config, key):
    with pytest.raises(ValueError, match=f"'{key}'"):
        from_hf(config)


def test_falcon_with_alibi_is_refused():
    with pytest.raises(ValueError, match="alibi"):
        from_hf(T.FalconConfig(hidden_size=64, num_attention_heads=4, alibi=True))


# -- Llama 4's NoPE layers ------------------------------------------------------------------------

def test_llama4_layer_specs_give_its_nope_layers_their_temperature():
    model = tiny_model("llama4_text", seed=2)
    config = model.config
    specs = hf_layer_specs(config)
    assert [s["scheme"] for s in specs] == ["rope", "rope", "rope", "nope_temperature"]
    nope = specs[3]
    assert (nope["attn_scale"], nope["floor_scale"]) == (config.attn_scale, config.floor_scale)
    assert specs[0] == hf_rope_spec(config)
    # transformers' temperature on, against: off, and posenc's τ on the queries of the NoPE layers
    ids = _ids(seed=5)
    temperature = posenc.build(nope)
    tau = temperature.query_scale(torch.arange(ids.shape[1])).float()  # (L,)
    with torch.no_grad():
        want = model(ids).logits
        hooks = []
        for layer, spec in zip(model.model.layers, specs):
            if spec["scheme"] == "nope_temperature":
                layer.self_attn.attn_temperature_tuning = False
                hooks.append(layer.self_attn.q_proj.register_forward_hook(lambda m, i, out: out * tau[:, None]))
        got = model(ids).logits
        for h in hooks:
            h.remove()
        plain = model(ids).logits
    assert relative_difference(got, want) <= 1e-5
    assert relative_difference(plain, want) > 1e-4  # the temperature matters at these positions
    # config.json without no_rope_layers: one layer in no_rope_layer_interval, and tuning off
    shipped = {"model_type": "llama4_text", "hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 8,
               "no_rope_layer_interval": 2, "attn_temperature_tuning": False, "rope_theta": 500000.0}
    assert [s["scheme"] for s in hf_layer_specs(shipped)] == ["rope", "nope"] * 4


def test_layer_specs_check_no_rope_layers():
    config = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 3, "no_rope_layers": [1, 0]}
    with pytest.raises(ValueError, match="no_rope_layers must be 3 entries"):
        hf_layer_specs(config)
    assert [s["scheme"] for s in hf_layer_specs({**config, "no_rope_layers": [1, 0, 1]})] == ["rope", "nope", "rope"]
    assert len(hf_layer_specs(T.LlamaConfig(num_hidden_layers=3))) == 3


# -- length-dependent scalings, call by call ------------------------------------------------------

def test_longrope_switches_back_to_short_factors_after_a_long_call_as_transformers():
    from transformers.models.phi3.modeling_phi3 import Phi3RotaryEmbedding

    model = tiny_model("phi3", seed=6)
    theirs, ours = Phi3RotaryEmbedding(model.config), HFRotaryEmbedding(from_hf(model.config))
    x = torch.zeros(1)
    for length in (8, 40, 8, 16, 17, 4):  # L₀ = 16: short, long, short, the edges, short
        positions = torch.arange(length)[None]
        for mine, their in zip(ours(x, positions), theirs(x, positions)):
            torch.testing.assert_close(mine, their, rtol=0, atol=1e-5)
    # and in the model: a short batch after a long one, then greedy decoding through the cache
    # from a short prompt past L₀ (short factors for the prompt's keys, long ones after)
    long_ids, short_ids = _ids(40, seed=7), _ids(12, seed=8)

    def run():
        with torch.no_grad():
            model(long_ids)
            logits = model(short_ids).logits
            out = model.generate(short_ids[:, :6], max_new_tokens=16, do_sample=False, output_scores=True,
                                 return_dict_in_generate=True, pad_token_id=0)
        return logits, out.sequences, torch.stack(out.scores)

    want = run()
    _set(model, "model.rotary_emb", HFRotaryEmbedding(from_hf(model.config)))
    got = run()
    assert relative_difference(got[0], want[0]) <= 1e-5
    assert torch.equal(got[1], want[1]) and relative_difference(got[2], want[2]) <= 1e-5


def test_dynamic_ntk_goes_back_below_the_original_length_as_transformers():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = T.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=16,
                           rope_parameters={"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0})
    theirs, ours = LlamaRotaryEmbedding(config), HFRotaryEmbedding(from_hf(config))
    for length in (8, 40, 20, 16, 8, 30):
        positions = torch.arange(length)[None]
        for mine, their in zip(ours(torch.zeros(1), positions), theirs(torch.zeros(1), positions)):
            torch.testing.assert_close(mine, their, rtol=0, atol=2e-5)


def test_every_family_row_names_where_its_models_keep_the_rotary():
    """Each ``HF_FAMILIES`` row, on the model classes transformers builds for it (on the meta
    device: nothing allocated), found by the model's own ``config.model_type``."""
    builders = [T.AutoModelForCausalLM.from_config]
    for model_type in HF_FAMILIES:
        config = T.AutoConfig.for_model(model_type)
        for c in (config, getattr(config, "text_config", None)):
            if c is not None and hasattr(c, "num_hidden_layers"):
                c.num_hidden_layers = 2
        classes = [T.AutoModelForImageTextToText.from_config] if hasattr(config, "vision_config") else builders
        if model_type == "llama4":
            classes = [T.Llama4ForConditionalGeneration, T.AutoModelForCausalLM.from_config]  # the latter: llama4_text
        for build in classes:
            with torch.device("meta"):
                model = build(config)
            module = model
            for name in HF_FAMILIES[model.config.model_type].rotary.split("."):
                module = getattr(module, name)
            assert type(module).__name__.endswith("RotaryEmbedding"), (model_type, type(model).__name__)


def test_the_rope_page_lists_every_family_row():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "rope.md").read_text(encoding="utf-8")
    table = page[page.index("### Families"):]
    for model_type, family in HF_FAMILIES.items():
        assert f"`{model_type}`" in table and f"`{family.rotary}`" in table, model_type


@pytest.mark.parametrize("model_type, pairs, direction", [
    ("llama", "half", "counterclockwise"), ("glm", "interleaved", "counterclockwise"),
    ("ernie4_5", "interleaved", "counterclockwise"), ("nanochat", "half", "clockwise")])
def test_the_pairs_an_apply_rotates_are_found_by_calling_it(model_type, pairs, direction):
    """``found.apply_rotation`` calls the family's own ``apply_rotary_pos_emb`` with transformers'
    ``rotate_half`` table: Llama rotates (i, i + d/2), GLM and ERNIE 4.5 (2i, 2i+1) from the same
    table, NanoChat (i, i + d/2) the other way, clockwise (its ``rotate_half`` returns (x2, -x1))."""
    import importlib

    from posenc.interop.families.found import apply_layout, apply_rotation

    modeling = importlib.import_module(f"transformers.models.{model_type}.modeling_{model_type}")
    assert apply_layout(modeling.apply_rotary_pos_emb) == pairs
    assert apply_rotation(modeling.apply_rotary_pos_emb) == (pairs, direction)


def test_nanochat_clockwise_apply_turns_each_rope_its_own_way():
    """NanoChat's apply given ``HFRotaryEmbedding``'s table turns q by the rope's own angle: its own
    reading (``from_hf``: ``direction="clockwise"``, the table NanoChat's rotary returns) and a
    counterclockwise ``rope`` (the table turned back for a clockwise apply, ``apply_direction``)."""
    from transformers.models.nanochat import modeling_nanochat as nanochat

    config = T.NanoChatConfig(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=1)
    own = from_hf(config)
    assert own.spec["direction"] == "clockwise" and own.hf_apply_direction == "clockwise"
    q, p = torch.randn(1, 4, 9, 16, dtype=torch.float64), torch.arange(9)[None]
    theirs = nanochat.NanoChatRotaryEmbedding(config)(q.float(), p)
    ours = HFRotaryEmbedding(own)(q.float(), p)
    assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(ours, theirs))
    ccw = posenc.build({"scheme": "rope", "head_dim": 16}).double()
    for rope in (own.double(), ccw):
        cos, sin = HFRotaryEmbedding(rope, apply_direction="clockwise")(q, p)
        assert torch.allclose(nanochat.apply_rotary_pos_emb(q, q, cos, sin)[0], rope(q, p[0]), atol=1e-12)


def test_drop_in_takes_rope_parameters_of_a_layer_type_the_model_has_none_of():
    """Laguna's config gives rope parameters for sliding and full layers, its default layers are all
    full, and its rotary holds tables only for the layer types its layers have: the drop-in reads
    both (the sliding one never runs) and equals the model's rotary on its full layers."""
    config = T.LagunaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, head_dim=16)
    assert set(config.layer_types) == {"full_attention"} and "sliding_attention" in config.rope_parameters
    from transformers.models.laguna.modeling_laguna import LagunaRotaryEmbedding

    ours, theirs = HFRotaryEmbedding.from_config(config), LagunaRotaryEmbedding(config)
    positions = torch.arange(LENGTH)[None]
    for mine, their in zip(ours(torch.zeros(1), positions, "full_attention"),
                           theirs(torch.zeros(1), positions, "full_attention")):
        torch.testing.assert_close(mine, their, rtol=0, atol=2e-6)


def test_deepseek_v2_complex_table_through_patch_and_the_attention_function():
    """DeepSeek-V2: MLA heads ``[nope, rope]`` whose rope part its complex ``freqs_cis`` rotates on
    pairs (2i, 2i+1). Its own rope through ``patch``'s attention function (one module per layer: the
    rotary neutralised to 1 + 0i, which leaves the pairs in place) leaves the logits unchanged;
    another base does not (through its rotary module: the drop-in test above)."""
    model = tiny_model("deepseek_v2")
    ids = _ids(length=13)
    own = from_hf(model.config)
    assert (own.spec["rotary_dim"], own.layout, own.hf_table) == (8, "interleaved", "complex")
    wrong = posenc.build({**own.spec, "base": own.spec["base"] * 3})
    with torch.no_grad():
        want = model(ids).logits
        for pe, same in (([own, posenc.build(own.spec)], True), ([wrong, wrong], False)):
            posenc.interop.patch(model, pe)
            diff = relative_difference(model(ids).logits, want)
            posenc.interop.unpatch(model)
            assert (diff <= 1e-5) == same, (pe, diff)


def test_a_config_without_a_modeling_module_is_read_from_the_model_transformers_builds_for_it():
    """Sarvam-MLA's config has no modeling module of its own: transformers builds DeepSeek-V3's
    model for it, whose multi-head latent attention (and its rope_interleave key) is found there."""
    from posenc.interop.families.found import found_family

    row = found_family(T.SarvamMLAConfig(vocab_size=VOCAB, hidden_size=64, num_attention_heads=4, qk_rope_head_dim=8,
                                         qk_nope_head_dim=8, v_head_dim=16, kv_lora_rank=16, q_lora_rank=32))
    assert row is not None and (row.rope_part, row.interleave_key) == ("qk_rope_head_dim", "rope_interleave")


def test_jamba_attention_without_positions_is_nope_through_patch():
    """Jamba's attention layers have no position encoding (its Mamba layers carry order): its own
    encoding is ``nope`` (logits unchanged through ``patch``), and a scheme goes on its attention layer."""
    config = T.JambaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, attn_layer_period=2, attn_layer_offset=1,
                           num_experts=2, expert_layer_period=2, expert_layer_offset=1, use_mamba_kernels=False)
    torch.manual_seed(0)
    model = T.JambaForCausalLM(config).eval()
    assert hf_layer_specs(config) == [{"scheme": "nope"}] * 2
    ids = _ids(length=13)
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, hf_layer_specs(config))
        assert relative_difference(model(ids).logits, want) <= 1e-5
        posenc.interop.patch(model, "alibi")
        assert relative_difference(model(ids).logits, want) > 1e-4


def test_openai_gpt_learned_table_and_its_own_attention_through_patch():
    """GPT-1's attention computes itself (no cache, a padding mask ``[B, 1, 1, L]``): its learned
    table through ``patch`` leaves the logits of a left-padded batch unchanged; ALiBi changes them."""
    config = T.OpenAIGPTConfig(vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=64, attn_pdrop=0.0,
                               resid_pdrop=0.0, embd_pdrop=0.0)
    torch.manual_seed(0)
    model = T.OpenAIGPTLMHeadModel(config).eval()
    ids, mask = _ids(length=13), torch.ones(2, 13, dtype=torch.long)
    mask[1, :3] = 0
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits[:, 3:]
        posenc.interop.patch(model, hf_layer_specs(config))
        assert relative_difference(model(ids, attention_mask=mask).logits[:, 3:], want) <= 1e-5
        posenc.interop.patch(model, "alibi")
        assert relative_difference(model(ids, attention_mask=mask).logits[:, 3:], want) > 1e-4


def test_ministral3_temperature_is_off_while_patched_and_back_after_unpatch():
    """``patch`` switches Ministral 3's own query temperature off in its attention layers' view of
    the config (β 0; the model's config keeps β, as ``save_pretrained`` writes it) and ``unpatch``
    gives the layers their config back: the unmodified model's logits again."""
    import posenc.interop

    rp = {"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "original_max_position_embeddings": 4,
          "llama_4_scaling_beta": 0.5}
    config = T.Ministral3Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=32, num_attention_heads=2,
                                num_key_value_heads=1, head_dim=16, num_hidden_layers=1, max_position_embeddings=64,
                                rope_parameters=rp)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = T.Ministral3ForCausalLM(config).eval()
    ids = _ids(length=13)
    attention = model.model.layers[0].self_attn
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, "nope")
        assert attention.config.rope_parameters["llama_4_scaling_beta"] == 0.0
        assert model.config.rope_parameters["llama_4_scaling_beta"] == 0.5
        nope = model(ids).logits
        posenc.interop.unpatch(model)
        assert attention.config is model.config
        got = model(ids).logits
    assert relative_difference(nope, want) > 1e-3
    assert relative_difference(got, want) == 0.0
