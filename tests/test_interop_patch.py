"""``posenc.interop.patch``: any scheme inside a tiny random transformers causal LM, built from its
config (nothing downloaded). Rotary from ``from_hf`` leaves the logits unchanged; every kind keeps
a left-padded row equal to the same row without its padding, and greedy ``generate()`` through
the KV cache equals generating without it; unpatch restores the model; the patch survives
save and reload."""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc  # noqa: E402
import posenc.interop  # noqa: E402
from posenc.interop.patching import FAMILIES  # noqa: E402

SMALL = {"vocab_size": 97, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
         "num_attention_heads": 8, "max_position_embeddings": 128}
CONFIGS = {  # model type -> (config class, its extra keys): grouped heads wherever the family has them
    "llama": ("LlamaConfig", {"num_key_value_heads": 2}),
    "mistral": ("MistralConfig", {"num_key_value_heads": 4, "sliding_window": None}),
    "qwen2": ("Qwen2Config", {"num_key_value_heads": 2}),
    "qwen3": ("Qwen3Config", {"num_key_value_heads": 2, "head_dim": 16}),
    "phi3": ("Phi3Config", {"num_key_value_heads": 4, "pad_token_id": 0}),
    "gemma": ("GemmaConfig", {"num_key_value_heads": 1, "head_dim": 8}),
    "olmo2": ("Olmo2Config", {"num_key_value_heads": 2}),
    "granite": ("GraniteConfig", {"num_key_value_heads": 2}),
    "gpt_neox": ("GPTNeoXConfig", {"rotary_pct": 0.5}),
    # a logit cap small enough to bite (a tiny random model's scores are ~0.01-0.1), a sliding window
    "gemma2": ("Gemma2Config", {"num_key_value_heads": 2, "head_dim": 8, "query_pre_attn_scalar": 12,
                                "attn_logit_softcapping": 0.02, "sliding_window": 8}),
    # learned sinks per head (s_aux), half-width rotary tables, a sliding window on every other layer
    "gpt_oss": ("GptOssConfig", {"num_key_value_heads": 2, "head_dim": 8, "num_local_experts": 4,
                                 "num_experts_per_tok": 2, "sliding_window": 8}),
    # complex freqs_cis on pairs (2i, 2i+1), qk-norm, chunked attention, a NoPE layer with a query temperature
    "llama4_text": ("Llama4TextConfig", {"num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8,
                                         "num_local_experts": 2, "intermediate_size_mlp": 96, "attention_chunk_size": 8,
                                         "floor_scale": 3, "attn_scale": 0.3}),
    # MLA: q/k heads [nope 8, rope 8] with the rope part's pairs (2i, 2i+1), values of 12 (Dv != Dk), YaRN mscale
    "deepseek_v3": ("DeepseekV3Config", {"num_key_value_heads": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8,
                                         "v_head_dim": 12, "kv_lora_rank": 16, "q_lora_rank": 32, "n_routed_experts": 4,
                                         "num_experts_per_tok": 2, "first_k_dense_replace": 1,
                                         "moe_intermediate_size": 32, "n_group": 1, "topk_group": 1,
                                         "rope_interleave": True,
                                         "rope_parameters": {"rope_type": "yarn", "rope_theta": 2000.0, "factor": 8.0,
                                                             "original_max_position_embeddings": 16, "mscale": 1.0,
                                                             "mscale_all_dim": 0.5}}),
    # fused query_key_value, grouped heads (new_decoder_architecture), an attention that computes itself
    "falcon": ("FalconConfig", {"new_decoder_architecture": True, "num_kv_heads": 2}),
    # vision-language: the text model's layers; 3D mrope position_ids [3, B, L] (equal rows for text)
    **{t: (c, {"num_key_value_heads": 2, "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0,
                                                             "mrope_section": [1, 1, 2]}})
       for t, c in (("qwen2_vl", "Qwen2VLConfig"), ("qwen2_5_vl", "Qwen2_5_VLConfig"))},
}
EAGER = {"gemma2": "eager", "gpt_oss": "eager"}  # no SDPA: their softmax has a cap / a sink column
COMPOSITE = {"qwen2_vl": "Qwen2VLForConditionalGeneration", "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration"}
VISION = {"depth": 1, "embed_dim": 32, "hidden_size": 32, "num_heads": 2, "out_hidden_size": 64, "patch_size": 2,
          "spatial_merge_size": 1, "temporal_patch_size": 1, "intermediate_size": 32}


