"""The plan: a profile and a list of schemes expand into runs, each with a stable key. Each part
(``posenc.extrapolate.parts``) plans its own runs; ``parts.plan`` puts them in order, per seed.

A run's key hashes (profile, part, full scheme spec, variant, seed, settings hash), so the same
arguments give the same keys and a finished run is recognised in the results file; a run of a
``--plugin``'s scheme also hashes the plugin's source (``posenc.plugins.key_fields``), so an edited
scheme runs again, while runs of built-in schemes keep their keys. User schemes
are SPEC strings (``posenc.spec``); the sizes they leave out come from the benchmark's model.

Settings that decide an outcome follow the training length ``L`` (the longest training
sequence) when the spec leaves them out (``fit_to_training``): each scheme states its own rule as
the classmethod ``fit_to_training`` of its module (T5: ``max_distance = L/2`` and the buckets that
distances below ``L`` reach; FIRE: ``L_threshold = L``); YaRN's are in
``posenc.extrapolate.parts.scaling.yarn_betas``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from posenc import plugins, registry
from posenc.extrapolate.model import LAYERS, GPTConfig, build_pe, layer_pattern, pattern_label

Log = Callable[[str], None]


# -- schemes -----------------------------------------------------------------------------------

def resolve_scheme(text: str | dict[str, Any], cfg: GPTConfig, *, max_positions: int) -> tuple[str, dict[str, Any]]:
    """A SPEC (name, ``name:k=v,...``, JSON) as ``(label, full spec)`` sized for the model; a
    per-layer pattern (``model.layer_pattern``) as ``{"scheme": "layers", "pattern": [full specs]}``.

    Sizes the spec leaves out come from the model (``d_model``, ``head_dim``, ``num_heads``) and
    the longest training sequence (``max_positions``); a bias with a ``bidirectional`` switch
    is made causal (T5's decoder buckets), unless the spec says otherwise.
    """
    from posenc import spec as S

    pattern = layer_pattern(text)
    if pattern is not None:  # a spec per attention block, repeated: each entry resolved as a scheme
        if cfg.n_layer % len(pattern):
            raise ValueError(f"a per-layer pattern of {len(pattern)} entries needs n_layer to be a multiple of "
                             f"{len(pattern)}; the model has n_layer={cfg.n_layer}")
        entries = [resolve_scheme(entry, cfg, max_positions=max_positions) for entry in pattern]
        return pattern_label([lab for lab, _ in entries]), {"scheme": LAYERS, "pattern": [sp for _, sp in entries]}
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
    docstring), for the keys the spec leaves out: the scheme's own rule
    (``PositionalEncoding.fit_to_training``)."""
    return registry.get(given["scheme"]).cls.fit_to_training(given, length)


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
    part: str  # the part whose run it is: "lm", "scaling", "tasks", "image" or "time"
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
        plugin = plugins.key_fields(self.spec)
        if plugin is not None:  # a scheme of a --plugin: its source's hash, so an edited scheme runs again
            fields["plugin"] = plugin
        text = json.dumps(fields, sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    @property
    def config(self) -> str:
        """Everything but the seed: the runs of one configuration train together."""
        return json.dumps({"profile": self.profile, "part": self.part, "label": self.label, "spec": self.spec,
                           "variant": self.variant, "settings": self.settings, "arch": self.arch}, sort_keys=True)


def by_seed(groups: list[tuple[list[Any], tuple[int, ...]]]) -> list[tuple[int, Any]]:
    """``(seed, item)`` for the items of each ``(items, seeds)`` group on its seeds: seed by seed,
    the groups in their order within a seed (a part's rows that train other seeds than its schemes)."""
    seeds = sorted({s for _, group_seeds in groups for s in group_seeds})
    return [(seed, item) for seed in seeds for items, group_seeds in groups if seed in group_seeds for item in items]


def seed_groups(runs: list[Run]) -> list[list[Run]]:
    """``runs`` grouped by configuration (``Run.config``), each group in seed order, the groups in
    the order of their first run."""
    groups: dict[str, list[Run]] = {}
    for run in runs:
        groups.setdefault(run.config, []).append(run)
    return [sorted(g, key=lambda r: r.seed) for g in groups.values()]


def schedule(todo: list[Run], deps: dict[str, str], *, submit: Callable[[list[Run]], Any],
             wait_any: Callable[[list[Any]], Iterable[Any]], collect: Callable[[Any], list[dict[str, Any]]],
             cancel: Callable[[list[Any]], None]) -> Iterator[dict[str, Any]]:
    """Runs ``todo``'s configurations (``seed_groups``) on an executor, each submitted once the runs
    it needs (``deps``: a run's key → the key of the run it needs first) have finished; yields each
    group's records as it finishes. The executor is four functions: ``submit(group)`` → a handle,
    ``wait_any(handles)`` → the finished ones, ``collect(handle)`` → its records (a run's error is
    raised there), ``cancel(handles)`` → stops them (Ctrl-C, an error, or the consumer stopped)."""
    pending, finished = seed_groups(todo), set()
    running: dict[Any, list[Run]] = {}

    def submit_ready() -> None:
        for group in [g for g in pending if all(deps.get(r.key) in (None, *finished) for r in g)]:
            pending.remove(group)
            running[submit(group)] = group

    try:
        submit_ready()
        while running:
            for handle in wait_any(list(running)):
                group = running.pop(handle)
                records = collect(handle)
                finished.update(r.key for r in group)
                yield from records
            submit_ready()
    except BaseException:
        cancel(list(running))
        raise


def arch_label(label: str, arch: str) -> str:
    """A run's legend label: the scheme's, prefixed with the architecture when it is not a transformer."""
    return label if arch == "transformer" else f"{arch} {label}"

