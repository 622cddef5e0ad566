"""A walk over the causal LMs the installed transformers registers (``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES``):
each model type built tiny from its own config class (``LAYERS`` layers: 4 in the whole walk,
holding every kind of layer the family alternates (``layer_types``: sliding and full, linear and
full attention), its other per-layer lists cut to them; hidden 64, 4 query and 2 key/value heads
(MLA: a key head per query head, ``head_dim = qk_rope_head_dim``), a vocabulary of 128, sliding
windows of 8 and a sparse indexer's top-k of 16 < the ``LENGTH`` tokens it runs (40 in the whole
walk); ``OVERRIDES``: the values a family's config class lacks to build, or needs to build every
kind of layer), random weights (``_wake``: none left at zero), float32, then through
``posenc.interop.patch``:

- ``drop-in`` (models with RoPE): the documented ``HFRotaryEmbedding(posenc.from_hf(config))``
  (``HFRotaryEmbedding.from_config``: one per layer type where the config has them) in place of
  the model's rotary module gives its logits (≤ ``DROP_IN``, 1e-4 relative: the float32 rounding of the model's own angles), and a rope of doubled base there
  changes them (no vacuous pass);
- ``own``: the model's own encoding (``hf_layer_specs(model.config)``) gives the unmodified model's
  logits (≤ ``DROP_IN``) and its greedy tokens through the cache with a left-padded batch;
- ``alibi`` and ``fox``: one training step, then greedy generation through the cache equals
  recomputing the whole sequence.

A model type's outcome is ``pass`` (every check), ``refused: <reason>`` (``patch`` raised a
ValueError naming what it does not support: the same reason for every check), each check's
(``own refused: <reason>; alibi pass; fox pass``) when they differ, ``not built``
(transformers cannot build it tiny from its config class alone, or the unmodified tiny model fails
on the walk's tokens: the walk's limit, not posenc's). Anything
else (different logits or tokens, a crash) fails the test. The outcomes are the table of
docs/guide/hf_walk.md, which the test checks (``python tests/test_hf_walk.py`` rewrites it).

The default run walks a sample (``SAMPLE``: every variant of the Family record, the families
without RoPE, a DeepSeek Sparse Attention model) with 2 layers and 19 tokens (make test's time); the
whole walk (every registered type: about 15 minutes on a shared 2-core machine, over make test's
budget) runs with ``POSENC_HF_WALK=all``; ``python tests/test_hf_walk.py`` walks them all
(each within ``LIMIT`` seconds) and rewrites the page.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")

import posenc.interop  # noqa: E402
import posenc.interop.patching  # noqa: E402
from posenc.interop.families.structure import find  # noqa: E402

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "hf_walk.md"
TEXT = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, global_head_dim=32, vocab_size=128, max_position_embeddings=256, sliding_window=8,
            attention_chunk_size=8,
            moe_intermediate_size=32, num_local_experts=4, num_experts=4, n_routed_experts=4, num_experts_per_tok=2,
            first_k_dense_replace=1, n_group=1, topk_group=1, kv_lora_rank=16, q_lora_rank=32, qk_nope_head_dim=8,
            qk_rope_head_dim=8, v_head_dim=16, rotary_dim=8, pad_token_id=0, bos_token_id=1, eos_token_id=2, use_cache=True,
            attention_dropout=0.0, hidden_dropout=0.0, attn_pdrop=0.0, resid_pdrop=0.0, embd_pdrop=0.0, dropout=0.0,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
            attn_layer_period=2, attn_layer_offset=1,  # Jamba's attention in one of its layers
            index_topk=16, index_n_heads=2, index_head_dim=16)  # DeepSeek Sparse Attention: 16 keys of the 40 a query sees
TOWER = dict(num_hidden_layers=1, depth=1, hidden_size=32, embed_dim=32, intermediate_size=32, num_attention_heads=2,
             num_heads=2, out_hidden_size=64, patch_size=2, spatial_merge_size=1, temporal_patch_size=1, image_size=8)
# what a family's config class needs beyond TEXT to build tiny with every kind of layer it alternates
OVERRIDES = {
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=8),  # one global, one local layer
    "dots1": dict(n_shared_experts=1),  # its default (None) does not build
    "zaya": dict(num_experts_per_tok=1),  # "ZAYA currently supports num_experts_per_tok=1 only"
    "lfm2_moe": dict(layer_types=["conv", "full_attention"]),  # its default (None) does not build
    "cohere_compass_text": dict(rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e4}}),
    **{t: dict(indexer_budget=8, indexer_compress_ratio=2, indexer_n_heads=2, indexer_kv_heads=1, indexer_head_dim=16)
       for t in ("qwen4_exp", "qwen4_exp_text")},  # its sparse attention's indexer: no defaults
    "mimo_v2_flash": dict(head_dim=24),  # int(24 · 0.334) = 8 rotated dims (its checkpoints: 192 · 0.334 = 64); 16 gives 5
    # its rotary_dim (TEXT's 8) and the factor its model reads agree, as in MiniMax-M3's checkpoints (64 of 128)
    "minimax_m3_vl_text": dict(rope_parameters={"rope_type": "default", "rope_theta": 5e6, "partial_rotary_factor": 0.5}),
    # its query temperature steps every 4 positions (its default, every 16384, is 1 at the walk's 23)
    "ministral3": dict(rope_parameters={"rope_type": "yarn", "rope_theta": 1e6, "factor": 16.0, "beta_fast": 32.0,
                                        "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                                        "original_max_position_embeddings": 4, "llama_4_scaling_beta": 0.1}),
}
WHOLE = os.environ.get("POSENC_HF_WALK") == "all" or __name__ == "__main__"  # the whole walk (it writes the page)
# tokens run (the whole walk: more than any window, 8, or top-k, 16); tokens generated
LENGTH, NEW = (40 if WHOLE else 19), 4
LAYERS = 4 if WHOLE else 2  # layers of a family that alternates kinds of layer (every kind, in the family's order)
# one model type per variant of the Family record, and the families without RoPE (the default run)
SAMPLE = ("llama", "cohere2", "gpt_oss", "gemma2", "falcon", "gpt_neox", "llama4_text",
          "gemma3_text", "qwen3_5", "smollm3", "olmo3", "gpt_neo", "bloom", "gptj", "mamba",
          # found from the modeling module (pairs (2i, 2i+1); MLA; a clockwise rotation), more rotaries (one
          # per base), two attention calls per layer, the offset learned table, MPT's ALiBi, a query temperature
          "glm", "axk2", "nanochat", "granite_swa", "diffllama", "opt", "mpt", "ministral3")


def causal_lm_types() -> list[str]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    return sorted(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)


def tiny(model_type: str, seed: int = 0) -> torch.nn.Module:
    """``model_type``'s causal LM, tiny (``TEXT`` sizes; a vision or audio tower ``TOWER``-sized), eager attention."""
    default = transformers.AutoConfig.for_model(model_type)
    config_class = type(default)
    subs = getattr(config_class, "sub_configs", {}) or {}

    def has(config, key: str) -> bool:
        try:
            return hasattr(config, key)
        except Exception:  # noqa: BLE001 - a per-layer attribute (Gemma 4's head_dim) refuses a global read: it is there
            return True

    def known(sizes: dict, config) -> dict:  # only the keys the config has (another would be read as set)
        return {k: v for k, v in sizes.items() if has(config, k)
                and not isinstance(getattr(type(config), k, None), property)}  # a derived size (Falcon's head_dim)

    if "text_config" in subs:
        kwargs = {k: known(TEXT if k == "text_config" else TOWER, getattr(default, k)) for k in subs
                  if getattr(default, k, None) is not None}
        kwargs["text_config"] = {**kwargs.get("text_config", {}), **OVERRIDES.get(model_type, {})}
    else:
        kwargs = {**known(TEXT, default), **OVERRIDES.get(model_type, {})}
    text_default = getattr(default, "text_config", None) if "text_config" in subs else default
    kinds = list(dict.fromkeys(getattr(text_default, "layer_types", None) or ()))
    rope = getattr(text_default, "rope_parameters", None)
    if len(kinds) == 1 and isinstance(rope, dict) and kinds[0] in rope and len(rope) == 2:  # rope parameters for
        kinds = list(rope)  # two kinds of layer, a default of one (Laguna, Mellum: sliding and full attention)
    for sizes in (kwargs[k] for k in subs if k == "text_config" and k in kwargs) if "text_config" in subs else (kwargs,):
        if len(kinds) > 1 and not isinstance(getattr(type(text_default), "layer_types", None), property):
            _every_kind(sizes, text_default, kinds)  # every kind of layer the family alternates (Qwen 3.5's linear
            # and full attention; Lara-mini's linear, sliding and full; Jamba's derive from attn_layer_period)
        if "qk_rope_head_dim" in sizes:  # MLA: a rotary qk_rope_head_dim wide, keys of every query head
            sizes.update({k: sizes[v] for k, v in (("head_dim", "qk_rope_head_dim"),
                                                   ("num_key_value_heads", "num_attention_heads")) if k in sizes})
    config = config_class(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).float().eval()
    _wake(model, seed)
    return model


