"""Hierarchical and structured positions: the claims of BiPE, HiRoPE, Abacus, position
coupling and randomized positions, and their section of the page (``#hierarchical``).

The rows are their parts' records, run there and planned beside those parts' runs by ``Structure.extend``
(the extension point of the hybrid rows; positions from the tokens: ``posenc.extrapolate.structured_positions``):

- text (``--part lm``, ``Profile.bipe_rows``): ``bipe`` (RoPE between segments) and ``bipe_bias``
  (ALiBi between segments, the official slopes x 96), segments the lines of the source code,
  against ``rope`` and ``alibi`` at the longest length (16L);
- scalings (``--part scaling``, ``Profile.hirope``): ``hirope`` applied zero-shot to the trained
  ``rope`` model, (line, token) positions, against plain RoPE at 4L and 16L and against the
  zero-shot scalings at 16L (no training: it evaluates the rope checkpoints);
- tasks (``--part tasks``): addition learned alone (``Profile.addition``), trained on up to n
  digits and tested to at least 3n, with Abacus and coupled positions (a learned table over them,
  no position in attention) against ``rope``, ``nope`` and ``alibi``; and the models of the
  algorithmic tasks trained with randomized positions (``Profile.randomized``) against the same
  scheme without them (the tasks part's own rows).

Every claim is decided by the page's procedure (``posenc.stats.findings``): per-seed paired
effects, a verdict from three seeds, Holm per paper; the claims on text share one seed spread
(pool ``structure:text``, ΔNLL) and those on tasks another (``structure:tasks``, Δaccuracy). A
claim whose rows this profile does not run is "not measured" with the command that measures it.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posenc.stats import estimates as stats
from posenc.extrapolate import task_generators as T
from posenc.stats.findings import Verdict, mcnemar_verdict, ppl_claim
from posenc.stats.page_parts import Page, e, exact_match_tables, pooled_error_cell, status
from posenc.stats.page_parts import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.parts.lm import bipe_runs, ppl_table
from posenc.extrapolate.parts.scaling import hirope_runs, is_hirope
from posenc.extrapolate.parts.tasks import ADDITION, RANDOMIZED, structure_runs
from posenc.extrapolate.plan import Run
from posenc.extrapolate.profiles import PROFILES, Profile
from posenc.stats.estimates import LMTable, TaskTable, learned_tasks, task_cells

HE = "He et al. 2024 (BiPE)"
ZHANG = "Zhang et al. 2024 (HiRoPE)"
MCLEISH = "McLeish et al. 2024 (Abacus)"
CHO = "Cho et al. 2024 (position coupling)"
RUOSS = "Ruoss et al. 2023 (randomized positions)"
SOURCES = {HE: "BiPE-RoPE and BiPE-ALiBi (segments at the full stop and the newline) against RoPE and ALiBi; "
               "language models trained at 1024 tokens, perplexity far past it (PG-19, ArXiv, GitHub)",
           ZHANG: "HiRoPE on trained code LLMs, training-free: RoPE's dimensions split between token and "
                  "function/class positions, with a window; long code language modelling and completion",
           MCLEISH: "Abacus embeddings (each digit's index in its number, a random offset in training) with NoPE or "
                    "FIRE; addition trained on up to 20 digits, tested to 100",
           CHO: "position coupling (digits of one significance share a position) on a learned absolute table; "
                "addition trained on 1 to 30 digits, tested to 200",
           RUOSS: "randomized positional encodings (an ordered sample of a range much longer than training) for "
                  "several schemes; 15 algorithmic tasks, trained to length 40, tested to 500"}
REPORTED = {HE: "lower perplexity than RoPE and ALiBi far past the training length (no single number: their tables "
                "by dataset and length)",
            ZHANG: "stable perplexity at lengths far past (\"exponentially greater than\") the training length, "
                   "training-free (no single number: their tables by model)",
            MCLEISH: "99% exact match on 100-digit addition trained on 20 digits (5x)",
            CHO: "trained on 1 to 30 digits, generalises to 200-digit addition (6.67x)",
            RUOSS: "+12.0% test accuracy on average past the training length (15 tasks, 5 schemes)"}
TEXT_COMMAND = "posenc report --profile full --part lm --part scaling"
TASKS_COMMAND = "posenc report --profile full --part tasks"
"""What measures the claims a profile leaves out (the quick profile: the addition and randomized rows)."""
TEXT_POOL, TASKS_POOL = "structure:text", "structure:tasks"
ZERO_SHOT = ("linear", "ntk", "yarn")  # the scalings HiRoPE is set against (zero-shot, T/L at each length)


def _absent(source: str, claim: str, why: str) -> Verdict:
    return Verdict(source, claim, why, "not measured")


def _times(table: LMTable, length: int | None = None) -> str:
    """``length`` (default: the longest) as a multiple of the training length: "16L" (the
    profiles' longest) when the table has no lengths."""
    L = table.train_length
    if not L or not table.lengths:
        return "16L" if length is None else f"{length}L"
    return f"{(max(table.lengths) if length is None else length) // L}L"


def _label(records: list[dict[str, Any]], scheme: str) -> str | None:
    """The label of the first transformer run of ``scheme``, or None."""
    return next((r["label"] for r in records if r.get("spec", {}).get("scheme") == scheme
                 and r.get("arch", "transformer") == "transformer"), None)


# -- text: BiPE and HiRoPE ---------------------------------------------------------------------

def bipe_verdicts(table: LMTable, bipe: str | None, bipe_bias: str | None, *, why: str) -> list[Verdict]:
    """BiPE with RoPE and with ALiBi between segments beats RoPE and ALiBi at the longest length;
    ``why``: what a claim without its runs says."""
    long = max(table.lengths) if table.lengths else table.train_length
    x = _times(table)
    out = []
    for name, label in (("BiPE-RoPE", bipe), ("BiPE-ALiBi", bipe_bias)):
        for base in ("rope", "alibi"):
            claim = f"at {x}, {name} (segments: lines) beats {base}"
            if label is None or base not in table.labels():
                out.append(_absent(HE, claim, why))
            else:
                out.append(ppl_claim(table, HE, claim, (label, long), (base, long)))
    return out


def hirope_verdicts(table: LMTable, hirope: str | None, base: str, zero_shot: dict[str, str], *,
                    why: str) -> list[Verdict]:
    """HiRoPE zero-shot on the trained RoPE beats plain RoPE at 4L and at the longest length, and
    each zero-shot scaling (``zero_shot[type]``: its label) at the longest length."""
    L = table.train_length
    long = max(table.lengths) if table.lengths else L
    x = _times(table)
    if L and table.lengths:
        at = [(f"{t // L}L", t) for t in sorted({4 * L, long}) if t in table.lengths]
    else:  # nothing measured: the claims as the profiles state them
        at = [("4L", 0), ("16L", 0)]
    pairs = [(f"at {name}, HiRoPE (zero-shot on the trained RoPE, lines as the higher level) beats plain RoPE",
              base, t) for name, t in at]
    pairs += [(f"at {x}, HiRoPE beats zero-shot {kind}", zero_shot.get(kind), long) for kind in ZERO_SHOT]
    out = []
    for claim, other, at in pairs:
        if hirope is None:
            out.append(_absent(ZHANG, claim, why))
        elif other is None or other not in table.labels():
            out.append(_absent(ZHANG, claim, "not measured: no run of the scaling it is set against"))
        else:
            out.append(ppl_claim(table, ZHANG, claim, (hirope, at), (other, at)))
    return out


def text_rows(page: Page, profile: Profile, records: list[dict[str, Any]]) -> list[Verdict]:
    lm = [r for r in records if r["part"] == "lm" and r.get("arch", "transformer") == "transformer"]
    scaling = [r for r in records if r["part"] == "scaling" and r.get("arch", "transformer") == "transformer"]
    hirope_recs = [r for r in scaling if is_hirope(r)]
    zero = {r["variant"]["type"]: r["label"] for r in scaling
            if r.get("variant", {}).get("mode") == "zero-shot" and r["variant"]["type"] in ZERO_SHOT}
    table = stats.lm_table([*lm, *hirope_recs, *(r for r in scaling if r["label"] in zero.values())])
    bipe, bipe_bias = _label(lm, "bipe"), _label(lm, "bipe_bias")
    hirope = hirope_recs[0]["label"] if hirope_recs else None
    base = next((r["label"] for r in lm if hirope_recs and r["spec"] == hirope_recs[0]["spec"]), "rope")
    why_bipe = ("not measured: no runs of bipe and bipe_bias" if profile.bipe_rows else
                f"measured by the full profile: {TEXT_COMMAND}")
    why_hirope = ("not measured: no HiRoPE runs (they need the scaling part and a trained rope)" if profile.hirope
                  else f"measured by the full profile: {TEXT_COMMAND}")
    verdicts = bipe_verdicts(table, bipe, bipe_bias, why=why_bipe) + hirope_verdicts(table, hirope, base, zero,
                                                                                     why=why_hirope)
    page.add("<h3>Text: BiPE's segments and HiRoPE's lines</h3>"
             "<p>BiPE adds a learned table over each byte's offset in its line to the embeddings and applies RoPE "
             "(<code>bipe</code>) or ALiBi (<code>bipe_bias</code>, the official slopes × 96) to the line indices; "
             "it trains like every other row. HiRoPE trains nothing: the trained RoPE model of each seed is "
             "evaluated with half of its rotary pairs (the low frequencies) reading the line index instead of the "
             "byte's, past a window of the training length; the zero-shot scalings rescale the same model's "
             "frequencies by T/L.</p>")
    labels = [lab for lab in (bipe, bipe_bias, "rope", "alibi") if lab and lab in table.labels()]
    if bipe or bipe_bias:
        page.add(ppl_table(table, labels, "nonoverlap"))
    if hirope:
        page.add(ppl_table(table, [lab for lab in (hirope, base, *zero.values()) if lab in table.labels()],
                           "nonoverlap"))
    if not (bipe or bipe_bias or hirope):
        page.add(f"<p>No runs of these rows here: <code>{e(TEXT_COMMAND)}</code> runs them.</p>")
    return [dataclasses.replace(v, pool=TEXT_POOL) for v in verdicts]


# -- tasks: addition and randomized positions --------------------------------------------------

def addition_verdicts(table: TaskTable | None, *, why: str) -> list[Verdict]:
    """Abacus and coupled positions beat rope, nope and alibi on addition past the trained digits
    (exact match on the same examples, the cells whose sequences are longer than every training one)."""
    cells = task_cells(table, ["add"]) if table is not None else []
    out = []
    for source, player in ((MCLEISH, "abacus"), (CHO, "coupling")):
        for base in ("rope", "nope", "alibi"):
            claim = f"addition past the trained digits: {player} positions beat {base}"
            if table is None or player not in table.labels() or base not in table.labels():
                out.append(_absent(source, claim, why))
                continue
            v = mcnemar_verdict(table, source, claim, player, base, cells,
                         f"of addition at {', '.join(str(s) for _, s in cells)} digits")
            out.append(v or _absent(source, claim, "not measured: no cell past the trained positions"))
    return out


def randomized_verdicts(table: TaskTable | None, schemes: list[str], *, why: str) -> list[Verdict]:
    """Each scheme with randomized positions beats itself without them on the algorithmic tasks'
    cells past the trained positions (the tasks some model learned at the trained size)."""
    tasks = [t for t in learned_tasks(table) if t in T.ALGORITHMIC] if table is not None else []
    cells = task_cells(table, tasks) if table is not None else []
    out = []
    for name in schemes:
        claim = f"{name} with randomized positions generalises better than {name} without them"
        mine = f"{name} + randomized"
        if table is None or mine not in table.labels() or name not in table.labels():
            out.append(_absent(RUOSS, claim, why))
            continue
        v = mcnemar_verdict(table, RUOSS, claim, mine, name, cells, f"of {', '.join(tasks)} beyond the trained positions")
        out.append(v or _absent(RUOSS, claim, "not measured: no task learned at the trained size, or no cell past "
                                              "the trained positions"))
    return out


def task_rows(page: Page, profile: Profile, records: list[dict[str, Any]]) -> list[Verdict]:
    tasks = [r for r in records if r["part"] == "tasks" and r.get("arch", "transformer") == "transformer"]
    addition = [r for r in tasks if (r.get("variant") or {}).get("tasks") == ADDITION]
    randomized = [r for r in tasks if (r.get("variant") or {}).get("positions") == RANDOMIZED]
    schemes = list(dict.fromkeys([*profile.randomized,
                                  *(r["label"].removesuffix(" + randomized") for r in randomized)]))
    schemes = schemes or list(PROFILES["full"].randomized)  # the claims the full profile measures
    plain = [r for r in tasks if not (r.get("variant") or {}) and r["label"] in schemes
             and any(row["task"] in T.ALGORITHMIC for row in r.get("eval", []))]
    why_add = ("not measured: no runs of the addition models" if profile.addition else
               f"measured by the full profile: {TASKS_COMMAND}")
    why_random = ("not measured: no runs with randomized positions" if profile.randomized else
                  f"measured by the full profile: {TASKS_COMMAND}")
    add_table = stats.task_table(addition) if addition else None
    random_table = stats.task_table(plain + randomized) if randomized and plain else None
    verdicts = addition_verdicts(add_table, why=why_add) + randomized_verdicts(random_table, schemes, why=why_random)
    page.add("<h3>Tasks: digits' positions and randomized positions</h3>"
             "<p><b>Addition</b> is learned alone, trained on up to n digits and tested to at least 3n (every number "
             "least significant digit first). <b>abacus</b>: each digit's index in its number (0 elsewhere), a "
             "random offset per batch in training; <b>coupling</b>: the digits of one significance in both operands "
             "and the sum share a position, the + and the separator one before them, a random start per example in "
             "training; both on a learned table with no position in attention. <b>Randomized positions</b>: the "
             "algorithmic tasks' model of a scheme trained on an ordered random sample of "
             f"[0, {profile.randomized_max_positions}) as positions, evaluated at 0…L−1, against the same scheme "
             "trained on 0…L−1.</p>")
    if add_table is not None:
        labels = list(dict.fromkeys(r["label"] for r in addition))
        exact_match_tables(page, add_table, labels, ["add"])
    if random_table is not None:
        tasks_ = [t for t in learned_tasks(random_table) if t in T.ALGORITHMIC]
        cells = task_cells(random_table, tasks_)
        rows = [[e(lab), pooled_error_cell(random_table, lab, cells)] for lab in random_table.labels()]
        page.add("<p>Error pooled over the cells beyond the trained positions "
                 f"({e(', '.join(tasks_) or 'no task learned')}):</p>" + html_table(["scheme", "error"], rows))
    if add_table is None and random_table is None:
        page.add(f"<p>No runs of these rows here: <code>{e(TASKS_COMMAND)}</code> runs them.</p>")
    return [dataclasses.replace(v, pool=TASKS_POOL) for v in verdicts]


# -- section -----------------------------------------------------------------------------------

def claims_table(verdicts: list[Verdict]) -> str:
    """Each claim with the paper's reported number beside ours and its verdict (before Holm)."""
    rows = [[f"{e(v.claim)} <span class=muted>({e(v.source)})</span>", e(REPORTED.get(v.source, "")), e(v.measured),
             status(v.status)] for v in verdicts]
    return html_table(["claim", "the paper reported", "measured here", "verdict"], rows, text=True)


def structure_section(page: Page, records: list[dict[str, Any]], profile: Profile) -> list[Verdict]:
    page.add('<h2 id="hierarchical">Hierarchical and structured positions</h2>'
             "<p>Positions from a sequence's structure rather than its index: BiPE (a segment index and an offset "
             "in the segment), HiRoPE (a line index on RoPE's low frequencies), Abacus and position coupling "
             "(a digit's significance), and randomized training positions (Ruoss et al.). Each row is its part's "
             "(text, scalings, tasks); each claim is decided as every claim of the page (three seeds, Holm per "
             "paper). The papers' reported numbers are beside ours; the models here are far smaller.</p>")
    verdicts = text_rows(page, profile, records) + task_rows(page, profile, records)
    page.add("<h3>The papers' numbers beside ours</h3>" + claims_table(verdicts)
             + "<p class=muted>Before Holm's correction; the summary's verdict table has them after it.</p>")
    return verdicts


class Structure(Part):
    """The structured positions' claims and section; its rows are the text, scalings and tasks parts'."""

    name = "structure"  # no record has it: the rows are the lm, scaling and tasks parts'

    def extend(self, profile: Profile, runs: list[Run], *, custom: bool, corpus_sha: str) -> list[Run]:
        """The structured positions' rows of ``runs``' seed, right after the runs of the part that runs
        them, as the hybrid rows join theirs: BiPE's language models after the lm runs
        (``profile.bipe_rows``), HiRoPE zero-shot on their trained RoPE model after the scaling
        runs (``profile.hirope``), the addition models and the randomized positions after the tasks
        runs (``profile.addition``, ``profile.randomized``). Only on the transformer; BiPE's and the
        tasks' rows not with ``--scheme`` either (HiRoPE's evaluate the user's trained RoPE model)."""
        if not runs:
            return []
        part, seed, transformer = runs[0].part, runs[0].seed, profile.arch == "transformer"
        if part == "lm" and transformer and not custom:
            rows = bipe_runs(profile, corpus_sha)
        elif part == "scaling":
            rows = hirope_runs(profile, runs[0].spec, corpus_sha)  # every scaling run's spec is its base RoPE's
        elif part == "tasks" and transformer and not custom:
            rows = structure_runs(profile)
        else:
            rows = []
        return [r for r in rows if r.seed == seed]

    def records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in records if r["part"] in ("lm", "scaling", "tasks")]

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        verdicts = structure_section(page, records, profile)
        cited = {v.source for v in verdicts}
        return Section(verdicts, sources={k: v for k, v in SOURCES.items() if k in cited})


PART = Structure()
