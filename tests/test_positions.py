"""The positions model (``posenc.positions``, ``posenc.reference.positions``): several axes, real
positions, grid positions, exact angles at any integer position; the schemes built on it
(sinusoidal with axes, axial RoPE, learned grids) against their references and the field's claims.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

import posenc
from posenc import positions as P
from posenc import reference as ref
from posenc import registry
from posenc.encodings import _base
from posenc.reference import positions as RP
from posenc.rotary import angles
from conftest import DTYPES, assert_close, small_module

LENGTH = 217


# -- the model ------------------------------------------------------------------------------------

def test_grid_positions_are_row_major():
    g = posenc.grid_positions((2, 3))
    assert g.dtype == torch.int64
    assert g.tolist() == [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
    v = posenc.grid_positions((2, 3, 4), offset=5)
    assert v.shape == (24, 3) and v[0].tolist() == [5, 5, 5] and v[-1].tolist() == [6, 7, 8]
    assert v[:, 0].tolist() == [5] * 12 + [6] * 12  # time is the outer axis
    assert np.array_equal(ref.grid_positions((4, 5)), posenc.grid_positions((4, 5)).numpy())


@pytest.mark.parametrize("bad, error, text", [
    ((), TypeError, "shape"), ("ab", TypeError, "shape"), ((2, 0), ValueError, "shape[1] must be >= 1"),
    ((2, 2.5), TypeError, "shape[1]"),
])
def test_grid_positions_refuse_bad_shapes(bad, error, text):
    with pytest.raises(error, match=__import__("re").escape(text)):
        posenc.grid_positions(bad)
    with pytest.raises(ValueError, match="offset must be >= 0"):
        posenc.grid_positions((2, 2), offset=-1)


def test_a_module_reads_its_axes_from_the_spec_never_from_the_tensor():
    pe = posenc.build({"scheme": "sinusoidal", "d_model": 24, "axes": 3})
    assert pe.axes == 3
    pos = torch.tensor([[0, 1, 2], [3, 4, 5], [6, 7, 8]])  # [L=3, A=3]: three tokens, not a batch
    assert pe(pos).shape == (3, 24)
    assert pe(pos[None].expand(2, 3, 3)).shape == (2, 3, 24)
    for bad in (torch.arange(3), pos[:, :2], pos[None, None]):
        with pytest.raises(ValueError, match=r"positions must have shape \[L, 3\] or \[B, L, 3\] \(axes=3\), got shape"):
            pe(bad)
    one = posenc.build({"scheme": "sinusoidal", "d_model": 24})
    assert one(pos).shape == (3, 3, 24)  # one axis: [B, L]


def test_real_schemes_are_the_reference_list_and_declared_by_the_classes():
    assert registry.real_schemes() == sorted(registry.real_schemes(), key=registry.schemes().index)
    assert set(registry.real_schemes()) == set(RP.REAL_SCHEMES)
    assert {"sinusoidal", "rope", "alibi", "kerple", "fire"} <= set(registry.real_schemes())
    assert not {"learned", "t5", "shaw", "transformer_xl"} & set(registry.real_schemes())


@pytest.mark.parametrize("name", registry.schemes())
def test_every_scheme_subclasses_the_base_of_its_kind(name):
    cls = registry.get(name).cls
    assert issubclass(cls, _base.KIND_BASES[cls.kind])
    if cls.kind == "relative":
        assert cls.value_term is None or callable(cls.value_term)


# -- real-valued positions ---------------------------------------------------------------------

REAL_CASES = {
    "sinusoidal": {},
    "rope": {},
    "rope_axial": {"scheme": "rope", "axes": 2},
    "rope_mixed": {},
    "alibi": {},
    "kerple": {},
    "fire": {},
}


def _real_module(case):
    overrides = dict(REAL_CASES[case])
    name = overrides.pop("scheme", case)
    return small_module(name, **overrides)


def _call(m, pos_q, pos_k=None):
    if m.kind == "additive":
        return m(pos_q)
    if m.kind == "rotary":
        x = torch.randn(2, 4, pos_q.shape[0], m.head_dim, generator=torch.Generator().manual_seed(1))
        return m(x, pos_q)
    return m(pos_q, pos_k if pos_k is not None else pos_q)


def _positions(m, length, offset=0):
    p = torch.arange(length) + offset
    return p if m.axes == 1 else torch.stack([p, 2 * p + 1], dim=-1)


@pytest.mark.parametrize("case", list(REAL_CASES))
def test_integer_valued_float_positions_give_exactly_the_integer_result(case):
    m = _real_module(case)
    pos = _positions(m, 37, offset=1000)
    for dtype in (torch.float64, torch.float32):
        assert torch.equal(_call(m, pos.to(dtype)), _call(m, pos)), f"{case} at {dtype}"


@pytest.mark.parametrize("case", list(REAL_CASES))
def test_real_positions_match_the_reference(case):
    m = _real_module(case)
    g = torch.Generator().manual_seed(2)
    pos = _positions(m, 41).double() * 0.37 + torch.rand(_positions(m, 41).shape, generator=g, dtype=torch.float64)
    args = (pos,) if m.kind == "additive" else (torch.randn(2, 4, 41, m.head_dim, generator=g), pos) \
        if m.kind == "rotary" else (pos, pos + 0.5)
    out = m(*args)
    expected = m.reference(*[a.numpy() if a.is_floating_point() else a for a in args])
    assert_close(out, expected, what=case)
    half = torch.tensor([0.0, 0.5, 1.0, 1.5], dtype=torch.float64)
    if m.kind == "bias":  # a real distance between two integers
        assert not torch.equal(m(half, half)[:, 1, 0], m(half, half)[:, 2, 0])


@pytest.mark.parametrize("name", ["learned", "t5", "shaw", "transformer_xl"])
def test_table_schemes_refuse_real_positions_naming_those_that_accept_them(name):
    m = small_module(name)
    pos = torch.arange(5).float()
    args = {"additive": (pos,), "bias": (pos, pos),
            "relative": (torch.randn(1, 4, 5, 8), torch.randn(1, 4, 5, 8), pos, pos)}[m.kind]
    with pytest.raises(TypeError, match=rf"positions must have an integer dtype .*scheme '{name}' takes integer "
                                        r"positions only, got torch.float32; real-valued positions are accepted by: "
                                        r"alibi, (dinov3, )?fire, (hirope, )?kerple, (liere, )?(mrope, )?rope.*sinusoidal"):
        m(*args)


def _real_attention(backend, causal=True):
    pe = small_module("alibi")
    g = torch.Generator().manual_seed(6)
    q, k, v = (torch.randn(1, 4, 9, 8, generator=g) for _ in range(3))
    p = torch.arange(9, dtype=torch.float64) * 0.5  # half steps: truncating them would change the biases
    with torch.no_grad():
        out = posenc.attention(q, k, v, pe, q_positions=p, k_positions=p, causal=causal, backend=backend)
    expected = ref.attention(*(t.double().numpy() for t in (q, k, v)), bias=pe.reference(p.numpy(), p.numpy()),
                             causal=causal)
    assert_close(out, expected, magnitude=16.0, what=backend)


@pytest.mark.parametrize("backend", ["materialize", "chunked"])
def test_attention_keeps_real_positions(backend):
    _real_attention(backend)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
def test_flex_attention_keeps_real_positions(monkeypatch):
    """The positions the flex path hands to score_mod. FlexAttention runs eagerly here (compiling it
    takes 10-60 s on 2 cores; test_attention.py compiles it for integer positions)."""
    from torch.nn.attention import flex_attention as fa

    import posenc.attn

    monkeypatch.setattr(posenc.attn, "_compiled_flex", lambda key: posenc.attn._flex_call)  # eager flex_attention
    _real_attention("flex", causal=False)  # no block mask to build


def test_real_positions_must_be_finite():
    m = small_module("alibi")
    with pytest.raises(ValueError, match="q_positions must be finite, got nan"):
        m(torch.tensor([0.0, float("nan")]), torch.arange(2.0))


# -- exact angles -------------------------------------------------------------------------------

def _mp_angles(positions, theta):
    import mpmath

    mpmath.mp.dps = max(mpmath.mp.dps, 40)
    out = np.empty((len(positions), len(theta)))
    for r, p in enumerate(positions):
        for c, t in enumerate(theta):
            a = mpmath.mpf(int(p)) * (t if isinstance(t, mpmath.mpf) else mpmath.mpf(float(t)))  # a float64 θ: as exact
            out[r, c] = float(a - 2 * mpmath.pi * mpmath.floor(a / (2 * mpmath.pi) + mpmath.mpf(0.5)))
    return out


TWO40 = 1 << 40
HUGE = [0, 1, (1 << 21) - 1, 1 << 21, (1 << 24) + 1, (1 << 33) + 12345, TWO40 - 1, TWO40, TWO40 + 3,
        (1 << 50) + 7, (1 << 62) + 5]


def test_angles_are_exact_to_2_40_and_beyond_against_40_digits():
    theta = ref.rope_inv_freq(64, 500000.0)
    truth = _mp_angles(HUGE, theta)
    fast = angles(torch.tensor(HUGE), torch.from_numpy(theta)).numpy()
    spec = ref.angles(np.array(HUGE), theta)
    # wrap-around at ±π: compare on the circle
    for got in (fast, spec):
        err = np.abs(np.angle(np.exp(1j * (got - truth))))
        assert err.max() < 1e-8, err.max()
    plain = (np.array(HUGE, dtype=np.float64)[:, None] * theta)  # what the old float64 product gave
    assert np.abs(np.angle(np.exp(1j * (plain - truth)))).max() > 1e-5  # the test can fail


def test_rope_cos_sin_within_1e6_at_2_40_in_float32():
    import mpmath

    rope = posenc.build({"scheme": "rope", "head_dim": 64})
    pos = [TWO40 - 1, TWO40, TWO40 + 12345, (1 << 39) + 3]
    cos, sin = rope.cos_sin(torch.tensor(pos))
    mpmath.mp.dps = 50
    theta = [mpmath.mpf(10000) ** (-mpmath.mpf(2 * i) / 64) for i in range(32)]  # from base and i, not posenc's θ
    truth = _mp_angles(pos, theta)
    assert np.abs(cos.numpy() - np.cos(truth)).max() <= 1e-6
    assert np.abs(sin.numpy() - np.sin(truth)).max() <= 1e-6


def test_angles_of_real_positions_split_exactly_and_have_the_right_gradient():
    theta = torch.tensor([1.0, 0.01, 1e-4], dtype=torch.float64, requires_grad=True)
    pos = torch.tensor([0.5, 2.0 ** 30 + 0.25, 2.0 ** 45 + 2.0])
    a = angles(pos.double(), theta)
    truth = np.remainder(np.array([[float(p) * float(t) for t in theta.detach()] for p in pos.double()]) + np.pi,
                         2 * np.pi) - np.pi
    assert abs(a[0] - torch.from_numpy(truth[0])).max() < 1e-15
    a.sum().backward()
    assert torch.allclose(theta.grad, pos.double().sum().expand(3), rtol=1e-12)  # ∂(p·θ)/∂θ = p


# -- sinusoidal with axes -----------------------------------------------------------------------

def _mae_2d(embed_dim, size):
    """MAE's get_2d_sincos_pos_embed (He et al. 2022, models' util/pos_embed.py), written out."""
    def one(d, pos):
        omega = 1.0 / 10000 ** (np.arange(d // 2, dtype=np.float64) / (d / 2.0))
        out = np.einsum("m,d->md", pos.reshape(-1), omega)
        return np.concatenate([np.sin(out), np.cos(out)], axis=1)

    grid = np.meshgrid(np.arange(size, dtype=np.float64), np.arange(size, dtype=np.float64))  # w first
    grid = np.stack(grid, axis=0).reshape(2, 1, size, size)
    return np.concatenate([one(embed_dim // 2, grid[0]), one(embed_dim // 2, grid[1])], axis=1)


def test_sinusoidal_axes_is_mae_2d_sincos_up_to_the_documented_order():
    d, s = 32, 5
    pe = posenc.build({"scheme": "sinusoidal", "d_model": d, "axes": 2}).double()
    ours = pe(posenc.grid_positions((s, s))[:, [1, 0]]).numpy()  # (column, row)
    perm = np.concatenate([np.concatenate([np.arange(a * d // 2, (a + 1) * d // 2, 2),
                                           np.arange(a * d // 2 + 1, (a + 1) * d // 2, 2)]) for a in range(2)])
    np.testing.assert_allclose(ours[:, perm], _mae_2d(d, s), atol=1e-12)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("axes", [2, 3])
def test_sinusoidal_axes_match_the_reference_and_factorize(axes, dtype):
    pe = posenc.build({"scheme": "sinusoidal", "d_model": 48, "axes": axes}).to(dtype)
    pos = torch.randint(0, 5000, (2, LENGTH, axes))
    out = pe(pos)
    assert out.dtype == dtype and out.shape == (2, LENGTH, 48)
    assert_close(out, pe.reference(pos.numpy()), what=f"axes={axes}")
    one = posenc.build({"scheme": "sinusoidal", "d_model": 48 // axes}).double()
    pe64 = pe.double()
    for a in range(axes):  # each block is the 1D encoding of its own axis
        block = pe64(pos)[..., a * 48 // axes:(a + 1) * 48 // axes]
        assert torch.equal(block, one(pos[..., a]))


def test_sinusoidal_axes_must_divide_d_model():
    with pytest.raises(ValueError, match=r"d_model must be divisible by 2·axes = 6 .*d_model=64 with axes=3"):
        posenc.build({"scheme": "sinusoidal", "d_model": 64, "axes": 3})
    with pytest.raises(ValueError, match="axes must be >= 1, got 0"):
        posenc.build({"scheme": "sinusoidal", "d_model": 64, "axes": 0})


# -- axial RoPE ---------------------------------------------------------------------------------

AXIAL = [({"axes": 2}, "half"), ({"axes": 2}, "interleaved"), ({"axes": 3, "axes_dims": [8, 12, 12]}, "half"),
         ({"axes": 2, "axes_dims": [8, 16], "head_dim": 40}, "interleaved")]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("spec, layout", AXIAL, ids=lambda v: str(v))
def test_axial_rope_matches_its_reference(spec, layout, dtype):
    spec = {"scheme": "rope", "head_dim": 32, "layout": layout, **spec}
    rope = posenc.build(spec).to(dtype)
    a = rope.axes
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 3, LENGTH, rope.head_dim, generator=g).to(dtype)
    for pos in (torch.randint(0, 3000, (LENGTH, a), generator=g), torch.randint(0, 3000, (2, LENGTH, a), generator=g)):
        out = rope(x, pos)
        assert out.dtype == dtype and out.shape == x.shape
        assert_close(out, rope.reference(x.double().numpy(), pos.numpy()), dtype=dtype,
                     magnitude=float(x.abs().max()), what=f"{spec} {dtype}")


@pytest.mark.parametrize("spec", [{"axes": 2}, {"axes": 3}, {"axes": 2, "rotary_dim": 16},
                                  {"axes": 3, "axes_dims": [8, 12, 4]}], ids=str)
def test_axial_half_rope_into_out_in_place_and_its_gradient_equal_the_reference(spec):
    """Equal axes over the whole head rotate as one view ``[..., A, d]``; unequal or partial axes slice by
    slice: both into ``out``, in place, and with autograd's gradient (gradcheck in float64)."""
    rope = posenc.build({"scheme": "rope", "head_dim": 24, **spec}).double()
    g = torch.Generator().manual_seed(5)
    pos = torch.randint(0, 40, (9, rope.axes), generator=g)
    x = torch.randn(2, 3, 9, 24, generator=g, dtype=torch.float64)
    want = torch.from_numpy(rope.reference(x.numpy(), pos.numpy()))
    out = torch.empty_like(x)
    assert rope(x, pos, out=out) is out
    torch.testing.assert_close(out, want, rtol=0, atol=1e-12)
    inplace = x.clone()
    assert rope(inplace, pos, out=inplace) is inplace
    torch.testing.assert_close(inplace, want, rtol=0, atol=1e-12)
    xg = x[:1, :1].clone().requires_grad_(True)
    assert torch.autograd.gradcheck(lambda t: rope(t, pos), (xg,))


