"""``--arch llama``: the benchmark trains transformers' ``LlamaForCausalLM`` with each scheme patched
in (``posenc.extrapolate.llama``), and its records say so."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("transformers")

from posenc.cli import main  # noqa: E402
from posenc.extrapolate.llama import LlamaLM  # noqa: E402
from posenc.extrapolate.arch import build_model  # noqa: E402
from posenc.extrapolate.model import GPTConfig  # noqa: E402

CFG = GPTConfig(vocab_size=50, n_layer=2, n_head=2, n_embd=32)


@pytest.mark.parametrize("spec", ["rope", "alibi", "t5", "sinusoidal", "learned", "fox", "nope",
                                  '["rope", "nope_temperature"]'])
def test_the_llama_of_every_kind_gives_logits_and_a_spec(spec):
    from posenc.spec import fill_sizes

    pattern = json.loads(spec) if spec.startswith("[") else None
    if pattern is None:
        spec = fill_sizes(spec, dim=CFG.n_embd, num_heads=CFG.n_head, head_dim=CFG.head_dim, length=64)
    model = build_model(CFG, pattern or spec, arch="llama")
    assert isinstance(model, LlamaLM) and not model.stackable
    idx = torch.randint(0, 50, (2, 12))
    assert model(idx).shape == (2, 12, 50)
    assert model(idx, torch.arange(12) + 5).shape == (2, 12, 50)
    got = model.pe_spec
    if pattern is None:
        assert got["scheme"] == spec["scheme"]
    else:
        assert got["scheme"] == "layers" and [p["scheme"] for p in got["pattern"]] == ["rope", "nope_temperature"]


def test_set_pe_swaps_the_frequencies():
    model = build_model(CFG, {"scheme": "rope", "head_dim": CFG.head_dim}, arch="llama")
    idx = torch.randint(0, 50, (1, 20))
    with torch.no_grad():
        plain = model(idx)
        model.set_pe({"scheme": "rope", "head_dim": CFG.head_dim, "scaling": {"type": "linear", "factor": 4}})
        scaled = model(idx)
    assert model.pe_spec["scaling"] == {"type": "linear", "factor": 4}
    assert not torch.allclose(plain, scaled, atol=1e-5)


@pytest.mark.slow
def test_extrapolate_arch_llama_on_the_smoke_profile(tmp_path):
    out = tmp_path / "r.jsonl"
    assert main(["extrapolate", "--profile", "smoke", "--arch", "llama", "--scheme", "rope", "--scheme", "alibi",
                 "--part", "lm", "--jobs", "1", "--no-progress", "--out", str(out)]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert records and all(r["arch"] == "llama" for r in records)
    assert {r["scheme"] for r in records} >= {"rope", "alibi"}
    for r in records:
        nll = [e["nll"] for e in r["eval"] if "nll" in e]
        assert nll and all(0 < x < 10 for x in nll), r["label"]
