"""``posenc bench``'s attention cases for two checkouts side by side: each case in a fresh process
of each checkout's own venv (``posenc.bench.attention.attention_child``), the two alternated case by
case and their order swapped every round, so that a machine whose speed drifts moves both alike;
prints each case's median seconds and peak memory (VmHWM) and the ratio new / old.

    python docs/bench_side_by_side.py OLD_CHECKOUT NEW_CHECKOUT [--rounds 2] [--repeats 3] [--only TEXT]

Each checkout needs its venv (``make report`` or ``make test`` made it). The cases are the quick
profile's (``posenc bench --quick``, one thread); ``--repeats`` timed calls follow each case's
first call (the profile times most cases once); ``--only`` keeps the cases whose label contains
every ``&``-separated TEXT (``--only "cope&1024"``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

CHILD = ("import json, sys; from posenc.bench.attention import attention_child; "
         "print(json.dumps(attention_child(json.loads(sys.argv[1]))))")
SPECS = ("import json; from posenc.bench.attention import attention_specs; from posenc.bench.profiles import PROFILES; "
         "print(json.dumps(attention_specs(PROFILES['quick'], threads=1)))")


def _python(checkout: Path, code: str, *args: str) -> dict | list:
    run = subprocess.run([str(checkout / ".venv" / "bin" / "python"), "-c", code, *args], cwd=checkout,
                         capture_output=True, text=True, timeout=1800)
    if run.returncode:
        return {"error": run.stderr.strip().splitlines()[-1] if run.stderr.strip() else f"exit {run.returncode}"}
    return json.loads(run.stdout.strip().splitlines()[-1])


def _cases(checkout: Path, repeats: int, only: list[str]) -> dict[str, dict]:
    cases = {}
    for spec in _python(checkout, SPECS):
        label = f"{spec['pass']} {spec['scheme']} {spec['method']} L={spec['length']}"
        if all(text in label for text in only):
            cases[label] = {**spec, "repeats": max(repeats, spec.get("repeats", 0))}
    return cases


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--only", default="")
    args = parser.parse_args()
    only = [text for text in args.only.split("&") if text]
    sides = {"old": (args.old, _cases(args.old, args.repeats, only)),
             "new": (args.new, _cases(args.new, args.repeats, only))}
    labels = [label for label in sides["new"][1] if label in sides["old"][1]]
    got: dict[str, dict[str, list[dict]]] = {label: {"old": [], "new": []} for label in labels}
    for round_ in range(args.rounds):
        for label in labels:
            for side in (("old", "new") if round_ % 2 == 0 else ("new", "old")):
                checkout, cases = sides[side]
                got[label][side].append(_python(checkout, CHILD, json.dumps(cases[label])))
    print("case | old s | new s | ratio | old peak GB | new peak GB | ratio")
    for label in labels:
        med = {side: {key: statistics.median(r[key] for r in rows) for key in ("seconds", "peak_rss_gb")}
               for side, rows in got[label].items() if all("seconds" in r for r in rows)}
        if len(med) < 2:
            print(f"{label} | error: {[r for rows in got[label].values() for r in rows if 'error' in r][:1]}")
            continue
        old, new = med["old"], med["new"]
        print(f"{label} | {old['seconds']:.4f} | {new['seconds']:.4f} | {new['seconds'] / old['seconds']:.2f} | "
              f"{old['peak_rss_gb']:.3f} | {new['peak_rss_gb']:.3f} | {new['peak_rss_gb'] / old['peak_rss_gb']:.2f}")


if __name__ == "__main__":
    main()