def test_axial_rope_is_a_1d_rope_per_slice():
    rope = posenc.build({"scheme": "rope", "head_dim": 24, "axes": 2, "axes_dims": [8, 16]}).double()
    pos = posenc.grid_positions((4, 6), offset=3)
    x = torch.randn(1, 2, 24, 24, dtype=torch.float64)
    out = rope(x, pos)
    for (start, d, a) in ((0, 8, 0), (8, 16, 1)):
        one = posenc.build({"scheme": "rope", "head_dim": d}).double()
        torch.testing.assert_close(out[..., start:start + d], one(x[..., start:start + d], pos[:, a]), rtol=0, atol=1e-12)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_axial_rope_scores_depend_only_on_per_axis_differences(layout):
    rope = posenc.build({"scheme": "rope", "head_dim": 36, "axes": 3, "layout": layout}).double()
    g = torch.Generator().manual_seed(4)
    q, k = torch.randn(1, 2, 30, 36, generator=g, dtype=torch.float64), torch.randn(1, 2, 30, 36, generator=g,
                                                                                      dtype=torch.float64)
    pos = torch.randint(0, 50, (30, 3), generator=g)
    scores = rope(q, pos) @ rope(k, pos).transpose(-1, -2)
    shift = torch.tensor([7, 0, 1000])  # a different shift per axis
    moved = rope(q, pos + shift) @ rope(k, pos + shift).transpose(-1, -2)
    torch.testing.assert_close(moved, scores, rtol=0, atol=1e-10)
    one_axis = pos.clone()
    one_axis[:, 1] = torch.randint(0, 50, (30,), generator=g)  # change one axis's differences only
    other = rope(q, one_axis) @ rope(k, one_axis).transpose(-1, -2)
    assert (other - scores).abs().max() > 1e-3


