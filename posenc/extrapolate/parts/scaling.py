"""The ``scaling`` part (``--part scaling``): RoPE scalings on the trained RoPE model of the ``lm`` part.

Protocol: the trained RoPE model with linear / NTK / YaRN scaling, zero-shot (factor = T/L at
length T) and after a short fine-tune at F·L with factor F (and a no-scaling control), evaluated at
every length of the text part. Claims: NTK-aware and YaRN beat plain RoPE zero-shot; position
interpolation beats fine-tuning without it; YaRN beats linear after the fine-tune. HiRoPE
(the structured positions' claims, ``profile.hirope``) is one more zero-shot row on the same trained model: its
``(line, token)`` positions from the bytes, a window of the training length, no training
(``run_hirope``); its claims and rows are in ``posenc.extrapolate.parts.structure``.
Dual Chunk Attention (``profile.dual_chunk``; An et al. 2024, Qwen2.5-1M) is another zero-shot row
on it, this part's own, beside the scalings: chunks of the training length, vLLM's local share of
1/8 and its temperature from the training length (``dual_chunk_spec``), no training; its claim is
this part's.

YaRN (``yarn_betas``): ``beta_fast``/``beta_slow`` put the ends of the ramp at the same share of
the rotary pairs as the paper's LLaMA setting (pairs 20 and 46 of 64 at L₀ = 4096); the paper's
32/1 at head_dim 16 and L₀ = 32 would interpolate 6 of 8 pairs exactly as linear does.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import math
import time
from typing import Any

import torch

from posenc.extrapolate import figures as F
from posenc.stats import estimates as stats
from posenc.extrapolate.distributed import broadcast
from posenc.stats.findings import Verdict, ppl_claim
from posenc.extrapolate.model import TinyGPT
from posenc.stats.page_parts import Page
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.parts.lm import (checkpoint_path, lm_batches, lm_data, lm_eval, lm_model, lm_settings,
                                           lm_specs, ppl_summary, ppl_table, save_checkpoint)
from posenc.extrapolate.plan import Log, Run, arch_label
from posenc.extrapolate.profiles import Profile, settings_hash
from posenc.extrapolate.runs import Context, curve, train_with_bar
from posenc.stats.estimates import LMTable


def yarn_betas(head_dim: int, base: float, original: int) -> dict[str, float]:
    """``beta_fast``/``beta_slow`` that start and end YaRN's ramp at pairs ``round(20/64 · d/2)``
    and ``round(46/64 · d/2)`` of ``d/2``, as the paper's 32/1 do at d = 128, L₀ = 4096, base 10⁴.

    Pair ``i`` completes ``L₀/(2π) · base^(−2i/d)`` rotations over ``L₀``; the betas are those
    of pairs ``low + 1/2`` and ``high − 1/2``, which YaRN floors and ceils to ``low`` and ``high``.
    """
    pairs = head_dim // 2

    def rotations(i: float) -> float:
        return original / (2 * math.pi) * base ** (-2 * i / head_dim)

    low, high = round(20 / 64 * pairs), round(46 / 64 * pairs)
    high = max(high, low + 1)
    return {"beta_fast": rotations(low + 0.5), "beta_slow": rotations(high - 0.5)}


def scaling_dict(scaling_type: str, factor: float, original: int, *, head_dim: int | None = None,
                 base: float = 10000.0) -> dict[str, Any]:
    """``{"type": scaling_type, "factor": factor}`` plus ``original_max_positions`` where the type takes it,
    and YaRN's betas sized to ``head_dim`` and ``original`` when ``head_dim`` is given."""
    from posenc import scaling

    params = inspect.signature(scaling.SCALINGS[scaling_type]).parameters
    out: dict[str, Any] = {"type": scaling_type, "factor": float(factor)}
    if "original_max_positions" in params:
        out["original_max_positions"] = int(original)
    if scaling_type == "yarn" and head_dim is not None:
        out.update(yarn_betas(head_dim, base, original))
    return out


def scaling_label(scaling_type: str, mode: str, factor: int) -> str:
    if mode == "zero-shot":
        return f"rope + {scaling_type} (zero-shot)"
    what = "no scaling" if scaling_type == "none" else f"{scaling_type} x{factor}"
    return f"rope + {what} (fine-tuned at {factor}L)"


