"""A ``.gguf`` model for ``posenc extend``: a tiny random Llama written with the ``gguf`` package (as
llama.cpp's converter writes one), read by ``posenc.extend.sources``, kept as safetensors, and equal
to the model it was written from; posenc's own reader (``posenc.extend.gguf_llama``) checked against
transformers' ``from_pretrained(gguf_file=...)`` on it (bitwise state dict, config, tokenizer), and a
file it does not handle converted by transformers, saying so; then the whole path on it."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("gguf")
pytest.importorskip("transformers")

from test_extend import CONTEXT, TEXT, byte_tokenizer, tiny_config  # noqa: E402


def permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's order of q/k rows (``convert_hf_to_gguf.LlamaModel.permute``): pairs interleaved."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path: Path, vocab: dict | None = None, extra: dict | None = None) -> None:
    """``model`` as llama.cpp writes it; ``vocab``: the tokenizer's fields (default: ``byte_tokenizer``'s);
    ``extra``: more metadata (``{key: value}``)."""
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    vocab = vocab or byte_vocab()
    w.add_tokenizer_model("gpt2")
    if "pre" in vocab:
        w.add_tokenizer_pre(vocab["pre"])
    w.add_token_list(vocab["tokens"])
    w.add_token_types(vocab["types"])
    w.add_token_scores([0.0] * len(vocab["tokens"]))
    w.add_token_merges(vocab["merges"])
    for key, value in vocab.get("ids", {"bos": 256, "eos": 257}).items():
        getattr(w, f"add_{key}_token_id")(value)
    if "chat_template" in vocab:
        w.add_chat_template(vocab["chat_template"])
        w.add_add_bos_token(False)
    for key, value in (extra or {}).items():
        w.add_string(key, value)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(c.num_hidden_layers):
        p = f"model.layers.{i}."
        w.add_tensor(f"blk.{i}.attn_norm.weight", sd[p + "input_layernorm.weight"])
        w.add_tensor(f"blk.{i}.attn_q.weight", permute(sd[p + "self_attn.q_proj.weight"], c.num_attention_heads))
        w.add_tensor(f"blk.{i}.attn_k.weight", permute(sd[p + "self_attn.k_proj.weight"], c.num_key_value_heads))
        w.add_tensor(f"blk.{i}.attn_v.weight", sd[p + "self_attn.v_proj.weight"])
        w.add_tensor(f"blk.{i}.attn_output.weight", sd[p + "self_attn.o_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_norm.weight", sd[p + "post_attention_layernorm.weight"])
        w.add_tensor(f"blk.{i}.ffn_gate.weight", sd[p + "mlp.gate_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_up.weight", sd[p + "mlp.up_proj.weight"])
        w.add_tensor(f"blk.{i}.ffn_down.weight", sd[p + "mlp.down_proj.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    w.add_tensor("output.weight", sd["lm_head.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def byte_vocab() -> dict:
    """``byte_tokenizer``'s vocabulary: 256 bytes and two specials, no merges."""
    tokens = [t for t, _ in sorted(byte_tokenizer().get_vocab().items(), key=lambda kv: kv[1])]
    return {"tokens": tokens, "types": [1] * 256 + [3, 3], "merges": []}