def tiny(model_type: str, *, seed: int = 0, **changes):
    name, extra = CONFIGS[model_type]
    sizes = {**SMALL, **extra, **changes}
    if model_type in COMPOSITE:  # a text config inside the vision-language one (ids < 97: never an image token)
        config = getattr(transformers, name)(text_config=sizes, vision_config=VISION, attn_implementation="sdpa")
        torch.manual_seed(seed)
        return getattr(transformers, COMPOSITE[model_type])(config).eval()
    config = getattr(transformers, name)(**sizes, attn_implementation=EAGER.get(model_type, "sdpa"))
    torch.manual_seed(seed)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


ROTARY_ONLY = ()  # families that take a rotary scheme only (none today), built by test_hf_families.py's tiny_model


def test_every_family_in_the_table_is_tested():
    # the one Family table (issue 34) also holds from_hf's rows (cohere, gemma3, llama4, qwen3_vl),
    # Cohere 2 and the families without RoPE (gpt2, bloom): those are walked by tests/test_hf_walk.py
    assert set([*CONFIGS, "gemma3_text", *ROTARY_ONLY]) <= set(FAMILIES)


def _tiny_other(model_type):
    from test_hf_families import tiny_model

    return tiny_model(model_type)  # eager attention


@pytest.mark.parametrize("model_type", ROTARY_ONLY)
def test_rotary_only_families_take_from_hf_and_refuse_other_kinds(model_type):
    model = _tiny_other(model_type)
    ids = torch.randint(3, 64, (1, 13))
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, posenc.from_hf(model.config))
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        posenc.interop.unpatch(model)
    with pytest.raises(ValueError, match="takes only one rotary scheme on every layer"):
        posenc.interop.patch(model, "alibi")


def test_gemma3_runs_its_two_bases_and_every_kind_through_posenc_attention():
    """Gemma 3: one RoPE per layer type (local and global bases) and a sliding window, through the
    attention function: the layer-type pattern of ``hf_layer_specs`` leaves the logits unchanged."""
    from posenc.interop.hf import hf_layer_specs

    model = _tiny_other("gemma3_text")
    ids = torch.randint(3, 64, (2, 21))  # longer than the sliding window (8)
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, hf_layer_specs(model.config))
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        posenc.interop.patch(model, "alibi", layers=[0, 5])  # the others keep their own bases
        changed = model(ids).logits
    assert not torch.allclose(changed, want, atol=1e-4)
    assert torch.equal(_generate(model, ids[:1]), _generate(model, ids[:1], use_cache=False))


