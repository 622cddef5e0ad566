"""BART and the encoder–decoders built like it (mBART, PLBart): an encoder and a decoder
(``model.encoder``, ``model.decoder``: ``patching/stacks.py`` patches each as a model of its own),
each with a learned table ``embed_positions`` (``BartLearnedPositionalEmbedding``, an
``nn.Embedding`` of ``max_position_embeddings + 2`` rows whose row ``p + 2`` holds position ``p``:
fairseq's offset, ``Family.table_offset``, checked against the table's own ``offset``) added to the
token embeddings before ``layernorm_embedding``. The encoder counts ``0..L-1`` (no padding count);
the decoder counts from its cache's length. posenc reads the rows the table's own forward reads
(``families/bert.py``'s ``own_rows``), never recounting them.

The encoder's self-attention is bidirectional (``is_causal`` False), the decoder's causal
(``is_causal`` True), each read from the module; the decoder's cross-attention (``encoder_attn``)
has no positions and keeps transformers' SDPA. ``hf_layer_specs`` gives ``{"scheme": "learned",
"d_model": d_model, "max_positions": max_position_embeddings}`` for each encoder layer, then each
decoder layer (started from each stack's own table: logits unchanged)."""

from __future__ import annotations

from typing import Any

STACKS = (("Encoder", "encoder_layers", "encoder_attention_heads"),
          ("Decoder", "decoder_layers", "decoder_attention_heads"))


def own_spec(config: Any) -> dict[str, Any]:
    """A BART config's (object or ``config.json`` dict) table as a posenc ``learned`` spec."""
    from posenc.interop.families.gpt2 import _get

    return {"scheme": "learned", "d_model": _get(config, "d_model", "hidden_size"),
            "max_positions": _get(config, "max_position_embeddings")}


def sinusoidal_spec(config: Any) -> dict[str, Any]:
    """Marian's and Pegasus's fixed table (``create_weight``: ``[sin(p·θ_i) | cos(p·θ_i)]``, ``θ_i =
    10000^(−2i/d)``, sin half then cos half) as posenc's ``sinusoidal`` of ``layout="half"``."""
    from posenc.interop.families.gpt2 import _get

    return {"scheme": "sinusoidal", "d_model": _get(config, "d_model", "hidden_size"), "base": 10000.0,
            "layout": "half"}


def _family(**fields: Any):
    from posenc.interop.families.record import Family

    return Family(**{**dict(rotary=None, positions="learned", layers="layers", attention="self_attn", table_holder="",
                            table_attr="embed_positions", table_offset=2, own_spec=own_spec, stacks=STACKS), **fields})


def _sinusoidal_family():
    """Marian, Pegasus: BART's layout, a fixed sinusoidal table in each stack (no offset), checked row
    by row against posenc's before it is replaced."""
    return _family(table_offset=0, own_spec=sinusoidal_spec)


TYPES = ("bart", "mbart", "plbart")
SINUSOIDAL = ("marian", "pegasus")
UNOFFSET = ("blenderbot", "blenderbot-small")
"""BlenderBot's and BlenderBot Small's: BART's layout, their learned tables without the offset."""