def bpe_vocab() -> dict:
    """SmolLM2's kind of vocabulary, small: control tokens first (``<|endoftext|>``, ``<|im_start|>``,
    ``<|im_end|>``), GPT-2's 256 byte symbols, merges, a user-defined token and one spelled outside the
    byte alphabet; the pre-tokenizer ``smollm``; distinct bos/eos/unk/pad ids and a chat template."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    control = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    merges = ["Ġ t", "h e", "Ġt he", "i s", "Ġ is", "o r", "Ġ b", "Ġb e", "Ġ n", "Ġn o", "Ġno t", "Ġt o"]
    merged = [m.replace(" ", "") for m in merges]
    tokens = control + list(bytes_to_unicode().values()) + merged + ["<think>", "€€"]
    types = [3] * 3 + [1] * (256 + len(merged)) + [4, 1]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": "smollm",
            "ids": {"bos": 1, "eos": 2, "unk": 0, "pad": 2}, "chat_template": "{{ messages[0]['content'] }}"}


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    from transformers import LlamaForCausalLM

    torch.manual_seed(3)
    model = LlamaForCausalLM(tiny_config()).eval()
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    write_gguf(model, path)
    return model, path


def test_a_gguf_is_converted_once_and_equals_its_model(written, cache):
    from posenc.extend import sources

    model, path = written
    folder = sources.model_folder(path, cache)
    assert (folder / "config.json").is_file() and folder.parent == cache
    assert sources.model_folder(path, cache) == folder  # the second time: the cache
    loaded, tokenizer = sources.load(folder)
    line = "To be, or not to be"
    ids = torch.tensor([tokenizer(line, add_special_tokens=False)["input_ids"]])
    assert ids.shape[1] == len(line.encode())  # the tokenizer came with it: bytes
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits, rtol=1e-5, atol=1e-5)


def test_the_whole_path_on_a_gguf(written, cache, tmp_path):
    from posenc.extend import extend

    _, path = written
    (tmp_path / "text.txt").write_text(TEXT)
    page = extend(path, to=2 * CONTEXT, methods=["none", "yarn"], text=tmp_path / "text.txt", out=tmp_path / "o",
                  cache=cache, passages=1, trials=0, bucket=32, log=lambda s: None, progress=False)
    assert page.is_file() and (tmp_path / "o" / "results.jsonl").stat().st_size > 0


@pytest.fixture(scope="module")
def bpe_gguf(tmp_path_factory):
    """A tiny random Llama with ``bpe_vocab``'s tokenizer as a GGUF (tied embeddings: no output.weight)."""
    from transformers import LlamaForCausalLM

    vocab = bpe_vocab()
    config = tiny_config()
    config.vocab_size, config.bos_token_id, config.eos_token_id = len(vocab["tokens"]), 1, 2
    torch.manual_seed(4)
    model = LlamaForCausalLM(config).eval()
    path = tmp_path_factory.mktemp("bpe") / "bpe.gguf"
    write_gguf(model, path, vocab)
    return path


def saved_by_transformers(path: Path, folder: Path):
    """``from_pretrained(gguf_file=...)``'s model and tokenizer of ``path``, saved into ``folder``."""
    from posenc.extend import sources

    sources._convert_with_transformers(path, folder)
    return folder


@pytest.mark.parametrize("which", ["bytes", "bpe"])
def test_posenc_gguf_reader_gives_what_transformers_gives(which, written, bpe_gguf, tmp_path):
    """Check before replacing: the same config, bitwise the same tensors, the same tokenizer (its
    serialisation and the ids of a text with merges, specials, an added token and non-ASCII bytes)."""
    import json

    from safetensors.torch import load_file
    from transformers import AutoTokenizer

    from posenc.extend import gguf_llama

    path = written[1] if which == "bytes" else bpe_gguf
    mine, theirs = tmp_path / "posenc", saved_by_transformers(path, tmp_path / "transformers")
    gguf_llama.convert(path, mine)
    for name in ("config.json", "generation_config.json", "tokenizer.json"):
        assert json.loads((mine / name).read_text()) == json.loads((theirs / name).read_text()), name
    a, b = load_file(mine / "model.safetensors"), load_file(theirs / "model.safetensors")
    assert sorted(a) == sorted(b)
    for name in a:
        assert a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]), name
    line = "<|im_start|>the note is not to be<think> or not, naïve € €€<|im_end|>"
    ids = [AutoTokenizer.from_pretrained(f)(line)["input_ids"] for f in (mine, theirs)]
    assert ids[0] == ids[1]
    if which == "bpe":
        assert len(ids[0]) < len(line.encode())  # the merges and the specials took part
        tok = AutoTokenizer.from_pretrained(mine)
        assert (tok.bos_token, tok.eos_token, tok.unk_token, tok.pad_token) == (
            "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<|im_end|>")