@pytest.mark.parametrize("model_type", ["mistral", "gemma2"])
def test_sliding_window_layers_run_posencs_window(model_type, monkeypatch):
    """A sliding-window layer's window is ``posenc.attention``'s ``window=`` (the model's 4D mask is
    dropped where it holds only causality and the window): on 13 tokens, past a window of 4, the
    model's own encoding gives the unpatched model's logits, padded or not, and its greedy tokens
    through the cache."""
    from posenc.interop.hf import hf_layer_specs

    model = tiny(model_type, sliding_window=4)
    ids = torch.randint(3, 97, (2, 13))
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    calls = []
    attention = posenc.attention
    monkeypatch.setattr(posenc, "attention", lambda *a, **kw: calls.append(kw) or attention(*a, **kw))
    with torch.no_grad():
        want, want_padded = model(ids).logits, model(ids, attention_mask=mask).logits
        tokens = _generate(model, ids, mask)
        posenc.interop.patch(model, hf_layer_specs(model.config))
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        windowed = [kw for kw in calls if kw.get("window") is not None]
        assert windowed and all(kw["window"] == 4 and kw["attention_mask"] is None for kw in windowed)
        got = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(got[:, 3:], want_padded[:, 3:], rtol=1e-5, atol=1e-5)
    assert torch.equal(_generate(model, ids, mask), tokens)


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
def test_from_hf_leaves_the_logits_unchanged(model_type):
    """``from_hf`` through the model's rotary module, and ``hf_layer_specs`` (one spec per layer, so
    through the attention function: posenc's RoPE, and Llama 4's NoPE temperature as posenc's
    ``nope_temperature``) both leave the logits unchanged."""
    from posenc.interop.families.structure import find
    from posenc.interop.hf import hf_layer_specs

    model = tiny(model_type)
    # Falcon (up to transformers 5.24): its layers' forward, its attention implementation
    own = find(model).family.forward is not None
    ids = torch.randint(3, 97, (2, 19))
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, posenc.from_hf(model.config))
        got = model(ids).logits
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        posenc.interop.patch(model, hf_layer_specs(model.config))
        assert model.config._attn_implementation == ("sdpa" if own else "posenc")
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        posenc.interop.unpatch(model)
        torch.testing.assert_close(model(ids).logits, want, rtol=0, atol=0)


def test_llama4_nope_layers_take_posencs_temperature():
    """Llama 4's own query temperature is off while patched: its NoPE layer runs the scheme it is
    given (``nope`` differs from the model; ``nope_temperature`` with its config's sizes equals it),
    and unpatch switches the model's temperature back on."""
    from posenc.interop.hf import hf_layer_specs

    model = tiny("llama4_text")
    ids = torch.randint(3, 97, (1, 40))  # past floor_scale: the temperature changes the queries
    specs = hf_layer_specs(model.config)
    assert [s["scheme"] for s in specs] == ["rope", "rope", "rope", "nope_temperature"]
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, [*specs[:3], {"scheme": "nope"}])
        assert not model.model.layers[3].self_attn.attn_temperature_tuning
        assert not torch.allclose(model(ids).logits, want, atol=1e-4)
        posenc.interop.patch(model, specs)
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        posenc.interop.unpatch(model)
    assert model.model.layers[3].self_attn.attn_temperature_tuning


KINDS = {  # a scheme of every kind, a per-layer pattern, and rotary on one layer only
    "bias": "alibi", "bias (table)": "t5", "relative": "shaw", "content": "cope", "content (reads hidden)": "fox",
    "none": "nope", "none (temperature)": "nope_temperature:floor_scale=4", "pattern": ["rope", "kerple"],
    "additive": "sinusoidal", "additive (learned)": "learned",
}


OTHER = {("relative", "deepseek_v3"): "transformer_xl"}  # Shaw's value term needs Dv = Dk: refused below


def _generate(model, ids, mask=None, **kw):
    return model.generate(ids, attention_mask=mask, max_new_tokens=16, do_sample=False, pad_token_id=0,
                          eos_token_id=None, **kw)


@pytest.mark.parametrize("model_type", sorted(CONFIGS))
@pytest.mark.parametrize("kind", list(KINDS))
def test_every_kind_pads_and_decodes_through_the_cache(kind, model_type):
    model = tiny(model_type)
    posenc.interop.patch(model, OTHER.get((kind, model_type), KINDS[kind]))
    ids = torch.randint(3, 97, (2, 11))
    mask = torch.ones(2, 11, dtype=torch.long)
    mask[0, :4] = 0  # the first row is left-padded by 4
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # counted from each row's first token, as generate() does
    with torch.no_grad():
        padded = model(ids, attention_mask=mask, position_ids=positions).logits
        alone = model(ids[:1, 4:]).logits
    torch.testing.assert_close(padded[:1, 4:], alone, rtol=1e-5, atol=1e-5)
    cached = _generate(model, ids, mask)
    recomputed = _generate(model, ids, mask, use_cache=False)
    assert torch.equal(cached, recomputed), kind
    assert torch.equal(cached[0, 11:], _generate(model, ids[:1, 4:])[0, 7:]), kind


