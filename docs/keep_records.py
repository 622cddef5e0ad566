"""Keeps a benchmark run's records in posenc/extrapolate/records (``posenc.extrapolate.kept``): runs
``posenc extrapolate ARGS`` itself, then writes NAME.jsonl (the results file exactly as the run wrote
it) and NAME.json (its provenance: commit, date, machine, command, profile, parts, seeds, schemes,
wall and CPU time, the records' sha256). Never edit either by hand: run this again.

    python docs/keep_records.py NAME -- --profile quick --part lm --scheme rope --scheme pope --scheme fope

The run starts from an empty results file, so every record is measured by this command. A long run
(``--profile decide``: hours) is given ``--work FILE``, a results file outside the repository that a
second start of the same command resumes (``posenc extrapolate`` resumes from its ``--out``); the kept
wall and CPU time are then the sums over its starts, and ``starts`` says how many there were.

    nice -n 19 python docs/keep_records.py --work /somewhere/decide.jsonl decide -- --profile decide --no-progress
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from posenc.cli import build_parser
    from posenc.commands.extrapolate import _profile
    from posenc.extrapolate import kept, provenance

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="the kept set's name (letters, digits, - and _)")
    p.add_argument("--work", type=Path, default=None,
                   help="a results file that survives an interrupted start: a second start resumes from it")
    p.add_argument("args", nargs=argparse.REMAINDER, help="-- then the arguments of posenc extrapolate (no --out)")
    a = p.parse_args(argv)
    args = [x for x in a.args if x != "--"] if a.args[:1] == ["--"] else a.args
    if not a.name.replace("-", "").replace("_", "").isalnum():
        p.error(f"name must be letters, digits, - and _; got {a.name!r}")
    if "--out" in args:
        p.error("give no --out: the records go to posenc/extrapolate/records/NAME.jsonl")
    parsed = build_parser().parse_args(["extrapolate", *args])
    profile = _profile(parsed)
    command = shlex.join(["posenc", "extrapolate", *args, "--out", f"{a.name}.jsonl"])
    where = provenance.capture(command, parsed.device or "cpu")
    with tempfile.TemporaryDirectory() as tmp:
        out = a.work if a.work is not None else Path(tmp) / "results.jsonl"
        starts_file = out.with_name(out.name + ".starts.json")
        earlier = json.loads(starts_file.read_text()) if a.work is not None and starts_file.exists() else []
        if a.work is not None and not earlier and out.exists():
            p.error(f"--work {out} holds results of a start this script did not make; give another file")
        before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
        run = subprocess.run([sys.executable, "-m", "posenc", "extrapolate", *args, "--out", str(out)],
                             env={**os.environ}, check=False)
        wall = time.perf_counter() - start
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        if a.work is not None:  # this start's times, whatever its end: the next start adds them up
            earlier.append({"command": command, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
                            "returncode": run.returncode})
            starts_file.write_text(json.dumps(earlier, indent=1) + "\n")
            if any(e["command"] != command for e in earlier):
                print(f"--work {out} was started by another command; nothing kept", file=sys.stderr)
                return 2
            wall, cpu = sum(e["wall_seconds"] for e in earlier), sum(e["cpu_seconds"] for e in earlier)
        if run.returncode != 0:
            print(f"posenc extrapolate exited {run.returncode}; nothing kept", file=sys.stderr)
            return run.returncode
        kept.RECORDS_DIR.mkdir(exist_ok=True)
        jsonl = kept.RECORDS_DIR / f"{a.name}.jsonl"
        shutil.copyfile(out, jsonl)
    record = {**where, "profile": profile.name, "parts": list(parsed.parts) if parsed.parts else None,
              "seeds": list(profile.seeds) if parsed.seeds else None, "schemes": parsed.schemes,
              "corpus": parsed.corpus, "wall_seconds": round(wall, 1), "cpu_seconds": round(cpu, 1),
              "records_sha256": kept.sha256(jsonl)}
    if a.work is not None:
        record["starts"] = len(earlier)
    record["load_avg_end"] = [round(x, 2) for x in os.getloadavg()]
    (kept.RECORDS_DIR / f"{a.name}.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"kept {jsonl} ({sum(1 for _ in open(jsonl))} records, {wall:.0f} s wall, {cpu:.0f} s CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
