"""The papers' claims, checked against what this run measured (never assumed).

Each claim is a direction ("A is lower/higher than B") or a bound ("A is at most B + margin")
from a paper. Each verdict has a test and a two-sided p-value (``posenc.extrapolate.stats``): paired
t-tests on block NLLs for perplexity (Student's t over seeds, the normal with one seed), McNemar's
exact test on the same examples for the tasks. The family is every verdict of the report that has
a p-value (language modelling, RoPE scalings, tasks, the hybrid, images and time together); ``adjust`` applies Holm's
correction over it at ``ALPHA`` = 0.05. A verdict ``agrees`` when its Holm-adjusted p is below
0.05 and the measured difference has the paper's direction, ``disagrees`` when it is below 0.05
and has the opposite one, ``no clear difference`` otherwise, ``not measured`` when a scheme is
missing. Behind fewer than ``MIN_SEEDS`` seeds a verdict is marked "indicative": the spread
between training runs is then not in its error.

"Does not degrade" claims are non-inferiority tests with a stated margin: the NLL of the same
held-out bytes at positions 8L–16L of a 16L window against positions L/2–L of an L window (the
trained positions with the most context); it ``agrees`` when the increase is significantly below
``MARGIN`` nats (perplexity within 2%). Whole-window perplexities at different lengths differ in
context as well as in positions, so they are compared across schemes at one length only.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from posenc.extrapolate.stats import (ALPHA, Estimate, LMTable, TaskTable, holm, learned_tasks, mcnemar_exact,
                                      mean_reciprocal_rank)

PRESS = "Press et al. 2022"  # ALiBi; WikiText-103, trained at 512, tested to 15512 (~30L)
KAZEMNEJAD = "Kazemnejad et al. 2023"  # algorithmic tasks, train sizes <= 20, test to 40
SETTINGS = {PRESS: "WikiText-103, 247M parameters, trained at 512 tokens, tested to 15512 (~30L)",
            KAZEMNEJAD: "algorithmic tasks, each trained separately, train sizes ≤ 20, test to 40"}
KAZEMNEJAD_MRR = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}
"""Their mean reciprocal ranks; their absolute scheme runs past the training length, so the
sinusoidal one stands for it here (a learned table cannot run there at all)."""
MARGIN = math.log(1.02)  # non-inferiority margin of "does not degrade": perplexity at most 2% higher
MIN_SEEDS = 3  # fewer seeds behind a verdict: "indicative"


@dataclass(frozen=True)
class Verdict:
    source: str
    claim: str  # what the paper found, in words
    measured: str  # what this run measured, in words
    status: str  # agrees / disagrees / no clear difference / not measured
    p: float | None = None  # two-sided p-value of the test (None: no test, e.g. "cannot run")
    direction: int = 0  # +1: the estimate lies on the paper's side; −1: on the other
    seeds: int = 0  # seeds behind the verdict
    p_holm: float | None = None  # after Holm's correction over the report's family (``adjust``)

    @property
    def indicative(self) -> bool:
        return self.p is not None and self.seeds < MIN_SEEDS


def _decide(p: float, direction: int, alpha: float = ALPHA) -> str:
    if p >= alpha or direction == 0:
        return "no clear difference"
    return "agrees" if direction > 0 else "disagrees"


def adjust(verdicts: list[Verdict], alpha: float = ALPHA) -> list[Verdict]:
    """Holm's correction over every verdict with a p-value; statuses re-decided on the adjusted p."""
    tested = [i for i, v in enumerate(verdicts) if v.p is not None]
    adjusted = holm([verdicts[i].p for i in tested])
    out = list(verdicts)
    for i, q in zip(tested, adjusted):
        out[i] = dataclasses.replace(verdicts[i], p_holm=q, status=_decide(q, verdicts[i].direction, alpha))
    return out


def _tested(source: str, claim: str, measured: str, d: Estimate, *, expect_negative: bool,
            null: float = 0.0) -> Verdict:
    p = d.p_value(null)
    direction = 1 if (d.mean < null) == expect_negative else -1
    if d.mean == null:
        direction = 0
    return Verdict(source, claim, measured, _decide(p, direction), p, direction, d.seeds)