@pytest.mark.parametrize("layout", [{"multi_query": True}, {"multi_query": False, "attn_implementation": "eager"},
                                    {"new_decoder_architecture": True, "num_kv_heads": 1}, {"alibi": True}],
                         ids=["multi_query", "a_kv_head_per_head_eager", "one_group", "alibi"])
def test_falcon_layouts_run_posenc_attention(layout):
    """Falcon's other layouts through its patched forward: one key/value head (multi_query), one per
    query head (under eager, an additive mask), a single group; ``hf_layer_specs`` leaves the
    logits unchanged, and the cache decodes as recomputing. A Falcon with its own ALiBi (no RoPE)
    runs the scheme instead (``use_alibi`` off while patched, on again after unpatch)."""
    from posenc.interop.hf import hf_layer_specs

    layout = dict(layout)
    impl = layout.pop("attn_implementation", "sdpa")
    config = transformers.FalconConfig(**{**SMALL, **layout}, attn_implementation=impl)
    torch.manual_seed(1)
    model = transformers.FalconForCausalLM(config).eval()
    ids = torch.randint(3, 97, (2, 19))
    mask = torch.ones(2, 19, dtype=torch.long)
    mask[0, :5] = 0
    with torch.no_grad():
        want = model(ids).logits
        if not config.alibi:
            posenc.interop.patch(model, hf_layer_specs(config))
            torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        for spec in ("t5", "fox"):
            posenc.interop.patch(model, spec)
            assert not model.transformer.use_alibi
            cached = _generate(model, ids, mask)
            assert torch.equal(cached, _generate(model, ids, mask, use_cache=False)), spec
            assert torch.equal(cached[0, 19:], _generate(model, ids[:1, 5:])[0, 14:]), spec
        posenc.interop.unpatch(model)
        assert model.transformer.use_alibi == config.alibi
        torch.testing.assert_close(model(ids).logits, want, rtol=0, atol=0)


@pytest.mark.parametrize("spec", ["fox", "cope", "dape", "path"])
def test_content_schemes_take_gpt_oss_sinks_and_gemma2_cap(spec):
    """A content scheme on GPT-OSS: its sinks enter the scheme's softmax (the logits move with
    them) and get a gradient; on Gemma 2 the cap enters its scores (the logits move with it).
    Stick-breaking, which has no softmax for a sink, is refused on GPT-OSS and runs on Gemma 2."""
    ids = torch.randint(3, 97, (2, 13))
    model = tiny("gpt_oss")
    posenc.interop.patch(model, spec)
    model(ids, labels=ids).loss.backward()
    sinks = [layer.self_attn.sinks for layer in model.model.layers]
    assert all(bool(s.grad.abs().sum() > 0) for s in sinks)
    with torch.no_grad():
        before = model(ids).logits
        for s in sinks:
            s.add_(3.0)
        assert not torch.allclose(model(ids).logits, before, atol=1e-4)
    logits = []
    for cap in (0.02, None):
        model = tiny("gemma2", attn_logit_softcapping=cap)
        posenc.interop.patch(model, spec)
        with torch.no_grad():
            logits.append(model(ids).logits)
    assert not torch.allclose(logits[0], logits[1], atol=1e-3)


def test_stick_breaking_is_refused_on_gpt_oss_and_runs_on_gemma2():
    with pytest.raises(ValueError, match="GptOssForCausalLM's attention adds a learned sink .* 'stick_breaking' .*no softmax"):
        posenc.interop.patch(tiny("gpt_oss"), "stick_breaking")
    model = posenc.interop.patch(tiny("gemma2"), "stick_breaking")
    ids = torch.randint(3, 97, (1, 9))
    with torch.no_grad():
        assert torch.equal(_generate(model, ids), _generate(model, ids, use_cache=False))


