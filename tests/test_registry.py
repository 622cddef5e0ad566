"""The registry: schemes(), build(), specs, and what @register checks."""

from __future__ import annotations

import inspect
import json

import pytest
import torch

import posenc
from posenc import registry
from posenc.encodings._base import BiasEncoding, PositionalEncoding
from conftest import module_args, schemes_of_kind, small_module, small_spec

ALL = registry.schemes()


def test_the_basic_schemes_are_registered_with_their_kinds():
    kinds = {n: registry.get(n).kind for n in ALL}
    assert {"nope": "none", "sinusoidal": "additive", "learned": "additive", "rope": "rotary",
            "alibi": "bias", "t5": "bias"}.items() <= kinds.items()
    assert set(kinds.values()) <= set(posenc.KINDS)
    for kind in posenc.KINDS:
        assert registry.schemes(kind) == [n for n in ALL if kinds[n] == kind]


def test_schemes_stays_callable_after_the_schemes_package_is_imported():
    """``posenc.schemes()`` is the public function; the ``posenc/encodings/`` package must not
    replace it once a module is built (importing a subpackage sets the parent's attribute)."""
    posenc.build("nope")
    posenc.attention  # noqa: B018 - imports posenc.attn, which imports posenc.encodings._base
    assert callable(posenc.schemes), f"posenc.schemes is {posenc.schemes!r}"
    assert posenc.schemes() == ALL
    assert posenc.schemes("bias") == registry.schemes("bias")


@pytest.mark.parametrize("name", ALL)
def test_registered_class_is_complete(name):
    s = registry.get(name)
    assert issubclass(s.cls, PositionalEncoding)
    assert s.cls.name == name and s.cls.kind == s.kind
    assert callable(getattr(s.cls, "reference", None)), f"{name} has no float64 reference"
    assert s.summary, f"{name}'s class has no docstring summary"
    init = inspect.signature(s.cls.__init__).parameters
    assert list(s.params) == [p for p in init if p != "self"]
    assert all(init[p].kind is inspect.Parameter.KEYWORD_ONLY for p in s.params)


@pytest.mark.parametrize("name", ALL)
def test_build_of_spec_gives_an_equivalent_module(name):
    m = small_module(name, seed=1)
    spec = m.spec
    assert spec["scheme"] == name and set(spec) == {"scheme", *registry.get(name).params}
    assert m.name == name and m.kind == registry.get(name).kind
    again = posenc.build(json.loads(json.dumps(spec)))  # a spec survives JSON (the CLI's format)
    assert again.spec == spec
    assert type(again) is type(m)
    args = module_args(m, length=13, offset=5)
    if not list(m.parameters()):  # deterministic: equal outputs straight away
        torch.testing.assert_close(again(*args), m(*args), rtol=0, atol=0)
    else:  # learned: equal once the weights are loaded
        again.load_state_dict(m.state_dict())
        torch.testing.assert_close(again(*args), m(*args), rtol=0, atol=0)


@pytest.mark.parametrize("name", ALL)
def test_spec_is_a_copy(name):
    m = small_module(name)
    spec = m.spec
    spec["scheme"] = "changed"
    assert m.spec["scheme"] == name
    assert repr(m)  # extra_repr shows the spec


def test_spec_does_not_alias_the_callers_dict():
    scaling = {"type": "linear", "factor": 2.0}
    m = posenc.build({"scheme": "rope", "head_dim": 8, "scaling": scaling})
    scaling["factor"] = 8.0
    assert m.spec["scaling"]["factor"] == 2.0


@pytest.mark.parametrize("name", ALL)
def test_build_by_name_needs_exactly_the_required_params(name):
    required = registry.get(name).required
    if not required:
        assert posenc.build(name).spec == posenc.build({"scheme": name}).spec
        return
    with pytest.raises(ValueError) as e:
        posenc.build(name)
    assert repr(required[0]) in str(e.value) and name in str(e.value)


def test_defaults_are_filled_in():
    spec = posenc.build({"scheme": "rope", "head_dim": 8}).spec
    assert spec == {"scheme": "rope", **{k: v for k, v in registry.get("rope").params.items()}, "head_dim": 8}


def test_small_spec_fills_the_sizes_of_any_scheme():
    for name in ALL:
        spec = small_spec(name)
        assert set(registry.get(name).required) <= set(spec)
    with pytest.raises(ValueError, match="unknown key 'nonsense'"):
        posenc.build(small_spec("alibi", nonsense=1))


def test_schemes_of_kind_covers_every_scheme_once():
    assert sorted(sum((schemes_of_kind(k) for k in posenc.KINDS), [])) == sorted(ALL)


# -- register -----------------------------------------------------------------------------------

@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def test_register_reads_params_from_the_keyword_only_init(scratch_registry):
    @registry.register("scratch", kind="bias")
    class Scratch(BiasEncoding):
        """A scratch scheme."""

        def __init__(self, *, num_heads: int, width: float = 2.0) -> None:
            super().__init__()

        def reference(self, q_positions, k_positions):  # pragma: no cover
            return None

    s = registry.get("scratch")
    assert s.params == {"num_heads": registry.REQUIRED, "width": 2.0} and s.required == ["num_heads"]
    assert s.summary == "A scratch scheme."
    assert "scratch" in registry.schemes("bias")
    assert posenc.build({"scheme": "scratch", "num_heads": 2}).spec == {"scheme": "scratch", "num_heads": 2,
                                                                      "width": 2.0}


def test_register_refuses_bad_declarations(scratch_registry):
    with pytest.raises(ValueError, match=r"kind must be one of none, additive, rotary, bias, relative, content; got 'odd'"):
        registry.register("scratch", kind="odd")

    class Positional(PositionalEncoding):
        def __init__(self, num_heads: int) -> None:
            super().__init__()

    with pytest.raises(TypeError, match=r"keyword-only parameters, not 'num_heads'"):
        registry.register("scratch", kind="bias")(Positional)

    class Other(PositionalEncoding):
        def __init__(self) -> None:
            super().__init__()

    with pytest.raises(ValueError, match=r"scheme 'alibi' is already registered by ALiBi"):
        registry.register("alibi", kind="bias")(Other)
    with pytest.raises(TypeError, match=r"Other is registered as kind 'rotary', so it must subclass .*RotaryEncoding"):
        registry.register("scratch", kind="rotary")(Other)