def _ppl_claim(table: LMTable, source: str, claim: str, lower: tuple[str, int], higher: tuple[str, int],
               mode: str = "nonoverlap") -> Verdict:
    """The paper found perplexity(lower) < perplexity(higher)."""
    d = table.diff(lower, higher, mode)
    if d is None:
        return Verdict(source, claim, "not measured (a scheme or length is missing)", "not measured")
    a, b = table.estimate(*lower[:1], mode, lower[1]), table.estimate(*higher[:1], mode, higher[1])
    measured = (f"{lower[0]} @{lower[1]}: {a.ppl:.2f} vs {higher[0]} @{higher[1]}: {b.ppl:.2f} "
                f"(ΔNLL {d.mean:+.4f} ± {d.se:.4f} nats/token)")
    return _tested(source, claim, measured, d, expect_negative=True)


def _position_claim(table: LMTable, source: str, claim: str, label: str, *, degrades: bool) -> Verdict:
    """NLL at positions 8L–16L (the last bucket) against L/2–L on the same bytes: ``degrades`` is
    a directional claim (higher past L); otherwise non-inferiority within ``MARGIN``."""
    buckets = table.buckets()
    near, far = buckets[1], buckets[-1]
    d = table.position_diff((label, far), (label, near)) if far.lo >= table.train_length else None
    if d is None:
        return Verdict(source, claim, "not measured (a scheme or length is missing)", "not measured")
    L = table.train_length
    a, b = table.position(label, far), table.position(label, near)
    what = (f"{label}, same bytes at positions {far.name(L)}: {a.ppl:.2f} vs {near.name(L)}: {b.ppl:.2f} "
            f"(ΔNLL {d.mean:+.4f} ± {d.se:.4f}")
    if degrades:
        return _tested(source, claim, what + ")", d, expect_negative=False)
    return _tested(source, claim, what + f"; margin {MARGIN:.4f})", d, expect_negative=True, null=MARGIN)


def lm_verdicts(table: LMTable) -> list[Verdict]:
    L = table.train_length
    long = max(table.lengths) if table.lengths else L
    x = f"{long // L}L" if L else "long"
    return [
        _position_claim(table, PRESS, "ALiBi does not degrade past L: 19.73 at L → 18.31 at 30L "
                        f"(here: positions past L within a {x} window, non-inferiority, margin 2% perplexity)",
                        "alibi", degrades=False),
        _position_claim(table, PRESS, f"sinusoidal degrades: 20.05 at L → 406 at 30L (here: positions past L "
                        f"within a {x} window)", "sinusoidal", degrades=True),
        _position_claim(table, PRESS, f"rotary degrades: 20.07 at L → 79.25 at 30L (here: positions past L "
                        f"within a {x} window)", "rope", degrades=True),
        _ppl_claim(table, PRESS, f"at {x}, ALiBi beats sinusoidal", ("alibi", long), ("sinusoidal", long)),
        _ppl_claim(table, PRESS, f"at {x}, ALiBi beats rotary", ("alibi", long), ("rope", long)),
        _ppl_claim(table, PRESS, f"at {x}, rotary beats sinusoidal (79.25 vs 406 at 30L)",
                   ("rope", long), ("sinusoidal", long)),
        _ppl_claim(table, PRESS, f"at {x}, ALiBi beats T5 (T5 holds to ~5L, then rises)",
                   ("alibi", long), ("t5", long)),
        _learned_verdict(table),
    ]


def _learned_verdict(table: LMTable) -> Verdict:
    claim = "a learned absolute table cannot run past its length"
    L = table.train_length
    if "learned" not in table.labels():
        return Verdict("Vaswani et al. 2017; Press et al. 2022", claim, "not measured", "not measured")
    longer = [t for t in table.lengths if t > L]
    blocked = [t for t in longer if t in table.cannot.get("learned", {})]
    ran_at_l = table.estimate("learned", "nonoverlap", L) is not None
    ok = ran_at_l and blocked == longer
    measured = (f"ran at {L}; recorded as cannot-run at {', '.join(map(str, blocked)) or 'no length'}"
                if ran_at_l else "did not run at L")
    return Verdict("Vaswani et al. 2017; Press et al. 2022", claim, measured, "agrees" if ok else "disagrees")


