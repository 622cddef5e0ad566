"""RoBERTa and the encoders built like it (XLM-RoBERTa, CamemBERT, RoBERTa-PreLayerNorm,
XLM-RoBERTa-XL, Data2Vec-Text, X-MOD): BERT's layout (a learned table ``embeddings.position_embeddings``
before the embeddings' LayerNorm, the inner self-attention calling transformers' attention
interface), with fairseq's positions: ``create_position_ids_from_input_ids`` counts the non-pad
tokens, ``position_ids = cumsum(ids != pad) · (ids != pad) + padding_idx`` (``padding_idx =
pad_token_id``), so the ``k``-th non-pad token (from 1) reads row ``padding_idx + k`` and every pad
token row ``padding_idx`` (the table's ``nn.Embedding`` padding row: zeros as initialised, never
trained). A left-padded row's first real token is at position 0, as an unpadded one's.

posenc reads the positions the model gives its table (never recounts them): position ``p =
position_ids − (pad_token_id + 1)`` (``Family.table_offset``). Its own encoding (``hf_layer_specs``)
is ``{"scheme": "learned", "d_model": hidden_size, "max_positions": max_position_embeddings −
pad_token_id − 1}``, started from the table's rows past the padding row, so ``patch(model,
hf_layer_specs(model.config))`` leaves the logits unchanged, padded inputs included. Any other
scheme gets the same positions (additive schemes in the embeddings, the others in attention).

**Pad tokens' positions** (the convention posenc names): a pad token keeps the model's own padding
row in the embeddings under every scheme (what RoBERTa adds there), and in attention takes position
0 (posenc's ``-1`` clamped): it is a masked key, and its own output is padding's."""

from __future__ import annotations

from typing import Any


def _get(config: Any, name: str) -> Any:
    return config.get(name) if isinstance(config, dict) else getattr(config, name, None)


def table_offset(config: Any) -> int:
    """The row of position 0: ``pad_token_id + 1`` (RoBERTa's ``padding_idx + 1``)."""
    pad = _get(config, "pad_token_id")
    if not isinstance(pad, int) or isinstance(pad, bool) or pad < 0:
        raise ValueError(f"RoBERTa counts positions past its padding row, pad_token_id; the config's is {pad!r} "
                         "(a non-negative integer is needed)")
    return pad + 1


def own_spec(config: Any) -> dict[str, Any]:
    """The learned table past the padding row as a posenc ``learned`` spec."""
    from posenc.interop.families import gpt2

    spec = gpt2.own_spec(config)
    rows = spec["max_positions"] - table_offset(config)
    if rows < 1:
        raise ValueError(f"max_position_embeddings={spec['max_positions']} leaves no position past RoBERTa's padding "
                         f"row (pad_token_id={table_offset(config) - 1})")
    return {**spec, "max_positions": rows}


def _family():
    from posenc.interop.families import bert

    return bert._family(table_offset=table_offset, own_spec=own_spec)


TYPES = ("roberta", "xlm-roberta", "camembert", "roberta-prelayernorm", "xlm-roberta-xl", "data2vec-text", "xmod")
"""The model types whose embeddings are RoBERTa's (``create_position_ids_from_input_ids``) and whose
inner self-attention calls transformers' attention interface."""