def _wake(model: torch.nn.Module, seed: int) -> None:
    """Parameters a family initialises to zero filled with small random values: a zero-initialised
    query-key temperature (Zaya's ``qk_norm.temp``) or gate leaves attention uniform, so no position
    encoding could change the logits and every check would pass vacuously."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() and p.is_floating_point() and not p.any():
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def _every_kind(sizes: dict, default, kinds: list[str]) -> None:
    """``LAYERS`` layers holding every kind of layer the family alternates: the first ``LAYERS`` of
    its default ``layer_types`` when they hold every kind (its own order), else the kinds in turn;
    the config's other per-layer lists (``layer_rope_theta``, ``mlp_layer_types``,
    ``indexer_types``: as long as its default layers) cut to the same layers."""
    own = list(getattr(default, "layer_types", None) or ())
    first = own[:LAYERS]
    chosen = first if set(first) >= set(kinds) else [kinds[i % len(kinds)] for i in range(LAYERS)]
    sizes.update(num_hidden_layers=LAYERS, layer_types=chosen)
    n = getattr(default, "num_hidden_layers", None)
    for key, value in default.to_dict().items():
        if isinstance(value, list) and n and len(value) == n and key not in sizes and key.endswith(("_types", "_theta")):
            # a kind its default layers lack (Laguna's, from its rope parameters) takes the first layer's value
            sizes[key] = value[:LAYERS] if first is chosen else [value[own.index(k) if k in own else 0] for k in chosen]


def _ids(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two rows of ``LENGTH`` tokens, the second left-padded by 3, and its attention mask."""
    ids = torch.randint(3, 128, (2, LENGTH), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    ids[1, :3], mask[1, :3] = 0, 0
    return ids, mask


def _generate(model, ids, mask, use_cache=True) -> torch.Tensor:
    with torch.no_grad():
        return model.generate(ids, attention_mask=mask, max_new_tokens=NEW, do_sample=False, use_cache=use_cache,
                              pad_token_id=0)[:, ids.shape[1]:]


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def _own(model, ids, mask) -> None:
    from posenc.interop.hf import hf_layer_specs

    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
    tokens = _generate(model, ids, mask)
    posenc.interop.patch(model, hf_layer_specs(model.config))
    with torch.no_grad():
        got = model(ids, attention_mask=mask).logits
    diff = _relative(got[:, 3:], want[:, 3:])  # the padded row's padding: no token to compare
    assert diff <= DROP_IN, f"own encoding: logits differ by {diff:.3g} (relative)"
    assert torch.equal(_generate(model, ids, mask), tokens), "own encoding: generated tokens differ"
    posenc.interop.unpatch(model)


DROP_IN = 1e-4
"""The tolerance of the drop-in and of the own encoding through posenc (relative logits): the model forms its angles in float32 and posenc in
float64, so their cos and sin differ by the model's rounding, about ``angle · 2⁻²⁴``: Gemma 4's
512-wide global heads at 40 tokens, 2.7e-6 on cos (measured), which four layers carry to 1.1e-5 to
4.2e-5 of the logits (Gemma 4 Unified); a wrong rotary moves them by 1e-2 and more (the doubled base below)."""


def _dropin(model, ids, mask) -> None:
    """The documented drop-in: the model's rotary module replaced by ``HFRotaryEmbedding`` of
    ``from_hf(config)`` (one per layer type where the config has them) gives the same logits."""
    from posenc.interop.hf import HFRotaryEmbedding

    parts = find(model)
    with torch.no_grad():
        want = model(ids, attention_mask=mask).logits
        theirs = getattr(parts.decoder, parts.rotary)
        setattr(parts.decoder, parts.rotary, HFRotaryEmbedding.from_config(model.config))
        try:
            got = model(ids, attention_mask=mask).logits
        finally:
            setattr(parts.decoder, parts.rotary, theirs)
    diff = _relative(got[:, 3:], want[:, 3:])
    assert diff <= DROP_IN, f"drop-in: logits differ by {diff:.3g} (relative)"
    with torch.no_grad():  # and it has an effect: a rope of doubled base changes the logits (no vacuous pass)
        setattr(parts.decoder, parts.rotary, _doubled(HFRotaryEmbedding.from_config(model.config)))
        try:
            doubled = model(ids, attention_mask=mask).logits
        finally:
            setattr(parts.decoder, parts.rotary, theirs)
    change = _relative(doubled[:, 3:], want[:, 3:])
    assert change > 1e-7, f"drop-in: a rope of doubled base changes the logits by {change:.3g} (no effect)"


def _doubled(rotary):
    """``rotary`` (an ``HFRotaryEmbedding``) with each rope's base doubled."""
    import posenc
    from posenc.interop.hf import HFRotaryEmbedding

    ropes = {None: rotary.rope} if rotary.rope is not None else dict(rotary.ropes.items())
    doubled = {}
    for key, rope in ropes.items():
        twice = posenc.build({**rope.spec, "base": 2 * rope.spec["base"]})
        twice.hf_table, twice.hf_apply_direction = rotary.table, rotary.apply_direction
        doubled[key] = twice
    return HFRotaryEmbedding(doubled[None] if None in doubled else doubled, table=rotary.table,
                             apply_direction=rotary.apply_direction)


def _scheme(model, ids, mask, spec: str) -> None:
    posenc.interop.patch(model, spec)
    model.train()
    loss = model(ids, attention_mask=mask, labels=ids).loss
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            if p.grad is not None:
                p -= 1e-3 * p.grad
                p.grad = None
    model.eval()
    assert torch.isfinite(loss), f"{spec}: loss {loss}"
    cached, recomputed = _generate(model, ids, mask), _generate(model, ids, mask, use_cache=False)
    assert torch.equal(cached, recomputed), f"{spec}: generation through the cache differs from recomputing"
    posenc.interop.unpatch(model)


def _reason(err: Exception) -> str:
    """A refusal's reason, without the parts that name this build (sizes, values)."""
    text = str(err).split("\n")[0]
    return re.sub(r"\s+", " ", text)[:160].replace("|", "/").strip()


def walk(model_type: str) -> str:
    """``model_type``'s outcome (see the module docstring); AssertionError on a wrong result."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            model = tiny(model_type)
    except _Late:
        raise
    except Exception as err:  # noqa: BLE001 - transformers cannot build it tiny: the walk's limit, recorded
        return f"not built: {type(err).__name__}"
    ids, mask = _ids(seed=len(model_type))
    try:
        with torch.no_grad():
            model(ids, attention_mask=mask)
    except Exception as err:  # noqa: BLE001 - the unmodified model fails on the walk's input: the walk's limit
        return f"not built: the unmodified model fails on the walk's tokens ({type(err).__name__})"
    try:
        posenc.interop.patching.family_of(model)  # its parts, found from its structure
    except ValueError as err:
        return f"refused: {_reason(err)}"
    results = {}
    checks = [("own", lambda: _own(model, ids, mask)), ("alibi", lambda: _scheme(model, ids, mask, "alibi")),
              ("fox", lambda: _scheme(model, ids, mask, "fox"))]
    if find(model).rotary is not None:  # RoPE: the documented drop-in first
        checks.insert(0, ("drop-in", lambda: _dropin(model, ids, mask)))
    for check, run in checks:
        try:
            run()
            results[check] = "pass"
        except ValueError as err:
            results[check] = f"refused: {_reason(err)}"
            if getattr(model, "_posenc_original", None) is not None:
                posenc.interop.unpatch(model)
    if len(set(results.values())) == 1:
        return next(iter(results.values()))
    return "; ".join(f"{check} {outcome}" for check, outcome in results.items())


def read_page() -> dict[str, str]:
    causal = PAGE.read_text(encoding="utf-8").split("\n## Beyond causal LMs\n", 1)[0]  # the other registries' rows
    rows = [line for line in causal.splitlines() if line.startswith("| `")]
    return {re.findall(r"`([^`]+)`", row)[0]: row.split("|")[2].strip() for row in rows}


def _types() -> list[str]:
    every = causal_lm_types()
    if os.environ.get("POSENC_HF_WALK") == "all":
        return every
    return [t for t in SAMPLE if t in every]


@pytest.mark.slow
@pytest.mark.parametrize("model_type", _types())
def test_walk(model_type):
    """The model type's outcome is the one docs/guide/hf_walk.md records (a pass, or a refusal with
    its reason); a wrong result (logits, tokens, cache) fails inside ``walk``."""
    recorded = read_page()
    assert model_type in recorded, f"{model_type} is registered by transformers but not in {PAGE.name}"
    got = walk(model_type)
    assert got == recorded[model_type], f"{model_type}: walked {got!r}, the page records {recorded[model_type]!r}"


def test_the_page_lists_registered_types():
    """The page's model types are registered ones; with ``POSENC_HF_WALK=all``, every one of them."""
    listed, every = sorted(read_page()), causal_lm_types()
    assert set(listed) <= set(every) and set(_types()) <= set(listed)


