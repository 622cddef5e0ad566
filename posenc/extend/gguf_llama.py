"""posenc's own reader of a Llama GGUF: config, state dict and tokenizer in a few seconds.

transformers converts SmolLM2-135M's ``.gguf`` (``from_pretrained(folder, gguf_file=...)`` and the
tokenizer, saved) in 28 s of CPU, 103 s of wall time on the loaded 2-core machine: it parses the
metadata three times (config, tokenizer, weights; most of it the 49k-token vocabulary) and rebuilds
a GGUF-to-transformers tensor-name map from gguf-py's tables. This reader (9 s of CPU; the numbers
are in docs/guide/extend.md) parses the file once with gguf-py (``GGUFReader`` on a plain view of
its memory map: ``open_gguf``) and does, for the one case it handles, exactly what transformers'
Llama path does:

- **Config**: the metadata keys of ``CONFIG_KEYS`` (transformers' ``GGUF_CONFIG_MAPPING`` for
  ``llama``, ``general`` and the tokenizer's special ids), ``tie_word_embeddings`` when the file has
  no ``output.weight``, ``vocab_size`` from the token list when the file does not state it.
- **Weights**: every tensor through gguf-py's NumPy ``dequantize`` to float32, named by ``TENSORS``;
  the query and key rows un-permuted. llama.cpp's converter (``LlamaModel.permute``) interleaves the
  two halves of every head's rotary pairs, ``w.reshape(H, 2, D/2, d).swapaxes(1, 2)``, for its
  interleaved rotation; transformers rotates halves, so the inverse
  ``w.reshape(H, D/2, 2, d).swapaxes(1, 2)`` is applied, with ``H`` the query heads for ``attn_q``
  and the key/value heads for ``attn_k`` (transformers' ``LlamaTensorProcessor``).
- **Tokenizer**: a GGUF of ``tokenizer.ggml.model = "gpt2"`` (byte-level BPE, SmolLM2's) built with
  the ``tokenizers`` library from the file's tokens and merges: a token spelled outside GPT-2's byte
  alphabet is respelled in it, ``<|endoftext|>`` (GPT-2's default unk/bos/eos, which transformers' builder
  adds, with a new id when the vocabulary lacks it) and the control tokens (type 3) are added as
  special tokens, the user-defined ones (type 4) as plain added tokens, and GPT-2's
  pre-tokenizer is used (``tokenizer.ggml.pre`` must be one of ``GPT2_PRE``: files whose merges were
  learned on another split are not handled).

**Refusal.** Anything else (another architecture, a Llama GGUF named as Mistral, a metadata key of the
architecture or a tensor this reader does not map, another tokenizer) raises ``Unsupported`` naming
it, before anything is written; ``posenc.extend.sources`` then converts through transformers and
says so. tests/test_extend_gguf.py checks on a GGUF written in the test that this reader gives
bitwise the state dict, the config and the token ids of ``from_pretrained(gguf_file=...)``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

ARCHITECTURE = "llama"
TOKENIZER = "gpt2"
GPT2_PRE = ("gpt2", "default", "smollm")  # llama.cpp's names of pre-tokenizers that split as GPT-2 does
CONFIG_KEYS = {  # GGUF key -> transformers config name (transformers' GGUF_CONFIG_MAPPING)
    "general.architecture": "model_type",
    "general.name": "_model_name_or_path",
    "llama.context_length": "max_position_embeddings",
    "llama.block_count": "num_hidden_layers",
    "llama.feed_forward_length": "intermediate_size",
    "llama.embedding_length": "hidden_size",
    "llama.rope.dimension_count": "head_dim",
    "llama.rope.freq_base": "rope_theta",
    "llama.attention.head_count": "num_attention_heads",
    "llama.attention.head_count_kv": "num_key_value_heads",
    "llama.attention.layer_norm_rms_epsilon": "rms_norm_eps",
    "llama.vocab_size": "vocab_size",
    "tokenizer.ggml.bos_token_id": "bos_token_id",
    "tokenizer.ggml.eos_token_id": "eos_token_id",
    "tokenizer.ggml.unknown_token_id": "unk_token_id",
    "tokenizer.ggml.padding_token_id": "pad_token_id",
}
TOKENIZER_KEYS = {  # GGUF key -> the tokenizer's config (what transformers passes to TokenizersBackend)
    "tokenizer.chat_template": "chat_template",
    "tokenizer.ggml.add_bos_token": "add_bos_token",
    "tokenizer.ggml.add_eos_token": "add_eos_token",
}
SPECIAL_TOKENS = {"bos_token": "bos_token_id", "eos_token": "eos_token_id", "unk_token": "unknown_token_id",
                  "pad_token": "padding_token_id"}
READ_ELSEWHERE = {"tokenizer.ggml.model", "tokenizer.ggml.pre", "tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                  "tokenizer.ggml.merges", "tokenizer.ggml.scores", "tokenizer.ggml.add_space_prefix"}
TENSORS = {  # GGUF name (blk.N. stripped) -> transformers name (model.layers.N. added back)
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
CONTROL, USER_DEFINED = 3, 4  # llama.cpp's token types: a control token (<|im_start|>), an added one (<think>)
GPT2_DEFAULT = "<|endoftext|>"  # GPT-2's unk/bos/eos, which transformers' GPT2Tokenizer adds (past the vocab if absent)


class Unsupported(ValueError):
    """A GGUF this reader does not handle; the message names what (the caller falls back to transformers)."""


def _value(field: Any) -> Any:
    """A metadata field's value as Python: a number, a bool, a string, or a list of them (from the
    field's parts, as every gguf-py since 0.10 lays them out)."""
    from gguf import GGUFValueType

    value_type = field.types[-1] if field.types else None
    parts = [field.parts[i] for i in field.data]
    if value_type == GGUFValueType.STRING:
        values = [bytes(part).decode("utf-8") for part in parts]
    else:
        values = [v for part in parts for v in part.tolist()]
    return values if field.types and field.types[0] == GGUFValueType.ARRAY else values[0]


