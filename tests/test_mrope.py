"""Multimodal RoPE (``mrope``) and ``posenc.mrope_positions``: the module against its float64
reference and against transformers' own Qwen2-VL / Qwen3-VL rotary classes (parameters drawn at
random), text == 1D RoPE exactly, the section maps, ``from_hf`` and ``HFRotaryEmbedding`` for
multimodal configs, positions equal to transformers' ``get_rope_index``, and bad input.
"""

from __future__ import annotations

import logging
import random

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
from posenc.encodings.rope import TABLE_MAX_ELEMENTS
from posenc.rotary import angles_cos_sin
from posenc.interop import HFRotaryEmbedding, from_hf, hf_rope_spec
from conftest import DTYPES, assert_close

EPS32 = float(torch.finfo(torch.float32).eps)
LENGTH = 217


def draw_sections(rng: random.Random, half: int, sections_layout: str) -> list[int]:
    """Random sections ``[s_t, s_h, s_w]`` summing to ``half`` that ``sections_layout`` accepts."""
    if sections_layout == "chunked":
        a, b = sorted(rng.sample(range(1, half), 2)) if half > 2 else (1, 1)
        return [a, b - a, half - b] if half > 2 else [half - 2, 1, 1]
    s_w = rng.randint(0, half // 3)
    s_h = rng.randint(0, min((half + 1) // 3, half - s_w))
    return [half - s_h - s_w, s_h, s_w]


def draw_segments(rng: random.Random, *, n: int = 5, max_side: int = 5, video: bool = True) -> list[dict]:
    """Text and vision segments, with text between vision blocks (transformers' get_rope_index
    groups adjacent tokens of one modality into one block)."""
    out = [{"text": rng.randint(1, 4)}]
    for _ in range(n):
        h, w = rng.randint(1, max_side), rng.randint(1, max_side)
        if video and rng.random() < 0.4:
            out.append({"video": [rng.randint(1, max(h, w)), h, w]})
        else:
            out.append({"image": [h, w]})
        out.append({"text": rng.randint(1, 4)})
    return out


def spec(**kw) -> dict:
    return {"scheme": "mrope", "head_dim": 16, "sections": [4, 2, 2], **kw}


# -- the section maps and the reference ----------------------------------------------------------

def test_axis_of_pair_chunked_and_interleaved_closed_forms():
    assert ref.mrope_axis_of_pair([16, 24, 24]).tolist() == [0] * 16 + [1] * 24 + [2] * 24
    inter = ref.mrope_axis_of_pair([24, 20, 20], "interleaved")
    assert inter.tolist() == [0, 1, 2] * 20 + [0] * 4  # Qwen3-VL: T,H,W cycles, then time
    for sections in ([11, 11, 10], [2, 1, 1], [5, 0, 0], [3, 1, 0]):
        counts = np.bincount(ref.mrope_axis_of_pair(sections, "interleaved"), minlength=3).tolist()
        assert counts == sections


@pytest.mark.parametrize("sections_layout", ["chunked", "interleaved"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_reference_text_equals_1d_rope_and_scores_are_relative_per_axis(sections_layout, layout):
    rng = np.random.default_rng(0)
    inv = ref.rope_inv_freq(16, 500.0)
    axis = ref.mrope_axis_of_pair([3, 3, 2], sections_layout)
    x = rng.standard_normal((2, 3, 9, 16))
    m = rng.integers(0, 5000, 9)
    text = np.repeat(m[:, None], 3, axis=1)
    np.testing.assert_array_equal(ref.mrope(x, text, inv, axis, layout=layout),
                                  ref.rope(x, m, inv, layout=layout))
    # q·k depends only on the per-axis differences: shift every axis by its own amount
    q, k = x[0, 0], x[1, 0]
    pq, pk = rng.integers(0, 300, (9, 3)), rng.integers(0, 300, (9, 3))
    shift = rng.integers(0, 10_000, 3)

    def scores(a, b):
        return ref.mrope(q, a, inv, axis, layout=layout) @ ref.mrope(k, b, inv, axis, layout=layout).T

    np.testing.assert_allclose(scores(pq + shift, pk + shift), scores(pq, pk), rtol=0, atol=1e-9)
    moved = pk.copy()
    moved[:, 1] += 1  # one row further down changes the scores
    assert np.abs(scores(pq, moved) - scores(pq, pk)).max() > 1e-3


# -- the module against its reference ------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("offset", [0, 1000])
@pytest.mark.parametrize("sections_layout,layout", [("chunked", "half"), ("interleaved", "interleaved")])
def test_module_matches_reference(dtype, offset, sections_layout, layout):
    m = posenc.build(spec(sections_layout=sections_layout, layout=layout, base=500.0)).to(dtype)
    g = torch.Generator().manual_seed(offset)
    pos = torch.randint(0, 300, (LENGTH, 3), generator=g) + offset  # (L, 3)
    x = torch.randn(2, 3, LENGTH, 16, generator=g).to(dtype)
    out = m(x, pos)
    assert out.dtype == dtype and out.shape == x.shape
    assert_close(out, m.reference(x.double().numpy(), pos.numpy()), dtype=dtype, what=f"{sections_layout} {layout}")


@pytest.mark.parametrize("scaling", [None, {"type": "yarn", "factor": 4.0, "original_max_positions": 64},
                                     {"type": "dynamic", "factor": 2.0, "original_max_positions": 64}])
def test_module_matches_reference_batched_partial_and_scaled(scaling):
    m = posenc.build({"scheme": "mrope", "head_dim": 24, "rotary_dim": 16, "sections": [3, 3, 2],
                      "sections_layout": "interleaved", "scaling": scaling})
    segments = [{"text": 3}, {"image": [5, 7]}, {"text": 2}, {"video": [2, 4, 3], "time_interval": 2.0}]
    p = posenc.mrope_positions(segments)
    pos = torch.stack([p, p + 40])  # (B, L, 3), different per row
    x = torch.randn(2, 2, p.shape[0], 24)
    out = m(x, pos)
    assert_close(out, m.reference(x.double().numpy(), pos.numpy()), what=str(scaling))
    torch.testing.assert_close(out[..., 16:], x[..., 16:], rtol=0, atol=0)  # past rotary_dim: unchanged


def test_table_and_direct_paths_agree_and_direct_path_is_reached():
    m = posenc.build(spec(sections_layout="interleaved"))
    pos = torch.randint(0, 5000, (2, 37, 3))
    table = m.cos_sin(pos)
    assert m._tables  # the table path was used
    direct = angles_cos_sin(pos, m.inv_freq, torch.float32, 1.0, m.axis_of_pair)  # the shared angle function
    for a, b in zip(table, direct):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    far = pos + (TABLE_MAX_ELEMENTS // 8 + 1)  # past the table: computed directly
    m._tables.clear()
    x = torch.randn(2, 1, 37, 16)
    assert_close(m(x, far), m.reference(x.double().numpy(), far.numpy()), what="direct")
    assert not m._tables


def test_real_positions_match_reference_and_integer_valued_floats_are_exact():
    m = posenc.build(spec(sections_layout="interleaved"))
    x = torch.randn(1, 2, 11, 16)
    pos = torch.randint(0, 3000, (11, 3))
    torch.testing.assert_close(m(x, pos.double()), m(x, pos), rtol=0, atol=0)
    real = pos * 0.37  # e.g. seconds of video
    assert_close(m(x, real), m.reference(x.double().numpy(), real.numpy()), what="real positions")


@pytest.mark.parametrize("seed", range(4))
def test_text_tokens_equal_1d_rope_exactly(seed):
    rng = random.Random(seed)
    half = rng.choice([4, 8, 16])
    sections_layout = rng.choice(["chunked", "interleaved"])
    common = {"head_dim": 2 * half, "base": rng.choice([100.0, 10000.0, 1e6]), "layout": rng.choice(["half", "interleaved"]),
              "scaling": rng.choice([None, {"type": "linear", "factor": 2.0},
                                     {"type": "yarn", "factor": 4.0, "original_max_positions": 256}])}
    rope = posenc.build({"scheme": "rope", **common})
    m = posenc.build({"scheme": "mrope", "sections": draw_sections(rng, half, sections_layout),
                      "sections_layout": sections_layout, **common})
    x = torch.randn(2, 2, 33, 2 * half)
    for top in (2000, 10**7, 2**40):  # the table path, the direct path, exact angles far out
        p = torch.randint(0, top, (2, 33))
        torch.testing.assert_close(m(x, p.unsqueeze(-1).expand(2, 33, 3)), rope(x, p), rtol=0, atol=0)


# -- transformers --------------------------------------------------------------------------------

transformers = pytest.importorskip("transformers")
from transformers import Qwen2VLConfig, Qwen2_5_VLConfig, Qwen3VLConfig  # noqa: E402
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig  # noqa: E402
from transformers.models.qwen2_vl.modeling_qwen2_vl import (Qwen2VLModel, Qwen2VLRotaryEmbedding,  # noqa: E402
                                                            Qwen2VLTextModel)
from transformers.models.qwen2_5_vl.modeling_qwen2_5_vl import Qwen2_5_VLModel  # noqa: E402
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig  # noqa: E402
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLTextModel, Qwen3VLTextRotaryEmbedding  # noqa: E402


@pytest.fixture(autouse=True)
def _quiet_transformers():
    logger = logging.getLogger("transformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    yield
    logger.setLevel(level)


def draw_rope_parameters(rng: random.Random, half: int, max_positions: int) -> dict:
    rope_type = rng.choice(["default", "default", "linear", "dynamic", "yarn", "llama3", "longrope"])
    rp = {"rope_type": rope_type, "rope_theta": rng.choice([10000.0, 1e6, 5e6])}
    if rope_type in ("linear", "dynamic"):
        rp["factor"] = rng.choice([2.0, 4.0])
    elif rope_type == "yarn":
        rp.update(factor=rng.choice([2.0, 8.0]), original_max_position_embeddings=max_positions // 2)
    elif rope_type == "llama3":
        rp.update(factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position_embeddings=max_positions // 4)
    elif rope_type == "longrope":
        rp.update(short_factor=[rng.uniform(1, 2) for _ in range(half)], long_factor=[rng.uniform(1, 8) for _ in range(half)],
                  original_max_position_embeddings=max_positions // 2, factor=4.0)
    return rp


def draw_hf(rng: random.Random):
    """A random Qwen2-VL (chunked) or Qwen3-VL (interleaved) text config and transformers' rotary class."""
    heads, head_dim = rng.choice([2, 4]), rng.choice([16, 32, 64])
    qwen3 = rng.random() < 0.5
    sections = draw_sections(rng, head_dim // 2, "interleaved" if qwen3 else "chunked")
    max_positions = rng.choice([256, 2048])
    rp = {**draw_rope_parameters(rng, head_dim // 2, max_positions), "mrope_section": sections}
    if qwen3:
        rp["mrope_interleaved"] = True
        config = Qwen3VLTextConfig(hidden_size=heads * head_dim, num_attention_heads=heads, head_dim=head_dim,
                                   max_position_embeddings=max_positions, rope_parameters=rp)
        return config, Qwen3VLTextRotaryEmbedding(config)
    config = Qwen2VLTextConfig(hidden_size=heads * head_dim, num_attention_heads=heads,
                               max_position_embeddings=max_positions, rope_parameters=rp)
    return config, Qwen2VLRotaryEmbedding(config)


def test_tables_equal_transformers_qwen2_vl_and_qwen3_vl_for_random_configs():
    rng = random.Random(8)
    seen = set()
    for _ in range(16):
        config, theirs = draw_hf(rng)
        rope = from_hf(config)
        assert rope.name == "mrope" and rope.sections == config.rope_parameters["mrope_section"]
        ours = HFRotaryEmbedding(rope)
        assert ours.attention_scaling == pytest.approx(theirs.attention_scaling, rel=1e-12)
        p = posenc.mrope_positions(draw_segments(rng, max_side=rng.choice([4, 12])),
                                   offset=rng.choice([0, config.max_position_embeddings]))
        position_ids = torch.stack([p, p + 7]).permute(2, 0, 1)  # (3, B, L), as get_rope_index returns
        their_cos, their_sin = theirs(torch.zeros(1), position_ids)
        our_cos, our_sin = ours(torch.zeros(1), position_ids)
        assert our_cos.shape == their_cos.shape and our_cos.dtype == torch.float32
        # transformers' angles are float32: their error grows with the angle p[a(j)]·θ_j
        angle = position_ids.permute(1, 2, 0)[..., rope.axis_of_pair].double() * rope.frequencies()  # (B, L, R)
        tol = 8 * EPS32 * (1 + torch.cat((angle, angle), -1)) * max(1.0, theirs.attention_scaling)
        for mine, their in ((our_cos, their_cos), (our_sin, their_sin)):
            err = (mine.double() - their.double()).abs()
            assert torch.all(err <= tol), (config.rope_parameters, float((err / tol).max()))
        seen.add((rope.sections_layout, config.rope_parameters["rope_type"]))
    assert {s for s, _ in seen} == {"chunked", "interleaved"} and len({t for _, t in seen}) >= 4


def _tiny_text_model(cls, config_cls, sections, *, head_dim=None, **extra):
    torch.manual_seed(0)
    sizes = {} if head_dim is None else {"head_dim": head_dim}
    config = config_cls(vocab_size=64, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                        num_key_value_heads=2, max_position_embeddings=512, attn_implementation="eager", **sizes,
                        rope_parameters={"rope_type": "default", "rope_theta": 100.0, "mrope_section": sections, **extra},
                        initializer_range=0.2)  # sharp attention: positions matter
    return cls(config).eval()


@pytest.mark.parametrize("which", ["qwen2_vl", "qwen3_vl"])
def test_tiny_text_model_unchanged_with_posenc_rotary_and_3d_position_ids(which):
    if which == "qwen2_vl":
        model = _tiny_text_model(Qwen2VLTextModel, Qwen2VLTextConfig, [2, 3, 3])
    else:
        model = _tiny_text_model(Qwen3VLTextModel, Qwen3VLTextConfig, [4, 2, 2], head_dim=16, mrope_interleaved=True)
    p = posenc.mrope_positions([{"text": 3}, {"image": [4, 6]}, {"text": 2}, {"video": [3, 2, 3]}, {"text": 4}])
    position_ids = p.T.unsqueeze(1)  # (3, 1, L)
    embeds = torch.randn(1, p.shape[0], 64, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(inputs_embeds=embeds, position_ids=position_ids).last_hidden_state
        model.rotary_emb = HFRotaryEmbedding(from_hf(model.config))
        got = model(inputs_embeds=embeds, position_ids=position_ids).last_hidden_state
        assert ((got - want).norm() / want.norm()).item() <= 1e-5
        # not vacuous: another section map changes the result
        other = {**from_hf(model.config).spec, **({"sections_layout": "chunked"} if which == "qwen3_vl"
                                                   else {"sections": [3, 3, 2]})}
        model.rotary_emb = HFRotaryEmbedding(posenc.build(other))
        assert ((model(inputs_embeds=embeds, position_ids=position_ids).last_hidden_state - want).norm()
                / want.norm()).item() > 1e-4


def test_from_hf_reads_qwen_configs_objects_and_dicts():
    qwen2 = {"scheme": "mrope", "head_dim": 128, "sections": [16, 24, 24], "base": 1e6, "rotary_dim": 128,
             "sections_layout": "chunked", "layout": "half", "scaling": None}
    qwen2_json = {"model_type": "qwen2_vl", "hidden_size": 3584, "num_attention_heads": 28, "rope_theta": 1e6,
                  "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}}  # Qwen2-VL-7B's config.json
    assert hf_rope_spec(qwen2_json) == {**qwen2, "head_dim": 128}
    assert hf_rope_spec(Qwen2VLConfig()) == qwen2  # composite config: read in text_config, default sections
    assert hf_rope_spec(Qwen2_5_VLConfig())["sections"] == [16, 24, 24]
    qwen3_json = {"model_type": "qwen3_vl", "text_config": {
        "model_type": "qwen3_vl_text", "head_dim": 128, "hidden_size": 2560, "num_attention_heads": 32,
        "rope_theta": 5e6, "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                                            "rope_type": "default"}}}
    qwen3 = {**qwen2, "sections": [24, 20, 20], "sections_layout": "interleaved", "base": 5e6}
    assert hf_rope_spec(qwen3_json) == qwen3
    assert hf_rope_spec(Qwen3VLConfig()) == {**qwen3, "base": 500000.0}  # transformers' defaults
    explicit = {"head_dim": 32, "rope_parameters": {"rope_type": "default", "mrope_section": [8, 4, 4],
                                                    "mrope_interleaved": False}}
    assert hf_rope_spec(explicit)["sections_layout"] == "chunked"
    assert hf_rope_spec({"head_dim": 32})["scheme"] == "rope"  # no sections: 1D
    with pytest.raises(ValueError, match="mrope_section"):
        hf_rope_spec({"head_dim": 32, "rope_parameters": {"mrope_interleaved": True}})
    with pytest.raises(ValueError, match="sections must sum to rotary_dim/2 = 16"):
        from_hf({"head_dim": 32, "rope_parameters": {"mrope_section": [8, 8, 8]}})


def test_hf_rotary_embedding_takes_3d_and_text_position_ids():
    ours = HFRotaryEmbedding(posenc.build(spec(sections_layout="interleaved")))
    p = torch.randint(0, 100, (2, 9, 3))
    cos, sin = ours(torch.zeros(1, dtype=torch.float64), p.permute(2, 0, 1))
    want_cos, want_sin = ours.rope.cos_sin(p, torch.float64)
    torch.testing.assert_close(cos, torch.cat((want_cos, want_cos), -1), rtol=0, atol=0)
    torch.testing.assert_close(sin, torch.cat((want_sin, want_sin), -1), rtol=0, atol=0)
    text = torch.randint(0, 100, (2, 9))
    rope = HFRotaryEmbedding(posenc.build({"scheme": "rope", "head_dim": 16}))
    for a, b in zip(ours(torch.zeros(1), text), rope(torch.zeros(1), text)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"\[3, B, L\]"):
        ours(torch.zeros(1), torch.zeros(4, 2, 9, dtype=torch.long))
    with pytest.raises(ValueError, match="mrope"):
        rope(torch.zeros(1), p.permute(2, 0, 1))


# -- mrope_positions against get_rope_index ------------------------------------------------------

def _token_types(segments: list[dict]) -> torch.Tensor:
    kinds = {"text": 0, "image": 1, "video": 2}
    out = []
    for s in segments:
        kind = next(k for k in kinds if k in s)
        n = s["text"] if kind == "text" else int(np.prod(s[kind]))
        out += [kinds[kind]] * n
    return torch.tensor([out])


def _get_rope_index(model_cls, config, segments: list[dict], merge: int) -> torch.Tensor:
    """transformers' get_rope_index on the same sequence: grids before the ``merge × merge`` merge."""
    types = _token_types(segments)
    images = [[1, s["image"][0] * merge, s["image"][1] * merge] for s in segments if "image" in s]
    videos = [[s["video"][0], s["video"][1] * merge, s["video"][2] * merge] for s in segments if "video" in s]
    seconds = [s.get("time_interval", 1.0) / config.vision_config.tokens_per_second
               for s in segments if "video" in s] if hasattr(config.vision_config, "tokens_per_second") else None
    kwargs = {"second_per_grid_ts": torch.tensor(seconds)} if seconds else {}
    model = model_cls(config)
    position_ids, _ = model.get_rope_index(torch.zeros_like(types), types,
                                           image_grid_thw=torch.tensor(images) if images else None,
                                           video_grid_thw=torch.tensor(videos) if videos else None, **kwargs)
    return position_ids[:, 0].T  # (L, 3)


TINY_VLM = dict(text_config=dict(vocab_size=16, hidden_size=16, intermediate_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=1))


@pytest.mark.parametrize("merge", [1, 2])
def test_mrope_positions_equal_qwen2_vl_get_rope_index(merge):
    rng = random.Random(merge)
    config = Qwen2VLConfig(**TINY_VLM, vision_config=dict(depth=1, embed_dim=16, hidden_size=16, num_heads=2,
                                                          spatial_merge_size=merge))
    for _ in range(6):
        segments = draw_segments(rng)
        ours = posenc.mrope_positions(segments)
        assert ours.dtype == torch.int64 and ours.shape[1] == 3
        torch.testing.assert_close(ours, _get_rope_index(Qwen2VLModel, config, segments, merge), rtol=0, atol=0)


def test_mrope_positions_equal_qwen2_5_vl_get_rope_index_with_time_intervals():
    rng = random.Random(25)
    config = Qwen2_5_VLConfig(**TINY_VLM, vision_config=dict(depth=1, hidden_size=16, out_hidden_size=16,
                                                             intermediate_size=16, num_heads=2, tokens_per_second=4))
    for _ in range(4):
        segments = draw_segments(rng, max_side=12)
        for s in segments:  # time spans no longer than the side: floor((t-1)·interval) < max(h, w)
            if "video" in s:
                t, h, w = s["video"]
                s["time_interval"] = rng.choice([0.5, 1.0, 1.5, 2.0])
                s["video"][0] = min(t, int((max(h, w) - 1) / s["time_interval"]) + 1)
        torch.testing.assert_close(posenc.mrope_positions(segments), _get_rope_index(Qwen2_5_VLModel, config, segments, 2),
                                   rtol=0, atol=0)


def test_mrope_positions_rule_for_long_videos_and_offsets():
    video = {"video": [10, 2, 3], "time_interval": 1.5}  # time spans 13 positions, the side 3
    p = posenc.mrope_positions([{"text": 2}, video, {"text": 3}], offset=5)
    block = p[2:62]
    assert block[:, 0].unique().tolist() == [7 + int(i * 1.5) for i in range(10)]  # floor(i·1.5) + start
    assert block[:6, 1:].tolist() == [[7 + r, 7 + c] for r in range(2) for c in range(3)]  # row-major
    # the next segment starts one past the block's largest position, on every axis
    assert p[62:].tolist() == [[int(block.max()) + 1 + i] * 3 for i in range(3)]
    assert p[:2].tolist() == [[5, 5, 5], [6, 6, 6]]
    torch.testing.assert_close(posenc.mrope_positions([{"text": 4}]), torch.arange(4)[:, None].expand(4, 3),
                               rtol=0, atol=0)


# -- bad input -----------------------------------------------------------------------------------

@pytest.mark.parametrize("bad,error,match", [
    ({"sections": [4, 2, 1]}, ValueError, r"sections must sum to rotary_dim/2 = 8.*\[4, 2, 1\]"),
    ({"sections": [4, 4]}, ValueError, "sections must have 3 entries"),
    ({"sections": [2, 2, 2, 2]}, ValueError, "sections must have 3 entries"),
    ({"sections": "4,2,2"}, TypeError, "sections must be a list"),
    ({"sections": [4, 2.5, 1.5]}, TypeError, r"sections\[1\] must be an integer"),
    ({"sections": [2, 4, 2], "sections_layout": "interleaved"}, ValueError, "do not fit the cycle"),
    ({"sections_layout": "mixed"}, ValueError, "sections_layout must be one of 'chunked', 'interleaved'"),
    ({"scaling": {"type": "xpos"}}, ValueError, "xpos"),
])
def test_bad_specs_are_named(bad, error, match):
    with pytest.raises(error, match=match):
        posenc.build(spec(**bad))


@pytest.mark.parametrize("positions,error,match", [
    (torch.arange(5), ValueError, r"shape \[L, 3\] or \[B, L, 3\]"),
    (torch.zeros(5, 2, dtype=torch.long), ValueError, r"got shape \[5, 2\]"),
    (torch.zeros(5, 3, dtype=torch.complex64), TypeError, "dtype"),
    (torch.full((5, 3), float("nan")), ValueError, "finite"),
    (torch.full((5, 3), -1), ValueError, "non-negative"),
    (torch.zeros(4, 3, dtype=torch.long), ValueError, "length 4 but the tensor has length 5"),
    (torch.zeros(3, 5, 3, dtype=torch.long), ValueError, "batch 3 but the tensor has batch 2"),
    ([[0, 0, 0]] * 5, TypeError, "torch.Tensor"),
])
def test_bad_positions_are_named(positions, error, match):
    m = posenc.build(spec())
    with pytest.raises(error, match=match):
        m(torch.zeros(2, 1, 5, 16), positions)


@pytest.mark.parametrize("segments,error,match", [
    ([], ValueError, "segments is empty"),
    ({"text": 3}, TypeError, "segments must be a list"),
    ([{"audio": 3}], ValueError, r"segments\[0\] must have exactly one kind key.*'audio'"),
    ([{"text": 2, "image": [2, 2]}], ValueError, "exactly one kind key"),
    ([{"text": 2}, "image"], TypeError, r"segments\[1\] must be a dict"),
    ([{"text": 0}], ValueError, r"segments\[0\]\['text'\] must be >= 1"),
    ([{"image": [0, 3]}], ValueError, r"\['image'\]\[0\] must be >= 1"),
    ([{"image": [2, 3, 4]}], ValueError, r"\['image'\] must have 2 entries"),
    ([{"video": [2, 3]}], ValueError, r"\['video'\] must have 3 entries"),
    ([{"image": [2, 2], "time_interval": 2.0}], ValueError, "time_interval applies to a video"),
    ([{"video": [2, 2, 2], "time_interval": 0}], ValueError, "time_interval'\\] must be > 0"),
    ([{"video": [3, 2, 2], "time_interval": 1e300}], ValueError, "at most"),
])
def test_bad_segments_are_named(segments, error, match):
    with pytest.raises(error, match=match):
        posenc.mrope_positions(segments)


def test_default_sections_are_transformers_defaults_at_head_dim_128_and_fit_any_size():
    assert posenc.build({"scheme": "mrope", "head_dim": 128}).sections == [16, 24, 24]  # Qwen2-VL
    assert posenc.build({"scheme": "mrope", "head_dim": 128, "sections_layout": "interleaved"}).sections == [24, 20, 20]
    for rotary_dim in range(2, 258, 2):
        for layout in ("chunked", "interleaved"):
            sections = ref.default_sections(rotary_dim, layout)
            assert sum(sections) == rotary_dim // 2 and min(sections) >= 0
            ref.mrope_axis_of_pair(sections, layout, rotary_dim=rotary_dim)  # accepted


# -- the time interval as transformers computes it (float32) -------------------------------------

def _qwen2_5_vl_rope_index(segments, tokens_per_second: int, seconds_per_grid, merge: int = 2) -> torch.Tensor:
    """transformers' Qwen2.5-VL get_rope_index, ``second_per_grid_ts`` as given (the processor's
    float32 tensor, or a list of Python floats)."""
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLModel

    config = Qwen2_5_VLConfig(**TINY_VLM, vision_config=dict(depth=1, hidden_size=16, out_hidden_size=16,
                                                             intermediate_size=16, num_heads=2,
                                                             spatial_merge_size=merge,
                                                             tokens_per_second=tokens_per_second))
    types = _token_types(segments)
    videos = [[s["video"][0], s["video"][1] * merge, s["video"][2] * merge] for s in segments if "video" in s]
    position_ids, _ = Qwen2_5_VLModel(config).get_rope_index(
        torch.zeros_like(types), types, video_grid_thw=torch.tensor(videos), second_per_grid_ts=seconds_per_grid)
    return position_ids[:, 0].T  # (L, 3)


@pytest.mark.parametrize("fps", [25, 50])
def test_mrope_positions_equal_qwen2_5_vl_with_the_processors_float32_interval(fps):
    """The processor hands ``second_per_grid_ts = temporal_patch_size / fps`` as a float32 tensor and
    transformers multiplies ``arange(t)`` by ``tokens_per_second · that`` in float32 (so does it for
    a Python float): ``time_dtype="float32"`` equals it in both cases, with the interval given as
    the tensor's value or as the float; float64 (the default, the exact product) is one position
    later or earlier at some frames."""
    rng = random.Random(fps)
    differs = 0
    for tps in [5] + [rng.randint(1, 20) for _ in range(5)]:  # 5: the docstring's case (0.4 and 0.2 per frame)
        seconds = 2 / fps  # temporal_patch_size = 2, as Qwen2.5-VL's processor
        side = rng.randint(3, 10)
        interval64 = tps * seconds
        frames = min(24, int((side - 1) / interval64) + 1)  # time spans no longer than the side
        processor = torch.tensor([seconds])  # float32, as BatchFeature makes it
        for given, interval in [(processor, tps * processor[0]), ([seconds], interval64)]:
            segments = [{"text": 2}, {"video": [frames, side, side], "time_interval": interval}, {"text": 2}]
            theirs = _qwen2_5_vl_rope_index(segments, tps, given)
            torch.testing.assert_close(posenc.mrope_positions(segments, time_dtype="float32"), theirs, rtol=0, atol=0)
            exact = [{**s, "time_interval": interval64} if "video" in s else s for s in segments]
            differs += not torch.equal(posenc.mrope_positions(exact), theirs)
    assert differs, "no case where float64 and float32 differ: the test would not see the convention"


def test_frame_positions_float32_is_torchs_product():
    from posenc.reference.mrope import frame_positions

    rng = np.random.default_rng(7)
    for _ in range(50):
        interval = float(rng.uniform(0.01, 8.0))
        t = int(rng.integers(1, 300))
        ours = frame_positions(t, interval, "float32")
        torch.testing.assert_close(torch.from_numpy(ours), (torch.arange(t) * interval).long(), rtol=0, atol=0)
    with pytest.raises(ValueError, match="time_dtype must be one of 'float64', 'float32'; got 'bfloat16'"):
        posenc.mrope_positions([{"text": 2}], time_dtype="bfloat16")
