"""Every registered module runs under ``torch.compile(fullgraph=True)`` (no graph break) and gives
what it gives eagerly. One small shape per scheme.

A graph break is dynamo's verdict, whatever the backend, so every scheme is traced with
``backend="aot_eager"`` (dynamo, then AOTAutograd's functionalized graph, run eagerly: no C++ to
build); one scheme of each kind, and ``posenc.attention``, also go through inductor, the backend
users compile with, which generates and builds C++ kernels. Measured with an empty inductor cache
on the 2-core machine: inductor on every scheme took 203 s of this file's 205 s (dual_chunk alone
41 s, rope_mixed 20 s, transformer_xl 20 s); the kinds' shared code paths are what inductor sees
differently, and one scheme per kind reaches each of them. The additive kind's is the learned table:
the sinusoidal table is ``rotary.angles_cos_sin``, which the rope case builds already (with the
inductor cache empty each spent 8-9 s generating that function's C++; learned 0.6 s)."""

from __future__ import annotations

import pytest
import torch

import posenc
from posenc import registry
from conftest import assert_close, module_args, reference_output, small_module

pytestmark = pytest.mark.xdist_group("compile")


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    """Schemes share code objects (BiasEncoding.forward): reset so that adding schemes never
    reaches dynamo's recompile limit."""
    torch._dynamo.reset()
    yield


INDUCTOR = {"none": "nope_temperature", "additive": "learned", "rotary": "rope", "bias": "alibi",
            "relative": "shaw", "content": "fox"}
"""The scheme of each kind compiled by inductor as well (the most used of the kind; for the additive
kind the learned table, as the sinusoidal table's angles are rope's)."""


def _cases() -> list:
    return [(name, backend) for name in registry.schemes()
            for backend in (("aot_eager", "inductor") if name in INDUCTOR.values() else ("aot_eager",))]


def test_every_kind_has_a_scheme_compiled_by_inductor():
    assert {kind: registry.get(name).kind for kind, name in INDUCTOR.items()} == {k: k for k in registry.KINDS}


@pytest.mark.parametrize("name, backend", _cases())
def test_module_compiles_without_graph_breaks(name, backend):
    m = small_module(name)
    args = module_args(m, length=13, offset=7, batched=True)
    compiled = torch.compile(m, fullgraph=True, backend=backend)
    with torch.no_grad():
        out, eager = compiled(*args), m(*args)
    assert out.shape == eager.shape and out.dtype == eager.dtype
    assert_close(out, reference_output(m, args), what=f"compiled {name}")
    torch.testing.assert_close(out, eager)


@pytest.mark.parametrize("name, backend", [("rope", "aot_eager"), ("alibi", "inductor")])
def test_attention_compiles_without_graph_breaks(name, backend):
    """``posenc.attention`` with a rotation and with a bias; inductor builds the bias path's
    kernels (the rotation's are the rope module's above: attention with rope under inductor
    took 24 s with an empty cache, for kernels that case already builds)."""
    pe = small_module(name)
    q, k, v = (torch.randn(2, 4, 11, 8) for _ in range(3))
    p = torch.arange(11) + 3

    def attend(q, k, v):
        return posenc.attention(q, k, v, pe, q_positions=p, k_positions=p, causal=True, backend="materialize")

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(attend, fullgraph=True, backend=backend)(q, k, v), attend(q, k, v))