def test_a_gguf_the_reader_does_not_handle_is_converted_by_transformers_saying_so(bpe_gguf, tmp_path):
    """A metadata key the reader does not map (here a Llama rope-scaling type) is refused by name and the
    file converted by transformers instead, with a line saying so."""
    from posenc.extend import gguf_llama, sources

    path = tmp_path / "other.gguf"
    from transformers import LlamaForCausalLM

    config = tiny_config()
    config.vocab_size = len(bpe_vocab()["tokens"])
    write_gguf(LlamaForCausalLM(config), path, bpe_vocab(), extra={"llama.rope.scaling.type": "linear"})
    with pytest.raises(gguf_llama.Unsupported, match="llama.rope.scaling.type"):
        gguf_llama.convert(path, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    lines: list[str] = []
    folder = sources.model_folder(path, tmp_path / "cache", log=lines.append)
    assert (folder / "model.safetensors").is_file()
    # what it converts, where, and its size; the reader's refusal by name; what it wrote
    assert len(lines) == 3 and str(folder) in lines[0], lines
    assert re.match(r"converting other\.gguf \(\d+ kB\) once into a float32 safetensors copy of about \d+ kB", lines[0])
    assert "does not handle other.gguf" in lines[1] and "transformers" in lines[1]
    assert lines[2].startswith(f"wrote {folder} (")


def damaged_copies(path: Path, folder: Path) -> dict[str, tuple[Path, str]]:
    """Copies of the GGUF ``path``, each damaged one way: ``{what: (file, what the refusal says)}``."""
    import struct

    data = path.read_bytes()
    size = len(data)
    cases = {
        "tensor count": (8, "the header counts 1099511627776 tensors"),
        "key/value count": (16, "the header counts 1099511627776 key/value pairs"),
        "first key's length": (24, "claims 1099511627776 bytes, past the end of the file"),
    }
    out = {}
    for what, (offset, message) in cases.items():
        copy = folder / f"{what.replace(' ', '_').replace('/', '_')}.gguf"
        copy.write_bytes(data[:offset] + struct.pack("<Q", 1 << 40) + data[offset + 8:])
        out[what] = (copy, message)
    copy = folder / "truncated.gguf"  # the tensors cut: the header whole, the data short
    copy.write_bytes(data[:size * 2 // 3])
    out["truncated"] = (copy, "past the end of the file")
    copy = folder / "one_tensor_more.gguf"  # a tensor count that fits the file but not its header
    tensors = struct.unpack_from("<Q", data, 8)[0]
    copy.write_bytes(data[:8] + struct.pack("<Q", tensors + 3) + data[16:])
    out["one tensor more"] = (copy, "dimensions (GGUF allows 1 to 4)")  # the tensor data read as a record
    return out


def test_a_damaged_gguf_is_refused_in_one_line_naming_the_file(written, tmp_path, capsys):
    """Each damaged copy: exit 2, one line naming the file and what is wrong, nothing converted, and no
    allocation larger than the file on the way (tracemalloc's peak)."""
    import tracemalloc

    from test_extend import cli

    from posenc.extend import gguf_header, sources

    for what, (path, message) in damaged_copies(written[1], tmp_path).items():
        code, err = cli(capsys, str(path), "--to", "256", "--out", str(tmp_path / "o"))
        assert code == 2 and len(err.strip().splitlines()) == 1, (what, err)
        assert f"{path}: damaged GGUF file" in err and message in err, (what, err)
        tracemalloc.start()
        with pytest.raises(gguf_header.Damaged):
            sources.model_folder(path, tmp_path / "cache", log=lambda s: None)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert peak < path.stat().st_size, (what, peak)
    assert not any((tmp_path / "cache").glob("*")) and not (tmp_path / "o").exists()


def test_the_header_check_passes_a_whole_file_of_another_architecture_to_its_refusal(tmp_path):
    """The check judges sizes, not architectures: a whole GGUF of another architecture passes it and is
    refused by the Llama reader by name, as before."""
    import gguf

    from posenc.extend import gguf_header, gguf_llama

    path = tmp_path / "gpt2.gguf"
    w = gguf.GGUFWriter(str(path), "gpt2")
    w.add_name("tiny gpt2")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    header = gguf_header.check(path)
    assert header.tensors == 1 and header.float32_bytes == 4 * 32
    with pytest.raises(gguf_llama.Unsupported, match="general.architecture 'gpt2'"):
        gguf_llama.convert(path, tmp_path / "out")
