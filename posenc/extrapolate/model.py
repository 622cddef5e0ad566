"""A small decoder-only transformer (nanoGPT scale) whose positional encoding is any posenc spec.

    x = pe.embed(tok_emb(idx), positions)    (an additive pe adds pe(positions))
    for each block:  x = x + attn(LN(x));  x = x + mlp(LN(x))
    logits = lm_head(LN(x))

Attention is ``posenc.attention(q, k, v, pe, q_positions=..., k_positions=..., causal=True)``, so
rotary, bias and relative kinds are applied inside attention and additive ones are added to the
token embeddings. A ``content`` scheme (FoX, CoPE, DAPE, stick-breaking, PaTH) counts its
positions from the tokens: it gets no positions, and one that reads the layer's input
(``pe.reads_hidden``: FoX's full gate, PaTH) gets the attention block's input, ``LN(x)``, as
``hidden=``. By default **one** pe module is shared by all layers (as T5 shares its bias
table across layers, and as RoPE/ALiBi have no per-layer state anyway); ``pe_per_layer=True``
gives each layer its own (learned tables are then per layer). Positions are always explicit.

Architectures (``arch``): ``"transformer"``, every block attention; ``"hybrid"``, every other
block (the 1st, 3rd, ...) an ``ssm`` block (``posenc.ssm``: a diagonal linear state-space layer in
place of attention, then the same MLP), as Jamba interleaves Mamba and attention layers (Lieber
et al. 2024, arXiv:2403.19887). The positional scheme acts in the remaining attention blocks only
(an additive one is still added to the embeddings); the ssm blocks take no position: their
state carries order by construction. The ssm block comes first, so the first attention block
already reads order-aware features, as in Jamba, where Mamba layers precede attention.

**Per-layer patterns** (``layer_pattern``): ``pe_spec`` may be a list of specs that repeats over
the attention blocks, as Llama 4 puts RoPE in three layers of four and NoPE with its query
temperature in the fourth: ``["rope", "rope", "rope", "nope_temperature"]``; ``{"scheme":
"layers", "pattern": [...]}`` is the same pattern as a spec (what a run records). The number of
attention blocks must be a multiple of the pattern's length; each entry's module is shared by the
blocks that entry falls on (one per block with ``pe_per_layer``), and an additive entry is added
before its own blocks.

**Positions from the tokens** (``positions_fn``): a model may carry a function ``fn(idx [B, L],
training) -> positions`` that makes each sequence's positions from its tokens when ``forward`` is
given none: the structured positions of ``posenc.extrapolate.structured_positions`` (BiPE's segments of
lines, HiRoPE's ``(line, token)``, Abacus and coupled digit positions, Ruoss et al.'s randomized
training positions). A ``[B, L, A]`` result is read as every axis of a structured scheme as it
is; ``[B, L]`` as one axis (spread over a scheme's axes as text). BiPE's intra-segment part
(``pe.embedding(P)``, the schemes with ``intra_positions``) is added to the token embeddings as an
additive pe is. A model with such a function trains seed by seed (``stackable`` is False: its
draws are not ``vmap``'s).

Notation used for tensor shapes: B batch, L length, C = n_embd, H heads, D = C // H, A axes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import posenc
from posenc._validate import check_bool, check_choice, check_int
from posenc.positions import text_positions
from posenc.ssm import DiagonalSSM

ARCHS = ("transformer", "hybrid", "llama")  # llama: transformers' LlamaForCausalLM (posenc.extrapolate.llama)
LAYERS = "layers"
"""The ``scheme`` of a per-layer pattern's spec: ``{"scheme": "layers", "pattern": [spec, ...]}``."""
MAX_PATTERN = 64  # entries in a per-layer pattern (a pattern repeats; 64 covers any model here)


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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not allowed in a per-layer pattern (numbers must be finite)")