def test_axial_rope_in_attention_and_its_table_path():
    rope = posenc.build({"scheme": "rope", "head_dim": 16, "axes": 2})
    pos = posenc.grid_positions((3, 5))
    q, k, v = (torch.randn(1, 2, 15, 16) for _ in range(3))
    out = posenc.attention(q, k, v, rope, q_positions=pos, k_positions=pos)
    expected = ref.attention(rope.reference(q.double().numpy(), pos.numpy()),
                             rope.reference(k.double().numpy(), pos.numpy()), v.double().numpy())
    assert_close(out, expected, magnitude=10.0, what="attention")
    diagonal = torch.arange(15).unsqueeze(-1).expand(15, 2)  # default: the same position on every axis
    torch.testing.assert_close(posenc.attention(q, k, v, rope),
                               posenc.attention(q, k, v, rope, q_positions=diagonal, k_positions=diagonal))
    # the table (integer positions) and the direct path (real positions) agree
    c1, s1 = rope.cos_sin(pos)
    c2, s2 = rope.cos_sin(pos.double())
    assert torch.equal(c1, c2) and torch.equal(s1, s2) and c1.shape == (15, 8)


@pytest.mark.parametrize("spec, error, text", [
    ({"axes": 3}, ValueError, "rotary_dim must be divisible by 2·axes = 6"),
    ({"axes": 2, "axes_dims": [8]}, ValueError, "axes_dims must have one size per axis (axes=2), got 1"),
    ({"axes": 2, "axes_dims": [8, 7]}, ValueError, "axes_dims[1] must be even"),
    ({"axes": 2, "axes_dims": [16, 32]}, ValueError, "axes_dims must sum to at most head_dim=32, got [16, 32]"),
    ({"axes": 2, "axes_dims": [8, 8], "rotary_dim": 32}, ValueError, "axes_dims must sum to rotary_dim=32"),
    ({"axes": 2, "axes_dims": "8,8"}, TypeError, "axes_dims must be a list"),
    ({"axes_dims": [16, 16]}, ValueError, "axes_dims is for axial rope (axes >= 2)"),
    ({"axes": 2, "scaling": {"type": "linear", "factor": 2}}, ValueError, "axial rope (axes=2) takes scaling=None"),
])
def test_axial_rope_refuses_bad_specs(spec, error, text):
    with pytest.raises(error, match=__import__("re").escape(text)):
        posenc.build({"scheme": "rope", "head_dim": 32, **spec})


