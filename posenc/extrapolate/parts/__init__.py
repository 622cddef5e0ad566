"""The parts of the benchmark, one module each: what it runs, how it evaluates, which claims it
checks and its section of the page (the interface: ``posenc.extrapolate.part.Part``).

``PARTS`` is the one table that names them, in the order of the plan (per seed) and of the page:

- ``text`` (``--part lm``): language modelling, perplexity by length (Press et al.);
- ``hybrid``: the same decoder with ssm blocks, rows beside the text (and tasks) runs (Jamba);
- ``scalings`` (``--part scaling``): RoPE scalings on the trained RoPE model;
- ``tasks``: algorithmic tasks and passkey by size (Kazemnejad et al.);
- ``image``: digits at larger grids (Heo et al.);
- ``time``: positions in time across frame rates.
"""

from __future__ import annotations

from posenc.extrapolate.part import Part
from posenc.extrapolate.parts import hybrid, image, scalings, tasks, text, time

PARTS: tuple[Part, ...] = (text.PART, hybrid.PART, scalings.PART, tasks.PART, image.PART, time.PART)


def owner(name: str) -> Part:
    """The part whose records have ``part == name``."""
    for part in PARTS:
        if part.name == name:
            return part
    raise ValueError(f"part must be one of {', '.join(p.name for p in PARTS)}; got {name!r}")


__all__ = ["PARTS", "owner"]
