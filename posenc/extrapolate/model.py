"""A small decoder-only transformer (nanoGPT scale) whose positional encoding is any posenc spec.

    x = tok_emb(idx) [+ pe(positions) if pe.kind == "additive"]
    for each block:  x = x + attn(LN(x));  x = x + mlp(LN(x))
    logits = lm_head(LN(x))

Attention is ``posenc.attention(q, k, v, pe, q_positions=..., k_positions=..., causal=True)``, so
rotary, bias and relative kinds are applied inside attention and additive ones are added to the
token embeddings. By default **one** pe module is shared by all layers (as T5 shares its bias
table across layers, and as RoPE/ALiBi have no per-layer state anyway); ``pe_per_layer=True``
gives each layer its own (learned tables are then per layer). Positions are always explicit.

Architectures (``arch``): ``"transformer"``, every block attention; ``"hybrid"``, every other
block (the 1st, 3rd, ...) an ``ssm`` block (``posenc.ssm``: a diagonal linear state-space layer in
place of attention, then the same MLP), as Jamba interleaves Mamba and attention layers (Lieber
et al. 2024, arXiv:2403.19887). The positional scheme acts in the remaining attention blocks only
(an additive one is still added to the embeddings); the ssm blocks take no position: their
state carries order by construction. The ssm block comes first, so the first attention block
already reads order-aware features, as in Jamba, where Mamba layers precede attention.

Notation used for tensor shapes: B batch, L length, C = n_embd, H heads, D = C // H.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc._validate import check_bool, check_choice, check_int
from posenc.positions import text_positions
from posenc.ssm import DiagonalSSM

ARCHS = ("transformer", "hybrid")


@dataclass(frozen=True)
class GPTConfig:
    vocab_size: int = 256  # bytes for language modelling; the task vocabulary for tasks
    n_layer: int = 4  # transformer blocks
    n_head: int = 4  # attention heads
    n_embd: int = 128  # model width C; head_dim = C // n_head
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * C
    pe_per_layer: bool = False  # one pe module per layer instead of one shared by all

    def __post_init__(self) -> None:
        for name in ("vocab_size", "n_layer", "n_head", "n_embd", "mlp_ratio"):
            check_int(name, getattr(self, name), min=1)
        check_bool("pe_per_layer", self.pe_per_layer)
        if self.n_embd % self.n_head:
            raise ValueError(f"n_embd must be a multiple of n_head={self.n_head}, got {self.n_embd}")

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


def build_pe(pe_spec: Any, cfg: GPTConfig) -> nn.Module:
    """``posenc.build(pe_spec)``, checked against the model's sizes (ValueError naming both)."""
    pe = posenc.build(pe_spec)
    if pe.kind == "additive" and getattr(pe, "d_model", cfg.n_embd) != cfg.n_embd:
        raise ValueError(f"additive pe has d_model={pe.d_model} but the model has n_embd={cfg.n_embd}")
    if pe.kind in ("rotary", "relative") and getattr(pe, "head_dim", cfg.head_dim) != cfg.head_dim:
        raise ValueError(f"{pe.kind} pe has head_dim={pe.head_dim} but the model has head_dim={cfg.head_dim}")
    if pe.kind in ("bias", "relative") and getattr(pe, "num_heads", cfg.n_head) != cfg.n_head:
        raise ValueError(f"{pe.kind} pe has num_heads={pe.num_heads} but the model has n_head={cfg.n_head}")
    return pe


class CausalSelfAttention(nn.Module):
    """Multi-head self-attention through ``posenc.attention``; causal unless ``causal=False``
    (the vision and time parts read the whole input)."""

    def __init__(self, cfg: GPTConfig, *, causal: bool = True) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.causal = check_bool("causal", causal)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pe: nn.Module | None) -> torch.Tensor:
        b, length, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)  # 3 x (B, L, C)
        q, k, v = (t.view(b, length, self.n_head, c // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, L, D)
        use = pe if pe is not None and (pe.kind not in ("additive", "none") or hasattr(pe, "query_scale")) else None
        # "chunked" bounds memory at long lengths and equals "materialize" when the map is small;
        # it never needs torch.compile (FlexAttention), so evaluation runs anywhere.
        where = positions if use is not None else None  # additive/none: attention needs no positions
        y = posenc.attention(q, k, v, use, q_positions=where, k_positions=where, causal=self.causal,
                             backend="chunked")  # (B, H, L, D)
        return self.proj(y.transpose(1, 2).reshape(b, length, c))  # (B, L, C)


def check_arch(arch: str, cfg: GPTConfig) -> str:
    """``arch`` is one of ``ARCHS``; a hybrid needs two blocks (one ssm, one attention) at least."""
    check_choice("arch", arch, ARCHS)
    if arch == "hybrid" and cfg.n_layer < 2:
        raise ValueError(f"arch='hybrid' needs n_layer >= 2 (an ssm block and an attention block), "
                         f"got n_layer={cfg.n_layer}")
    return arch


def _mlp(cfg: GPTConfig) -> nn.Sequential:
    return nn.Sequential(nn.Linear(cfg.n_embd, cfg.mlp_ratio * cfg.n_embd), nn.GELU(),
                         nn.Linear(cfg.mlp_ratio * cfg.n_embd, cfg.n_embd))


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig, *, causal: bool = True) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg, causal=causal)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = _mlp(cfg)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pe: nn.Module | None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), positions, pe)
        return x + self.mlp(self.ln_2(x))