def scaling_verdicts(lm: LMTable, scaling: LMTable, labels: dict[tuple[str, str], str], factor: int, *,
                     base: str = "rope") -> list[Verdict]:
    """Claims on RoPE scalings at the fine-tune length ``factor·L``; ``labels[(type, mode)]`` names
    the scaling runs (``type`` "none" is the fine-tune without scaling), ``base`` the LM run of the
    RoPE model they start from."""
    merged = LMTable({**lm.blocks, **scaling.blocks}, {**lm.cannot, **scaling.cannot},
                     sorted(set(lm.lengths) | set(scaling.lengths)), lm.train_length)
    at = lm.train_length * factor
    zero = {t: lab for (t, mode), lab in labels.items() if mode == "zero-shot"}
    tuned = {t: lab for (t, mode), lab in labels.items() if mode == "fine-tune"}
    out = []
    for kind, source in (("ntk", "bloc97 2023 (NTK-aware); Peng et al. 2023"), ("yarn", "Peng et al. 2023 (YaRN)")):
        if kind in zero:
            out.append(_ppl_claim(merged, source, f"zero-shot {kind} beats plain RoPE at {factor}L",
                                  (zero[kind], at), (base, at)))
    if "linear" in tuned and "none" in tuned:
        out.append(_ppl_claim(merged, "Chen et al. 2023 (position interpolation)",
                              f"after a short fine-tune at {factor}L, linear interpolation beats "
                              "fine-tuning without it",
                              (tuned["linear"], at), (tuned["none"], at)))
    if "yarn" in tuned and "linear" in tuned:
        out.append(_ppl_claim(merged, "Peng et al. 2023 (YaRN)",
                              f"fine-tuned at {factor}L, YaRN beats linear interpolation",
                              (tuned["yarn"], at), (tuned["linear"], at)))
    return out


def task_cells(table: TaskTable, tasks: list[str]) -> list[tuple[str, int]]:
    """The cells the task verdicts use: ``tasks`` at the sizes whose sequences are longer than
    every training sequence (positions never trained)."""
    return [(t, s) for t in tasks for s in table.sizes if table.beyond(t, s)]


def task_verdicts(table: TaskTable) -> tuple[list[Verdict], dict[str, float], list[str]]:
    """Kazemnejad et al.'s order on cells beyond the trained positions (McNemar's exact test on
    the same examples, pooled over those cells and the seeds), the measured mean reciprocal
    ranks, and the tasks they are computed on (those some scheme learned in distribution)."""
    labels = [lab for lab in KAZEMNEJAD_MRR if lab in table.labels()]
    tasks = learned_tasks(table)
    cells = task_cells(table, tasks)
    mrr = mean_reciprocal_rank(table, labels, cells=cells) if cells and labels else {}
    order = list(KAZEMNEJAD_MRR)
    out = []
    for better, worse in zip(order, order[1:]):
        claim = f"{better} generalises better than {worse} (MRR {KAZEMNEJAD_MRR[better]} vs {KAZEMNEJAD_MRR[worse]})"
        counts = table.discordant(better, worse, cells) if better in labels and worse in labels and cells else None
        if counts is None or counts[2] == 0:
            out.append(Verdict(KAZEMNEJAD, claim, "not measured (no task learned, no cell beyond the trained "
                                                  "positions, or a scheme missing)", "not measured"))
            continue
        b, c, n = counts
        p = mcnemar_exact(b, c)
        seeds = min(len(table.runs[lab][t][s]) for lab in (better, worse) for t, s in cells)
        measured = (f"exact match on {n} paired examples beyond the trained positions: {better} alone right "
                    f"{b}, {worse} alone right {c} (difference {(b - c) / n:+.3f}); "
                    f"MRR {mrr.get(better, float('nan')):.2f} vs {mrr.get(worse, float('nan')):.2f}")
        direction = (b > c) - (b < c)
        out.append(Verdict(KAZEMNEJAD, claim, measured, _decide(p, direction), p, direction, seeds))
    return out, mrr, tasks


# -- the recurrent baseline: attention + ssm blocks (``--arch hybrid``) -------------------------

JAMBA = "Lieber et al. 2024 (Jamba)"
SETTINGS[JAMBA] = ("Jamba ablations: language models interleaving Mamba and attention layers, trained with and "
                   "without RoPE in the attention layers")
HYBRID_NOPE, HYBRID_ROPE = "hybrid nope", "hybrid rope"  # posenc.extrapolate.plan.arch_label
PEERS = ("rope", "alibi", "kerple")  # how the NoPE hybrid's extrapolation is classed: like RoPE or like ALiBi/KERPLE


@dataclass(frozen=True)
class Trend:
    """Perplexity at L and at the longest length, and the paired change of the NLL between them."""

    label: str
    ppl_at_l: float
    ppl_long: float
    delta: float  # NLL(long) − NLL(L), nats/token
    se: float

    @property
    def degrades(self) -> bool:
        """True: worse at the far positions by more than 2 SE; False: not worse by more than 2 SE."""
        return self.delta > 2 * self.se


