"""Keeps a finished ``posenc extend`` run in posenc/extrapolate/records/NAME/ (``posenc.extrapolate.kept_extend``):
its results.jsonl exactly as the run wrote it, its settings.json with the paths reduced to their last part,
and provenance.json (commit, date, machine, the command that measures it again, wall and CPU time, the
sha256 of both files, the text's document names). Never edit any of them by hand: run this again.

Two ways. It runs ``posenc extend ARGS`` itself (into ``--work DIR``, or a temporary folder), timing it:

    nice -n 19 python docs/keep_extend.py extend-smollm2 -- --to 16384 --trials 3 --threads 2 --quiet

or it keeps a folder a ``posenc extend`` started outside it has finished, given what that start was,
as arguments (nothing is read from beside the folder):

    python docs/keep_extend.py extend-smollm2 --folder DIR --started 2026-12-07T23:19:30Z \\
        --command "posenc extend --to 16384 --trials 3 ..." --time-log run.log    # or --wall S --cpu S

``--started`` (UTC, ISO 8601) is the provenance's date; ``--command``, when given, must parse to the
arguments the folder's settings.json records (it is checked, then the kept command is written from the
settings, with ``--out NAME``: no machine's paths); ``--wall``/``--cpu`` are seconds, or ``--time-log``
reads them from GNU time's ``-v`` report (``Elapsed (wall clock) time``, ``User time``, ``System time``);
without either they are null. ``--commit`` names the commit the run started from (default: this checkout's,
``posenc.extrapolate.provenance.commit``). The machine is this one's (keep on the machine that ran it).

A folder is kept only when it is finished (every measurement of its grid is in results.jsonl) and holds
records of its own set-up alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


def time_log(path: Path) -> tuple[float, float]:
    """``(wall, cpu)`` seconds from GNU time's ``-v`` report in ``path``."""
    text = path.read_text(encoding="utf-8", errors="replace")
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): *(?:(\d+):)?(\d+):([\d.]+)", text)
    user = re.search(r"User time \(seconds\): *([\d.]+)", text)
    system = re.search(r"System time \(seconds\): *([\d.]+)", text)
    if not (wall and user and system):
        raise ValueError(f"--time-log {path}: no GNU time -v report (Elapsed, User time, System time) in it")
    h, m, s = wall.groups()
    return int(h or 0) * 3600 + int(m) * 60 + float(s), float(user.group(1)) + float(system.group(1))


def check_command(command: str, args: dict) -> None:
    """``command`` (a ``posenc extend`` line) parses to the arguments the run recorded (``settings["args"]``)."""
    from posenc.cli import build_parser

    words = shlex.split(command)
    if "extend" not in words:
        raise ValueError(f"--command {command!r} is not a posenc extend command")
    parsed = build_parser().parse_args(words[words.index("extend"):])
    from posenc.extend.methods import METHODS

    given = {"to": parsed.to, "methods": parsed.method or list(METHODS), "passages": parsed.passages,
             "trials": parsed.trials, "bucket": parsed.bucket, "threads": parsed.threads,
             "model": parsed.model and Path(parsed.model).name, "text": parsed.text and Path(parsed.text).name}
    recorded = {**{k: args.get(k) for k in given}, "model": args.get("model") and Path(args["model"]).name,
                "text": args.get("text") and Path(args["text"]).name}
    differ = [f"{k}: {given[k]!r} against {recorded[k]!r}" for k in given if given[k] != recorded[k]]
    if differ:
        raise ValueError(f"--command does not match the folder's settings.json ({'; '.join(differ)})")