def open_gguf(path: str | Path) -> Any:
    """gguf-py's ``GGUFReader`` of ``path``, slicing a plain ``ndarray`` view of its memory map: each slice
    of an ``np.memmap`` costs about 1.5 µs in ``__array_finalize__``, and the reader takes a million
    of them for SmolLM2's 98k vocabulary and merge strings (6.5 s on the loaded 2-core machine, 1.4 s
    so; the same bytes, tests/test_extend_gguf.py)."""
    import numpy as np
    from gguf import GGUFReader

    class PlainReader(GGUFReader):
        @property
        def data(self) -> Any:
            return self._plain

        @data.setter
        def data(self, mapped: Any) -> None:
            self._plain = np.asarray(mapped)  # a view: the map stays open through .base

    return PlainReader(str(path))


def read_metadata(reader: Any) -> dict[str, Any]:
    """``{key: value}`` of the file's metadata, refusing (``Unsupported``) what this reader does not handle."""
    meta = {key: _value(field) for key, field in reader.fields.items() if not key.startswith("GGUF.")}
    arch, name = meta.get("general.architecture"), str(meta.get("general.name", ""))
    if arch != ARCHITECTURE or "mistral" in name:
        raise Unsupported(f"general.architecture {arch!r} (name {name!r}): this reader handles {ARCHITECTURE!r} "
                          "(not Mistral)")
    unknown = [k for k in meta if k.startswith(ARCHITECTURE + ".") and k not in CONFIG_KEYS]
    if unknown:
        raise Unsupported(f"metadata {unknown} of {arch!r} is not mapped by this reader (known: {sorted(CONFIG_KEYS)})")
    if meta.get("tokenizer.ggml.model") != TOKENIZER or meta.get("tokenizer.ggml.pre", "default") not in GPT2_PRE:
        raise Unsupported(f"tokenizer.ggml.model {meta.get('tokenizer.ggml.model')!r}, tokenizer.ggml.pre "
                          f"{meta.get('tokenizer.ggml.pre')!r}: this reader builds {TOKENIZER!r} with a pre-tokenizer "
                          f"of {GPT2_PRE}")
    return meta


def config_dict(meta: dict[str, Any], tensor_names: list[str]) -> dict[str, Any]:
    """The transformers config dict transformers derives from the same metadata."""
    config = {CONFIG_KEYS[k]: v for k, v in meta.items() if k in CONFIG_KEYS}
    config["tie_word_embeddings"] = "output.weight" not in tensor_names
    config.setdefault("vocab_size", len(meta["tokenizer.ggml.tokens"]))
    return config


