"""The parts of the benchmark, one module each: what it runs, how it evaluates, which claims it
checks and its section of the page (the interface: ``posenc.extrapolate.part.Part``).

``PARTS`` is the one table of the parts themselves, in the order of the plan (per seed) and of
the page (``plan`` puts the parts' runs in that order); the names a user picks are
``posenc.extrapolate.PART_NAMES`` (torch-free, for the command line), in the same order:

- ``lm``: language modelling, perplexity by length (Press et al.);
- ``hybrid``: the same decoder with ssm blocks, rows beside the lm (and tasks) runs (Jamba);
- ``scaling``: RoPE scalings on the trained RoPE model;
- ``tasks``: algorithmic tasks and passkey by size (Kazemnejad et al.);
- ``structure``: the claims of hierarchical and structured positions (BiPE, HiRoPE, Abacus, position
  coupling, randomized positions), whose rows are the lm, scaling and tasks parts';
- ``image``: digits at larger grids (Heo et al.);
- ``time``: positions in time across frame rates;
- ``pretrained``: RoPE scalings on a pretrained LLM (``posenc extend``).

Each part's module, class and name agree (``parts.lm.LM``, name ``"lm"``; ``parts.scaling.Scaling``,
name ``"scaling"``).
"""

from __future__ import annotations

from typing import Any

from posenc import registry
from posenc.extrapolate.part import Log, Part
from posenc.extrapolate.parts import hybrid, image, lm, pretrained, scaling, structure, tasks, time
from posenc.extrapolate.plan import Run
from posenc.extrapolate.profiles import Profile

PARTS: tuple[Part, ...] = (lm.PART, hybrid.PART, scaling.PART, tasks.PART, structure.PART, image.PART, time.PART,
                           pretrained.PART)


def owner(name: str) -> Part:
    """The part whose records have ``part == name``."""
    for part in PARTS:
        if part.name == name:
            return part
    raise ValueError(f"part must be one of {', '.join(p.name for p in PARTS)}; got {name!r}")


def plan(profile: Profile, schemes: list[str | dict[str, Any]], *, corpus_sha: str, log: Log) -> list[Run]:
    """Every run of the profile, in order: per seed, each part's runs in the order of
    ``PARTS``, each followed by the rows other parts add beside them
    (the hybrid rows after the transformer runs of each part in ``profile.hybrid_parts``, then the
    structured positions' rows after the lm, scaling and tasks runs)."""
    custom = list(schemes) != [s for s in profile.schemes if s in registry.schemes()]  # the user's --scheme
    planned = [part.plan(profile, schemes, custom=custom, corpus_sha=corpus_sha, log=log) for part in PARTS]
    runs: list[Run] = []
    for seed in profile.all_seeds:
        for mine in planned:
            mine = [r for r in mine if r.seed == seed]
            runs += mine
            for part in PARTS:
                runs += part.extend(profile, mine, custom=custom, corpus_sha=corpus_sha)
    return runs


__all__ = ["PARTS", "owner", "plan"]