# -- learned grids ------------------------------------------------------------------------------

def test_learned_grid_rows_are_row_major_and_match_the_reference():
    pe = posenc.build({"scheme": "learned", "d_model": 8, "grid": [3, 4]})
    assert pe.axes == 2 and pe.weight.shape == (12, 8) and pe.spec["grid"] == [3, 4]
    pos = posenc.grid_positions((3, 4))
    torch.testing.assert_close(pe(pos), pe.weight, rtol=0, atol=0)
    batch = torch.stack([pos, pos.flip(0)])
    assert_close(pe(batch), pe.reference(batch.numpy()), what="learned grid")
    with pytest.raises(ValueError, match=r"positions\[..., 1\] must be <= 3 \(grid=\[3, 4\]"):
        pe(torch.tensor([[0, 4]]))
    with pytest.raises(ValueError, match=r"shape \[L, 2\] or \[B, L, 2\] \(axes=2\)"):
        pe(torch.arange(3))


@pytest.mark.parametrize("spec, error, text", [
    ({"d_model": 8}, ValueError, "needs 'max_positions' (a table of rows) or 'grid'"),
    ({"d_model": 8, "grid": [3, 0]}, ValueError, "grid[1] must be >= 1"),
    ({"d_model": 8, "grid": "3x4"}, TypeError, "grid must be a list of sizes"),
    ({"d_model": 8, "grid": [3, 4], "max_positions": 10}, ValueError, "max_positions must equal the grid's size 12"),
])
def test_learned_grid_refuses_bad_specs(spec, error, text):
    with pytest.raises(error, match=__import__("re").escape(text)):
        posenc.build({"scheme": "learned", **spec})