class SSMBlock(nn.Module):
    """``x = x + ssm(LN(x)); x = x + mlp(LN(x))``: the hybrid's block in place of attention."""

    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.ssm = DiagonalSSM(cfg.n_embd)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = _mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.ssm(self.ln_1(x))  # (B, L, C): no position, the state carries order
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """Decoder-only transformer (or, ``arch="hybrid"``, attention and ssm blocks in turn);
    ``pe_spec`` is any spec ``posenc.build`` accepts."""

    def __init__(self, cfg: GPTConfig, pe_spec: Any, *, arch: str = "transformer") -> None:
        super().__init__()
        self.cfg = cfg
        self.arch = check_arch(arch, cfg)
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.n_embd)  # std 1, the scale of a sinusoidal PE
        hybrid = arch == "hybrid"
        self.blocks = nn.ModuleList(SSMBlock(cfg) if hybrid and i % 2 == 0 else Block(cfg)
                                    for i in range(cfg.n_layer))
        # block index -> its slot in self.pes when each attention block has its own pe
        self._slot = {i: n for n, i in enumerate(i for i, b in enumerate(self.blocks) if isinstance(b, Block))}
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.pes = nn.ModuleList()
        self.set_pe(pe_spec)

    # -- positional encoding ----------------------------------------------------------------
    def set_pe(self, pe_spec: Any) -> None:
        """Builds the pe module(s) from a spec, replacing the current ones.

        Used to apply a RoPE scaling to a trained RoPE model: RoPE has no learned parameters, so
        swapping in ``{**spec, "scaling": {...}}`` changes only the frequencies.
        """
        count = len(self._slot) if self.cfg.pe_per_layer else 1  # attention blocks only
        pes = [build_pe(pe_spec, self.cfg) for _ in range(count)]
        device = self.lm_head.weight.device
        self.pes = nn.ModuleList(p.to(device) for p in pes)

    @property
    def pe_spec(self) -> dict[str, Any]:
        return self.pes[0].spec

    def _pe(self, layer: int) -> nn.Module:
        return self.pes[self._slot[layer] if self.cfg.pe_per_layer else 0]

    # -- forward ----------------------------------------------------------------------------
    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None) -> torch.Tensor:
        """``idx [B, L]`` token ids at ``positions [L]`` (default ``0..L-1``) -> logits ``[B, L, V]``."""
        b, length = idx.shape
        if positions is None:
            positions = torch.arange(length, device=idx.device)
        x = self.tok_emb(idx)  # (B, L, C)
        one_axis = positions
        per_layer = self.cfg.pe_per_layer
        # An additive pe is added to the embeddings once (shared), or before each attention block (per layer).
        if not per_layer and self.pes[0].kind == "additive":
            x = x + self.pes[0](text_positions(one_axis, getattr(self.pes[0], "axes", 1))).to(x.dtype)  # (B, L, C)
        for i, block in enumerate(self.blocks):
            if isinstance(block, SSMBlock):
                x = block(x)
                continue
            pe = self._pe(i)
            positions = text_positions(one_axis, getattr(pe, "axes", 1))  # tokens of text on every axis
            if per_layer and pe.kind == "additive":
                x = x + pe(positions).to(x.dtype)  # (B, L, C)
            x = block(x, positions, pe)
        return self.lm_head(self.ln_f(x))  # (B, L, V)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood in nats: ``[B, L, V]``, ``[B, L]`` -> ``[B, L]`` (float32+)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
