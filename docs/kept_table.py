"""Prints a kept set's tables for docs/numbers.md (``posenc.extrapolate.kept``): its CPU time per part
beside the estimate its command prints today (``posenc.extrapolate.costs``), and its verdicts, claim
by claim, as its own page decides them. Reads the kept files; writes nothing.

    python docs/kept_table.py decide

A kept ``posenc extend`` run (a folder ``NAME/``, ``posenc.extrapolate.kept_extend``): its time beside the
sum of its measurements' own seconds, and its verdicts as ``posenc extend``'s page decides them.

    python docs/kept_table.py extend-smollm2
"""

from __future__ import annotations

import argparse


def main(argv: list[str] | None = None) -> int:
    from posenc.extrapolate import costs, kept
    from posenc.extrapolate.parts import plan
    from posenc.extrapolate.plan import available_schemes

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="a kept set of posenc/extrapolate/records")
    a = p.parse_args(argv)
    if (kept.RECORDS_DIR / a.name / "provenance.json").is_file():
        return _extend(a.name)
    path = kept.RECORDS_DIR / f"{a.name}.json"
    if not path.exists():
        p.error(f"name: no kept set {a.name!r} in posenc/extrapolate/records (have: "
                f"{', '.join(sorted(q.stem for q in kept.RECORDS_DIR.glob('*.json')))})")
    k = kept.load_set(path)
    profile = k.profile()
    names = k.provenance["schemes"] or list(available_schemes(profile.schemes, lambda msg: None))
    sha = next((r["corpus"]["sha256"] for r in k.records if r.get("corpus")), "")
    runs = plan(profile, names, corpus_sha=sha, log=lambda msg: None)
    estimate = costs.estimate(profile, runs)
    measured: dict[str, float] = {}
    for r in k.records:
        measured[r["part"]] = measured.get(r["part"], 0.0) + float(r.get("cpu_seconds") or 0.0)
    print(f"{k.name}: {len(k.records)} records; `{k.provenance['command']}`; commit {k.provenance['commit'][:7]}, "
          f"{k.provenance['date']}; wall {k.provenance['wall_seconds']:.0f} s, CPU {k.provenance['cpu_seconds']:.0f} s "
          f"over {k.provenance.get('starts', 1)} start(s)\n")
    print("| part | runs | CPU-seconds (the runs' own) | estimated today | ratio |")
    print("|---|---|---|---|---|")
    for part in sorted(set(measured) | set(estimate.per_part)):
        n = sum(1 for r in k.records if r["part"] == part)
        got, est = measured.get(part, 0.0), estimate.per_part.get(part, 0.0)
        print(f"| {part} | {n} | {got:.0f} | {est:.0f} | {got / est:.2f} |" if est else f"| {part} | {n} | {got:.0f} | – | – |")
    print(f"| all | {len(k.records)} | {sum(measured.values()):.0f} | {estimate.cpu_seconds:.0f} | "
          f"{sum(measured.values()) / max(estimate.cpu_seconds, 1e-9):.2f} |\n")
    print("| part | source | claim | verdict | effect ± se | detectable | seeds |")
    print("|---|---|---|---|---|---|---|")
    for v in kept.verdicts(k):
        t = v.test
        effect = f"{t.effect:+.3g} ± {t.se:.2g} {v.unit}".strip() if t is not None else ""
        mde = f"{v.mde:.2g}" if v.mde is not None else ""
        claim = v.claim.replace("|", "/")
        print(f"| {v.pool} | {v.source} | {claim} | {v.status} | {effect} | {mde} | {v.seeds} |")
    return 0


def _extend(name: str) -> int:
    from posenc.extrapolate import kept, kept_extend
    from posenc.stats.findings import adjust

    k = kept_extend.load_set(kept.RECORDS_DIR / name)
    p = k.provenance
    wall = "?" if p["wall_seconds"] is None else f"{p['wall_seconds']:.0f}"
    cpu = "?" if p["cpu_seconds"] is None else f"{p['cpu_seconds']:.0f}"
    print(f"{k.name}: {len(k.records)} measurements; `{p['command']}`; commit {str(p['commit'])[:7]}, {p['date']}; "
          f"wall {wall} s, CPU {cpu} s; the measurements' own seconds {p.get('measured_seconds', 0):.0f}"
          + (f"; STALE: {len(k.stale)} records" if k.stale else "") + "\n")
    print("| source | claim | verdict | effect ± se | detectable | passages or prompts |")
    print("|---|---|---|---|---|---|")
    for v in adjust(k.verdicts()):
        t = v.test
        effect = f"{t.effect:+.3g} ± {t.se:.2g} {v.unit}".strip() if t is not None else ""
        mde = f"{v.mde:.2g}" if v.mde is not None else ""
        print(f"| {v.source} | {v.claim.replace('|', '/')} | {v.status} | {effect} | {mde} | {v.seeds} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