@pytest.mark.parametrize("old, new, extra", [((4, 4), (6, 5), 1), ((3, 5), (3, 5), 0), ((5, 5), (2, 3), 2)])
def test_resize_grid_equals_transformers_vit_interpolate_pos_encoding(old, new, extra):
    vit = pytest.importorskip("transformers.models.vit.modeling_vit")
    from posenc.interop import resize_grid

    g = torch.Generator().manual_seed(5)
    d = 12
    weight = torch.randn(1, extra + old[0] * old[1], d, generator=g)
    got = resize_grid(weight, list(old), list(new), extra_tokens=extra)
    assert got.shape == (1, extra + new[0] * new[1], d)
    assert torch.equal(got[:, :extra], weight[:, :extra])
    if old[0] == old[1] and extra == 1:  # transformers' own method (square grids, one class token)
        config = vit.ViTConfig(hidden_size=d, image_size=4 * old[0], patch_size=4, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=8)
        emb = vit.ViTEmbeddings(config)
        with torch.no_grad():
            emb.position_embeddings.copy_(weight)
        theirs = emb.interpolate_pos_encoding(torch.zeros(1, 1 + new[0] * new[1], d), 4 * new[0], 4 * new[1])
        torch.testing.assert_close(got, theirs, rtol=0, atol=0)
    else:  # the same operation written out
        image = weight[:, extra:].reshape(1, *old, d).permute(0, 3, 1, 2)
        image = torch.nn.functional.interpolate(image, size=new, mode="bicubic", align_corners=False)
        torch.testing.assert_close(got[:, extra:], image.permute(0, 2, 3, 1).reshape(1, -1, d), rtol=0, atol=0)


