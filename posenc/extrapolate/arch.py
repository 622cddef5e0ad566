"""The benchmark's model of an architecture (``--arch``): ``TinyGPT`` (``transformer``, ``hybrid``,
``posenc.extrapolate.model``) or transformers' ``LlamaForCausalLM`` with the scheme patched in
(``llama``, ``posenc.extrapolate.llama``)."""

from __future__ import annotations

from typing import Any

from torch import nn

from posenc.extrapolate.model import GPTConfig, TinyGPT, check_arch


def build_model(cfg: GPTConfig, pe_spec: Any, *, arch: str = "transformer") -> nn.Module:
    """The model of ``arch`` (one of ``posenc.extrapolate.model.ARCHS``) with the encoding ``pe_spec``."""
    if check_arch(arch, cfg) == "llama":
        from posenc.extrapolate.llama import LlamaLM  # transformers, imported only for this arch

        return LlamaLM(cfg, pe_spec)
    return TinyGPT(cfg, pe_spec, arch=arch)
