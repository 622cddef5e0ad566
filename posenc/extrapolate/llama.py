"""``--arch llama``: the benchmark on a model users run, transformers' ``LlamaForCausalLM``.

Sized from the profile's ``GPTConfig`` (``hidden_size = n_embd``, ``num_hidden_layers = n_layer``,
``num_attention_heads = n_head`` with as many key/value heads, ``intermediate_size = mlp_ratio ·
n_embd``; RMSNorm and SwiGLU are Llama's own), with each scheme put in by
``posenc.interop.patch``: the same run, the same data and the same evaluation as the benchmark's
own ``TinyGPT``, on the architecture people fine-tune. It has the interface the parts read:
``model(idx, positions) -> logits``, ``set_pe(spec)`` (a zero-shot RoPE scaling swaps the
frequencies), ``pe_spec``, ``pes`` (the scheme's modules) and ``cfg``. Seeds train one by one
(``stackable = False``): a transformers model is not stacked with ``torch.func``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from posenc.extrapolate.model import GPTConfig, layer_pattern
from posenc.interop.patching import patch

MAX_POSITIONS = 1 << 20  # transformers' max_position_embeddings (only a learned table reads it; it is sized itself)


class LlamaLM(nn.Module):
    """A ``LlamaForCausalLM`` of the profile's size with the positional encoding ``pe_spec``."""

    stackable = False

    def __init__(self, cfg: GPTConfig, pe_spec: Any) -> None:
        super().__init__()
        from transformers import LlamaConfig, LlamaForCausalLM

        self.cfg = cfg
        self.arch = "llama"
        config = LlamaConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.n_embd, num_hidden_layers=cfg.n_layer,
                             num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head,
                             intermediate_size=cfg.mlp_ratio * cfg.n_embd, max_position_embeddings=MAX_POSITIONS,
                             attention_dropout=0.0, tie_word_embeddings=False, use_cache=False,
                             attn_implementation="sdpa")
        self.hf = LlamaForCausalLM(config)
        self.set_pe(pe_spec)

    def set_pe(self, pe_spec: Any) -> None:
        """Patches the model with ``pe_spec`` (a spec, or a per-layer pattern), replacing the last patch."""
        pattern = layer_pattern(pe_spec)
        patch(self.hf, pe_spec if pattern is None else pattern)
        self.pattern = None if pattern is None else len(pattern)
        record = self.hf.config.posenc
        device = next(self.hf.parameters()).device
        holder = getattr(self.hf.model, "posenc_modules", None)
        self.hf.to(device)
        self._specs = [record["modules"][i] for i in record["layers"]]
        self.pes = holder if holder is not None else nn.ModuleList([self.hf.model.rotary_emb.rope])

    @property
    def pe_spec(self) -> dict[str, Any]:
        if self.pattern is not None:
            return {"scheme": "layers", "pattern": self._specs[:self.pattern]}
        return self._specs[0]

    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``idx [B, L]`` at ``positions [L]`` (default ``0..L-1``) -> logits ``[B, L, V]``."""
        if positions is not None:
            positions = positions.reshape(1, -1).expand(idx.shape[0], -1) if positions.dim() == 1 else positions
        return self.hf(input_ids=idx, position_ids=positions, use_cache=False).logits

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
