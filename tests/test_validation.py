"""Bad input raises ValueError or TypeError naming the parameter, the value given and what is
allowed; never a warning, a bare assert, or an IndexError/RuntimeError from deep inside."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import posenc
from posenc import registry
from conftest import SMALL, module_args, on_axes, small_module, small_spec

ALL = registry.schemes()
POSITIONED = [n for n in ALL if registry.get(n).kind != "content"]  # content schemes take no positions


def _raises(call, *, names=(), values=(), allowed=(), error=(ValueError, TypeError)):
    """``call()`` raises ``error`` whose message contains every name, value and allowed value."""
    with pytest.raises(error) as e:
        call()
    msg = str(e.value)
    for part in (*names, *map(str, values), *allowed):
        assert str(part) in msg, f"{part!r} not in message: {msg}"
    return msg


# -- specs --------------------------------------------------------------------------------------

def test_unknown_scheme_lists_the_known_ones():
    _raises(lambda: posenc.build("rotary_typo"), error=ValueError, values=["'rotary_typo'"], allowed=ALL)
    _raises(lambda: posenc.build({"scheme": "nop"}), error=ValueError, values=["'nop'"], allowed=ALL)


def test_spec_of_the_wrong_shape():
    _raises(lambda: posenc.build(42), error=TypeError, names=["spec"], values=["42"])
    _raises(lambda: posenc.build({"head_dim": 8}), error=ValueError, names=["'scheme'"], allowed=ALL)
    _raises(lambda: posenc.build({"scheme": 3}), error=TypeError, names=["scheme"], values=["3"])
    _raises(lambda: registry.schemes("rotory"), error=ValueError, names=["kind"], values=["'rotory'"],
            allowed=posenc.KINDS)


@pytest.mark.parametrize("name", ALL)
def test_unknown_key_lists_the_allowed_keys(name):
    _raises(lambda: posenc.build(small_spec(name, dims=4)), error=ValueError, names=["'dims'"],
            allowed=registry.get(name).params)


def test_rope_parameters():
    rope = {"scheme": "rope", "head_dim": 8}
    _raises(lambda: posenc.build({**rope, "head_dim": 7}), error=ValueError, names=["head_dim"], values=[7],
            allowed=["even"])
    _raises(lambda: posenc.build({**rope, "rotary_dim": 16}), error=ValueError, names=["rotary_dim", "head_dim"],
            values=[16, 8])
    _raises(lambda: posenc.build({**rope, "rotary_dim": 6, "head_dim": 8, "layout": "neox"}), error=ValueError,
            names=["layout"], values=["'neox'"], allowed=["'half'", "'interleaved'"])
    _raises(lambda: posenc.build({**rope, "rotary_dim": 5}), error=ValueError, names=["rotary_dim"], values=[5])
    _raises(lambda: posenc.build({**rope, "head_dim": "8"}), error=TypeError, names=["head_dim"], values=["'8'"])
    _raises(lambda: posenc.build({**rope, "head_dim": True}), error=TypeError, names=["head_dim"], values=["True"])


@pytest.mark.parametrize("name", [n for n in ALL if "base" in registry.get(n).params])
@pytest.mark.parametrize("base", [0, -10.0, float("inf"), float("nan")])
def test_base_must_be_positive_and_finite(name, base):
    _raises(lambda: posenc.build(small_spec(name, base=base)), error=ValueError, names=["base"], values=[base])


@pytest.mark.parametrize("name", [n for n in ALL if "num_heads" in registry.get(n).params])
@pytest.mark.parametrize("heads", [0, -3])
def test_num_heads_at_least_one(name, heads):
    _raises(lambda: posenc.build(small_spec(name, num_heads=heads)), error=ValueError, names=["num_heads"],
            values=[heads], allowed=[">= 1"])
    _raises(lambda: posenc.build(small_spec(name, num_heads=2.0)), error=TypeError, names=["num_heads"],
            values=[2.0])


def test_other_basic_parameters():
    _raises(lambda: posenc.build({"scheme": "sinusoidal", "d_model": 9}), error=ValueError, names=["d_model"],
            values=[9], allowed=["even"])
    _raises(lambda: posenc.build({"scheme": "learned", "d_model": 4, "max_positions": 0}), error=ValueError,
            names=["max_positions"], values=[0], allowed=[">= 1"])
    _raises(lambda: posenc.build({"scheme": "learned", "d_model": 4, "max_positions": 8, "init_std": -1}),
            error=ValueError, names=["init_std"], values=[-1])
    _raises(lambda: posenc.build({"scheme": "t5", "num_heads": 2, "num_buckets": 1}), error=ValueError,
            names=["num_buckets"], values=[1])
    _raises(lambda: posenc.build({"scheme": "t5", "num_heads": 2, "max_distance": 2}), error=ValueError,
            names=["max_distance"], values=[2])
    _raises(lambda: posenc.build({"scheme": "t5", "num_heads": 2, "bidirectional": "yes"}), error=TypeError,
            names=["bidirectional"], values=["'yes'"])


BAD_VALUES = st.sampled_from([-1, 0, 1, 3, 7, 2.5, -0.5, float("nan"), float("inf"), "8", None, True, [1], {},
                              {"type": "nope"}, 33])


@given(data=st.data())
def test_any_bad_spec_value_raises_value_or_type_error_naming_the_key(data):
    name = data.draw(st.sampled_from(ALL))
    params = list(registry.get(name).params)
    if not params:
        return
    key = data.draw(st.sampled_from(params))
    value = data.draw(BAD_VALUES)
    try:
        m = posenc.build(small_spec(name, **{key: value}))
    except (ValueError, TypeError) as e:
        assert re.search(rf"\b{re.escape(key)}\b", str(e)), f"{key!r} not named in: {e}"
        return
    # Accepted: the module must then work (a value it cannot use must have been refused).
    # within the module's own bound on length (learned: max_positions; path: max_length)
    args = module_args(m, length=min(5, getattr(m, "max_positions", 5), getattr(m, "max_length", 5)))
    out = m(*args)
    assert torch.isfinite(out).all() or name == "nope", f"{name} with {key}={value!r} gives non-finite output"


# -- calls --------------------------------------------------------------------------------------

def _arg_names(m) -> list[str]:
    params = inspect.signature(m.forward).parameters.values()
    return [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _position_slots(m, args) -> list[int]:
    return [i for i, a in enumerate(args) if not a.is_floating_point()]


@pytest.mark.parametrize("name", [n for n in POSITIONED if not getattr(registry.get(n).cls, "signed_positions", False)])
def test_negative_positions(name):
    m = small_module(name)
    args = module_args(m, length=6)
    names = _arg_names(m)
    for i in _position_slots(m, args):
        bad = list(args)
        bad[i] = args[i] - 3
        _raises(lambda: m(*bad), error=ValueError, names=[names[i]], values=[-3], allowed=["non-negative"])


@pytest.mark.parametrize("name", POSITIONED)
def test_positions_of_the_wrong_type_or_rank(name):
    m = small_module(name)
    args = module_args(m, length=6)
    names = _arg_names(m)
    for i in _position_slots(m, args):
        # real positions are the right type for the schemes that are functions of position
        cases = [(args[i].to(torch.complex64), TypeError, "torch.complex64") if m.real_positions
                 else (args[i].float(), TypeError, "torch.float32"),
                 (args[i].tolist(), TypeError, "list"),
                 (args[i].reshape(1, 1, *args[i].shape), ValueError, str([1, 1, *args[i].shape]))]
        if m.kind in ("none", "rotary", "relative"):  # a batch of 3 against tensors of batch 2
            cases.append((args[i][None].expand(3, *args[i].shape), ValueError, "3"))
        for bad_value, error, value in cases:
            bad = list(args)
            bad[i] = bad_value
            _raises(lambda: m(*bad), error=error, names=[names[i]], values=[value])


@pytest.mark.parametrize("name", [n for n in ALL if registry.get(n).kind in ("none", "rotary", "relative")])
def test_tensors_of_the_wrong_rank_or_last_dimension(name):
    m = small_module(name)
    args = module_args(m, length=6)
    names = _arg_names(m)
    for i, a in enumerate(args):
        if not a.is_floating_point():
            continue
        for bad_value, error, value in [(a[0], ValueError, list(a[0].shape)),
                                        (a.long(), TypeError, "torch.int64"),
                                        ("tensor", TypeError, "str")]:
            bad = list(args)
            bad[i] = bad_value
            _raises(lambda: m(*bad), error=error, names=[names[i]], values=[value])
        if m.kind != "none":
            bad = list(args)
            bad[i] = a[..., :-2]
            _raises(lambda: m(*bad), error=ValueError, names=[names[i]], values=[a.shape[-1] - 2])


@pytest.mark.parametrize("name", POSITIONED)
def test_positions_length_must_match_the_tensors(name):
    m = small_module(name)
    if m.kind in ("additive", "bias"):
        return  # positions alone: any length is valid
    args = module_args(m, length=6)
    for i in _position_slots(m, args):
        bad = list(args)
        bad[i] = args[i][:-1]
        _raises(lambda: m(*bad), error=ValueError, names=[_arg_names(m)[i]], values=[5, 6])


@pytest.mark.parametrize("name", [n for n in ALL if registry.get(n).kind == "bias"])
def test_bias_positions_batches_must_agree(name):
    m = small_module(name)
    q = on_axes(m, torch.arange(4).expand(2, 4))  # (2, 4) or (2, 4, A)
    k = on_axes(m, torch.arange(5).expand(3, 5))
    _raises(lambda: m(q, k), error=ValueError, names=["q_positions", "k_positions"], values=[2, 3])


def test_learned_positions_past_the_table_state_the_limit():
    m = posenc.build({"scheme": "learned", "d_model": 4, "max_positions": 100})
    m(torch.arange(100))
    _raises(lambda: m(torch.tensor([3, 100, 5])), error=ValueError, names=["positions", "max_positions=100"],
            values=[100, 99])
    _raises(lambda: m(torch.tensor([[0, 1], [7, 250]])), error=ValueError, values=[250])


# -- attention ----------------------------------------------------------------------------------

def _qkv(lq=5, lk=5, h=4, d=8):
    return torch.randn(2, h, lq, d), torch.randn(2, h, lk, d), torch.randn(2, h, lk, d)


def test_attention_refuses_an_additive_encoding_and_says_where_it_goes():
    for name in [n for n in ALL if registry.get(n).kind == "additive"]:
        msg = _raises(lambda: posenc.attention(*_qkv(), small_module(name)), error=ValueError, names=[name])
        assert "embedding" in msg and "pe(positions)" in msg


def test_attention_bad_tensors():
    q, k, v = _qkv()
    _raises(lambda: posenc.attention(q[0], k, v), error=ValueError, names=["q"], values=[[4, 5, 8]])
    _raises(lambda: posenc.attention(q, k[..., :6], v), error=ValueError, names=["k"], values=[8, 6])
    _raises(lambda: posenc.attention(q, k[:, :3], v[:, :3]), error=ValueError, values=[[2, 3, 5, 8]])
    _raises(lambda: posenc.attention(q, k, v[:, :, :3]), error=ValueError, values=[[2, 4, 3, 8]])
    _raises(lambda: posenc.attention(q, k, v.long()), error=TypeError, names=["v"], values=["torch.int64"])
    _raises(lambda: posenc.attention(q, k, v, causal=1), error=TypeError, names=["causal"], values=[1])
    _raises(lambda: posenc.attention(q, k, v, backend="cuda"), error=ValueError, names=["backend"],
            values=["'cuda'"], allowed=["'materialize'", "'chunked'", "'flex'"])
    _raises(lambda: posenc.attention(q, k, v, object()), error=TypeError, names=["pe"], values=["object"])


def test_attention_bad_positions():
    q, k, v = _qkv(lq=3, lk=5)
    alibi = small_module("alibi")
    _raises(lambda: posenc.attention(q, k, v, alibi, q_positions=torch.arange(5)), error=ValueError,
            names=["q_positions"], values=[5, 3])
    _raises(lambda: posenc.attention(q, k, v, alibi, k_positions=torch.arange(5) - 1), error=ValueError,
            names=["k_positions"], values=[-1])
    _raises(lambda: posenc.attention(q, k, v, alibi, k_positions=torch.arange(5).expand(3, 5)), error=ValueError,
            names=["k_positions"], values=[3, 2])
    _raises(lambda: posenc.attention(q, k, v, alibi, q_positions=torch.ones(3, dtype=torch.complex64)),
            error=TypeError, names=["q_positions"])


def test_attention_heads_must_match_the_encoding():
    for name in [n for n in ALL if registry.get(n).kind in ("bias", "relative") and "num_heads" in
                 registry.get(n).params]:
        _raises(lambda: posenc.attention(*_qkv(h=3), small_module(name)), error=ValueError, names=["num_heads"],
                values=[3, SMALL["num_heads"]])


def test_flex_with_gradients_on_cpu_is_refused():
    q, k, v = _qkv()
    msg = _raises(lambda: posenc.attention(q.requires_grad_(), k, v, small_module("alibi"), backend="flex"),
                  error=ValueError, names=["backend", "'flex'"])
    assert "chunked" in msg and "no_grad" in msg
    # A learned bias table needs gradients too, even when q, k, v do not.
    _raises(lambda: posenc.attention(*_qkv(), small_module("t5"), backend="flex"), error=ValueError,
            names=["'flex'"])


def test_flex_needs_an_elementwise_bias():
    for name in [n for n in ALL if registry.get(n).kind == "relative"]:
        with torch.no_grad():
            _raises(lambda: posenc.attention(*_qkv(), small_module(name), backend="flex"), error=ValueError,
                    names=["'flex'", name])


def test_attention_mixed_dtypes_and_a_bad_scale_name_the_parameter():
    q, k, v = _qkv()
    _raises(lambda: posenc.attention(q, k.double(), v), error=TypeError, names=["dtype"],
            values=["torch.float64", "torch.float32"])
    _raises(lambda: posenc.attention(q, k, v, scale="a"), error=TypeError, names=["scale"])
    _raises(lambda: posenc.attention(q, k, v, scale=float("nan")), error=ValueError, names=["scale"])


@pytest.mark.parametrize("name", [n for n in ALL if registry.get(n).kind == "relative"])
def test_relative_q_and_k_must_share_batch_and_heads(name):
    m = small_module(name)
    h, d = SMALL["num_heads"], SMALL["head_dim"]
    p = torch.arange(5)
    _raises(lambda: m(torch.randn(2, h, 5, d), torch.randn(3, h, 5, d), p, p), error=ValueError,
            names=["q", "k"], values=[[2, h, 5, d], [3, h, 5, d]])
    _raises(lambda: m(torch.randn(2, h, 5, d), torch.randn(2, h + 1, 5, d), p, p), error=ValueError,
            names=["q", "k"])


def test_apply_rotary_bad_cos_sin():
    x = torch.randn(1, 2, 5, 8)
    cos = torch.ones(5, 4)
    _raises(lambda: posenc.apply_rotary(x, torch.ones(5, 5), torch.ones(5, 5)), error=ValueError, names=["cos"])
    _raises(lambda: posenc.apply_rotary(x, cos, torch.ones(5, 3)), error=ValueError, names=["sin"])
    _raises(lambda: posenc.apply_rotary(x, cos, cos.long()), error=TypeError, names=["sin"])
    _raises(lambda: posenc.apply_rotary(x, cos, cos, layout="neox"), error=ValueError, names=["layout"])


def test_apply_rotary_cos_sin_of_the_wrong_length_or_batch_name_them():
    x = torch.randn(2, 3, 5, 8)
    for bad in (torch.ones(7, 4), torch.ones(3, 1, 5, 4), torch.ones(1, 1, 1, 5, 4)):
        _raises(lambda: posenc.apply_rotary(x, bad, bad), error=ValueError, names=["cos", "sin"],
                values=[list(bad.shape), [2, 3, 5, 4]])


def test_apply_rotary_refuses_an_expanded_out_and_takes_every_other_layout():
    x = torch.randn(2, 3, 5, 8)
    cos, sin = torch.randn(5, 4).cos(), torch.randn(5, 4).sin()
    expanded = torch.zeros(1, 3, 5, 8).expand(2, 3, 5, 8)
    _raises(lambda: posenc.apply_rotary(x, cos, sin, out=expanded), error=ValueError, names=["out"],
            values=[[2, 3, 5, 8], [0, 40, 8, 1]])
    for layout in ("half", "interleaved"):
        want = posenc.apply_rotary(x, cos, sin, layout=layout)
        strided = torch.zeros(2, 3, 5, 16)[..., ::2]  # a valid non-contiguous out
        assert posenc.apply_rotary(x, cos, sin, layout=layout, out=strided) is strided
        torch.testing.assert_close(strided, want)  # out= may fuse the products (float32 rounding)
        transposed = torch.zeros(2, 5, 3, 8).transpose(1, 2)
        torch.testing.assert_close(posenc.apply_rotary(x, cos, sin, layout=layout, out=transposed), want)
        # expanded inputs (x, cos, sin) read the same values twice: they simply work
        one = x[:1].expand(2, 3, 5, 8)
        big = (cos[None, None].expand(2, 3, 5, 4), sin[None, None].expand(2, 3, 5, 4))
        torch.testing.assert_close(posenc.apply_rotary(one, *big, layout=layout),
                                   posenc.apply_rotary(one.contiguous(), cos, sin, layout=layout))


def test_ssm_state_and_dtype_are_checked_by_name():
    from posenc.ssm import DiagonalSSM

    layer = DiagonalSSM(4, 3)
    x = torch.randn(2, 6, 4)
    _raises(lambda: layer(x, [0.0, 0.0, 0.0]), error=TypeError, names=["state"], values=["list"])
    _raises(lambda: layer(x, torch.zeros(2, 3, dtype=torch.long)), error=TypeError, names=["state"],
            values=["torch.int64"])
    _raises(lambda: layer(x, torch.zeros(2, 4)), error=ValueError, names=["state"], values=[[2, 3], [2, 4]])
    _raises(lambda: layer(x.double()), error=TypeError, names=["x"], values=["torch.float64", "torch.float32"])
    _raises(lambda: layer(x, return_state=1), error=TypeError, names=["return_state"], values=[1])
    _raises(lambda: DiagonalSSM(4, dt_max=1e308), error=ValueError, names=["dt_max"], values=[1e308])
    _raises(lambda: DiagonalSSM(4, dt_min=2.0, dt_max=1.0), error=ValueError, names=["dt_min", "dt_max"])
    # a float64 state, an expanded or non-contiguous one, continue the sequence as a float32 one does
    y, last = layer(x[:, :3], return_state=True)
    want = layer(x[:, 3:], last)
    for state in (last.double(), last[:1].expand(2, 3) if torch.equal(last[0], last[1]) else last.t().contiguous().t()):
        torch.testing.assert_close(layer(x[:, 3:], state), want)


def test_attention_with_head_dimension_zero_names_q():
    q = torch.randn(1, 2, 5, 0)
    _raises(lambda: posenc.attention(q, q, torch.randn(1, 2, 5, 4)), error=ValueError, names=["q", "D >= 1"],
            values=[[1, 2, 5, 0]])