def _timm_resample_abs_pos_embed(posemb, new_size, old_size=None, num_prefix_tokens=1, interpolation="bicubic",
                                 antialias=True, verbose=False):
    """timm's ``resample_abs_pos_embed`` (timm/layers/pos_embed.py, timm 0.9 to 1.0.x; published source,
    copied line for line but for the logging; timm is not a test dependency)."""
    import math

    import torch.nn.functional as F

    num_pos_tokens = posemb.shape[1]
    num_new_tokens = new_size[0] * new_size[1] + num_prefix_tokens
    if num_new_tokens == num_pos_tokens and new_size[0] == new_size[1]:
        return posemb
    if old_size is None:
        hw = int(math.sqrt(num_pos_tokens - num_prefix_tokens))
        old_size = hw, hw
    if num_prefix_tokens:
        posemb_prefix, posemb = posemb[:, :num_prefix_tokens], posemb[:, num_prefix_tokens:]
    else:
        posemb_prefix, posemb = None, posemb
    embed_dim = posemb.shape[-1]
    orig_dtype = posemb.dtype
    posemb = posemb.float()  # interpolate needs float32
    posemb = posemb.reshape(1, old_size[0], old_size[1], -1).permute(0, 3, 1, 2)
    posemb = F.interpolate(posemb, size=new_size, mode=interpolation, antialias=antialias)
    posemb = posemb.permute(0, 2, 3, 1).reshape(1, -1, embed_dim)
    posemb = posemb.to(orig_dtype)
    if posemb_prefix is not None:
        posemb = torch.cat([posemb_prefix, posemb], dim=1)
    return posemb


