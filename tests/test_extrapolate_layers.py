"""Per-layer scheme patterns in the benchmark model (Llama 4's RoPE x3 + NoPE with temperature):
strict parsing of the ``--scheme`` value, each attention block gets its entry's module, a model
trains a step, and the recorded spec keeps a string ``scheme``."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc.cli import main
from posenc.extrapolate.model import LAYERS, GPTConfig, TinyGPT, layer_pattern
from posenc.extrapolate.plan import resolve_scheme

CFG = GPTConfig(vocab_size=32, n_layer=4, n_head=2, n_embd=16, mlp_ratio=2)
LLAMA4 = '["rope", "rope", "rope", "nope_temperature:floor_scale=4"]'


def test_pattern_forms_parse_and_plain_specs_are_not_patterns():
    entries = ["rope", "rope", "rope", "nope_temperature:floor_scale=4"]
    assert layer_pattern(LLAMA4) == entries
    assert layer_pattern({"scheme": LAYERS, "pattern": entries}) == entries
    assert layer_pattern('{"scheme": "layers", "pattern": ["rope", {"scheme": "alibi"}]}') == ["rope", {"scheme": "alibi"}]
    for spec in ("rope", "rope:base=500", '{"scheme": "rope", "head_dim": 8}', {"scheme": "rope"}):
        assert layer_pattern(spec) is None


@pytest.mark.parametrize("text, error, message", [
    ('["rope", ', ValueError, "is not valid JSON"),
    ("[]", ValueError, "1 to 64 entries"),
    ('["rope", NaN]', ValueError, "NaN is not allowed"),
    ('["rope", 3]', TypeError, r"pattern\[1\] must be a SPEC string or a spec dict"),
    ('["rope", ["nope"]]', TypeError, r"pattern\[1\] must be a SPEC string"),
    ('["rope", "[\\"nope\\"]"]', ValueError, r"pattern\[1\] is itself a pattern"),
    ('{"scheme": "layers", "pattern": ["rope"], "n": 2}', ValueError, "exactly the keys 'scheme' and 'pattern'"),
])
def test_bad_patterns_are_refused(text, error, message):
    with pytest.raises(error, match=message):
        layer_pattern(text)


def test_each_block_gets_its_entry_and_a_hybrid_trains_a_step():
    label, spec = resolve_scheme(LLAMA4, CFG, max_positions=24)
    assert label == "layers: rope x3, nope_temperature (floor_scale=4)"
    assert spec["scheme"] == LAYERS and isinstance(spec["scheme"], str)
    assert [s["scheme"] for s in spec["pattern"]] == ["rope"] * 3 + ["nope_temperature"]
    assert spec["pattern"][0]["head_dim"] == CFG.head_dim  # sizes come from the model
    torch.manual_seed(0)
    model = TinyGPT(CFG, spec)
    assert [model._pe(i).name for i in range(4)] == ["rope", "rope", "rope", "nope_temperature"]
    assert model.pe_spec == spec
    per_layer = TinyGPT(dataclasses.replace(CFG, n_layer=8, pe_per_layer=True), spec)
    assert [per_layer._pe(i).name for i in range(8)] == (["rope"] * 3 + ["nope_temperature"]) * 2
    assert len({id(per_layer._pe(i)) for i in range(8)}) == 8

    x = torch.randint(0, CFG.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    before = [p.detach().clone() for p in model.parameters()]
    loss = torch.nn.functional.cross_entropy(model(x[:, :-1]).flatten(0, 1), x[:, 1:].flatten())
    loss.backward()
    opt.step()
    assert torch.isfinite(loss) and all(not torch.equal(a, p) for a, p in zip(before, model.parameters()))


def test_the_nope_layer_applies_its_temperature():
    """With the temperature's floor_scale past the input, the fourth block is plain NoPE: outputs differ."""
    _, spec = resolve_scheme(LLAMA4, CFG, max_positions=24)
    _, plain = resolve_scheme('["rope", "rope", "rope", "nope"]', CFG, max_positions=24)
    x = torch.randint(0, CFG.vocab_size, (1, 20), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.manual_seed(0)
        a = TinyGPT(CFG, spec)(x)
        torch.manual_seed(0)
        b = TinyGPT(CFG, plain)(x)
    torch.testing.assert_close(a[:, :3], b[:, :3])  # τ = 1 before position floor_scale - 1 = 3
    assert (a[:, 3:] - b[:, 3:]).abs().max() > 1e-4


def test_a_pattern_must_tile_the_attention_blocks():
    with pytest.raises(ValueError, match="needs n_layer to be a multiple of 3; the model has n_layer=4"):
        resolve_scheme('["rope", "rope", "nope"]', CFG, max_positions=24)
    _, spec = resolve_scheme('["rope", "nope_temperature"]', dataclasses.replace(CFG, n_layer=2), max_positions=24)
    with pytest.raises(ValueError, match="needs a multiple of 2 attention blocks; this model has 1"):
        TinyGPT(dataclasses.replace(CFG, n_layer=2), spec, arch="hybrid")


def test_command_line_refuses_a_bad_pattern_in_one_line(capsys):
    assert main(["extrapolate", "--profile", "smoke", "--scheme", '["rope", "nosuch"]']) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown scheme 'nosuch'" in err, err
    assert main(["extrapolate", "--profile", "smoke", "--scheme", '["rope", "fire:hidden=100000000"]']) == 2
    assert "hidden must be at most 4096" in capsys.readouterr().err
