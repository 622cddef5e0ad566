"""What a ``posenc extend`` run can decide, what it cannot, and the command that would.

The claims about extension (plain RoPE degrading past its context, NTK against linear, YaRN against
both, passkey past the context) are measured at ``2L₀`` (``4L₀`` where ``--to`` reaches it); a run
whose ``--to`` is shorter cannot decide them, and a claim on a method the run was not given is not
asked for (``posenc.extend.verdicts.why_not`` says which on each claim). ``lines`` groups those claims
by what would measure them, and gives the command (the run's own, with ``--to`` raised or the missing
``--method``s added: the same ``--out`` resumes with what is there), its forwards
(``posenc.extend.cost.forwards``) and, once this run has measured some, their time here scaled from
its own forwards (``posenc.extend.cost.seconds_for``); before any, the command that times one forward
(``python -m posenc.extend.cost``). The command line prints them before and after a run; the page
opens with them.
"""

from __future__ import annotations

import re
import shlex
import sys
from pathlib import Path
from typing import Any

from posenc.extend.methods import METHODS
from posenc.stats.procedure import MIN_SEEDS

DEFAULTS = {"passages": 3, "trials": 1, "bucket": 1024}


def program() -> str:
    """How ``posenc`` was started (``.venv/bin/posenc`` from a fresh clone), else ``posenc``."""
    return sys.argv[0] if sys.argv and Path(sys.argv[0]).name == "posenc" else "posenc"


def python() -> str:
    """The Python beside ``program()`` (``.venv/bin/python``), else ``python``."""
    prog = Path(program())
    return str(prog.with_name("python")) if prog.parent != Path(".") or "/" in program() else "python"


def command(args: dict[str, Any], **changes: Any) -> str:
    """The ``posenc extend`` command of ``args`` (the run's own arguments, ``settings["args"]``) with
    ``changes``."""
    a = {**args, **changes}
    words = [program(), "extend"] + ([str(a["model"])] if a.get("model") else []) + ["--to", str(a["to"])]
    if list(a["methods"]) != list(METHODS):
        for m in a["methods"]:
            words += ["--method", m]
    if a.get("text"):
        words += ["--text", str(a["text"])]
    words += ["--out", str(a["out"])]
    for flag, default in DEFAULTS.items():
        if a.get(flag, default) != default:
            words += [f"--{flag}", str(a[flag])]
    if a.get("threads"):
        words += ["--threads", str(a["threads"])]
    return shlex.join(words)


def _forwards_text(counts: dict[int, int]) -> str:
    parts = [f"{k} forward{'s' * (k != 1)} of {n} tokens" for n, k in counts.items()]
    return ", ".join(parts) if parts else "nothing new"


def _cost(counts: dict[int, int], measured: list[tuple[int, float]]) -> str:
    from posenc.extend.cost import seconds_for

    seconds = seconds_for(counts, measured)
    if seconds is None:
        longest = max(counts, default=0)
        return (f"{_forwards_text(counts)} (time one here: {python()} -m posenc.extend.cost --length {longest})"
                if counts else "nothing new")
    minutes = seconds / 60
    took = f"about {minutes:.0f} minutes" if minutes >= 1.5 else f"about {max(seconds, 1):.0f} s"
    return f"{_forwards_text(counts)}, {took} here (scaled as L² from this run's forwards)"


def lines(verdicts: list[Any], settings: dict[str, Any], records: list[dict[str, Any]] = ()) -> list[str]:
    """Plain-text lines: what this run measures, and each group of claims it cannot decide with the command
    that would and its cost. ``verdicts``: ``posenc.extend.verdicts.claims`` of the run (any records)."""
    from posenc.extend.cost import forwards

    grid, args = settings["grid"], settings.get("args")
    context, methods = grid["context"], list(grid["methods"])
    measured = [(r["length"], float(r["seconds"])) for r in records if r.get("kind") == "ppl" and "seconds" in r]
    can = [v for v in verdicts if v.status not in ("not measured", "not asked") or "not measured yet" in v.measured]
    out = [f"this run measures {len(can)} of {len(verdicts)} claim{'s' * (len(verdicts) != 1)}"
           + (f": {'; '.join(v.claim for v in can)}" if can else "")]
    groups: dict[int, tuple[list[str], list[str], list[bool]]] = {}  # --to: (claims, methods to add, passkey)
    for v in verdicts:
        if v.status not in ("not measured", "not asked") or "not measured yet" in v.measured:
            continue
        to = re.search(r"needs --to (\d+)", v.measured)
        claims, add, passkey = groups.setdefault(int(to.group(1)) if to else grid["to"], ([], [], []))
        claims.append(v.claim)
        add += [m for m in re.findall(r"--method (\w+)", v.measured) if m not in add]
        passkey.append("--trials 0" in v.measured)
    for to, (claims, add, passkey) in sorted(groups.items()):
        trials0 = any(passkey)
        wanted = methods + [m for m in METHODS if m in add and m not in methods]
        what = (["--to " + str(to)] if to != grid["to"] else []) + [f"--method {m}" for m in wanted if m in add] + (
            ["--trials 1"] if trials0 else [])
        trials = max(grid["trials"], 1 if trials0 else 0)
        runs = [m for m in wanted if m not in (settings.get("unavailable") or {})]
        cmd = (command(args, to=to, methods=wanted, trials=trials) if args is not None
               else f"posenc extend ... {' '.join(what)}")
        if to != grid["to"]:  # another set-up (the factor): everything is measured anew
            counts = forwards(to, context, runs, passages=len(settings["passages"]), trials=trials,
                              depths=grid["depths"])
        else:  # the same set-up: the same --out resumes, only the added methods (or passkey) are new
            full = forwards(to, context, runs, passages=len(settings["passages"]), trials=trials,
                            depths=grid["depths"])
            have = forwards(to, context, [m for m in runs if m in methods], passages=len(settings["passages"]), trials=grid["trials"],
                            depths=grid["depths"])
            counts = {n: k - have.get(n, 0) for n, k in full.items() if k > have.get(n, 0)}
        n = len(claims)
        out.append(f"cannot decide {n} claim{'s' * (n != 1)} ({'; '.join(claims)}); {', '.join(what)} would: "
                   f"{cmd}  [{_cost(counts, measured)}]")
    if len(settings["passages"]) < MIN_SEEDS:
        k = len(settings["passages"])
        out.append(f"measured on {k} passage{'s' * (k != 1)}: a verdict needs {MIN_SEEDS} (--passages {MIN_SEEDS})")
    return out


def planned(settings: dict[str, Any], methods: list[str]) -> list[str]:
    """``lines`` before the run: the claims of the grid with no records (each asked claim "not measured
    yet", the others saying why not)."""
    from posenc.extend.verdicts import claim_list

    grid = settings["grid"]
    verdicts = claim_list(lambda *a: None, lambda *a: {}, context=grid["context"], lengths=grid["lengths"],
                          passages=len(settings["passages"]), methods=methods, trials=grid["trials"])
    return lines(verdicts, settings)
