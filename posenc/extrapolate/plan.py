"""The plan: a profile and a list of schemes expand into runs, each with a stable key.

A run's key hashes (profile, part, full scheme spec, variant, seed, settings hash), so the same
arguments give the same keys and a finished run is recognised in the results file. User schemes
are SPEC strings (``posenc.spec``); the sizes they leave out come from the benchmark's model.

Settings that decide an outcome follow the training length ``L`` (the longest training
sequence) when the spec leaves them out (``fit_to_training``):
- T5: ``max_distance = L/2`` and ``num_buckets`` the largest (at most T5's 32) for which every
  bucket is reached by a distance below ``L``, so every bucket is trained and every distance past
  ``L`` falls into the trained last bucket (T5's 32 buckets up to 128 at L = 32 left the buckets
  for distances of 35 and more at their random initialisation);
- FIRE: ``L_threshold = L``, so its ``max(L, i)`` normalisation engages past the training length;
- YaRN (``yarn_betas``): ``beta_fast``/``beta_slow`` put the ends of the ramp at the same share of
  the rotary pairs as the paper's LLaMA setting (pairs 20 and 46 of 64 at L₀ = 4096); the paper's
  32/1 at head_dim 16 and L₀ = 32 would interpolate 6 of 8 pairs exactly as linear does.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from posenc import registry
from posenc.extrapolate import tasks as T
from posenc.extrapolate import vision
from posenc.extrapolate.model import GPTConfig, build_pe, check_arch
from posenc.extrapolate.profiles import Profile, settings_hash

Log = Callable[[str], None]


# -- schemes -----------------------------------------------------------------------------------

def resolve_scheme(text: str | dict[str, Any], cfg: GPTConfig, *, max_positions: int) -> tuple[str, dict[str, Any]]:
    """A SPEC (name, ``name:k=v,...``, JSON) as ``(label, full spec)`` sized for the model.

    Sizes the spec leaves out come from the model (``d_model``, ``head_dim``, ``num_heads``) and
    the longest training sequence (``max_positions``); a bias with a ``bidirectional`` switch
    is made causal (T5's decoder buckets), unless the spec says otherwise.
    """
    from posenc import spec as S

    given = S.as_spec(text)
    filled = S.fill_sizes(given, dim=cfg.n_embd, num_heads=cfg.n_head, length=max_positions,
                          head_dim=cfg.head_dim)
    plain = isinstance(text, str) and text.strip() == given["scheme"]
    label = given["scheme"] if plain else S.label(filled)
    if "bidirectional" in registry.get(given["scheme"]).params and "bidirectional" not in given:
        filled["bidirectional"] = False
    filled.update(fit_to_training(given, max_positions))
    full = registry.normalize_spec(filled)
    rows = full.get("max_positions")
    if isinstance(rows, int) and rows < max_positions:
        raise ValueError(f"{label}: max_positions={rows} is shorter than the training sequences "
                         f"({max_positions} positions); leave it out to use {max_positions}")
    build_pe(full, cfg)  # fails now, with the sizes named, rather than when its run starts
    return label, full


def fit_to_training(given: dict[str, Any], length: int) -> dict[str, Any]:
    """The settings of ``given``'s scheme that follow the training length (see the module
    docstring), for the keys the spec leaves out."""
    from posenc import reference as ref

    out: dict[str, Any] = {}
    if given["scheme"] == "t5" and "num_buckets" not in given and "max_distance" not in given:
        bidirectional = bool(given.get("bidirectional", False))
        distance = max(length // 2, 2)
        reached = -np.arange(length) if not bidirectional else np.arange(-length + 1, length)
        buckets = 32
        while buckets > (4 if bidirectional else 2):
            half = buckets // 2 if bidirectional else buckets
            if distance >= half // 2 + 1 and np.unique(ref.t5_bucket(reached, num_buckets=buckets,
                                                                    max_distance=distance,
                                                                    bidirectional=bidirectional)).size == buckets:
                break
            buckets -= 1
        out.update(num_buckets=buckets, max_distance=distance)
    if given["scheme"] == "fire" and "L_threshold" not in given:
        out["L_threshold"] = float(length)
    return out


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


def available_schemes(names: tuple[str, ...], log: Log) -> tuple[str, ...]:
    """The profile's default schemes that this posenc has (a missing one is reported, not fatal)."""
    known = set(registry.schemes())
    out = tuple(n for n in names if n in known)
    for n in names:
        if n not in known:
            log(f"note: scheme {n!r} is not available in this posenc; skipped")
    return out


