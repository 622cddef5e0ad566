"""The papers' claims on a pretrained model, tested with the report's procedure, the passage as the unit.

A pretrained model has no seeds: what varies between replications is the text. Each claim's
evidence (``posenc.stats.procedure.Evidence``) is its effect on each passage (paired: both
sides on the same tokens), with the passage's own standard error from its 64-token blocks (HAC);
``posenc.stats.findings.adjust`` tests it on the spread between its passages and corrects with
Holm per paper, stating each effect's interval and detectable effect. A verdict needs 3 passages
(``MIN_SEEDS``).

**Each claim on its own passages, not pooled.** The report pools the seed spread of a part's claims
(one dispersion factor: spread ∝ held-out noise), which fits seeds of similar training runs. Between
passages of different works it does not hold: how much a method's effect varies from one work to
another is not proportional to the token noise (a method can help one play and hurt another; plain
RoPE's "past minus within" has no such term). Measured on simulated null grids with the grid's three
passages (tests/test_extend_verdicts.py, 3000 grids each), pooling decided 7.5% and 9.4% of Peng et
al.'s null families and 6.7% and 9.9% of bloc97's at α = 5% when the per-(method, passage) offsets had
a spread of 0.1 and 0.3 nats; each claim on its own passages (Student's t with 2 degrees of freedom,
exact for normal passage effects) stays at its rate. So every perplexity claim is its own pool.
Passages come from different works of the text, so they are close to exchangeable, which the test
needs.

**Passkey**: each prompt (a depth of a trial) is a unit, the outcomes are paired right/wrong, and
the claim is decided by McNemar's exact test with Holm over its family (``passkey_verdicts``).

Effects are in nats per token (ΔNLL); the passkey's in accuracy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from posenc.stats.findings import MARGIN, Verdict, adjust, seed_verdict
from posenc.stats.distributions import holm, mcnemar_exact
from posenc.stats.estimates import hac_se
from posenc.stats.procedure import ALPHA, MIN_SEEDS, NEEDS_SEEDS, UNCLEAR, Evidence

BLOCK = 64  # tokens per block of a passage's standard error
PPL_POOL, PASSKEY_POOL = "pretrained-ppl", "pretrained-passkey"
PASSKEY_SOURCE = "Mohtashami & Jaggi 2023; Peng et al. 2023"
NLL = Callable[[str, int, int], "np.ndarray | None"]  # (method, length, passage) -> per-token NLL or None


def _blocks(x: np.ndarray) -> np.ndarray:
    n = x.size // BLOCK
    return x[:n * BLOCK].reshape(n, BLOCK).mean(axis=1) if n >= 2 else x


def _paired(nll: NLL, a: str, b: str, length: int, passages: int, lo: int, hi: int) -> Evidence | None:
    """Per passage: mean NLL of ``a`` minus ``b`` over tokens ``lo … hi`` of the ``length`` forward."""
    effects, within = [], []
    for p in range(passages):
        x, y = nll(a, length, p), nll(b, length, p)
        if x is None or y is None:
            continue
        d = x[lo:hi] - y[lo:hi]
        effects.append(float(d.mean()))
        within.append(hac_se(_blocks(d)))
    return Evidence(tuple(effects), tuple(within)) if effects else None


def _degrades(nll: NLL, length: int, context: int, passages: int) -> Evidence | None:
    """Per passage, ``none``: mean NLL of the tokens past the context minus those within it."""
    effects, within = [], []
    for p in range(passages):
        x = nll("none", length, p)
        if x is None:
            continue
        past, inside = x[context - 1:], x[:context - 1]
        effects.append(float(past.mean() - inside.mean()))
        within.append(float(np.hypot(hac_se(_blocks(past)), hac_se(_blocks(inside)))))
    return Evidence(tuple(effects), tuple(within)) if effects else None


NOT_ASKED = "not asked"  # the status of a claim whose methods (or passkey trials) this run was not given


def why_not(arms: tuple[str, ...], length: int, methods: list[str], lengths: list[int], trials: int = 1) -> str | None:
    """Why this run cannot measure a claim on ``arms`` at ``length`` (None: it can): methods not asked for,
    passkey not asked for (``trials`` 0), a length past ``--to``; every reason that applies, each with the
    flag that would (``posenc.extend.scope`` groups the claims by them)."""
    missing = [m for m in arms if m not in methods]
    reasons = []
    if missing:
        reasons.append(f"{NOT_ASKED} for: {', '.join(missing)} (add {' '.join('--method ' + m for m in missing)})")
    if trials == 0:
        reasons.append(f"{NOT_ASKED} for: passkey (--trials 0; give --trials 1 or more)")
    if length > lengths[-1]:
        reasons.append(f"this run's --to {lengths[-1]} does not reach {length}: needs --to {length}")
    return "; ".join(reasons) or None


def _verdict(source: str, claim: str, measured: str, ev: Evidence | None, *, sign: int = 1, null: float = 0.0,
             unit: str = "ΔNLL", why: str | None = None) -> Verdict:
    pool = f"{PPL_POOL}: {claim}"  # its own: not pooled with other claims (the module's docstring)
    if why is not None:
        return Verdict(source, claim, f"{measured}; {why}", NOT_ASKED if why.startswith(NOT_ASKED) else "not measured",
                       pool=pool)
    if ev is None:  # asked for and in range: a run stopped before it (a rerun resumes)
        return Verdict(source, claim, measured + "; not measured yet (a rerun resumes)", "not measured", pool=pool)
    ev = Evidence(ev.effects, ev.within, null=null, sign=sign)
    v = seed_verdict(source, claim, measured, ev, unit=unit)
    import dataclasses

    return dataclasses.replace(v, pool=pool)


def _passkey(correct: Callable[[str, int], dict], method: str, length: int) -> tuple[int, int, int] | None:
    """McNemar's counts over the prompts (depth, trial) at ``length``: ``(b, c, n)``, ``b`` prompts only
    ``method`` answered, ``c`` only ``none``, ``n`` prompts in all (None: none measured)."""
    mine, base = correct(method, length), correct("none", length)
    units = sorted(set(mine) & set(base))
    if not units:
        return None
    b = sum(bool(mine[u]) and not base[u] for u in units)
    c = sum(bool(base[u]) and not mine[u] for u in units)
    return b, c, len(units)


def passkey_verdicts(correct: Callable[[str, int], dict], methods: list[str], past: list[int],
                     context: int, why: Callable[[str, int], str | None] = lambda m, n: None) -> list[Verdict]:
    """Each scaling against ``none`` past the context, decided by McNemar's exact test on the paired
    prompts with Holm over the family (one source): a t-test on a handful of 0/±1 differences is not
    calibrated (three prompts all +1 have no spread: p = 0; with every accuracy at one half it decided
    10% of null families, tests/test_extend_verdicts.py). The verdicts carry no ``Evidence``, so
    ``adjust`` leaves them as decided here."""
    found = [(n, m, _passkey(correct, m, n)) for n in past for m in methods if m != "none"]
    tested = [(i, counts) for i, (_, _, counts) in enumerate(found) if counts is not None and counts[2] >= MIN_SEEDS]
    adjusted = dict(zip([i for i, _ in tested], holm([mcnemar_exact(b, c) for _, (b, c, _) in tested])))
    out = []
    for i, (n, m, counts) in enumerate(found):
        claim = f"{m} retrieves the passkey past the context more often than none ({n // context}×)"
        reason = why(m, n)
        if reason is not None:
            out.append(Verdict(PASSKEY_SOURCE, claim, f"accuracy({m}) − accuracy(none) at {n}; {reason}",
                               NOT_ASKED if reason.startswith(NOT_ASKED) else "not measured", pool=PASSKEY_POOL))
            continue
        if counts is None:
            out.append(Verdict(PASSKEY_SOURCE, claim, f"accuracy({m}) − accuracy(none) at {n}; not measured yet "
                               "(a rerun resumes)",
                               "not measured", pool=PASSKEY_POOL))
            continue
        b, c, units = counts
        measured = (f"exact match on {units} paired prompts at {n}: {m} alone right {b}, none alone right {c} "
                    f"(difference {(b - c) / units:+.3f}; McNemar's exact p {mcnemar_exact(b, c):.2g})")
        if i not in adjusted:
            out.append(Verdict(PASSKEY_SOURCE, claim, measured + f"; a verdict needs {MIN_SEEDS} prompts",
                               NEEDS_SEEDS, seeds=units, pool=PASSKEY_POOL, unit="Δaccuracy"))
            continue
        q = adjusted[i]
        status = UNCLEAR if q >= ALPHA else ("agrees" if b > c else "disagrees")
        out.append(Verdict(PASSKEY_SOURCE, claim, measured, status, p=mcnemar_exact(b, c), direction=(b > c) - (b < c),
                           seeds=units, p_holm=q, pool=PASSKEY_POOL, unit="Δaccuracy", tests=len(tested)))
    return out


def claims(nll: NLL, correct: Callable[[str, int], dict], *, context: int, lengths: list[int], passages: int,
           methods: list[str], trials: int = 1) -> list[Verdict]:
    """Every claim, decided together (Holm per paper); those this grid cannot measure say why."""
    return adjust(claim_list(nll, correct, context=context, lengths=lengths, passages=passages, methods=methods,
                             trials=trials))


def claim_list(nll: NLL, correct: Callable[[str, int], dict], *, context: int, lengths: list[int], passages: int,
               methods: list[str], trials: int = 1) -> list[Verdict]:
    """Every claim, each decided alone (``adjust`` decides them as a family). The claims about extension
    (at ``2L₀``, and ``4L₀`` where the grid reaches it) are listed even where ``--to`` is shorter, and a
    claim on methods this run was not given is listed as not asked for, each saying what would measure it
    (``why_not``)."""
    past = [n for n in lengths if n >= 2 * context] or [2 * context]
    two, out = past[0], []

    def why(arms: tuple[str, ...], n: int) -> str | None:
        return why_not(arms, n, methods, lengths)

    out.append(_verdict("Press et al. 2022; Chen et al. 2023", "plain RoPE degrades past its context",
                        f"none at {two}: NLL of tokens past {context} − tokens within",
                        _degrades(nll, two, context, passages), why=why(("none",), two)))
    out.append(_verdict("bloc97 2023", "zero-shot NTK-aware beats zero-shot linear at 2×",
                        f"NLL(linear) − NLL(ntk), all {two} tokens", _paired(nll, "linear", "ntk", two, passages, 0, two),
                        why=why(("linear", "ntk"), two)))
    for n in past:
        k = n // context
        for other in ("ntk", "linear"):
            out.append(_verdict("Peng et al. 2023", f"YaRN beats {other} zero-shot at {k}×",
                                f"NLL({other}) − NLL(yarn), all {n} tokens",
                                _paired(nll, other, "yarn", n, passages, 0, n), why=why((other, "yarn"), n)))
    out.append(_verdict("Peng et al. 2023", "dynamic scaling leaves perplexity within the original context unchanged",
                        f"NLL(dynamic) − NLL(none) at {context}: below the margin ln 1.02",
                        _paired(nll, "dynamic", "none", context, passages, 0, context), sign=-1, null=MARGIN,
                        why=why(("dynamic", "none"), context)))
    top = lengths[-1]
    out.append(_verdict("Chen et al. 2023", "linear interpolation raises perplexity within the original context",
                        f"NLL(linear) − NLL(none), the first {context} tokens of {top}",
                        _paired(nll, "linear", "none", top, passages, 0, min(context, top)),
                        why=why(("linear", "none"), top)))
    return out + passkey_verdicts(correct, methods, past, context,
                                  lambda m, n: why_not(("none", m), n, methods, lengths, trials))


def from_folder(out: Path) -> list[Verdict] | None:
    """The claims (each decided alone) of the ``posenc extend`` run in ``out`` (None: no run there)."""
    import json

    from posenc.stats.results import load

    if not (out / "settings.json").is_file():
        return None
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    grid = settings["grid"]
    records = [r for r in load(out / "results.jsonl").values() if r.get("setup") == settings["setup"]]
    nll, correct = measured_by(records, grid["lengths"])
    return claim_list(nll, correct, context=grid["context"], lengths=grid["lengths"],
                      passages=len(settings["passages"]), methods=shown_methods(settings, records),
                      trials=grid.get("trials", 1))


def runnable(settings: dict[str, Any]) -> list[str]:
    """The grid's methods that can run on its model (``longrope`` needs the model's factors)."""
    skipped = settings.get("unavailable")
    if skipped is None:  # a settings file written before the field existed: read the model's config
        from transformers import AutoConfig

        from posenc.extend.methods import unavailable

        config = AutoConfig.from_pretrained(settings["model"])
        skipped = {m: True for m in settings["grid"]["methods"] if unavailable(config, m) is not None}
    return [m for m in settings["grid"]["methods"] if m not in skipped]


def shown_methods(settings: dict[str, Any], records: list[dict[str, Any]]) -> list[str]:
    """This run's methods that can run, and any other method with records of the same set-up in the folder
    (an earlier run there with other ``--method``s: the page shows every record it counts), in ``METHODS``
    order."""
    from posenc.extend.methods import METHODS

    mine = set(runnable(settings)) | {r["method"] for r in records}
    return [m for m in METHODS if m in mine]


def measured_by(records: list[dict[str, Any]], lengths: list[int]) -> tuple[NLL, Callable[[str, int], dict]]:
    """The per-token NLL and passkey look-ups of ``records`` (a static method's shorter lengths are the
    first tokens of its longest forward)."""
    ppl: dict[tuple[str, int, int], np.ndarray] = {}
    for r in records:
        if r["kind"] == "ppl":
            ppl[(r["method"], r["length"], r["passage"])] = np.asarray(r["nll"], dtype=np.float64)

    def nll(method: str, length: int, passage: int) -> np.ndarray | None:
        exact = ppl.get((method, length, passage))
        if exact is not None:
            return exact
        if method in ("dynamic", "longrope"):
            return None
        longer = [n for (m, n, p) in ppl if m == method and p == passage and n > length]
        return ppl[(method, min(longer), passage)][:length - 1] if longer else None

    keys: dict[tuple[str, int], dict] = {}
    for r in records:
        if r["kind"] == "passkey":
            keys.setdefault((r["method"], r["length"]), {})[(r["depth"], r["trial"])] = bool(r["correct"])

    def correct(method: str, length: int) -> dict:
        return keys.get((method, length), {})

    return nll, correct
