"""Kept ``posenc extend`` records: a finished run of the pretrained model, kept in the repository with
its provenance, so that the page's pretrained section (``posenc.extrapolate.parts.pretrained``) shows
its verdicts when it measures none, marked *recorded*, never as fresh.

A kept extend set is a folder ``NAME/`` in ``posenc/extrapolate/records/`` written by
``docs/keep_extend.py`` (never edited by hand):

    results.jsonl    the run's results exactly as ``posenc extend`` wrote them: one record per
                     measurement, each ``key`` prefixed by the run's set-up hash
                     (``posenc.extend.run.setup_id``: model, text, factor, bucket)
    settings.json    the run's settings.json, its paths reduced to their last part (``model``,
                     ``args.model``, ``args.text``, ``args.out``: no machine's folders in the repository)
    provenance.json  ``FIELDS``: commit, date (when the run started), machine (CPU, cores, torch,
                     device), the command that measures it again, wall and CPU time, the sha256 of
                     results.jsonl and of settings.json, and ``documents``, the names of the text's
                     documents as the run read them (the set-up hash covers them)

``load_set`` checks a set before anything shows it: a results.jsonl or settings.json whose sha256 is not
the one its provenance names changed since it was kept and is refused (``kept.Refused``). Its records'
keys are compared with the keys today's code gives its grid (``today_keys``: the set-up hash from the
kept model name, documents and grid with today's factor, and every measurement of the grid): a record
whose key today's code would not write is *stale*, and so is every verdict of the set.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posenc.extrapolate.kept import RECORDS_DIR, Recorded, Refused, machine_text

FIELDS = ("commit", "date", "machine", "command", "wall_seconds", "cpu_seconds", "records_sha256", "settings_sha256",
          "documents")
PROVENANCE, RESULTS, SETTINGS = "provenance.json", "results.jsonl", "settings.json"
PATHS = (("model",), ("args", "model"), ("args", "text"), ("args", "out"))  # reduced to their last part when kept


@dataclass
class KeptExtend:
    name: str
    folder: Path
    provenance: dict[str, Any]
    settings: dict[str, Any]
    records: list[dict[str, Any]]
    stale: list[str] = field(default_factory=list)  # keys of records today's code would not write

    def recorded(self) -> Recorded:
        p = self.provenance
        return Recorded(self.name, str(p["commit"]), p["date"], machine_text(p["machine"]), p["command"],
                        bool(self.stale))

    def verdicts(self) -> list:
        """The claims of the kept run, as ``posenc.extend.verdicts.from_folder`` lists them for a run in
        ``OUT/extend`` (each decided alone; the page decides them with its others), each marked with its
        ``Recorded``."""
        from posenc.extend.verdicts import from_folder

        mark = self.recorded()
        return [dataclasses.replace(v, recorded=mark) for v in from_folder(self.folder) or []]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def reduced(settings: dict[str, Any]) -> dict[str, Any]:
    """``settings`` with its paths (``PATHS``) reduced to their last part."""
    out = json.loads(json.dumps(settings))
    for where in PATHS:
        holder = out
        for k in where[:-1]:
            holder = holder.get(k) or {}
        if holder.get(where[-1]):
            holder[where[-1]] = Path(str(holder[where[-1]])).name
    return out


def today_keys(settings: dict[str, Any], documents: list[str]) -> set[str]:
    """Every key today's ``posenc extend`` writes for the grid of ``settings`` on a text of ``documents``: the
    set-up hash of its model's name, the documents and its grid with today's factor, and each measurement of
    its grid (``posenc.extend.run``)."""
    from posenc.extend import run
    from posenc.extend.methods import factor_for
    from posenc.extend.verdicts import runnable

    g = settings["grid"]
    grid = run.Grid(g["to"], g["context"], factor_for(g["to"], g["context"]), tuple(g["methods"]), g["passages"],
                    tuple(g["depths"]), g["trials"], g["bucket"])
    setup = run.setup_id(Path(settings["model"]), documents, grid)
    available = runnable(settings)
    todo = run.ppl_todo(grid, available, len(settings["passages"])) + run.passkey_todo(grid, available)
    return {run.key_of(item, setup) for item in todo}


def load_set(folder: str | Path) -> KeptExtend:
    """A kept extend set from its folder, checked (``Refused``)."""
    from posenc.stats.results import load

    folder = Path(folder)
    provenance = json.loads((folder / PROVENANCE).read_text(encoding="utf-8"))
    missing = [f for f in FIELDS if f not in provenance]
    if missing:
        raise Refused(f"kept extend records {folder.name}: provenance lacks {', '.join(missing)}")
    for name, key in ((RESULTS, "records_sha256"), (SETTINGS, "settings_sha256")):
        if not (folder / name).is_file():
            raise Refused(f"kept extend records {folder.name}: {name} is missing")
        if sha256(folder / name) != provenance[key]:
            raise Refused(f"kept extend records {folder.name}: {name} changed since it was kept (its sha256 is not "
                          "the one its provenance names); refused: run its command again and keep it anew")
    settings = json.loads((folder / SETTINGS).read_text(encoding="utf-8"))
    records = list(load(folder / RESULTS).values())
    kept = KeptExtend(folder.name, folder, provenance, settings, records)
    try:
        today = today_keys(settings, list(provenance["documents"]))
    except (KeyError, TypeError, ValueError):  # a grid today's code cannot read: every record is stale
        today = set()
    kept.stale = [r["key"] for r in records if r.get("key") not in today]
    return kept


def load_sets(folder: str | Path = RECORDS_DIR) -> tuple[list[KeptExtend], list[str]]:
    """Every kept extend set of ``folder`` (its sub-folders with a provenance.json) and the reasons of those
    refused."""
    sets, refused = [], []
    root = Path(folder)
    for sub in sorted(p for p in root.iterdir() if (p / PROVENANCE).is_file()) if root.is_dir() else []:
        try:
            sets.append(load_set(sub))
        except (Refused, ValueError, KeyError, OSError) as e:
            refused.append(str(e))
    return sets, refused