def layer_pattern(value: Any) -> list[Any] | None:
    """The entries of a per-layer pattern, or None when ``value`` names one scheme.

    A pattern is a JSON list of SPECs (``'["rope", "rope", "rope", "nope_temperature:floor_scale=64"]'``,
    as ``--scheme`` takes it), that list itself, or ``{"scheme": "layers", "pattern": [...]}`` (a
    dict or its JSON text). Entries are SPEC strings or spec dicts, never patterns; parsed with
    ``json.loads`` only (finite numbers), and anything else raises ValueError/TypeError.
    """
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith(("[", "{")):
            return None
        try:
            parsed = json.loads(text, parse_constant=_no_constant)
        except json.JSONDecodeError as e:
            if text.startswith("{"):
                return None  # a JSON SPEC: posenc.spec says what is wrong with it
            raise ValueError(f"per-layer pattern {text[:80]!r} is not valid JSON ({e.msg} at character {e.pos}); "
                             'write it as a JSON list of SPECs, e.g. ["rope", "rope", "rope", "nope_temperature"]') from None
        if isinstance(parsed, Mapping) and parsed.get("scheme") != LAYERS:
            return None
        value = parsed
    if isinstance(value, Mapping):
        if value.get("scheme") != LAYERS:
            return None
        extra = sorted(set(value) - {"scheme", "pattern"})
        if extra or "pattern" not in value:
            raise ValueError(f"a {LAYERS!r} spec has exactly the keys 'scheme' and 'pattern' (a list of SPECs); "
                             f"got keys {sorted(value)}")
        value = value["pattern"]
    if not isinstance(value, (list, tuple)):
        return None
    if not 1 <= len(value) <= MAX_PATTERN:
        raise ValueError(f"a per-layer pattern has 1 to {MAX_PATTERN} entries, got {len(value)}")
    for i, entry in enumerate(value):
        if not isinstance(entry, (str, Mapping)):
            raise TypeError(f"pattern[{i}] must be a SPEC string or a spec dict, got {entry!r} ({type(entry).__name__})")
        if (entry.get("scheme") == LAYERS if isinstance(entry, Mapping) else entry.strip().startswith("[")):
            raise ValueError(f"pattern[{i}] is itself a pattern; a per-layer pattern lists schemes")
    return list(value)


def pattern_label(labels: list[str]) -> str:
    """``["rope", "rope", "rope", "nope_temperature"]`` -> ``"layers: rope x3, nope_temperature"``."""
    runs: list[list[Any]] = []
    for label in labels:
        if runs and runs[-1][0] == label:
            runs[-1][1] += 1
        else:
            runs.append([label, 1])
    return f"{LAYERS}: " + ", ".join(label if n == 1 else f"{label} x{n}" for label, n in runs)


