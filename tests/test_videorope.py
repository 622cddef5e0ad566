"""VideoRoPE (``videorope``): low-frequency temporal allocation, the diagonal layout and the
temporal spacing δ, against the float64 reference and the official code (Wiselnn570/VideoRoPE,
``videorope-transformer/modeling_videorope.py``, re-stated below: it patches a transformers 4.45
Qwen2-VL), with parameters drawn at random; text as 1D RoPE; cached decoding equal to the full pass."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

import posenc
from posenc import reference as ref
posenc.schemes()  # the registry loads in its own order before a scheme module is imported directly
from posenc.encodings.videorope import videorope_positions  # noqa: E402
from conftest import assert_close

VISION_START, IMAGE, VIDEO, TEXT = 151652, 151655, 151656, 7


# -- the official code, re-stated ------------------------------------------------------------------

def _official_positions(input_ids, image_grid_thw, video_grid_thw, scale_factor, spatial_merge_size=2):
    """``Qwen2VLForConditionalGeneration.get_t_scale_rope_index`` for one sequence, no padding mask:
    ``(3, L)`` float positions."""
    input_tokens = input_ids.tolist()
    vision_start_indices = torch.argwhere(input_ids == VISION_START).squeeze(1)
    vision_tokens = input_ids[vision_start_indices + 1]
    image_nums, video_nums = int((vision_tokens == IMAGE).sum()), int((vision_tokens == VIDEO).sum())
    llm_pos_ids_list, st, image_index, video_index = [], 0, 0, 0
    remain_images, remain_videos = image_nums, video_nums
    for _ in range(image_nums + video_nums):
        ed_image = input_tokens.index(IMAGE, st) if IMAGE in input_tokens and remain_images > 0 else len(input_tokens) + 1
        ed_video = input_tokens.index(VIDEO, st) if VIDEO in input_tokens and remain_videos > 0 else len(input_tokens) + 1
        if ed_image < ed_video:
            t, h, w = image_grid_thw[image_index]
            image_index, remain_images, ed = image_index + 1, remain_images - 1, ed_image
        else:
            t, h, w = video_grid_thw[video_index]
            video_index, remain_videos, ed = video_index + 1, remain_videos - 1, ed_video
        llm_grid_t, llm_grid_h, llm_grid_w = t.item(), h.item() // spatial_merge_size, w.item() // spatial_merge_size
        text_len = ed - st
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
        t_index = torch.arange(llm_grid_t).view(-1, 1).expand(-1, llm_grid_h * llm_grid_w).flatten()
        h_index = torch.arange(llm_grid_h).view(1, -1, 1).expand(llm_grid_t, -1, llm_grid_w).flatten() - (llm_grid_h - 1) // 2
        w_index = torch.arange(llm_grid_w).view(1, 1, -1).expand(llm_grid_t, llm_grid_h, -1).flatten() - (llm_grid_w - 1) // 2
        t_index = t_index * scale_factor
        t_index = t_index + text_len + st_idx
        h_index = h_index + t_index
        w_index = w_index + t_index
        llm_pos_ids_list.append(torch.stack([t_index, h_index, w_index]))
        st = ed + llm_grid_t * llm_grid_h * llm_grid_w
    if st < len(input_tokens):
        st_idx = llm_pos_ids_list[-1][0].max() + 1 if len(llm_pos_ids_list) > 0 else 0
        text_len = len(input_tokens) - st
        llm_pos_ids_list.append(torch.arange(text_len).view(1, -1).expand(3, -1) + st_idx)
    return torch.cat([p.float() for p in llm_pos_ids_list], dim=1).reshape(3, -1)


def _official_cos_sin(position_ids, head_dim, base):
    """``Qwen2VLRotaryEmbedding.forward`` (default rope): ``(3, B, L, D)`` float32 cos and sin."""
    inv_freq = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    inv_freq_expanded = inv_freq[None, None, :, None].float().expand(3, position_ids.shape[1], -1, 1)
    freqs = (inv_freq_expanded @ position_ids[:, :, None, :].float()).transpose(2, 3)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _official_rotate(q, cos, sin, mrope_section):
    """``apply_m_modify_multimodal_rotary_pos_emb`` (the query half)."""
    mrope_section = [mrope_section[0], mrope_section[1] + mrope_section[2]] * 2
    mrope_section = mrope_section[::-1]
    index, result_cos, result_sin = 0, [], []
    for i, section in enumerate(mrope_section):
        if i % 2 == 0:
            for j in range(section):
                row = 1 if j % 2 == 0 else 2
                result_cos.append(cos[row, ..., index: index + 1])
                result_sin.append(sin[row, ..., index: index + 1])
                index += 1
        else:
            result_cos.append(cos[0, ..., index:index + section])
            result_sin.append(sin[0, ..., index:index + section])
            index += section
    cos, sin = torch.cat(result_cos, dim=-1).unsqueeze(1), torch.cat(result_sin, dim=-1).unsqueeze(1)
    rotated = torch.cat((-q[..., q.shape[-1] // 2:], q[..., : q.shape[-1] // 2]), dim=-1)
    return q * cos + rotated * sin


def _random_sequence(rng):
    """Token ids with a vision start before each block, their grids (before the 2×2 merge), and
    posenc's segments for the same sequence."""
    ids, images, videos, segments = [], [], [], []
    text = rng.randint(3, 6)  # the diagonal layout centres a grid on its position: text first keeps it >= 0
    for _ in range(rng.randint(1, 3)):
        ids += [TEXT] * text + [VISION_START]
        segments.append({"text": text + 1})
        t, h, w = rng.randint(1, 3), rng.randint(1, 4), rng.randint(1, 4)
        if t == 1 and rng.random() < 0.5:
            ids += [IMAGE] * (h * w)
            images.append([1, 2 * h, 2 * w])
            segments.append({"image": [h, w]})
        else:
            ids += [VIDEO] * (t * h * w)
            videos.append([t, 2 * h, 2 * w])
            segments.append({"video": [t, h, w]})
        text = rng.randint(1, 4)
    ids += [TEXT] * text
    segments.append({"text": text})
    grids = [torch.tensor(g) if g else None for g in (images, videos)]
    return torch.tensor(ids), grids[0], grids[1], segments


