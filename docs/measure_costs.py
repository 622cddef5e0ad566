"""Measures the CPU-seconds per seed of a profile's rows and keeps them in posenc/extrapolate/costs.json
(``posenc.extrapolate.costs``: what a run's estimate at its start rests on).

    python docs/measure_costs.py --profile smoke
    python docs/measure_costs.py --profile quick --part lm --part scaling --seed 0

One seed, one process of one torch thread (``--jobs 1 --threads 1``), the runs' results in a
temporary file; each row's ``cpu_seconds`` (the process's CPU time over the run: what the run costs
however loaded the machine is; its wall time is not) appended to costs.json as one measurement with
its provenance (commit, date, machine, command, the load average at its start). Rows measured again
replace their earlier value when the estimate reads them; nothing else in the file changes.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    from posenc.extrapolate import PART_NAMES, costs, provenance
    from posenc.extrapolate.driver import run
    from posenc.extrapolate.parts import plan
    from posenc.extrapolate.plan import available_schemes
    from posenc.extrapolate.profiles import get_profile, with_overrides

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--profile", required=True)
    p.add_argument("--part", action="append", choices=PART_NAMES, dest="parts")
    p.add_argument("--scheme", action="append", dest="schemes", help="the schemes instead of the profile's")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=str(costs.COSTS_FILE))
    args = p.parse_args(argv)
    profile = with_overrides(get_profile(args.profile), seeds=(args.seed,),
                             parts=tuple(args.parts) if args.parts else None)
    command = shlex.join(["python", "docs/measure_costs.py", *(argv if argv is not None else sys.argv[1:])])
    kept = provenance.capture(command)
    load = list(os.getloadavg())
    start, cpu = time.perf_counter(), time.process_time()
    with tempfile.TemporaryDirectory() as tmp:
        records = run(profile, results=Path(tmp) / "results.jsonl", schemes=args.schemes, jobs=1, threads=1,
                      progress=False, device="cpu")
    sha = next((r["corpus"]["sha256"] for r in records if r.get("corpus")), "")
    names = args.schemes or list(available_schemes(profile.schemes, lambda msg: None))
    runs = {r.key: r for r in plan(profile, names, corpus_sha=sha, log=lambda msg: None)}
    rows = {costs.run_row(runs[r["key"]]): round(r["cpu_seconds"], 2) for r in records if "cpu_seconds" in r}
    measurement = {"profile": profile.name, "parts": list(profile.parts), "seed": args.seed, **kept,
                   "load_avg_start": [round(x, 2) for x in load], "load_avg_end": [round(x, 2) for x in os.getloadavg()],
                   "wall_seconds": round(time.perf_counter() - start, 1),
                   "cpu_seconds": round(time.process_time() - cpu, 1), "rows": rows}
    out = Path(args.out)
    data = json.loads(out.read_text()) if out.exists() else {
        "about": "CPU-seconds per seed of each row (part|arch|label), written by docs/measure_costs.py, never by hand",
        "measurements": []}
    data["measurements"].append(measurement)
    out.write_text(json.dumps(data, indent=1, sort_keys=False) + "\n")
    print(f"{len(rows)} rows of profile {profile.name} measured into {out} "
          f"({measurement['wall_seconds']} s wall, {measurement['cpu_seconds']} s CPU)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
