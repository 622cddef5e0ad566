"""``posenc extend`` end to end on a tiny random Llama (a safetensors folder made here) and a few
thousand bytes of text: the grid, kill-and-resume, the page, and each one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[1]
CONTEXT = 128  # the tiny model's max_position_embeddings
TEXT = ("Now is the winter of our discontent made glorious summer by this sun of York; and all the clouds that "
        "lour'd upon our house in the deep bosom of the ocean buried. ") * 40  # 6.2k bytes = tokens


def byte_tokenizer():
    """A byte-level tokenizer of 256 bytes and two specials (ids 256, 257), no merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {ch: i for i, ch in enumerate(bytes_to_unicode().values())}
    vocab.update({"<s>": 256, "</s>": 257})
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")


def tiny_config():
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=258, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                       num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=CONTEXT,
                       rope_theta=10000.0, bos_token_id=256, eos_token_id=257, tie_word_embeddings=False)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    """A tiny random Llama with its tokenizer, saved as a transformers (safetensors) folder."""
    from transformers import LlamaForCausalLM

    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(tiny_config()).save_pretrained(folder)
    byte_tokenizer().save_pretrained(folder)
    (folder.parent / "text.txt").write_text(TEXT, encoding="utf-8")
    return folder


def run(tiny: Path, out: Path, **kw):
    from posenc.extend import extend

    args = dict(to=2 * CONTEXT, methods=["none", "linear", "dynamic", "yarn"], text=tiny.parent / "text.txt",
                out=out, bucket=32, depths=(0.5,), log=lambda s: None, progress=False)
    args.update(kw)
    return extend(tiny, **args)


def records(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "results.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def whole(tiny, tmp_path_factory) -> Path:
    """The folder of one whole run on the tiny model: five methods, three passages, passkey at 2×."""
    out = tmp_path_factory.mktemp("whole")
    run(tiny, out, methods=["none", "linear", "ntk", "dynamic", "yarn"])
    return out


def test_whole_path_on_a_tiny_llama(whole):
    recs = records(whole)
    ppl = [r for r in recs if r["kind"] == "ppl"]
    # static methods once at 2×, dynamic at 1× and 2×, on 3 passages; passkey per method at the lengths
    # from min(1024, N) on (here 2× only)
    assert sorted((r["method"], r["length"]) for r in ppl if r["passage"] == 0) == [
        ("dynamic", 128), ("dynamic", 256), ("linear", 256), ("none", 256), ("ntk", 256), ("yarn", 256)]
    assert {r["passage"] for r in ppl} == {0, 1, 2}
    assert len([r for r in recs if r["kind"] == "passkey"]) == 5
    for r in ppl:
        assert len(r["nll"]) == r["length"] - 1 and np.isfinite(r["nll"]).all()
    assert ppl[0]["params"]["scaling"] is None  # none: the model's own RoPE
    linear = next(r for r in ppl if r["method"] == "linear")
    assert linear["params"]["scaling"] == {"type": "linear", "factor": 2.0}
    html = (whole / "index.html").read_text()
    assert "<svg" in html or "data:image/png" in html
    assert "Verdicts" in html


def test_the_first_tokens_of_a_static_method_are_the_shorter_forward(tiny):
    """What lets a static method run once at the largest length: causal, same angles at any length."""
    from posenc.extend import measure, methods, run, sources

    model, _ = sources.load(tiny)
    with torch.no_grad():  # sharper attention: a random model's loss hardly depends on positions
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)
            layer.self_attn.k_proj.weight.mul_(8)
    ids = torch.randint(0, 256, (2 * CONTEXT,), generator=torch.Generator().manual_seed(1))
    for method, equal in (("yarn", True), ("dynamic", False)):
        methods.apply(model, method, 2.0)
        grid = run.Grid(2 * CONTEXT, CONTEXT, 2.0, (method,), bucket=CONTEXT)
        one = {"kind": "ppl", "method": method, "passage": 0}
        long = run._measure(model, None, {**one, "length": 2 * CONTEXT}, ids.tolist(), grid)["nll"]
        short = run._measure(model, None, {**one, "length": CONTEXT}, ids.tolist(), grid)["nll"]
        long, short = np.array(long), np.array(short)
        assert np.allclose(long[:CONTEXT - 1], short, atol=2e-4) == equal, (method, np.abs(long[:CONTEXT - 1] - short).max())