def write_page(outcomes: dict[str, str]) -> None:
    counts: dict[str, int] = {}
    for outcome in outcomes.values():
        key = "partial (some checks refused)" if ";" in outcome else outcome.split(":")[0]
        counts[key] = counts.get(key, 0) + 1
    text = PAGE.read_text(encoding="utf-8") if PAGE.exists() else ""
    head = text.split("## Outcomes", 1)[0]
    beyond = "\n## Beyond causal LMs\n"  # tests/test_hf_walk_registries.py's section, kept as it is
    rest = beyond + text.split(beyond, 1)[1] if beyond in text else ""
    lines = [head.rstrip() + "\n\n## Outcomes\n", f"transformers {transformers.__version__}: "
             + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) + f" of {len(outcomes)}.\n",
             "| model type | outcome |", "|---|---|"]
    lines += [f"| `{t}` | {o} |" for t, o in sorted(outcomes.items())]
    PAGE.write_text("\n".join(lines) + "\n" + rest, encoding="utf-8")


class _Late(Exception):
    """A model type past ``LIMIT`` seconds in the whole walk (``__main__``)."""


LIMIT = 240  # seconds per model type in the whole walk: BLT and Falcon-H1 build or decode far slower than the rest


def _late(*_) -> None:
    raise _Late()


if __name__ == "__main__":  # python tests/test_hf_walk.py [model types]: walk and rewrite the page
    import signal
    import time

    chosen = sys.argv[1:] or causal_lm_types()
    found = read_page() if PAGE.exists() else {}
    signal.signal(signal.SIGALRM, _late)
    for t in chosen:
        start = time.perf_counter()
        signal.alarm(LIMIT)
        try:
            found[t] = walk(t)
        except _Late:
            found[t] = f"timed out (over {LIMIT} s)"
        except AssertionError as err:
            found[t] = f"FAILS: {_reason(err)}"
        except Exception as err:  # noqa: BLE001 - a crash inside patch or the model: recorded to be fixed
            found[t] = f"CRASHES: {type(err).__name__}: {_reason(err)}"
        finally:
            signal.alarm(0)
        print(f"{t}\t{time.perf_counter() - start:.1f}s\t{found[t]}", flush=True)
    write_page(found)
