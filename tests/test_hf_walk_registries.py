"""A walk over the model types transformers registers beyond causal LMs (issue 51): the masked-LM,
sequence-to-sequence, speech sequence-to-sequence, image-classification and CTC registries, each
type built tiny from its own config class (``SIZES``: the keys its config has; ``OVERRIDES``: the
fix a family's config needs to build tiny, named), random weights (seeded), float32, eager attention,
its inputs drawn for its registry (``_inputs``: two rows, the second padded where the model takes a
mask), then through ``posenc.interop.patch``:

- ``own``: the model's own encoding (``hf_layer_specs``) gives the unmodified model's outputs (≤ 1e-5
  relative, padding excluded);
- the registry's scheme (``SCHEME``: ``alibi`` for text and speech, ``rope_mixed`` for images, placed
  in every self-attention): the outputs change (no vacuous pass), a training step runs (finite loss,
  gradients), and a sequence-to-sequence model generates greedily through the cache exactly as it does
  recomputing every step.

A type's outcome is ``pass``; ``refused: <reason>`` (a ValueError naming what posenc does not
support), per check where they differ; ``no positions`` (no attention module: a convolutional or
pooling network, nothing to place); ``not built`` (transformers cannot build it tiny from its config,
or the unmodified tiny model fails on the walk's inputs: the walk's limit, not posenc's). Anything else
(different outputs, a crash, a scheme without effect) fails. The outcomes are docs/guide/hf_walk.md's
section "Beyond causal LMs", which the test checks; ``python tests/test_hf_walk_registries.py`` walks
every registered type (within ``LIMIT`` seconds each) and rewrites the section; the default run walks
``SAMPLE``, the whole walk runs with ``POSENC_HF_WALK=all``.
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

PAGE = Path(__file__).resolve().parents[1] / "docs" / "guide" / "hf_walk.md"
SECTION = "\n## Beyond causal LMs\n"  # the heading, a line of its own
REGISTRIES = {  # name -> (transformers' mapping of model type to class name, the auto class, the inputs)
    "masked LM": ("MODEL_FOR_MASKED_LM_MAPPING_NAMES", "AutoModelForMaskedLM", "text"),
    "sequence-to-sequence": ("MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "AutoModelForSeq2SeqLM", "text2text"),
    "speech sequence-to-sequence": ("MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "AutoModelForSpeechSeq2Seq", "speech2text"),
    "image classification": ("MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES", "AutoModelForImageClassification", "image"),
    "CTC": ("MODEL_FOR_CTC_MAPPING_NAMES", "AutoModelForCTC", "audio"),
}
SCHEME = {"text": "alibi", "text2text": "alibi", "speech2text": "alibi", "image": "rope_mixed", "audio": "alibi"}
LENGTH, NEW, IMAGE, SAMPLES = 24, 4, 32, 4000  # tokens, tokens generated, image side, audio samples
VOCAB = 96
SIZES = dict(num_hidden_layers=2, hidden_size=64, intermediate_size=64, num_attention_heads=4, num_key_value_heads=4,
             head_dim=16, vocab_size=VOCAB, max_position_embeddings=128, pad_token_id=0, bos_token_id=1,
             eos_token_id=2, decoder_start_token_id=1, embedding_size=64, type_vocab_size=2,
             # encoder-decoders (BART, Marian, Whisper, T5)
             d_model=64, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=64, num_layers=2, num_decoder_layers=2, num_heads=4, d_kv=16,
             d_ff=64, max_source_positions=64, max_target_positions=64, num_mel_bins=16,
             # vision
             image_size=IMAGE, patch_size=8, num_channels=3, num_labels=3,
             # speech encoders (wav2vec2 and its kin)
             conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
             num_conv_pos_embedding_groups=2, num_feat_extract_layers=2,
             # no randomness in the comparison
             hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, dropout=0.0, attention_dropout=0.0,
             activation_dropout=0.0, hidden_dropout=0.0, feat_proj_dropout=0.0, layerdrop=0.0,
             encoder_layerdrop=0.0, decoder_layerdrop=0.0, dropout_rate=0.0, mask_time_prob=0.0)
SWIN = dict(embed_dim=32, depths=[1, 1], num_heads=[2, 4], window_size=4, patch_size=4)  # an 8×8 grid, windows of 4
OVERRIDES: dict[str, dict] = {  # what a family's config class needs beyond SIZES to build tiny, named per type
    # DeBERTa-v2/v3's checkpoints: disentangled attention, no absolute table (the config's defaults are neither)
    "deberta-v2": dict(relative_attention=True, position_biased_input=False, pos_att_type=["p2c", "c2p"]),
    **{t: SWIN for t in ("swin", "swinv2", "donut-swin")},
}
SAMPLE = {  # the default run (make test's time): a type per kind of encoding and registry
    "masked LM": ("bert", "roberta", "modernbert", "deberta-v2"),
    "sequence-to-sequence": ("bart", "marian", "t5", "t5gemma", "voxtral"),  # T5Gemma: refused; Voxtral: a text_config
    "speech sequence-to-sequence": ("whisper",),
    "image classification": ("vit", "ijepa", "dinov2", "convnext"),
    "CTC": ("wav2vec2", "sew"),
}
WHOLE = os.environ.get("POSENC_HF_WALK") == "all" or __name__ == "__main__"
LIMIT = 120  # seconds per model type in the whole walk


def registered_classes(registry: str) -> dict[str, str | tuple[str, ...]]:
    from transformers.models.auto import modeling_auto

    return getattr(modeling_auto, REGISTRIES[registry][0])


def registered(registry: str) -> list[str]:
    return sorted(registered_classes(registry))


def tiny(registry: str, model_type: str, seed: int = 0) -> torch.nn.Module:
    """``model_type``'s model of ``registry``, tiny (``SIZES``' keys its config has), eager attention."""
    default = transformers.AutoConfig.for_model(model_type)

    def known(config) -> dict:
        own = config.to_dict()
        return {k: v for k, v in SIZES.items() if k in own
                and not isinstance(getattr(type(config), k, None), property)
                and isinstance(own[k], (list, tuple)) == isinstance(v, (list, tuple))}  # Swin: a head count per stage

    kwargs = {**known(default), **OVERRIDES.get(model_type, {})}
    for sub in getattr(type(default), "sub_configs", {}) or {}:
        if getattr(default, sub, None) is not None:
            kwargs[sub] = known(getattr(default, sub))
    config = type(default)(**kwargs)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    names = registered_classes(registry)[model_type]  # the registry's class (DeiT: the first of two)
    model = getattr(transformers, names if isinstance(names, str) else names[0])(config).float().eval()
    _wake(model, seed)
    return model


def _wake(model: torch.nn.Module, seed: int) -> None:
    """Parameters a family initialises to zero (NeoMME's output projection and gates) filled with
    small random values: left at zero, attention would not reach the outputs, and every check would
    pass vacuously (the scheme's effect check catches that)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() and p.is_floating_point() and not p.any():
                p.copy_(0.1 * torch.randn(p.shape, generator=gen))


def _inputs(registry: str, model: torch.nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """The registry's inputs: two rows, the second padded (right-padded, as encoders are) where the
    model takes a mask."""
    g = torch.Generator().manual_seed(seed)
    kind = REGISTRIES[registry][2]
    config = model.config
    if kind in ("text", "text2text"):
        ids = torch.randint(3, VOCAB, (2, LENGTH), generator=g)
        mask = torch.ones_like(ids)
        ids[1, -5:], mask[1, -5:] = 0, 0
        inputs = {"input_ids": ids, "attention_mask": mask}
        if kind == "text2text":
            inputs["decoder_input_ids"] = torch.cat([torch.ones(2, 1, dtype=torch.long),
                                                     torch.randint(3, VOCAB, (2, 7), generator=g)], 1)
        return inputs
    if kind == "image":
        return {"pixel_values": torch.randn(2, 3, IMAGE, IMAGE, generator=g)}
    if kind == "audio":
        values = torch.randn(2, SAMPLES, generator=g)
        mask = torch.ones(2, SAMPLES, dtype=torch.long)
        mask[1, -SAMPLES // 4:] = 0
        return {"input_values": values, "attention_mask": mask}
    bins = getattr(config, "num_mel_bins", None) or getattr(config, "feature_size", 16)
    frames = 2 * getattr(config, "max_source_positions", 32)  # Whisper: exactly twice its encoder positions
    return {model.main_input_name: torch.randn(2, bins, frames, generator=g),
            "decoder_input_ids": torch.cat([torch.ones(2, 1, dtype=torch.long),
                                            torch.randint(3, VOCAB, (2, 7), generator=g)], 1)}


def _outputs(model, inputs) -> torch.Tensor:
    out = model(**inputs)
    return out.logits if getattr(out, "logits", None) is not None else out[0]


def _kept(inputs, outputs: torch.Tensor) -> torch.Tensor:
    """The outputs of unpadded tokens (a padded query's output is the model's own business)."""
    mask = inputs.get("attention_mask")
    if mask is None or "decoder_input_ids" in inputs or mask.shape[1] != outputs.shape[1]:
        return outputs
    return outputs[mask.bool()]


def _relative(got: torch.Tensor, want: torch.Tensor) -> float:
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


def _own(model, inputs) -> None:
    from posenc.interop.hf import hf_layer_specs

    with torch.no_grad():
        want = _outputs(model, inputs)
    posenc.interop.patch(model, hf_layer_specs(model))  # the model: where its own encoding needs its weights
    try:
        with torch.no_grad():
            got = _outputs(model, inputs)
    finally:
        posenc.interop.unpatch(model)
    diff = _relative(_kept(inputs, got), _kept(inputs, want))
    assert diff <= 1e-5, f"own encoding: outputs differ by {diff:.3g} (relative)"


def _generate(model, inputs, use_cache: bool) -> torch.Tensor:
    source = {k: v for k, v in inputs.items() if not k.startswith("decoder_")}
    with torch.no_grad():
        return model.generate(**source, max_new_tokens=NEW, do_sample=False, use_cache=use_cache, pad_token_id=0,
                              decoder_start_token_id=1)  # the tiny config's (T5's config has none)


def _scheme(model, inputs, spec: str, kind: str) -> None:
    with torch.no_grad():
        before = _outputs(model, inputs)
    posenc.interop.patch(model, spec)
    try:
        with torch.no_grad():
            after = _outputs(model, inputs)
        change = _relative(_kept(inputs, after), _kept(inputs, before))
        assert change > 1e-6, f"{spec}: the outputs change by {change:.3g} (no effect)"
        model.train()
        loss = _outputs(model, inputs).float().pow(2).mean()
        loss.backward()
        model.eval()
        assert torch.isfinite(loss), f"{spec}: loss {loss}"
        assert any(p.grad is not None for p in model.parameters()), f"{spec}: no gradient"
        model.zero_grad(set_to_none=True)
        if kind in ("text2text", "speech2text"):
            cached, recomputed = _generate(model, inputs, True), _generate(model, inputs, False)
            assert torch.equal(cached, recomputed), f"{spec}: generation through the cache differs from recomputing"
    finally:
        posenc.interop.unpatch(model)


def _reason(err: Exception) -> str:
    """A refusal's first line, cut after at most 160 characters at a word's end (no name cut in two)."""
    text = re.sub(r"\s+", " ", str(err).split("\n")[0]).replace("|", "/").strip()
    return text if len(text) <= 160 else text[:160].rsplit(" ", 1)[0] + " …"


def _attends(model: torch.nn.Module) -> bool:
    """Whether any module of ``model`` is an attention (by its class name, or torch's own)."""
    return any("attention" in type(m).__name__.lower() or isinstance(m, torch.nn.MultiheadAttention)
               for m in model.modules())


def walk(registry: str, model_type: str) -> str:
    """``model_type``'s outcome in ``registry`` (see the module docstring); AssertionError on a wrong result."""
    try:
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            model = tiny(registry, model_type)
    except _Late:
        raise
    except Exception as err:  # noqa: BLE001 - transformers cannot build it tiny: the walk's limit, recorded
        return f"not built: {type(err).__name__}"
    if not _attends(model):  # nothing for a scheme of posenc's to run in
        if any("position" in name for name, _ in model.named_parameters()):
            return "no attention module (its positions: a table outside attention, kept)"
        return "no positions (no attention module, no position table)"
    inputs = _inputs(registry, model, seed=len(model_type))
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _outputs(model, inputs)
    except _Late:
        raise
    except Exception as err:  # noqa: BLE001 - the unmodified model fails on the walk's inputs: the walk's limit
        return f"not built: the unmodified model fails on the walk's inputs ({type(err).__name__})"
    try:
        posenc.interop.patching.family_of(model)
    except ValueError as err:
        return f"refused: {_reason(err)}"
    kind = REGISTRIES[registry][2]
    spec = SCHEME[kind]
    results = {}
    for check, run in (("own", lambda: _own(model, inputs)), (spec, lambda: _scheme(model, inputs, spec, kind))):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                run()
            results[check] = "pass"
        except ValueError as err:
            results[check] = f"refused: {_reason(err)}"
    if len(set(results.values())) == 1:
        return next(iter(results.values()))
    return "; ".join(f"{check} {outcome}" for check, outcome in results.items())


def read_section() -> dict[tuple[str, str], str]:
    """(registry, model type) -> outcome, from the page's section."""
    text = PAGE.read_text(encoding="utf-8")
    if SECTION not in text:
        return {}
    found, registry = {}, None
    for line in text.split(SECTION, 1)[1].splitlines():
        if line.startswith("### "):
            registry = line[4:].strip()
        elif line.startswith("| `") and registry is not None:
            cells = line.split("|")
            found[(registry, re.findall(r"`([^`]+)`", cells[1])[0])] = cells[2].strip()
        elif line.startswith("## "):
            break
    return found


def _kind_of(outcome: str) -> str:
    return "partial (some checks refused)" if ";" in outcome else outcome.split(":")[0].split(" (")[0]


def write_section(outcomes: dict[tuple[str, str], str]) -> None:
    """Rewrites the page's section from ``outcomes``, leaving the rest of the page as it is."""
    text = PAGE.read_text(encoding="utf-8")
    head, _, tail = text.partition(SECTION)
    rest = "\n## " + tail.split("\n## ", 1)[1] if "\n## " in tail else ""
    lines = [SECTION.strip(), "",
             f"transformers {transformers.__version__}, `python tests/test_hf_walk_registries.py` "
             "(the checks: that file's docstring).", ""]
    for registry in REGISTRIES:
        rows = {t: o for (r, t), o in sorted(outcomes.items()) if r == registry}
        counts: dict[str, int] = {}
        for outcome in rows.values():
            counts[_kind_of(outcome)] = counts.get(_kind_of(outcome), 0) + 1
        lines += [f"### {registry}", "", ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
                  + f" of {len(rows)}.", "", "| model type | outcome |", "|---|---|"]
        lines += [f"| `{t}` | {o} |" for t, o in rows.items()] + [""]
    PAGE.write_text(head.rstrip() + "\n\n" + "\n".join(lines).rstrip() + "\n" + rest, encoding="utf-8")


def _cases() -> list[tuple[str, str]]:
    if WHOLE:
        return [(r, t) for r in REGISTRIES for t in registered(r)]
    return [(r, t) for r, types in SAMPLE.items() for t in types if t in registered(r)]


@pytest.mark.slow
@pytest.mark.parametrize(("registry", "model_type"), _cases())
def test_walk(registry, model_type):
    """The type's outcome is the one the page records; a wrong result fails inside ``walk``."""
    recorded = read_section()
    assert (registry, model_type) in recorded, f"{registry} {model_type} is not in {PAGE.name}"
    got = walk(registry, model_type)
    assert got == recorded[(registry, model_type)], \
        f"{registry} {model_type}: walked {got!r}, the page records {recorded[(registry, model_type)]!r}"


def test_the_section_lists_every_registered_type():
    """Every type of the five registries is in the page, and nothing else."""
    recorded = set(read_section())
    every = {(r, t) for r in REGISTRIES for t in registered(r)}
    assert recorded == every, f"missing {sorted(every - recorded)[:5]}, not registered {sorted(recorded - every)[:5]}"


class _Late(Exception):
    """A model type past ``LIMIT`` seconds in the whole walk (``__main__``)."""


def _late(*_) -> None:
    raise _Late()


if __name__ == "__main__":  # python tests/test_hf_walk_registries.py [model types]: walk, rewrite the section
    import signal
    import time

    wanted = set(sys.argv[1:])
    found = read_section()
    signal.signal(signal.SIGALRM, _late)
    for registry, model_type in [(r, t) for r in REGISTRIES for t in registered(r)]:
        if wanted and model_type not in wanted:
            continue
        start = time.perf_counter()
        signal.alarm(LIMIT)
        try:
            found[(registry, model_type)] = walk(registry, model_type)
        except _Late:
            found[(registry, model_type)] = f"timed out (over {LIMIT} s)"
        except AssertionError as err:
            found[(registry, model_type)] = f"FAILS: {_reason(err)}"
        except Exception as err:  # noqa: BLE001 - a crash inside patch or the model: recorded to be fixed
            found[(registry, model_type)] = f"CRASHES: {type(err).__name__}: {_reason(err)}"
        finally:
            signal.alarm(0)
        print(f"{registry}\t{model_type}\t{time.perf_counter() - start:.1f}s\t{found[(registry, model_type)]}",
              flush=True)
    write_section(found)