@pytest.mark.parametrize("antialias", [True, False])
def test_resize_grid_equals_timm_resample_abs_pos_embed_both_ways(antialias):
    """Random grids up and down, prefix tokens and modes: ``resize_grid(antialias=...)`` is timm's
    resize exactly; the default (no antialias) differs from timm's default (antialias) for bicubic
    and for a shrinking bilinear resize."""
    from posenc.interop import resize_grid

    rng = np.random.default_rng(11 + antialias)
    differ = 0
    for _ in range(12):
        old = [int(n) for n in rng.integers(2, 12, size=2)]
        new = [int(n) for n in rng.integers(2, 16, size=2)]
        if new == old:
            continue
        extra, d = int(rng.integers(0, 3)), int(rng.integers(1, 9))
        mode = str(rng.choice(["bicubic", "bilinear"]))
        weight = torch.from_numpy(rng.standard_normal((1, extra + old[0] * old[1], d))).float()
        theirs = _timm_resample_abs_pos_embed(weight, new, old, num_prefix_tokens=extra, interpolation=mode,
                                              antialias=antialias)
        got = resize_grid(weight, old, new, extra_tokens=extra, mode=mode, antialias=antialias)
        torch.testing.assert_close(got, theirs, rtol=0, atol=0)
        default = resize_grid(weight, old, new, extra_tokens=extra, mode=mode)
        if antialias and mode == "bilinear" and new[0] >= old[0] and new[1] >= old[1]:
            torch.testing.assert_close(default, theirs)  # bilinear upsampling: the same up to rounding
        elif antialias:  # PyTorch's antialiased bicubic is PIL's kernel (a = -0.5), the plain one a = -0.75
            differ += 1
            assert (default - theirs).abs().max() > 1e-3
    assert differ or not antialias
    with pytest.raises(ValueError, match="antialias=True applies to mode='bilinear' or 'bicubic'"):
        resize_grid(torch.zeros(4, 2), [2, 2], [1, 1], mode="nearest", antialias=True)
    with pytest.raises(TypeError, match="antialias must be True or False, got 1"):
        resize_grid(torch.zeros(4, 2), [2, 2], [1, 1], antialias=1)


def test_learned_grid_resized_copy():
    pe = posenc.build({"scheme": "learned", "d_model": 6, "grid": [4, 4]})
    big = pe.resized([8, 6])
    assert big.grid == [8, 6] and big.weight.shape == (48, 6) and pe.weight.shape == (16, 6)
    from posenc.interop import resize_grid

    assert torch.equal(big.weight, resize_grid(pe.weight.detach(), [4, 4], [8, 6]))
    assert big(posenc.grid_positions((8, 6))).shape == (48, 6)
    with pytest.raises(ValueError, match="weight has 17 rows but extra_tokens=0 \\+ old_grid 4×4 needs 16"):
        resize_grid(torch.zeros(17, 6), [4, 4], [2, 2])
    with pytest.raises(ValueError, match="resized\\(\\) needs a grid table"):
        small_module("learned").resized([2, 2])


def test_a_learned_grid_needs_two_axes():
    """``grid=[N]`` would read ``[L]`` positions as one grid point: refused, pointing to max_positions."""
    with pytest.raises(ValueError, match=r"grid must have at least two sizes .* max_positions=N"):
        posenc.build({"scheme": "learned", "d_model": 4, "grid": [5]})