def test_gpt_oss_sinks_and_gemma2_cap_reach_posenc_attention():
    """Through the attention function GPT-OSS's sinks train (their gradient equals the eager
    model's, whose attention is its own, with ``from_hf`` through ``hf_layer_specs``), and Gemma 2's
    logits depend on its cap as the eager model's do."""
    from posenc.interop.hf import hf_layer_specs

    ids = torch.randint(3, 97, (2, 13))
    grads = []
    for patched in (False, True):
        model = tiny("gpt_oss")
        if patched:
            posenc.interop.patch(model, hf_layer_specs(model.config))
        model(ids, labels=ids).loss.backward()
        grads.append(torch.stack([layer.self_attn.sinks.grad for layer in model.model.layers]))
    assert bool(grads[0].abs().sum() > 0)
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-7)
    logits = []
    for cap in (0.02, None):
        model = tiny("gemma2", attn_logit_softcapping=cap)
        with torch.no_grad():
            want = model(ids).logits
            posenc.interop.patch(model, hf_layer_specs(model.config))
            logits.append(model(ids).logits)
        torch.testing.assert_close(logits[-1], want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(logits[0], logits[1], atol=1e-3)  # the cap changes the model, and posenc follows


def test_deepseek_v3_rope_part_in_either_pair_order():
    """MLA's rope part (the last qk_rope_head_dim dims of each q/k head) without ``rope_interleave``
    (pairs (i, i + d/2)): ``hf_layer_specs`` through the attention function rotates that part only
    (logits unchanged), a full-width ``"rope"`` decodes through the cache; Shaw, whose value term
    needs Dv = Dk, is refused naming v_head_dim."""
    from posenc.interop.hf import hf_layer_specs

    model = tiny("deepseek_v3", rope_interleave=False)
    ids = torch.randint(3, 97, (2, 19))
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, hf_layer_specs(model.config))
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
    posenc.interop.patch(model, "rope")  # head_dim 16: the whole q/k head
    assert model.model.layers[0].self_attn.posenc_pe.head_dim == 16
    mask = torch.ones(2, 19, dtype=torch.long)
    mask[0, :5] = 0
    assert torch.equal(_generate(model, ids, mask), _generate(model, ids, mask, use_cache=False))
    with pytest.raises(ValueError, match="v_head_dim=12"):
        posenc.interop.patch(model, "shaw")


@pytest.mark.parametrize("model_type", sorted(COMPOSITE))
def test_qwen_vl_image_positions_reach_mrope_and_one_axis_schemes_refuse_them(model_type):
    """Image tokens' 3D positions (rows that differ): posenc's ``mrope`` through the attention
    function reads all three rows (logits unchanged), a one-axis scheme refuses them by name; the
    vision tower keeps its own attention."""
    from posenc.interop.hf import hf_layer_specs

    model = tiny(model_type)
    p = posenc.mrope_positions([{"text": 3}, {"image": [2, 3]}, {"text": 4}])  # (L, 3)
    position_ids = p.T.unsqueeze(1).expand(3, 2, -1)  # (3, B, L)
    ids = torch.randint(3, 97, (2, p.shape[0]))
    with torch.no_grad():
        want = model(ids, position_ids=position_ids).logits
        posenc.interop.patch(model, hf_layer_specs(model.config))
        assert model.config.vision_config._attn_implementation == "sdpa"
        torch.testing.assert_close(model(ids, position_ids=position_ids).logits, want, rtol=1e-5, atol=1e-5)
        posenc.interop.patch(model, "alibi")
        with pytest.raises(ValueError, match="3 rows that differ .*'alibi' takes one position per token"):
            model(ids, position_ids=position_ids)


def test_rotary_on_some_layers_keeps_the_models_own_elsewhere():
    model = tiny("qwen2")
    ids = torch.randint(3, 97, (1, 13))
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, "alibi", layers=[])  # no layer named: every layer keeps from_hf's rotary
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
        posenc.interop.patch(model, "alibi", layers=[1])
        record = model.config.posenc
        assert [record["modules"][i]["scheme"] for i in record["layers"]] == ["rope", "alibi"]
        assert not torch.allclose(model(ids).logits, want, atol=1e-3)