# -- the plan ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Run:
    part: str  # "lm", "scaling" or "tasks"
    seed: int
    label: str  # legend label
    spec: dict[str, Any]  # the full pe spec (scaling: the base RoPE's)
    settings: str  # hash of the settings the numbers depend on
    variant: dict[str, Any] = field(default_factory=dict)  # scaling: type, mode, factor
    profile: str = ""
    arch: str = "transformer"  # the model: posenc.extrapolate.model.ARCHS

    @property
    def key(self) -> str:
        fields = {"profile": self.profile, "part": self.part, "spec": self.spec, "variant": self.variant,
                  "seed": self.seed, "settings": self.settings}
        if self.arch != "transformer":  # a transformer run keeps the key it had before there was a choice
            fields["arch"] = self.arch
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def config(self) -> str:
        """Everything but the seed: the runs of one configuration train as one stacked model."""
        return json.dumps({"profile": self.profile, "part": self.part, "label": self.label, "spec": self.spec,
                           "variant": self.variant, "settings": self.settings, "arch": self.arch}, sort_keys=True)


def seed_groups(runs: list[Run]) -> list[list[Run]]:
    """``runs`` grouped by configuration (``Run.config``), each group in seed order, the groups in
    the order of their first run."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.config, []).append(run)
    return [sorted(g, key=lambda r: r.seed) for g in groups.values()]


def arch_label(label: str, arch: str) -> str:
    """A run's legend label: the scheme's, prefixed with the architecture when it is not a transformer."""
    return label if arch == "transformer" else f"{arch} {label}"


def task_max_positions(profile: Profile) -> int:
    return max(T.seq_len(t, profile.tasks.max_size) for t in profile.tasks.tasks)


def scaling_dict(kind: str, factor: float, original: int, *, head_dim: int | None = None,
                 base: float = 10000.0) -> dict[str, Any]:
    """``{"type": kind, "factor": factor}`` plus ``original_max_positions`` where the type takes it,
    and YaRN's betas sized to ``head_dim`` and ``original`` when ``head_dim`` is given."""
    from posenc import scaling

    params = inspect.signature(scaling.SCALINGS[kind]).parameters
    out: dict[str, Any] = {"type": kind, "factor": float(factor)}
    if "original_max_positions" in params:
        out["original_max_positions"] = int(original)
    if kind == "yarn" and head_dim is not None:
        out.update(yarn_betas(head_dim, base, original))
    return out


