"""Every registered module runs under ``torch.compile(fullgraph=True)`` (no graph break) and gives
what it gives eagerly. One small shape per scheme: compiling takes seconds."""

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


@pytest.mark.parametrize("name", registry.schemes())
def test_module_compiles_without_graph_breaks(name):
    m = small_module(name)
    args = module_args(m, length=13, offset=7, batched=True)
    compiled = torch.compile(m, fullgraph=True)
    with torch.no_grad():
        out, eager = compiled(*args), m(*args)
    assert out.shape == eager.shape and out.dtype == eager.dtype
    assert_close(out, reference_output(m, args), what=f"compiled {name}")
    torch.testing.assert_close(out, eager)


@pytest.mark.parametrize("name", ["rope", "alibi"])
def test_attention_compiles_without_graph_breaks(name):
    pe = small_module(name)
    q, k, v = (torch.randn(2, 4, 11, 8) for _ in range(3))
    p = torch.arange(11) + 3

    def attend(q, k, v):
        return posenc.attention(q, k, v, pe, q_positions=p, k_positions=p, causal=True, backend="materialize")

    with torch.no_grad():
        torch.testing.assert_close(torch.compile(attend, fullgraph=True)(q, k, v), attend(q, k, v))