def test_gemma4_layers_of_two_head_sizes_take_their_own_sizes_and_rope():
    """Gemma 4's full-attention layers have a head of their own (``global_head_dim``, read per layer
    from ``per_layer_config``: transformers refuses a global ``config.head_dim``) and p-RoPE; its
    ``apply_rotary_pos_emb`` takes one tensor at a time. Its own encoding through the attention
    function leaves the logits unchanged; one spec gives each layer a module of its own head size."""
    from test_hf import tiny_gemma4_config

    torch.manual_seed(0)
    model = transformers.Gemma4ForCausalLM(tiny_gemma4_config(attn_implementation="eager")).eval()
    ids = torch.randint(3, 97, (2, 13), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        posenc.interop.patch(model, posenc.interop.hf_layer_specs(model.config))
        torch.testing.assert_close(model(ids).logits, want, rtol=1e-5, atol=1e-5)
    posenc.interop.patch(model, "rope")  # patched again, from the model's own state
    assert [layer.self_attn.posenc_pe.head_dim for layer in model.model.layers] == [16, 32]


def test_a_shared_spec_is_one_module_and_parameters_train():
    model = tiny("llama")
    posenc.interop.patch(model, "t5")
    tables = {id(layer.self_attn.posenc_pe) for layer in model.model.layers}
    assert len(tables) == 1  # one T5 table for the model, as T5 shares it
    ids = torch.randint(3, 97, (2, 9))
    model.train()
    model(ids, labels=ids).loss.backward()
    pe = model.model.layers[0].self_attn.posenc_pe
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in pe.parameters())


@pytest.mark.parametrize("model_type", ["llama", "falcon"])  # Falcon: its layers' forward, patched again on load
def test_save_and_reload_restore_the_patched_model(tmp_path, model_type):
    from posenc.interop.patching import _parts

    model = tiny(model_type)
    posenc.interop.patch(model, "t5")
    with torch.no_grad():
        for p in _parts(model)[3][0].posenc_pe.parameters():
            p.normal_()  # a table unlike a fresh one
    ids = torch.randint(3, 97, (1, 10))
    with torch.no_grad():
        want = model(ids).logits
    model.save_pretrained(tmp_path)
    again = posenc.interop.from_pretrained(tmp_path)
    with torch.no_grad():
        torch.testing.assert_close(again.eval()(ids).logits, want, rtol=1e-6, atol=1e-6)
    assert again.config.posenc == model.config.posenc


def test_an_unknown_family_is_refused_naming_its_class():
    # GPT-2 was this test's unknown family until issue 34 (a learned table: now supported); a
    # state-space model has no attention layers to find
    config = transformers.MambaConfig(num_hidden_layers=1, hidden_size=16, vocab_size=50)
    model = transformers.MambaForCausalLM(config)
    with pytest.raises(ValueError, match="MambaForCausalLM.*'mamba'"):
        posenc.interop.patch(model, "alibi")


@pytest.mark.parametrize("pe, error, words", [
    (["rope", "alibi", "t5"], ValueError, "3 entries must divide the model's 2 layers"),
    ({"scheme": "layers", "pattern": ["rope"], "extra": 1}, ValueError, "got keys"),
    (object(), TypeError, "SPEC"),
])
def test_bad_patches_are_refused(pe, error, words):
    with pytest.raises(error, match=words):
        posenc.interop.patch(tiny("llama"), pe)


def test_layers_must_be_indices_of_the_model():
    with pytest.raises(ValueError, match=r"layers must hold layer indices in 0\.\.1, got 2"):
        posenc.interop.patch(tiny("llama"), "alibi", layers=[2])
    with pytest.raises(ValueError, match="is not patched"):
        posenc.interop.unpatch(tiny("llama"))


TRAINED = ["alibi", "t5", "fox", "cope"]