def plan(profile: Profile, schemes: list[str | dict[str, Any]], *, corpus_sha: str, log: Log) -> list[Run]:
    """Every run of the profile, in order: per seed, LM per scheme, scalings, tasks per scheme.

    Every run uses ``profile.arch``; with ``"transformer"``, the schemes named in
    ``profile.hybrid`` also run as hybrids (after the transformer runs of each part in
    ``profile.hybrid_parts``), so the two architectures are compared on the same schemes."""
    from posenc import scaling

    lm_settings = settings_hash({"lm": profile.lm, "corpus": corpus_sha})
    sc_settings = settings_hash({"lm": profile.lm, "scaling": profile.scaling, "corpus": corpus_sha})
    task_settings = settings_hash({"tasks": profile.tasks})
    # resolved (and checked) only for the parts that run: a two-axis --scheme for --part image is no LM scheme
    lm_specs = [resolve_scheme(s, profile.lm.model, max_positions=profile.lm.train_length) for s in schemes
                if {"lm", "scaling"} & set(profile.parts)]
    task_specs = [resolve_scheme(s, profile.tasks.model, max_positions=task_max_positions(profile)) for s in schemes
                  if "tasks" in profile.parts]
    custom = list(schemes) != [s for s in profile.schemes if s in registry.schemes()]  # the user's --scheme
    image_settings, time_settings = settings_hash({"image": profile.image}), settings_hash({"time": profile.time})
    image_items = vision.image_items(profile.image, schemes if custom else None) if "image" in profile.parts else []
    time_items = vision.time_items(profile.time, schemes if custom else None) if "time" in profile.parts else []
    arch = profile.arch
    if arch != "transformer" and {"image", "time"} & set(profile.parts):
        log(f"note: --arch {arch} applies to lm, scaling and tasks; the image and time parts use their own "
            "bidirectional transformer")
    hybrid = profile.hybrid if arch == "transformer" else ()
    for part, cfg in (("lm", profile.lm.model), ("tasks", profile.tasks.model)):
        if part in profile.parts:
            check_arch(arch, cfg)
            if hybrid and part in profile.hybrid_parts:
                check_arch("hybrid", cfg)
    base = next(((lab, sp) for lab, sp in lm_specs if sp["scheme"] == "rope" and sp.get("scaling") is None), None)
    types = [t for t in profile.scaling.types if t in scaling.SCALINGS]
    for t in profile.scaling.types:
        if t not in scaling.SCALINGS:
            log(f"note: RoPE scaling {t!r} is not available in this posenc; skipped")
    if "scaling" in profile.parts and base is None:
        log("note: no unscaled 'rope' scheme among the schemes, so the RoPE scalings are skipped")

    def runs_of(part: str, seed: int, specs: list[tuple[str, dict[str, Any]]], settings: str) -> list[Run]:
        out = [Run(part, seed, arch_label(lab, arch), sp, settings, profile=profile.name, arch=arch)
               for lab, sp in specs]
        if part in profile.hybrid_parts:
            out += [Run(part, seed, arch_label(lab, "hybrid"), sp, settings, profile=profile.name, arch="hybrid")
                    for lab, sp in specs if lab in hybrid]
        return out

    runs: list[Run] = []
    for seed in profile.seeds:
        if "lm" in profile.parts:
            runs += runs_of("lm", seed, lm_specs, lm_settings)
        if "scaling" in profile.parts and base is not None:
            f = profile.scaling.finetune_factor
            for mode, kinds in (("zero-shot", types), ("fine-tune", ["none", *types])):
                for kind in kinds:
                    variant = {"type": kind, "mode": mode, "factor": "T/L" if mode == "zero-shot" else f}
                    runs.append(Run("scaling", seed, arch_label(scaling_label(kind, mode, f), arch), base[1],
                                    sc_settings, variant, profile.name, arch))
        if "tasks" in profile.parts:
            runs += runs_of("tasks", seed, task_specs, task_settings)
        if "image" in profile.parts:  # the profile's variants, or the user's schemes made two-axis
            runs += [Run("image", seed, lab, sp, image_settings, {"positions": mode}, profile.name)
                     for lab, sp, mode in image_items]
        if "time" in profile.parts:
            runs += [Run("time", seed, lab, sp, time_settings, {"cannot": mode} if mode else {}, profile.name)
                     for lab, sp, mode in time_items]
    return runs


def scaling_label(kind: str, mode: str, factor: int) -> str:
    if mode == "zero-shot":
        return f"rope + {kind} (zero-shot)"
    what = "no scaling" if kind == "none" else f"{kind} x{factor}"
    return f"rope + {what} (fine-tuned at {factor}L)"
