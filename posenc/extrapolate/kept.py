"""Kept records: a benchmark run's results exactly as the run wrote them, kept in the repository with
their provenance, so that the page can show a claim it does not measure now from the verdict a run
measured, marked as such, never as fresh.

A kept set is two files in ``posenc/extrapolate/records/`` written by ``docs/keep_records.py`` (which
runs ``posenc extrapolate`` itself; never edited by hand):

    NAME.jsonl   the results file as ``posenc extrapolate`` wrote it: one record per run, each with
                 its ``key``, the run's set-up hash (``plan.Run.key``: profile, part, full scheme
                 spec, variant, seed and the hash of every setting its numbers depend on, with the
                 benchmark's protocol version), its numbers, ``seconds`` and ``cpu_seconds``
    NAME.json    its provenance (``FIELDS``): the commit, date and machine (CPU, cores, torch,
                 device), the command (what measures it again), the profile, parts, seeds and
                 schemes of that command, its wall and CPU time, and the sha256 of NAME.jsonl

``load_set`` checks a set before anything shows it: a NAME.jsonl whose sha256 is not the one its
provenance names has been altered since it was kept and is refused (``Refused``). A record whose
set-up hash is not a key of today's plan of that command (``stale_keys``: a setting, a scheme's
spec or the protocol changed since) is *stale*, and so is every verdict of its set.

``fill(verdicts, sets)``: each verdict of the page that is "not measured" now takes the kept verdict
of the same claim (same source and words), marked *recorded* with its commit, date, machine and
command (``Recorded``), and *stale* where its set is.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RECORDS_DIR = Path(__file__).with_name("records")
FIELDS = ("commit", "date", "machine", "command", "profile", "parts", "seeds", "schemes", "corpus", "wall_seconds",
          "cpu_seconds", "records_sha256")


class Refused(ValueError):
    """A kept set that cannot be trusted: its records changed since they were kept, or its provenance is incomplete."""


@dataclass(frozen=True)
class Recorded:
    """Where a kept verdict comes from (what the page prints beside it)."""

    name: str  # the kept set's NAME
    commit: str
    date: str
    machine: str  # "AMD EPYC, 2 cores, torch 2.13.0+cpu, cpu"
    command: str  # measures it again
    stale: bool = False  # a record's set-up hash is not in today's plan


@dataclass
class KeptSet:
    name: str
    provenance: dict[str, Any]
    records: list[dict[str, Any]]
    stale: list[str] = field(default_factory=list)  # keys of records whose set-up hash today's plan lacks

    def profile(self):
        """The profile of its command (its profile, seeds and parts)."""
        from posenc.extrapolate.profiles import get_profile, with_overrides

        p = self.provenance
        return with_overrides(get_profile(p["profile"]), seeds=tuple(p["seeds"]) if p.get("seeds") else None,
                              parts=tuple(p["parts"]) if p.get("parts") else None)

    def recorded(self) -> Recorded:
        p = self.provenance
        return Recorded(self.name, str(p["commit"]), p["date"], machine_text(p["machine"]), p["command"],
                        bool(self.stale))


def machine_text(m: dict[str, Any]) -> str:
    """A provenance's machine in words: "AMD EPYC, 2 cores, torch 2.13.0+cpu, cpu"."""
    return f"{m.get('processor', '?')}, {m.get('cpus', '?')} cores, torch {m.get('torch', '?')}, {m.get('device', '?')}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_set(path: str | Path) -> KeptSet:
    """A kept set from its provenance file ``NAME.json`` (its records beside it), checked (``Refused``)."""
    from posenc.stats.results import load

    path = Path(path)
    provenance = json.loads(path.read_text())
    missing = [f for f in FIELDS if f not in provenance]
    if missing:
        raise Refused(f"kept records {path.stem}: provenance lacks {', '.join(missing)}")
    jsonl = path.with_suffix(".jsonl")
    if not jsonl.exists():
        raise Refused(f"kept records {path.stem}: {jsonl.name} is missing")
    if sha256(jsonl) != provenance["records_sha256"]:
        raise Refused(f"kept records {path.stem}: {jsonl.name} changed since it was kept (its sha256 is not the "
                      "one its provenance names); refused: run its command again to keep new ones")
    records = list(load(jsonl).values())
    kept = KeptSet(path.stem, provenance, records)
    kept.stale = stale_keys(kept)
    return kept


def stale_keys(kept: KeptSet) -> list[str]:
    """The keys of ``kept``'s records that today's plan of its command does not have: their set-up
    changed since they were kept."""
    from posenc.extrapolate.parts import plan
    from posenc.extrapolate.plan import available_schemes

    profile = kept.profile()
    p = kept.provenance
    names = p["schemes"] or list(available_schemes(profile.schemes, lambda msg: None))
    sha = next((r["corpus"]["sha256"] for r in kept.records if r.get("corpus")), "")
    try:
        today = {r.key for r in plan(profile, names, corpus_sha=sha, log=lambda msg: None)}
    except (ValueError, TypeError):  # a scheme or setting today's code refuses: every record is stale
        today = set()
    return [r["key"] for r in kept.records if r["key"] not in today]


def load_sets(folder: str | Path = RECORDS_DIR) -> tuple[list[KeptSet], list[str]]:
    """Every kept set of ``folder`` and the reasons of those refused."""
    sets, refused = [], []
    for path in sorted(Path(folder).glob("*.json")):
        try:
            sets.append(load_set(path))
        except (Refused, ValueError, KeyError, OSError) as e:
            refused.append(str(e))
    return sets, refused


def verdicts(kept: KeptSet) -> list:
    """The verdicts of ``kept``'s records, as its own page decides them (each part's claims, pooled
    within the part, Holm per paper), each marked with its ``Recorded``."""
    from posenc.stats import findings
    from posenc.stats.page_parts import Page
    from posenc.extrapolate.parts import PARTS

    profile = kept.profile()
    page = Page(draw=False)  # its verdicts alone: no figure is drawn
    sections = [part.section(page, part.records(kept.records), profile) for part in PARTS]
    pooled = [dataclasses.replace(v, pool=v.pool or part.name or "lm") for part, s in zip(PARTS, sections)
              for v in s.verdicts]
    mark = kept.recorded()
    return [dataclasses.replace(v, recorded=mark) for v in findings.adjust(pooled)]


def fill(now: list, sets: list[KeptSet], *, include_smoke: bool = False) -> list:
    """``now`` (the page's verdicts) with each "not measured" one replaced by the kept verdict of the
    same claim, when a kept set decided it (the newest set first). A smoke set's verdicts mean nothing and
    fill only a smoke page (``include_smoke``)."""
    if not any(v.status == "not measured" for v in now):
        return now
    found: dict[tuple[str, str], Any] = {}
    for kept in sorted(sets, key=lambda k: k.provenance["date"], reverse=True):
        if kept.provenance["profile"] == "smoke" and not include_smoke:
            continue
        for v in verdicts(kept):
            if v.status != "not measured":
                found.setdefault((v.source, v.claim), v)
    return [found.get((v.source, v.claim), v) if v.status == "not measured" else v for v in now]