def test_the_loss_in_chunks_equals_the_whole_logits(tiny):
    from posenc.extend import measure, sources

    model, _ = sources.load(tiny)
    ids = torch.randint(0, 256, (99,), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        logits = model(ids[None]).logits[0].double()  # (L, V)
    expected = torch.nn.functional.cross_entropy(logits[:-1], ids[1:], reduction="none").numpy()
    assert np.allclose(measure.token_nll(model, ids, chunk=10), expected, atol=1e-5)


def test_a_killed_run_resumes(tiny, tmp_path, monkeypatch):
    run(tiny, tmp_path, methods=["none", "ntk"], trials=0)
    lines = (tmp_path / "results.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == 6
    # killed while writing the fourth record: three whole lines and half of one
    (tmp_path / "results.jsonl").write_bytes(b"".join(lines[:3]) + lines[3][:40])
    from posenc.extend import measure

    calls = []
    real = measure.token_nll
    monkeypatch.setattr(measure, "token_nll", lambda *a, **k: calls.append(1) or real(*a, **k))
    run(tiny, tmp_path, methods=["none", "ntk"], trials=0)
    assert len(calls) == 3  # only what the killed run had not written
    def measured(recs):  # what was measured (not how long it took)
        return sorted(json.dumps({k: v for k, v in r.items() if k not in ("seconds", "vm_hwm")}) for r in recs)

    assert measured(records(tmp_path)) == measured(map(json.loads, lines))  # the same records, each once


def cli(capsys, *args: str) -> tuple[int, str]:
    """``posenc extend ARGS`` in this process: its exit status and its stderr."""
    from posenc.cli import main

    try:
        code = main(["extend", *args])
    except SystemExit as e:  # argparse's own errors
        code = e.code
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--to", "0"], "--to must be an integer from 2"),
    (["--to", "12x"], "--to must be an integer"),
    (["--to", "256", "--method", "rotary"], "invalid choice: 'rotary'"),
])
def test_bad_flags_are_one_line(capsys, args, message):
    code, err = cli(capsys, *args)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def test_a_missing_model_a_short_text_and_a_length_that_does_not_fit(tiny, tmp_path, capsys):
    code, err = cli(capsys, str(tmp_path / "nowhere.gguf"), "--to", "256")
    assert code == 2 and "does not exist" in err and len(err.strip().splitlines()) == 1, err
    short = tmp_path / "short.txt"
    short.write_text("too short " * 10)
    code, err = cli(capsys, str(tiny), "--to", "256", "--text", str(short), "--out", str(tmp_path / "o"))
    assert code == 2 and "fewer than 256" in err and len(err.strip().splitlines()) == 1, err
    code, err = cli(capsys, str(tiny), "--to", str(1 << 31), "--text", str(short), "--out", str(tmp_path / "o"))
    assert code == 2 and "GiB are available" in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "results.jsonl").exists()


def test_unknown_method_in_the_api_names_the_choices(tiny):
    from posenc.extend import extend

    with pytest.raises(ValueError, match="--method must be one of none, linear"):
        extend(tiny, to=256, methods=["rotary"])


def test_the_report_part_lists_the_claims_or_reads_a_run(whole):
    from posenc.stats.page_parts import Page
    from posenc.extrapolate.parts import PARTS, owner
    from posenc.extrapolate.profiles import get_profile

    part = owner("pretrained")
    assert part in PARTS
    quick = get_profile("quick")
    assert part.plan(quick, [], custom=False, corpus_sha="", log=print) == []  # quick does not pick it
    section = part.section(Page(), [], quick)
    assert {v.status for v in section.verdicts} == {"not measured"} and len(section.verdicts) == 6
    assert all("posenc extend --to 16384" in v.measured for v in section.verdicts)
    read = part.section(Page(), [{"extend": str(whole)}], quick)
    ppl = [v for v in read.verdicts if v.unit == "ΔNLL"]
    assert len(ppl) == 6 and all(v.seeds == 3 for v in ppl)  # 2×: degrades, ntk/linear, yarn/ntk, yarn/linear,
    # dynamic within L₀, linear within L₀; passkey: each scaling against none at 2× (one prompt: needs more)
    passkey = [v for v in read.verdicts if v.unit != "ΔNLL"]
    assert len(passkey) == 4 and all(v.seeds == 1 for v in passkey)