# -- runs --------------------------------------------------------------------------------------

def base_run(run: Run, profile: Profile, corpus_sha: str) -> Run:
    """The text part's run of the RoPE model a scaling run starts from (same seed and architecture)."""
    return Run("lm", run.seed, "rope", run.spec, lm_settings(profile, corpus_sha), profile=profile.name, arch=run.arch)


def _base_model(ctx: Context, run: Run) -> TinyGPT:
    """The trained RoPE model of the same seed: its checkpoint, or trained again (deterministic)."""
    base = base_run(run, ctx.profile, ctx.corpus_sha)
    model = lm_model(ctx, run.spec, run.seed, run.arch)
    path = checkpoint_path(ctx, base)
    have = broadcast(path.is_file(), ctx.dist)
    if have:
        model.load_state_dict(torch.load(path, map_location=ctx.dist.device, weights_only=True))
    else:
        ctx.log(f"checkpoint of the RoPE model (seed {run.seed}) not found; training it again")
        lm = ctx.profile.lm
        batches = lm_batches(ctx, run.seed, batch=lm.train.batch_size, length=lm.train_length)
        train_with_bar(ctx, [model], lm.train, [batches], "lm rope (base)")
        save_checkpoint(ctx, base, model)
    model.eval()
    return model


def run_scaling(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One scaling of the trained RoPE model for each of ``runs`` (its seeds); a fine-tune trains
    the seeds as one stacked model."""
    lm, sc, run = ctx.profile.lm, ctx.profile.scaling, runs[0]
    models = [_base_model(ctx, r) for r in runs]
    scaling_type, mode = run.variant["type"], run.variant["mode"]
    L = lm.train_length

    def scaled(factor: float) -> dict[str, Any]:
        if scaling_type == "none" or factor <= 1:
            return copy.deepcopy(run.spec)
        return {**run.spec, "scaling": scaling_dict(scaling_type, factor, L, head_dim=run.spec.get("head_dim"),
                                                    base=run.spec.get("base", 10000.0))}

    records: list[dict[str, Any]] = [{"train_length": L, "variant": run.variant} for _ in runs]
    if mode == "zero-shot":
        for record, model in zip(records, models):
            record["eval"] = lm_eval(ctx, model, set_pe=lambda length, m=model: m.set_pe(scaled(length / L)))
        return records
    f = sc.finetune_factor
    for model in models:
        model.set_pe(scaled(f))
    batch = max(1, lm.train.batch_size // f)  # the same tokens per step as training (not world-dependent)
    cfg = dataclasses.replace(lm.train, steps=sc.finetune_steps, batch_size=batch,
                              warmup=max(1, sc.finetune_steps // 10))
    t0 = time.perf_counter()
    curves = train_with_bar(ctx, models, cfg, [lm_batches(ctx, r.seed + 10_000, batch=batch, length=f * L)
                                               for r in runs], f"finetune {scaling_type}", lr=sc.finetune_lr)
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    for record, model, losses in zip(records, models, curves):
        record.update(train_loss=curve(losses), train_seconds=round(seconds, 2), eval=lm_eval(ctx, model))
    return records


HIROPE = "hirope"  # the ``type`` of a HiRoPE run's variant (zero-shot, on the trained rope model)


def hirope_spec(rope: dict[str, Any], profile: Profile) -> dict[str, Any]:
    """HiRoPE on the trained ``rope`` (same head_dim, base, rotary_dim, layout): the profile's
    ``token_dims`` (None: hirope's default) and ``window`` (None: the training length)."""
    from posenc import registry

    settings = profile.hirope
    spec: dict[str, Any] = {"scheme": HIROPE, **{k: rope[k] for k in ("head_dim", "base", "rotary_dim", "layout")
                                                 if k in rope}}
    if settings is not None and settings.token_dims is not None:
        spec["token_dims"] = settings.token_dims
    window = None if settings is None else settings.window
    spec["window"] = profile.lm.train_length if window is None else window
    return registry.normalize_spec(spec)


def run_hirope(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """HiRoPE applied zero-shot to the trained RoPE model of each of ``runs`` (its seeds): its
    (line, token) positions from the bytes (``posenc.extrapolate.structured_positions``), no training."""
    from posenc.extrapolate import structured_positions as structured

    out = []
    for run in runs:
        model = _base_model(ctx, run)
        spec = hirope_spec(run.spec, ctx.profile)
        model.set_pe(spec)
        model.positions_fn = structured.lines_and_tokens()
        out.append({"train_length": ctx.profile.lm.train_length, "variant": run.variant, "hirope": spec,
                    "eval": lm_eval(ctx, model)})
    return out


def hirope_runs(profile: Profile, base: dict[str, Any], corpus_sha: str) -> list[Run]:
    """HiRoPE zero-shot on the trained rope model (``base``: its spec), one run per seed of the
    scaling part (none without ``profile.hirope`` or on another architecture than the transformer):
    the structured positions' rows, which ``parts.structure`` adds beside this part's runs."""
    if profile.hirope is None or profile.arch != "transformer":
        return []
    settings = settings_hash({"lm": profile.lm, "hirope": profile.hirope, "corpus": corpus_sha})
    spec = hirope_spec(base, profile)
    variant = {"type": HIROPE, "mode": "zero-shot", "factor": 1, "token_dims": spec["token_dims"],
               "window": spec["window"]}
    return [Run("scaling", seed, "rope + hirope (zero-shot)", base, settings, variant, profile.name, profile.arch)
            for seed in profile.seeds_for("scaling")]


def is_hirope(record: dict[str, Any]) -> bool:
    return (record.get("variant") or {}).get("type") == HIROPE


DUAL_CHUNK = "dual_chunk"  # the ``type`` of a Dual Chunk Attention run's variant (zero-shot, on the trained rope)


def dual_chunk_spec(rope: dict[str, Any], profile: Profile) -> dict[str, Any]:
    """Dual Chunk Attention on the trained ``rope`` (its head_dim, base and layout), fitted to the
    training length (``DualChunk.fit_to_training``: chunk_size = L, local_size = L/8, the temperature's
    L₀ = L)."""
    from posenc import registry

    given = {"scheme": DUAL_CHUNK, **{k: rope[k] for k in ("head_dim", "base", "layout") if k in rope}}
    fitted = registry.get(DUAL_CHUNK).cls.fit_to_training(given, profile.lm.train_length)
    return registry.normalize_spec({**given, **fitted})


def run_dual_chunk(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """Dual Chunk Attention applied zero-shot to the trained RoPE model of each of ``runs`` (its seeds)."""
    out = []
    for run in runs:
        model = _base_model(ctx, run)
        spec = dual_chunk_spec(run.spec, ctx.profile)
        model.set_pe(spec)
        out.append({"train_length": ctx.profile.lm.train_length, "variant": run.variant, "dual_chunk": spec,
                    "eval": lm_eval(ctx, model)})
    return out


def dual_chunk_runs(profile: Profile, base: dict[str, Any], corpus_sha: str, seed: int) -> list[Run]:
    """Dual Chunk Attention zero-shot on the trained rope model (``base``: its spec) of ``seed`` (none
    without ``profile.dual_chunk`` or on another architecture than the transformer)."""
    partial = base.get("rotary_dim") not in (None, base.get("head_dim"))  # dual_chunk rotates every pair
    if not profile.dual_chunk or profile.arch != "transformer" or partial:
        return []
    spec = dual_chunk_spec(base, profile)
    settings = settings_hash({"lm": profile.lm, "dual_chunk": spec, "corpus": corpus_sha})
    variant = {"type": DUAL_CHUNK, "mode": "zero-shot", "factor": "T/L", "chunk_size": spec["chunk_size"],
               "local_size": spec["local_size"]}
    return [Run("scaling", seed, scaling_label(DUAL_CHUNK, "zero-shot", 1), base, settings, variant, profile.name,
                profile.arch)]


# -- claims and section ----------------------------------------------------------------------

def scaling_verdicts(lm: LMTable, scaling: LMTable, labels: dict[tuple[str, str], str], factor: int, *,
                     base: str = "rope") -> list[Verdict]:
    """Claims on RoPE scalings at the fine-tune length ``factor·L``; ``labels[(type, mode)]`` names
    the scaling runs (``type`` "none" is the fine-tune without scaling), ``base`` the LM run of the
    RoPE model they start from."""
    merged = LMTable({**lm.blocks, **scaling.blocks}, {**lm.cannot, **scaling.cannot},
                     sorted(set(lm.lengths) | set(scaling.lengths)), lm.train_length)
    at = lm.train_length * factor
    zero = {t: lab for (t, mode), lab in labels.items() if mode == "zero-shot"}
    tuned = {t: lab for (t, mode), lab in labels.items() if mode == "fine-tune"}
    out = []
    for scaling_type, source in (("ntk", "bloc97 2023 (NTK-aware); Peng et al. 2023"),
                                 ("yarn", "Peng et al. 2023 (YaRN)"),
                                 (DUAL_CHUNK, "An et al. 2024 (Dual Chunk Attention); Qwen2.5-1M")):
        if scaling_type in zero:
            out.append(ppl_claim(merged, source, f"zero-shot {scaling_type} beats plain RoPE at {factor}L",
                                 (zero[scaling_type], at), (base, at)))
    if "linear" in tuned and "none" in tuned:
        out.append(ppl_claim(merged, "Chen et al. 2023 (position interpolation)",
                             f"after a short fine-tune at {factor}L, linear interpolation beats "
                             "fine-tuning without it",
                             (tuned["linear"], at), (tuned["none"], at)))
    if "yarn" in tuned and "linear" in tuned:
        out.append(ppl_claim(merged, "Peng et al. 2023 (YaRN)",
                             f"fine-tuned at {factor}L, YaRN beats linear interpolation",
                             (tuned["yarn"], at), (tuned["linear"], at)))
    return out


def scaling_section(page: Page, lm_recs: list[dict[str, Any]],
                    sc_recs: list[dict[str, Any]]) -> list[Verdict]:
    page.add("<h2>RoPE scalings on the trained RoPE model</h2>")
    if not sc_recs or not lm_recs:
        page.add("<p>Not run in this profile (it needs an unscaled <code>rope</code> scheme).</p>")
        return []
    lm, sc = stats.lm_table(lm_recs), stats.lm_table(sc_recs)
    labels = {(r["variant"]["type"], r["variant"]["mode"]): r["label"] for r in sc_recs}
    # the LM run the scalings start from: the one with their base spec (its label may be "rope (base=500)")
    arch = sc_recs[0].get("arch", "transformer")  # and the same model (a hybrid rope has the same spec)
    base = next((r["label"] for r in lm_recs if r["spec"] == sc_recs[0]["spec"]
                 and r.get("arch", "transformer") == arch), "rope")
    factor = next((r["variant"]["factor"] for r in sc_recs if r["variant"]["mode"] == "fine-tune"), 4)
    page.add("<p>Zero-shot: the trained RoPE model's frequencies are rescaled at each length T with factor T/L "
             f"(no training). Fine-tuned: a short fine-tune at {factor}L with factor {factor} (and a control "
             f"fine-tuned at {factor}L without scaling), then evaluated at every length.</p>" + _yarn_note(sc_recs)
             + _dual_chunk_note(sc_recs))
    page.figure("rope_scalings", lambda: F.scaling(lm, sc, labels, base=base),
                "RoPE scalings: zero-shot and after a fine-tune; a scaling keeps its colour in both panels "
                "(fine-tuned: dashed); bands: 95% intervals.")
    merged = stats.LMTable({**lm.blocks, **sc.blocks}, {**lm.cannot, **sc.cannot},
                           sorted(set(lm.lengths) | set(sc.lengths)), lm.train_length)
    page.add(ppl_table(merged, [base, *labels.values()], "nonoverlap"))
    return scaling_verdicts(lm, sc, labels, int(factor), base=base)


def _dual_chunk_note(sc_recs: list[dict[str, Any]]) -> str:
    spec = next((r["dual_chunk"] for r in sc_recs if r["variant"]["type"] == DUAL_CHUNK and "dual_chunk" in r), None)
    if spec is None:
        return ""
    return (f"<p>Dual Chunk Attention (An et al. 2024; Qwen2.5-1M's long-context inference, vLLM's "
            f"<code>dual_chunk_rope</code>), zero-shot on the same model: chunks of {spec['chunk_size'] - spec['local_size']}"
            f" tokens (chunk_size {spec['chunk_size']}, local_size {spec['local_size']}), so no query–key distance "
            f"exceeds {spec['chunk_size']}, and its logit temperature from L₀ = "
            f"{spec['original_max_position_embeddings']}.</p>")


def _yarn_note(sc_recs: list[dict[str, Any]]) -> str:
    from posenc.scaling import yarn_correction_range

    spec, L = sc_recs[0]["spec"], sc_recs[0].get("train_length")
    if "head_dim" not in spec or not L or not any(r["variant"]["type"] == "yarn" for r in sc_recs):
        return ""
    d, base = spec["head_dim"], spec.get("base", 10000.0)
    betas = yarn_betas(d, base, L)
    low, high = yarn_correction_range(d, base, L, betas["beta_fast"], betas["beta_slow"])
    plow, phigh = yarn_correction_range(d, base, L, 32.0, 1.0)
    return (f"<p class=muted>YaRN here: beta_fast = {betas['beta_fast']:.3g}, beta_slow = {betas['beta_slow']:.3g} "
            f"(rotations over L₀ = {L}), sized so its ramp runs from pair {low} to pair {high} of {d // 2}, the same "
            "share of the pairs as the paper's 32/1 at head_dim 128 and L₀ = 4096 (pairs 20–46 of 64). The paper's "
            f"32/1 would ramp from pair {plow} to {phigh} here and interpolate every later pair exactly as linear "
            "does. Even so, with so few pairs, \"YaRN beats linear\" tests YaRN's split of the frequencies and its "
            "attention temperature together.</p>")


class Scaling(Part):
    """The ``lm`` part's model, data and summary line (``parts.lm``'s functions); its own runs,
    claims and section."""

    name = "scaling"
    lists_specs = False  # the spec is the base RoPE's

    def model(self, profile: Profile):
        return profile.lm.model

    def load(self, profile: Profile, corpus: str | None):
        return lm_data(profile, corpus) if self.name in profile.parts else None

    def summary(self, record: dict[str, Any]) -> str:
        return ppl_summary(record)

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        from posenc import scaling

        if self.name not in profile.parts:
            return []
        base = next(((lab, sp) for lab, sp in lm_specs(profile, schemes)
                     if sp["scheme"] == "rope" and sp.get("scaling") is None), None)
        types = [t for t in profile.scaling.types if t in scaling.SCALINGS]
        for t in profile.scaling.types:
            if t not in scaling.SCALINGS:
                log(f"note: RoPE scaling {t!r} is not available in this posenc; skipped")
        if base is None:
            log("note: no unscaled 'rope' scheme among the schemes, so the RoPE scalings are skipped")
            return []
        settings = settings_hash({"lm": profile.lm, "scaling": profile.scaling, "corpus": corpus_sha})
        f = profile.scaling.finetune_factor
        runs = []
        for seed in profile.seeds_for(self.name):
            for mode, scaling_types in (("zero-shot", types), ("fine-tune", ["none", *types])):
                for scaling_type in scaling_types:
                    variant = {"type": scaling_type, "mode": mode, "factor": "T/L" if mode == "zero-shot" else f}
                    label = arch_label(scaling_label(scaling_type, mode, f), profile.arch)
                    runs.append(Run(self.name, seed, label, base[1], settings, variant, profile.name, profile.arch))
            runs += dual_chunk_runs(profile, base[1], corpus_sha, seed)  # zero-shot, beside the scalings
        return runs

    def depends_on(self, run: Run, profile: Profile, corpus_sha: str) -> str | None:
        return base_run(run, profile, corpus_sha).key

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        scaling_type = runs[0].variant.get("type")
        if scaling_type == HIROPE:
            return run_hirope(ctx, runs)
        return run_dual_chunk(ctx, runs) if scaling_type == DUAL_CHUNK else run_scaling(ctx, runs)

    def records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if r["part"] in ("lm", self.name)]  # the base model's rows too

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        lm = [r for r in records if r["part"] == "lm"]
        own = [r for r in records if r["part"] == self.name and not is_hirope(r)]  # HiRoPE's: parts.structure
        return Section(scaling_section(page, lm, own))


PART = Scaling()