@pytest.mark.parametrize("seed", range(6))
def test_videorope_positions_equal_the_official_index(seed):
    rng = random.Random(seed)
    ids, images, videos, segments = _random_sequence(rng)
    delta = rng.choice([1.0, 2.0, 0.5, 3.0, round(rng.uniform(0.25, 4), 3)])
    theirs = _official_positions(ids, images, videos, delta)
    ours = videorope_positions(segments, temporal_spacing=delta)
    assert ours.shape == (len(ids), 3)
    assert_close(theirs.T, ours.numpy(), dtype=torch.float32, what=f"positions, δ={delta}")


@pytest.mark.parametrize("seed", range(4))
def test_videorope_rotation_equals_the_official_code(seed):
    rng = random.Random(100 + seed)
    half = rng.randint(2, 12) * 2  # rotary_dim / 2, even: s_h = s_w
    side = rng.randint(1, half // 2 - (1 if half > 2 else 0))
    sections = [half - 2 * side, side, side]
    head_dim, base = 2 * half, rng.choice([10000.0, 1e6, rng.uniform(100, 1e5)])
    ids, images, videos, segments = _random_sequence(rng)
    delta = rng.choice([2.0, 1.5])
    positions = _official_positions(ids, images, videos, delta)  # (3, L)
    cos, sin = _official_cos_sin(positions[:, None], head_dim, base)
    q = torch.randn(1, 2, positions.shape[1], head_dim)
    theirs = _official_rotate(q, cos, sin, sections)
    m = posenc.build({"scheme": "videorope", "head_dim": head_dim, "sections": sections, "base": base})
    ours = m(q.double(), videorope_positions(segments, temporal_spacing=delta))
    # the official angles are float32 products p·θ: their rounding bounds the difference
    mag = float(positions.max()) * float(q.abs().max())
    assert_close(theirs, ours.numpy(), dtype=torch.float32, magnitude=mag, what=f"sections {sections}")


# -- the reference and the properties --------------------------------------------------------------

def test_videorope_puts_time_on_the_lowest_frequencies_and_alternates_rows_and_columns():
    m = posenc.build({"scheme": "videorope", "head_dim": 128})
    assert m.sections == [16, 24, 24]
    np.testing.assert_array_equal(m.axis_of_pair.numpy(), [1, 2] * 24 + [0] * 16)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16], ids=str)
