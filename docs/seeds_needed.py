"""Which claims of a kept set three seeds do not decide, and how many seeds would, for docs/numbers.md. Reads
the kept records (``posenc.extrapolate.kept``); writes nothing.

    python docs/seeds_needed.py decide

Of the set's verdicts as its own page decides them (``docs/kept_table.py`` prints them all), the claims
"no clear difference" with a test. For each, the effect the paper reports in the claim's own units, where
the claim or the paper's reported number (``posenc.extrapolate.parts.structure.REPORTED``) states one:

- two perplexities, "A vs B" or "A at L → B at 30L", for a ΔNLL claim: ``ln(B/A)``, in nats per token;
- two error rates, "X% vs Y%", for a Δaccuracy claim: ``(Y − X)/100``;
- "+N% test accuracy", for a Δaccuracy claim: ``N/100``.

The claim needs more seeds where its detectable effect (80% power after Holm in its paper's family,
``posenc.stats.procedure.detectable``) is larger than ``|paper's effect − null|``; the seeds that would
detect that effect from the measured spread: ``posenc.stats.procedure.seeds_to_detect``. The second table:
the claims whose paper states no effect in these units (an MRR, or no number), with the seeds that would
detect the effect measured here, where it is larger than its detectable effect would need.
"""

from __future__ import annotations

import argparse
import math
import re

PERPLEXITIES = (re.compile(r"(\d+(?:\.\d+)?) vs (\d+(?:\.\d+)?)(?! ?%)"),
                re.compile(r"(\d+(?:\.\d+)?) at L → (\d+(?:\.\d+)?) at"))
ERRORS = re.compile(r"(\d+(?:\.\d+)?)% vs (\d+(?:\.\d+)?)%")
ACCURACY = re.compile(r"([+-]?\d+(?:\.\d+)?)% test accuracy")


def paper_effect(v) -> tuple[float, str] | None:
    """``(|paper's effect − null|, what it rests on)`` in the claim's units, or None where the claim and its
    paper's reported number state none in these units."""
    from posenc.extrapolate.parts.structure import REPORTED

    null = v.evidence.null if v.evidence is not None else 0.0
    text = v.claim
    if v.unit == "ΔNLL" and "MRR" not in text:
        for rule in PERPLEXITIES:
            m = rule.search(text)
            if m:
                a, b = float(m.group(1)), float(m.group(2))
                return abs(math.log(b / a) - null), f"perplexities {m.group(1)} and {m.group(2)}: ln ratio"
    if v.unit == "Δaccuracy":
        m = ERRORS.search(text)
        if m:
            a, b = float(m.group(1)), float(m.group(2))
            return abs((b - a) / 100 - null), f"errors {m.group(1)}% and {m.group(2)}%"
        m = ACCURACY.search(REPORTED.get(v.source, ""))
        if m:
            return abs(float(m.group(1)) / 100 - null), f"the paper: {m.group(0)}"
    return None


def main(argv: list[str] | None = None) -> int:
    from posenc.extrapolate import kept
    from posenc.stats.procedure import UNCLEAR, seeds_to_detect

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name", help="a kept set of posenc/extrapolate/records")
    a = p.parse_args(argv)
    path = kept.RECORDS_DIR / f"{a.name}.json"
    if not path.exists():
        p.error(f"name: no kept set {a.name!r} in posenc/extrapolate/records")
    k = kept.load_set(path)
    unclear = [v for v in kept.verdicts(k) if v.status == UNCLEAR and v.test is not None and v.mde is not None]

    def seeds(v, target: float) -> str:
        n = seeds_to_detect(v.test, target, v.tests)
        return "more than 1000" if n is None else str(n)

    print(f"{k.name}: {len(unclear)} claims \"no clear difference\" on {k.provenance['command']}\n")
    print("| part | source | claim | paper's effect (its units) | detectable at 3 seeds | seeds that detect the "
          "paper's effect | spread |")
    print("|---|---|---|---|---|---|---|")
    rest = []
    for v in unclear:
        found = paper_effect(v)
        if found is None:
            rest.append(v)
            continue
        target, why = found
        if v.mde <= target:
            continue  # three seeds detect the paper's effect: the measured one is smaller
        spread = "its part's, pooled" if v.test.pooled else "its own seeds'"
        print(f"| {v.pool} | {v.source} | {v.claim.replace('|', '/')} | {target:.3g} {v.unit} ({why}) | "
              f"{v.mde:.2g} | {seeds(v, target)} | {spread} |")
    print("\nNo effect of the paper in the claim's units (an MRR, or no number): the seeds that would detect the "
          "effect measured here\n")
    print("| part | source | claim | effect measured here | detectable at 3 seeds | seeds that detect it |")
    print("|---|---|---|---|---|---|")
    for v in rest:
        target = abs(v.test.effect - (v.evidence.null if v.evidence is not None else 0.0))
        if v.mde <= target:
            continue
        print(f"| {v.pool} | {v.source} | {v.claim.replace('|', '/')} | {v.test.effect:+.3g} {v.unit} | "
              f"{v.mde:.2g} | {seeds(v, target)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
