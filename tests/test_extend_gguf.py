"""A ``.gguf`` model for ``posenc extend``: a tiny random Llama written with the ``gguf`` package (as
llama.cpp's converter writes one), read by ``posenc.extend.sources`` through transformers, kept as
safetensors, and equal to the model it was written from; then the whole path on it."""

from __future__ import annotations

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


def write_gguf(model, path: Path) -> None:
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    tok = byte_tokenizer()
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    w.add_tokenizer_model("gpt2")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([1] * 256 + [3, 3])
    w.add_token_scores([0.0] * 258)
    w.add_token_merges([])
    w.add_bos_token_id(256)
    w.add_eos_token_id(257)
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