def test_videorope_matches_reference_on_a_text_and_video_sequence(dtype):
    m = posenc.build({"scheme": "videorope", "head_dim": 20, "base": 500.0})  # sections [4, 3, 3]
    pos = videorope_positions([{"text": 5}, {"video": [3, 3, 5]}, {"text": 2}, {"image": [2, 3]}, {"text": 1}],
                              offset=7, temporal_spacing=1.5)  # (53, 3): odd length, real positions, an offset
    batched = torch.stack([pos, pos + 4])
    x = torch.randn(2, 3, pos.shape[0], 20, dtype=torch.float64)
    expected = ref.videorope(x.numpy(), batched.numpy(), ref.rope_inv_freq(20, 500.0),
                             ref.videorope_axis_of_pair([4, 3, 3]))
    out = m.to(dtype)(x.to(dtype), batched)
    assert out.dtype == dtype
    assert_close(out, expected, dtype=dtype, magnitude=float(x.abs().max()))


def test_videorope_text_is_rope_and_the_grid_sits_on_the_diagonal():
    pos = videorope_positions([{"text": 3}, {"video": [2, 3, 3]}, {"text": 2}], temporal_spacing=2.0)
    frame0 = pos[3:12]
    assert frame0[:, 0].tolist() == [3.0] * 9 and frame0[4].tolist() == [3.0, 3.0, 3.0]  # centre on (t, t, t)
    assert pos[12, 0] == 5.0 and pos[21].tolist() == [6.0] * 3  # next frame at t + δ; text one past the last time
    x = torch.randn(1, 2, 3, 16, dtype=torch.float64)
    v = posenc.build({"scheme": "videorope", "head_dim": 16})
    r = posenc.build({"scheme": "rope", "head_dim": 16})
    assert torch.equal(v(x, pos[:3]), r(x, pos[:3, 0]))


def test_videorope_cached_decoding_equals_the_full_pass():
    m = posenc.build({"scheme": "videorope", "head_dim": 16})
    pos = videorope_positions([{"text": 4}, {"video": [2, 2, 3]}, {"text": 3}], temporal_spacing=1.5)
    L = pos.shape[0]
    q, k, v = torch.randn(3, 1, 2, L, 16, dtype=torch.float64)
    full = posenc.attention(q, k, v, m, q_positions=pos, k_positions=pos, causal=True)
    cache = []
    for i in range(L):
        cache.append(m(k[:, :, i:i + 1], pos[i:i + 1], role="key"))  # each key rotated once, at its own step
        qi = m(q[:, :, i:i + 1], pos[i:i + 1], role="query")
        scores = qi @ torch.cat(cache, dim=2).transpose(-1, -2) / 4.0
        step = torch.softmax(scores, dim=-1) @ v[:, :, : i + 1]
        torch.testing.assert_close(step, full[:, :, i:i + 1], rtol=0, atol=1e-12)


def test_videorope_gradients():
    m = posenc.build({"scheme": "videorope", "head_dim": 8}).double()
    pos = videorope_positions([{"text": 2}, {"video": [2, 1, 2]}], temporal_spacing=1.5)
    x = torch.randn(1, 1, pos.shape[0], 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: m(t, pos), (x,))


def test_videorope_refuses_bad_sections_and_segments():
    with pytest.raises(ValueError, match=r"sections.*sections\[1\] == sections\[2\]"):
        posenc.build({"scheme": "videorope", "head_dim": 16, "sections": [2, 4, 2]})
    with pytest.raises(ValueError, match="rotary_dim/2 = 8"):
        posenc.build({"scheme": "videorope", "head_dim": 16, "sections": [2, 2, 2]})
    with pytest.raises(ValueError, match="xpos"):
        posenc.build({"scheme": "videorope", "head_dim": 16, "scaling": {"type": "xpos"}})
    with pytest.raises(ValueError, match=r"segments\[0\].*offset >= 2"):
        videorope_positions([{"image": [5, 5]}])
    with pytest.raises(ValueError, match="temporal_spacing"):
        videorope_positions([{"text": 2}, {"video": [2, 2, 2], "time_interval": 2.0}])
    with pytest.raises(ValueError, match="temporal_spacing"):
        videorope_positions([{"text": 2}], temporal_spacing=0)