@pytest.mark.slow
@pytest.mark.parametrize("spec", TRAINED)
def test_transformers_trainer_trains_a_patched_llama(spec, tmp_path):
    """``transformers.Trainer`` on a patched Llama: the loss falls and posenc's parameters move."""
    pytest.importorskip("accelerate")
    model = tiny("llama")
    posenc.interop.patch(model, spec)
    pe_params = {k: p.detach().clone() for k, p in model.named_parameters() if ".posenc_modules." in k}
    g = torch.Generator().manual_seed(2)
    rows = torch.randint(3, 20, (32, 8), generator=g).repeat(1, 3)  # a pattern that repeats: learnable order
    data = [{"input_ids": r, "labels": r} for r in rows]
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=40, per_device_train_batch_size=8,
                                          learning_rate=3e-3, logging_steps=10, report_to=[], save_strategy="no",
                                          use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [e["loss"] for e in trainer.state.log_history if "loss" in e]
    assert losses[-1] < 0.8 * losses[0], losses
    moved = [k for k, p in model.named_parameters() if k in pe_params and not torch.equal(p.detach(), pe_params[k])]
    assert moved == list(pe_params), f"{spec}: posenc parameters that did not train: {set(pe_params) - set(moved)}"


DDP_SPECS = ["t5", "fox"]


@pytest.fixture(scope="module")
def torchrun_gradients(tmp_path_factory):
    """One ``torchrun`` launch for every scheme of ``DDP_SPECS`` (three processes that import torch
    and transformers: seconds each): the folder of rank 0's averaged gradients, ``SPEC.pt``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).with_name("ddp_patched_llama.py")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1"}
    two = tmp_path_factory.mktemp("ddp")
    log = two / "torchrun.log"  # the workers' output, shown when they fail or hang
    with log.open("w") as out:
        try:
            proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
                                   "2", str(script), ",".join(DDP_SPECS), str(two)], stdout=out,
                                  stderr=subprocess.STDOUT, env=env, cwd=two, timeout=240)
        except subprocess.TimeoutExpired:
            pytest.fail(f"torchrun did not finish in 240 s; its log:\n{log.read_text()[-3000:]}")
    assert proc.returncode == 0, log.read_text()[-3000:]
    return two


@pytest.mark.slow
@pytest.mark.xdist_group("heavy")
@pytest.mark.parametrize("spec", DDP_SPECS)
def test_two_torchrun_processes_give_the_gradients_of_one(spec, torchrun_gradients):
    """DDP on gloo over 2 processes, each on half the batch, averages to the whole batch's gradients
    (computed here, in one process)."""
    from ddp_patched_llama import whole_batch_gradients

    a, b = whole_batch_gradients(spec), torch.load(torchrun_gradients / f"{spec}.pt", weights_only=True)
    assert a.keys() == b.keys() and any(".posenc_modules." in k for k in a)
    for k in a:
        torch.testing.assert_close(b[k], a[k], rtol=1e-4, atol=1e-6, msg=lambda m: f"{spec} {k}: {m}")


def test_the_docs_family_table_is_the_table_patch_reads():
    """docs/guide/transformers.md's table names each model type of FAMILIES once, and says "rotary
    scheme on every layer only" exactly for the rotary-only rows."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "transformers.md").read_text(encoding="utf-8")
    table = page.split("## Families", 1)[1].split("\n\n", 2)[1]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    seen = {}
    for row in rows:
        types, what = row.strip("|").split("|")[:2]
        for t in re.findall(r"`([a-z0-9_-]+)`", types):
            seen[t] = "on every layer only" in what
    assert seen == {t: f.rotary_only is not None for t, f in FAMILIES.items()}


def test_queries_take_the_last_positions_of_a_rotary_called_with_every_keys():
    """Qwen4-Exp calls its rotary with every key's position (its indexer reads them all) and slices
    the queries' off the end; a neutralised rotary records them all, and the queries take the last."""
    from torch import nn

    from posenc.interop.patching import _query_positions
    from posenc.interop.state import STATE, LayerState

    layer, rotary = nn.Module(), nn.Module()
    rotary.__dict__["position_ids"] = torch.arange(20)[None].expand(2, -1)
    layer.__dict__[STATE] = LayerState(positions=rotary)
    assert _query_positions(layer, None, None, 2, 1, 20, torch.device("cpu")).tolist() == [[19], [19]]
    assert _query_positions(layer, None, None, 2, 20, 20, torch.device("cpu")).tolist() == [list(range(20))] * 2