def trend(table: LMTable, label: str) -> Trend | None:
    """The same bytes at the last position bucket (8L–16L at quick) against L/2–L, as the Press
    verdicts compare them (``_position_claim``): context held equal, only the positions differ."""
    buckets = table.buckets()
    if len(buckets) < 3:
        return None
    near, far = buckets[1], buckets[-1]
    if far.lo < table.train_length:
        return None
    d = table.position_diff((label, far), (label, near))
    a, b = table.position(label, near), table.position(label, far)
    if d is None or a is None or b is None:
        return None
    return Trend(label, a.ppl, b.ppl, d.mean, d.se)


def hybrid_verdicts(table: LMTable) -> list[Verdict]:
    """Jamba's claim that attention between recurrent layers needs no positional encoding, at the
    training length, as non-inferiority: the NoPE hybrid's NLL minus the RoPE hybrid's is below
    ``MARGIN`` (agrees), or significantly above it (disagrees); its p-value joins the Holm family."""
    L = table.train_length
    claim = ("with recurrent layers in the stack, attention needs no positional encoding: at L the NoPE hybrid is "
             "as good as the RoPE hybrid (non-inferiority, margin 2% perplexity)")
    d = table.diff((HYBRID_NOPE, L), (HYBRID_ROPE, L))
    if d is None:
        return [Verdict(JAMBA, claim, "not measured (no hybrid nope and hybrid rope runs)", "not measured")]
    a, b = table.estimate(HYBRID_NOPE, "nonoverlap", L), table.estimate(HYBRID_ROPE, "nonoverlap", L)
    measured = (f"{HYBRID_NOPE} @{L}: {a.ppl:.2f} vs {HYBRID_ROPE} @{L}: {b.ppl:.2f} "
                f"(ΔNLL {d.mean:+.4f} ± {d.se:.4f} nats/token)")
    return [_tested(JAMBA, claim, measured + f"; margin {MARGIN:.4f}", d, expect_negative=True, null=MARGIN)]


def hybrid_answers(table: LMTable) -> list[str]:
    """The two questions on the hybrid, answered in words from this run (empty when not measured):
    does the NoPE hybrid extrapolate like ALiBi/KERPLE or degrade like RoPE; does the recurrence
    make position in attention unnecessary at the training length."""
    out = []
    L = table.train_length
    mine = trend(table, HYBRID_NOPE)
    if mine is not None:
        peers = {p: t for p in PEERS if (t := trend(table, p)) is not None}
        same = [p for p, t in peers.items() if t.degrades == mine.degrades]
        other = [p for p in peers if p not in same]
        how = "degrades past L" if mine.degrades else "does not degrade past L"
        buckets = table.buckets()
        text = (f"Extrapolation: the NoPE hybrid {how} (the same bytes at positions {buckets[-1].name(L)}: perplexity "
                f"{mine.ppl_long:.2f} vs {mine.ppl_at_l:.2f} at {buckets[1].name(L)}, ΔNLL {mine.delta:+.4f} ± "
                f"{mine.se:.4f}; degrading means worse by more than 2 SE)")
        def named(labels: list[str]) -> str:
            return ", ".join(f"{p} ({peers[p].delta:+.4f})" for p in labels)

        if peers:
            text += (f", like {named(same) or 'none of ' + ', '.join(peers)} in this run"
                     + (f" and unlike {named(other)}" if other else ""))
        out.append(text + ".")
    d = table.diff((HYBRID_NOPE, L), (HYBRID_ROPE, L))
    if d is not None:
        if d.mean > 2 * d.se:
            verdict = "no: RoPE still helps the hybrid's attention at L by more than 2 SE"
        elif d.mean < -2 * d.se:
            verdict = "yes: the NoPE hybrid is better than the RoPE hybrid by more than 2 SE"
        else:
            verdict = "yes, within 2 SE: RoPE adds nothing measurable to the hybrid at L"
        v = hybrid_verdicts(table)[0]
        verdict += f" (Jamba's claim as a non-inferiority test with a 2% margin, before Holm: {v.status})"
        text = f"Position at training length: {verdict} (ΔNLL NoPE − RoPE hybrid {d.mean:+.4f} ± {d.se:.4f})"
        t = table.diff(("nope", L), ("rope", L))
        if t is not None:
            text += f"; in the transformer, NoPE − RoPE is {t.mean:+.4f} ± {t.se:.4f}"
        out.append(text + ".")
    return out