def hf_name(gguf_name: str) -> str:
    """The transformers name of a GGUF tensor (``Unsupported`` for one this reader does not map)."""
    parts = gguf_name.split(".", 2)
    if parts[0] == "blk" and len(parts) == 3 and parts[1].isdigit() and parts[2] in TENSORS:
        return f"model.layers.{parts[1]}.{TENSORS[parts[2]]}"
    if gguf_name in TENSORS and not gguf_name.startswith(("attn_", "ffn_")):
        return TENSORS[gguf_name]
    raise Unsupported(f"tensor {gguf_name!r} is not mapped by this reader (known: {sorted(TENSORS)})")


def unpermute(w: Any, heads: int) -> Any:
    """``(H·D, d)`` rows of llama.cpp's order back to transformers' (rotary halves): the inverse of
    ``convert_hf_to_gguf``'s ``w.reshape(H, 2, D/2, d).swapaxes(1, 2)``."""
    return w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(2, 1).reshape(w.shape)


def state_dict(reader: Any, config: dict[str, Any]) -> dict[str, Any]:
    """``{transformers name: float32 tensor}`` of every tensor in the file (query/key rows un-permuted)."""
    import numpy as np
    import torch
    from gguf import dequantize

    names = {t.name: hf_name(t.name) for t in reader.tensors}  # every name checked before any dequantisation
    out = {}
    for tensor in reader.tensors:
        w = dequantize(tensor.data, tensor.tensor_type)  # (out, in) float32 (a view for F32)
        if ".attn_q." in tensor.name:
            w = unpermute(w, config["num_attention_heads"])
        elif ".attn_k." in tensor.name:
            w = unpermute(w, config["num_key_value_heads"])
        out[names[tensor.name]] = torch.from_numpy(np.copy(w)).to(torch.float32)
    return out


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's printable spelling of the 256 bytes (``encoder.py`` of openai/gpt-2)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    extra = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + i) for i, b in enumerate(extra)}}


def tokenizer(meta: dict[str, Any]) -> Any:
    """The byte-level BPE tokenizer of the file, as transformers' ``TokenizersBackend`` (what
    ``AutoTokenizer.from_pretrained(gguf_file=...)`` returns for a ``gpt2`` GGUF)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    tokens = list(meta["tokenizer.ggml.tokens"])
    vocab = {t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8")): i
             for i, t in enumerate(tokens)}
    merges = [tuple(m.split(" ")) for m in meta.get("tokenizer.ggml.merges", [])]
    backend = Tokenizer(models.BPE(vocab=vocab, merges=merges, dropout=None, continuing_subword_prefix="",
                                   end_of_word_suffix="", fuse_unk=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    backend.decoder = decoders.ByteLevel(add_prefix_space=True, trim_offsets=True, use_regex=True)
    backend.post_processor = processors.TemplateProcessing(single="$A:0", pair="$A:0 $B:1", special_tokens=[])
    types = meta.get("tokenizer.ggml.token_type") or []
    control = [AddedToken(t, normalized=False, special=True) for t, token_type in zip(tokens, types)
               if token_type == CONTROL and set(t) <= alphabet]
    backend.add_special_tokens([AddedToken(GPT2_DEFAULT, normalized=False, special=True)] + control)
    known = backend.get_vocab(with_added_tokens=True)
    backend.add_tokens([AddedToken(t, normalized=False, special=False) for t, token_type in zip(tokens, types)
                        if token_type == USER_DEFINED and t in known])  # matched whole, as llama.cpp does
    settings = {name: meta[k] for k, name in TOKENIZER_KEYS.items() if k in meta}
    for name, key in SPECIAL_TOKENS.items():
        token_id = meta.get(f"tokenizer.ggml.{key}")
        settings[name] = tokens[token_id] if token_id is not None else None
    return PreTrainedTokenizerFast(tokenizer_object=backend, **settings)


def convert(path: str | Path, folder: str | Path) -> None:
    """Writes the transformers folder of the Llama GGUF ``path`` into ``folder`` (config, generation
    config, ``model.safetensors`` in float32, tokenizer); raises ``Unsupported`` before writing anything
    for a file this reader does not handle."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    reader = open_gguf(path)
    meta = read_metadata(reader)
    config = AutoConfig.for_model(**config_dict(meta, [t.name for t in reader.tensors]))
    weights = state_dict(reader, config.to_dict())
    tok = tokenizer(meta)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(weights, strict=False, assign=True)
    model.tie_weights()
    missing = sorted(n for n, p in model.state_dict().items() if p.is_meta)
    if missing:
        raise Unsupported(f"{Path(path).name} has no tensor for {missing}")
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