def keep(name: str, folder: Path, *, started: str, wall: float | None, cpu: float | None, commit: str | None,
         command: str | None = None, dest: Path | None = None) -> Path:
    """Keeps ``folder`` (a finished ``posenc extend`` run) as ``dest/NAME`` (default: the records folder)."""
    from posenc.extend import scope, sources
    from posenc.extrapolate import kept_extend, provenance
    from posenc.stats.results import load

    settings = json.loads((folder / "settings.json").read_text(encoding="utf-8"))
    args = settings.get("args")
    if args is None:
        raise ValueError(f"{folder}/settings.json has no args (written before posenc extend recorded them)")
    if command is not None:
        check_command(command, args)
    records = list(load(folder / "results.jsonl").values())
    others = sorted({r.get("setup") for r in records} - {settings["setup"]})
    if others:
        raise ValueError(f"{folder}/results.jsonl holds records of other set-ups ({', '.join(map(str, others))}): "
                         "keep a folder of one run")
    documents = [doc for doc, _ in sources.read_text(args.get("text"))]
    today = kept_extend.today_keys(settings, documents)
    if next(iter(today)).split(":")[0] != settings["setup"]:
        raise ValueError(f"{folder}: today's set-up hash of its model, text and grid is not its {settings['setup']}: "
                         "measure it again with today's code")
    have = {r["key"] for r in records}
    if not today <= have:
        raise ValueError(f"{folder} is not finished: {len(today - have)} of {len(today)} measurements missing "
                         "(run its command again: it resumes)")
    small = kept_extend.reduced(settings)
    out = (dest or kept_extend.RECORDS_DIR) / name
    out.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / "results.jsonl", out / kept_extend.RESULTS)
    (out / kept_extend.SETTINGS).write_text(json.dumps(small, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    again = scope.command(small["args"], out=name).replace(scope.program(), "posenc", 1)
    record = {"commit": commit or provenance.commit(), "date": started, "machine": provenance.machine("cpu"),
              "command": again, "wall_seconds": None if wall is None else round(wall, 1),
              "cpu_seconds": None if cpu is None else round(cpu, 1),
              "measured_seconds": round(sum(float(r.get("seconds") or 0) for r in records), 1),
              "records": len(records), "records_sha256": kept_extend.sha256(out / kept_extend.RESULTS),
              "settings_sha256": kept_extend.sha256(out / kept_extend.SETTINGS), "documents": documents,
              "settings_paths_reduced": [".".join(p) for p in kept_extend.PATHS]}
    (out / kept_extend.PROVENANCE).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="the kept set's name (letters, digits, - and _)")
    p.add_argument("--folder", type=Path, default=None, help="a finished posenc extend folder started outside this "
                   "script (give --started)")
    p.add_argument("--started", default=None, help="when that run started, UTC: 2026-12-07T23:19:30Z")
    p.add_argument("--command", default=None, help="the posenc extend command that made --folder (checked)")
    p.add_argument("--wall", type=float, default=None, help="its wall-clock seconds")
    p.add_argument("--cpu", type=float, default=None, help="its CPU seconds (user + system)")
    p.add_argument("--time-log", type=Path, default=None, help="GNU time -v's report of that run (wall and CPU)")
    p.add_argument("--commit", default=None, help="the commit it started from (default: this checkout's)")
    p.add_argument("--work", type=Path, default=None, help="when running: the folder posenc extend writes (resumable)")
    p.add_argument("--records", type=Path, default=None, help="where NAME/ goes (default: posenc/extrapolate/records)")
    p.epilog = "-- then the arguments of posenc extend (no --out): run it and keep it"
    argv = list(sys.argv[1:] if argv is None else argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    a, args = p.parse_args(argv[:cut]), argv[cut + 1:]
    if not a.name.replace("-", "").replace("_", "").isalnum():
        p.error(f"name must be letters, digits, - and _; got {a.name!r}")
    if (a.folder is None) == (cut == len(argv)) or (a.folder is None and not args):
        p.error("give either --folder DIR (a finished run) or -- and the arguments of posenc extend")
    if a.time_log is not None and (a.wall is not None or a.cpu is not None):
        p.error("give --time-log or --wall/--cpu, not both")
    try:
        if a.folder is not None:
            if a.started is None or not ISO.fullmatch(a.started):
                p.error(f"--started must be when the run started, UTC, as 2026-12-07T23:19:30Z; got {a.started!r}")
            wall, cpu = time_log(a.time_log) if a.time_log is not None else (a.wall, a.cpu)
            out = keep(a.name, a.folder, started=a.started, wall=wall, cpu=cpu, commit=a.commit, command=a.command,
                       dest=a.records)
        else:
            if "--out" in args:
                p.error("give no --out: the run goes to --work (or a temporary folder)")
            started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
            with tempfile.TemporaryDirectory() as tmp:
                work = a.work if a.work is not None else Path(tmp) / "extend"
                before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
                run = subprocess.run([sys.executable, "-m", "posenc", "extend", *args, "--out", str(work)],
                                     env={**os.environ}, check=False)
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_CHILDREN)
                if run.returncode != 0:
                    print(f"posenc extend exited {run.returncode}; nothing kept", file=sys.stderr)
                    return run.returncode
                cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                out = keep(a.name, work, started=started, wall=wall, cpu=cpu, commit=a.commit,
                           command=shlex.join(["posenc", "extend", *args]), dest=a.records)
    except (ValueError, OSError) as e:
        print(f"keep_extend: {e}", file=sys.stderr)
        return 2
    provenance = json.loads((out / "provenance.json").read_text(encoding="utf-8"))
    print(f"kept {out.name}: {provenance['records']} records; {provenance['command']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
