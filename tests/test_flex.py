"""posenc.attention as real loops use it (issue 15): FlexAttention under many lengths without a
dynamo reset, every dtype on ``auto``, a float32 bias far from the keys, ``torch.compile`` of the
flex path, the fallback when compiling is unavailable, and the small edge cases (one length for
q and k of length-dependent ropes, Shaw's Dv, empty inputs, modules built under inference mode)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import posenc
import posenc.scores
import posenc.attn
from posenc import reference as ref
from conftest import assert_close, attention_reference, in_fork, schemes_of_kind, small_module, tolerance

APPLIED = schemes_of_kind("none", "rotary", "bias", "relative")


def _qkv(lq, lk, *, batch=1, heads=4, dim=8, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, heads, n, dim, generator=g, dtype=torch.float64) for n in (lq, lk, lk))
    return q.to(dtype), k.to(dtype), v.to(dtype)


# -- 1 and 6: a loop in a process of its own, no dynamo reset ---------------------------------

@pytest.fixture(scope="module")
def loop():
    """``flex_loop.loop()`` in a process of its own forked from this worker (``conftest.in_fork``):
    its peak memory, address-space cap and compiled flex cases are its own, while torch, posenc
    and inductor are imported already (a new interpreter spent about 5 s of CPU starting them)."""
    import flex_loop

    status, result, _, err = in_fork(flex_loop.loop)
    assert status == 0, err[-4000:]
    return result


@pytest.mark.slow
@pytest.mark.xdist_group("compile")
def test_many_lengths_then_a_long_flex_call_keeps_memory_bounded(loop):
    """12 distinct lengths (past dynamo's recompile limit of 8), then L=6144 on flex: its
    peak adds less than 150 MB; a path that builds the 4 x 6144^2 float32 scores adds >= 604 MB
    (today's eager fallback after the limit: 5 GB), and no call fell back to chunked."""
    assert loop["peak"] - loop["before"] < 150 << 20, loop
    assert loop["fallbacks"] == []


@pytest.mark.slow
@pytest.mark.xdist_group("compile")
def test_decoding_steps_between_full_passes_compile_the_case_four_times(loop):
    """The loop's 12 lengths, full passes and decoding steps, compile ALiBi's case four times: the
    first call's shapes, then dynamic lengths, then more than one block of queries and more than one
    block of keys (dynamo specializes a size of 1). A decoding step's queries are the last rows of a
    longer tensor; taken as they are, their strides made a fifth compile (about 5 s here)."""
    assert loop["alibi_compiles"] == 4


@pytest.mark.slow
@pytest.mark.xdist_group("compile")
def test_the_library_used_as_a_loop_matches_the_reference(loop):
    """Varying lengths, dtypes, decoding steps, schemes and backends in one process."""
    assert len(loop["errors"]) == 28
    bad = [e for e in loop["errors"] if not e["err"] <= e["tol"]]
    assert not bad, bad


@pytest.mark.slow
@pytest.mark.xdist_group("compile")
def test_a_case_out_of_recompiles_runs_chunked_and_warns_once(loop):
    """With a budget of one compile, the second length of a case falls back (exact, above)."""
    assert len(loop["budget_fallbacks"]) == 1 and "recompile limit" in loop["budget_fallbacks"][0]


def test_a_case_that_cannot_compile_runs_chunked_and_warns_once(monkeypatch):
    monkeypatch.setattr(posenc.attn, "_FLEX", {})
    monkeypatch.setattr(torch._dynamo, "is_dynamo_supported", lambda: False)
    pe = small_module("alibi")
    q, k, v = _qkv(7, 20)
    with pytest.warns(posenc.attn.FlexFallbackWarning, match="chunked"):
        out = posenc.attention(q, k, v, pe, causal=True, backend="flex")
    with warnings.catch_warnings():
        warnings.simplefilter("error", posenc.attn.FlexFallbackWarning)
        again = posenc.attention(q[:, :, -3:], k, v, pe, causal=True, backend="flex")
    assert_close(out, attention_reference(q, k, v, pe, causal=True))
    assert_close(again, attention_reference(q[:, :, -3:], k, v, pe, causal=True))


# -- 2: every dtype on every route ------------------------------------------------------------

def test_auto_takes_float64_at_any_length(monkeypatch):
    """float64 past the materialize size goes to blockwise (CPU FlexAttention has no float64),
    with and without grad mode; flex asked for by name refuses it by name."""
    monkeypatch.setattr(posenc.scores, "MATERIALIZE_ELEMENTS", 100)  # too large to materialize
    pe = small_module("alibi").double()
    q, k, v = _qkv(9, 23, dtype=torch.float64)
    expected = attention_reference(q, k, v, pe, causal=True)
    assert_close(posenc.attention(q, k, v, pe, causal=True), expected, magnitude=1e3)
    with torch.no_grad():
        assert_close(posenc.attention(q, k, v, pe, causal=True), expected, magnitude=1e3)
    with pytest.raises(TypeError, match="backend='flex'.*float64"):
        posenc.attention(q, k, v, pe, backend="flex")


# -- 3: the bias in float32 on every backend --------------------------------------------------

@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("dtype, position", [(torch.float16, 200_000), (torch.bfloat16, 20_000)])
def test_a_query_far_from_every_key_agrees_on_every_backend(dtype, position):
    """One decoding step at ``position`` over keys 0..299 (ALiBi: a bias of -m·position that
    overflows float16 and loses its key-to-key differences in bfloat16). Scores are float32 on
    every backend: error <= a few float32 eps of the largest bias (times |v|) plus the dtype's."""
    pe = small_module("alibi")
    q, k, v = _qkv(1, 300, dtype=dtype)
    qp, kp = torch.tensor([position]), torch.arange(300)
    expected = attention_reference(q, k, v, pe, q_positions=qp, k_positions=kp, causal=True)
    largest = float(ref.alibi_slopes(4).max()) * position
    tol = (tolerance(torch.float32, largest) + tolerance(dtype)) * float(v.abs().max())
    with torch.no_grad():
        for backend in ("materialize", "chunked", "flex", "blockwise"):
            out = posenc.attention(q, k, v, pe, q_positions=qp, k_positions=kp, causal=True, backend=backend)
            err = float(np.abs(out.double().numpy() - expected).max())
            assert err <= tol, f"{backend}: error {err:.3g} > {tol:.3g}"


# -- 4: torch.compile(fullgraph=True) of the flex path ------------------------------------------

@pytest.mark.slow
@pytest.mark.xdist_group("compile")
@pytest.mark.parametrize("name", ["alibi", "t5", "kerple", "fire"])
def test_attention_compiles_on_the_flex_path(name, monkeypatch):
    """1 x 4 x 1040 x 1040 scores (> MATERIALIZE_ELEMENTS): under the caller's compile auto picks
    flex (eagerly on the CPU it picks blockwise), and the chunked backend is never reached while tracing."""
    torch._dynamo.reset()  # a fresh compile of this function; the flex path itself needs no reset
    pe = small_module(name, hidden=2) if name == "fire" else small_module(name)  # FIRE's compile time grows with hidden
    q, k, v = _qkv(1040, 1040)
    assert 4 * 1040 * 1040 > posenc.scores.MATERIALIZE_ELEMENTS

    def attend(q, k, v):
        return posenc.attention(q, k, v, pe, causal=True)

    with torch.no_grad():
        eager = posenc.attention(q, k, v, pe, causal=True, backend="chunked")

        def no_chunked(*args, **kw):
            raise AssertionError("the chunked backend was taken")

        def no_blockwise(*args, **kw):
            raise AssertionError("the blockwise backend was taken")

        monkeypatch.setattr(posenc.attn, "_chunked", no_chunked)
        monkeypatch.setattr(posenc.attn, "blockwise_attention", no_blockwise)
        out = torch.compile(attend, fullgraph=True)(q, k, v)
    torch.testing.assert_close(out, eager, rtol=1e-5, atol=1e-5)


# -- 5: the smaller ones ------------------------------------------------------------------------

ORIGINAL = 16
LENGTH_DEPENDENT = {
    "dynamic": {"type": "dynamic", "factor": 4, "original_max_positions": ORIGINAL},
    "longrope": {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(4)],
                 "long_factor": [1.0 + 0.5 * i for i in range(4)], "factor": 4, "original_max_positions": ORIGINAL},
}


@pytest.mark.parametrize("name", list(LENGTH_DEPENDENT))
def test_length_dependent_rope_rotates_q_and_k_at_one_length(name):
    """A query at 40 past keys 0..9 (within the original 16 positions, where alone they would
    keep the short frequencies): q and k both use the frequencies at L = 41."""
    spec = {"scheme": "rope", "head_dim": 8, "scaling": LENGTH_DEPENDENT[name]}
    pe = posenc.build(spec)
    q, k, v = _qkv(1, 10, dtype=torch.float64)
    qp, kp = torch.tensor([40]), torch.arange(10)
    out = posenc.attention(q, k, v, pe, q_positions=qp, k_positions=kp)
    freq = pe.scaling.at(41)
    qr = ref.rope(q.numpy(), qp.numpy(), freq, layout=pe.layout, attention_factor=pe.attention_factor)
    kr = ref.rope(k.numpy(), kp.numpy(), freq, layout=pe.layout, attention_factor=pe.attention_factor)
    assert_close(out, ref.attention(qr, kr, v.numpy()), magnitude=1e3)


def test_shaw_checks_the_value_dimension():
    pe = small_module("shaw")
    q, k, _ = _qkv(5, 5)
    with pytest.raises(ValueError, match=r"v must have last dimension 8, got 1"):
        posenc.attention(q, k, torch.randn(1, 4, 5, 1), pe)


@pytest.mark.parametrize("name", APPLIED)
@pytest.mark.parametrize("lq, lk, causal", [(0, 6, True), (0, 0, True), (3, 0, False)])
def test_empty_queries_or_keys_give_what_sdpa_gives(name, lq, lk, causal):
    """No scores to bias: ``[B, H, Lq, Dv]`` as plain SDPA returns it (empty, or zeros over no keys)."""
    pe = small_module(name)
    q, k, v = _qkv(lq, lk)
    out = posenc.attention(q, k, v, pe, causal=causal)
    assert out.shape == (1, 4, lq, 8) and out.dtype == q.dtype
    torch.testing.assert_close(out, posenc.attention(q, k, v, None, causal=causal))


@pytest.mark.parametrize("name", APPLIED + ["rope-dynamic", "rope-longrope"])
def test_a_module_built_under_inference_mode_works_outside_it(name):
    """Built under ``torch.inference_mode()``, used outside it: the same result as a module built
    normally (inference-mode parameters still cannot take gradients: PyTorch's rule)."""
    def make():
        if name.startswith("rope-"):
            return posenc.build({"scheme": "rope", "head_dim": 8, "scaling": LENGTH_DEPENDENT[name[5:]]})
        return small_module(name)

    with torch.inference_mode():
        built = make()
    normal = make()
    q, k, v = _qkv(30, 30)
    with torch.no_grad():
        torch.testing.assert_close(posenc.attention(q, k, v, built), posenc.attention(q, k, v, normal))
    if name.startswith("rope-"):  # no parameters: gradients reach q
        q.requires_grad_()
        posenc.attention(q, k, v, built).sum().backward()
        assert q.grad is not None