def build_pe(pe_spec: Any, cfg: GPTConfig) -> nn.Module:
    """``posenc.build(pe_spec)``, checked against the model's sizes (ValueError naming both)."""
    pe = posenc.build(pe_spec)
    model = {"d_model": ("n_embd", cfg.n_embd), "head_dim": ("head_dim", cfg.head_dim),
             "num_heads": ("n_head", cfg.n_head)}
    for size in pe.model_sizes:  # the sizes the kind shares with the model (d_model, head_dim, num_heads)
        name, want = model[size]
        have = getattr(pe, size, None)
        if have is not None and have != want:
            raise ValueError(f"{pe.kind} pe has {size}={have} but the model has {name}={want}")
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

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pe: nn.Module | None, *,
                context_parallel: str | None = None) -> torch.Tensor:
        """``context_parallel``: ``x`` is this rank's shard of each sequence, at global ``positions [L]``,
        and attention spans the whole sequence over the ranks (``posenc.context_parallel_attention``
        with that method)."""
        b, length, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)  # 3 x (B, L, C)
        q, k, v = (t.view(b, length, self.n_head, c // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, H, L, D)
        use = pe if pe is not None and pe.attends else None  # additive, NoPE: nothing in attention
        if context_parallel is not None:  # the block's input LN(x) for a content scheme that reads it
            hidden = x if use is not None and use.reads_hidden else None
            y = posenc.context_parallel_attention(q, k, v, use, positions=positions, causal=self.causal,
                                                  method=context_parallel, hidden=hidden)  # (B, H, L, D)
            return self.proj(y.transpose(1, 2).reshape(b, length, c))  # (B, L, C)
        # positions, or (a content scheme: counted from the tokens) the block's input LN(x) if it reads it
        given = use.attention_keywords(positions, x) if use is not None else {}
        # "chunked" bounds memory at long lengths and equals "materialize" when the map is small;
        # it never needs torch.compile (FlexAttention), so evaluation runs anywhere.
        y = posenc.attention(q, k, v, use, causal=self.causal, backend="chunked", **given)  # (B, H, L, D)
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

    def forward(self, x: torch.Tensor, positions: torch.Tensor, pe: nn.Module | None, *,
                context_parallel: str | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), positions, pe, context_parallel=context_parallel)
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
    ``pe_spec`` is any spec ``posenc.build`` accepts, or a per-layer pattern (``layer_pattern``)."""

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
        self.positions_fn: Any = None  # fn(idx [B, L], training) -> positions: see the module docstring
        self.set_pe(pe_spec)

    @property
    def stackable(self) -> bool:
        """Whether the seeds of this model may train as one stack (``posenc.extrapolate.stack``):
        not when positions come from ``positions_fn`` (its random draws are not vmap's)."""
        return self.positions_fn is None

    # -- positional encoding ----------------------------------------------------------------
    def set_pe(self, pe_spec: Any) -> None:
        """Builds the pe module(s) from a spec, replacing the current ones.

        Used to apply a RoPE scaling to a trained RoPE model: RoPE has no learned parameters, so
        swapping in ``{**spec, "scaling": {...}}`` changes only the frequencies.
        """
        pattern = layer_pattern(pe_spec)
        specs = [pe_spec] if pattern is None else pattern
        blocks = len(self._slot)  # attention blocks only
        if blocks % len(specs):
            raise ValueError(f"a per-layer pattern of {len(specs)} entries needs a multiple of {len(specs)} attention "
                             f"blocks; this model has {blocks} (n_layer={self.cfg.n_layer}, arch={self.arch!r})")
        count = blocks if self.cfg.pe_per_layer else len(specs)
        pes = [build_pe(specs[i % len(specs)], self.cfg) for i in range(count)]
        device = self.lm_head.weight.device
        self.pes = nn.ModuleList(p.to(device) for p in pes)
        self.pattern = None if pattern is None else len(specs)  # the pattern's period, or None for one scheme

    @property
    def pe_spec(self) -> dict[str, Any]:
        if self.pattern is not None:
            return {"scheme": LAYERS, "pattern": [p.spec for p in self.pes[:self.pattern]]}
        return self.pes[0].spec

    def _pe(self, layer: int) -> nn.Module:
        """The pe of block ``layer``: its own (per layer), its pattern entry's, or the one shared."""
        return self.pes[self._slot[layer] % len(self.pes)]

    # -- forward ----------------------------------------------------------------------------
    def forward(self, idx: torch.Tensor, positions: torch.Tensor | None = None, *,
                context_parallel: str | None = None) -> torch.Tensor:
        """``idx [B, L]`` token ids at ``positions [L]`` (default ``0..L-1``) -> logits ``[B, L, V]``.

        ``context_parallel`` (``"ring"``, ``"ulysses"``; under ``torch.distributed``): ``idx`` is this
        rank's shard of every sequence, at its global ``positions`` (``posenc.shard_positions``), and
        each attention block spans the whole sequences over the ranks; every block must be attention
        (``arch="transformer"``) and the positions ``[L]`` given."""
        b, length = idx.shape
        if context_parallel is not None and (self.arch != "transformer" or positions is None or positions.dim() != 1):
            raise ValueError(f"context_parallel={context_parallel!r} shards the sequences of arch='transformer' at "
                             f"given global positions [L]; got arch={self.arch!r} and positions "
                             f"{None if positions is None else list(positions.shape)}")
        if positions is None and self.positions_fn is not None:
            positions = self.positions_fn(idx, self.training)  # (B, L) or (B, L, A): from the tokens
        if positions is None:
            positions = torch.arange(length, device=idx.device)
        x = self.tok_emb(idx)  # (B, L, C)
        one_axis = positions
        per_layer = self.cfg.pe_per_layer or self.pattern is not None
        # An additive pe (or BiPE's intra part) is added to the embeddings once (shared), or before each
        # attention block (per layer).
        if not per_layer:
            x = _embed(x, self.pes[0], _on_axes(one_axis, self.pes[0]))
        for i, block in enumerate(self.blocks):
            if isinstance(block, SSMBlock):
                x = block(x)
                continue
            pe = self._pe(i)
            positions = _on_axes(one_axis, pe)
            if per_layer:
                x = _embed(x, pe, positions)
            x = block(x, positions, pe, context_parallel=context_parallel)
        return self.lm_head(self.ln_f(x))  # (B, L, V)

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def _on_axes(positions: torch.Tensor, pe: nn.Module) -> torch.Tensor:
    """``positions`` as ``pe`` reads them: ``[B, L, A]`` structured positions as they are, one-axis
    ones as text tokens on every axis (``text_positions``)."""
    if positions.dim() == 3:
        return positions
    return text_positions(positions, getattr(pe, "axes", 1))


def _embed(x: torch.Tensor, pe: nn.Module, positions: torch.Tensor) -> torch.Tensor:
    """``x [B, L, C]`` plus what ``pe`` adds to the embeddings: its kind's (``pe.embed``: an additive
    pe's output; nothing for the others), and BiPE's intra-segment part ``pe.embedding(P)``."""
    x = pe.embed(x, positions)  # (B, L, C)
    if hasattr(pe, "intra_positions"):  # bipe, bipe_bias: the absolute offset in the segment
        return x + pe.embedding(positions).to(x.dtype)  # (B, L, C)
    return x


def token_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-token negative log-likelihood in nats: ``[B, L, V]``, ``[B, L]`` -> ``[B, L]`` (float32+)."""
    return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape)
