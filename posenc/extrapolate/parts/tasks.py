"""The tasks part (``--part tasks``): copy, reverse, sort, add and passkey, trained on sizes ≤ n,
exact match at larger sizes (Kazemnejad et al. 2023, arXiv:2305.19466).

One model per scheme learns every task (one task per batch, in turn); the verdicts use only the
cells whose sequences are longer than every training sequence, and compare two schemes example by
example (McNemar's exact test on the same examples, pooled over those cells and the seeds).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from posenc.extrapolate import figures as F
from posenc.extrapolate import stats
from posenc.extrapolate import tasks as T
from posenc.extrapolate.distributed import Dist, all_sum
from posenc.extrapolate.evaluate import cannot_run
from posenc.extrapolate.findings import Verdict, _decide
from posenc.extrapolate.model import TinyGPT, check_arch
from posenc.extrapolate.page import Page, e, missing
from posenc.extrapolate.page import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run, arch_label, resolve_scheme
from posenc.extrapolate.profiles import Profile, settings_hash
from posenc.extrapolate.runs import Context, curve, train_with_bar
from posenc.extrapolate.stats import TaskTable, learned_tasks, mcnemar_exact, mean_reciprocal_rank

KAZEMNEJAD = "Kazemnejad et al. 2023"  # algorithmic tasks, train sizes <= 20, test to 40
SOURCES = {KAZEMNEJAD: "algorithmic tasks, each trained separately, train sizes ≤ 20, test to 40"}


KAZEMNEJAD_MRR = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}
"""Their mean reciprocal ranks; their absolute scheme runs past the training length, so the
sinusoidal one stands for it here (a learned table cannot run there at all)."""


# -- runs --------------------------------------------------------------------------------------

def task_max_positions(profile: Profile) -> int:
    return max(T.seq_len(t, profile.tasks.max_size) for t in profile.tasks.tasks)


def _task_batches(ts, seed: int):
    g = torch.Generator().manual_seed(seed)

    def next_batch(step: int):
        b = T.train_batch(ts.tasks[step % len(ts.tasks)], batch=ts.train.batch_size, max_size=ts.max_size, g=g)
        return b.tokens, b.mask
    return next_batch


def run_tasks(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One configuration's seeds (``runs``), trained as one stacked model; a body per seed."""
    ts, run = ctx.profile.tasks, runs[0]
    models = []
    for r in runs:
        torch.manual_seed(r.seed)
        models.append(TinyGPT(dataclasses.replace(ts.model, vocab_size=max(ts.model.vocab_size, T.VOCAB_SIZE)),
                              run.spec, arch=run.arch).to(ctx.dist.device))
    t0 = time.perf_counter()
    curves = train_with_bar(ctx, models, ts.train, [_task_batches(ts, r.seed) for r in runs], f"tasks {run.label}")
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    trained = task_max_positions(ctx.profile)  # one model learns every task: its longest training sequence
    out = []
    for model, losses in zip(models, curves):
        rows: list[dict[str, Any]] = []
        for task in ts.tasks:
            for size in ts.sizes():
                mult = round(size / ts.max_size, 4)
                length = T.seq_len(task, size)
                row: dict[str, Any] = {"task": task, "size": size, "mult": mult, "length": length,
                                       "beyond_trained": length > trained}
                reason = cannot_run(model, length)
                if reason is not None:
                    row["cannot_run"] = reason
                else:
                    row.update(task_scores(model, task, size, count=ts.eval_examples, dist=ctx.dist))
                rows.append(row)
        out.append({"train_loss": curve(losses), "train_seconds": round(seconds, 2), "params": model.num_params(),
                    "max_size": ts.max_size, "trained_positions": trained, "eval": rows})
    return out


@torch.no_grad()
def task_scores(model: TinyGPT, task: str, size: int, *, count: int, dist: Dist, batch: int = 64) -> dict[str, float]:
    """Exact matches (``correct`` of ``count``), the fraction of answer tokens right
    (``token_acc``) and which examples were right (``hits``: "0"/"1" per example, so two schemes
    can be compared example by example) on the ``count`` fixed examples of ``task`` at ``size``."""
    model.eval()
    b = T.eval_batch(task, size, count=count, seed=0)
    tokens, mask = b.tokens[dist.rank::dist.world], b.mask[dist.rank::dist.world]
    sums = torch.zeros(3, dtype=torch.float64)  # exact matches, right answer tokens, answer tokens
    exact = torch.zeros(tokens.shape[0], dtype=torch.bool)  # (count / world,): this rank's examples
    for i in range(0, tokens.shape[0], batch):
        x = tokens[i:i + batch].to(dist.device)
        m = mask[i:i + batch].to(dist.device)
        hit = model(x[:, :-1]).argmax(-1) == x[:, 1:]  # (b, T)
        right = (hit | ~m).all(dim=1)  # (b,)
        exact[i:i + batch] = right.cpu()
        sums += torch.stack([right.sum(), (hit & m).sum(), m.sum()]).double().cpu()
    sums = all_sum(sums, dist)
    every = torch.zeros(count, dtype=torch.float64)
    every[dist.rank::dist.world] = exact.double()
    every = all_sum(every, dist)  # (count,): example i right, in the fixed order of ``eval_batch``
    return {"correct": int(sums[0]), "count": count, "token_acc": round(float(sums[1] / sums[2]), 5),
            "hits": "".join("1" if v > 0.5 else "0" for v in every.tolist())}


# -- claims and section ----------------------------------------------------------------------

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


def task_section(page: Page, task_recs: list[dict[str, Any]]) -> list[Verdict]:
    page.add("<h2>5. Algorithmic tasks and passkey retrieval: exact match by size</h2>")
    if not task_recs:
        page.add("<p>Not run in this profile.</p>")
        return []
    table = stats.task_table(task_recs)
    labels = list(dict.fromkeys(r["label"] for r in task_recs))
    page.add(f"<p>One model per scheme trained on all of {', '.join(table.tasks)} (one task per batch, in turn) "
             f"with sizes 1…{table.max_size}; "
             "exact match (every answer token right under greedy decoding) on the same fixed examples for every "
             "scheme. Cells show exact match and, in grey, the fraction of answer tokens right. Because one model "
             "learns every task, a larger size of a short task can still lie within the positions trained by a "
             f"longer one: the longest training sequence has {table.trained_positions or '?'} tokens, and only the "
             "cells in <b>bold</b> (with †) have longer sequences — positions never trained. The verdicts use only "
             "those cells (McNemar's exact test on the same examples). Passkey allows a shortcut: the key is found "
             "by its content (the KEY marker among filler tokens), so a model can copy it without telling "
             "positions apart; it tests retrieval across unseen distances, not position arithmetic.</p>")
    page.figure("task_accuracy", lambda: F.accuracy(table, labels),
                "Exact match against size; dashed: largest trained size.")
    for task in table.tasks:
        rows = []
        for label in labels:
            cells = [e(label)]
            for s in table.sizes:
                est = table.estimate(label, task, s)
                if est is not None:
                    text = f"{est.mean:.2f} <span class=muted>({table.token_acc(label, task, s):.2f})</span>"
                    cells.append(f"<b>{text}</b>†" if table.beyond(task, s) else text)
                else:
                    cells.append(missing(table.cannot.get(label, {}).get(task, {}).get(s)))
            rows.append(cells)
        page.add(f'<div class="side"><h3>{e(task)}</h3>'
                 + html_table(["scheme"] + [f"n={s}" for s in table.sizes], rows) + "</div>")
    verdicts, mrr, learned = task_verdicts(table)
    unlearned = [t for t in table.tasks if t not in learned]
    if unlearned:
        page.add(f'<p class="note">Not learned at this scale (no scheme reaches 50% exact match even at the '
                 f"trained size {table.max_size}): {', '.join(unlearned)}. These say nothing about length "
                 "generalisation and are left out of the ranking and the verdicts below.</p>")
    if mrr:
        rows = [[e(k), f"{KAZEMNEJAD_MRR[k]:.2f}", f"{v:.2f}"] for k, v in mrr.items()]
        page.add(f"<h3>Mean reciprocal rank on the cells beyond the trained positions ({', '.join(learned)})</h3>"
                 + html_table(["scheme", "Kazemnejad et al. 2023", "measured"], rows)
                 + "<p class=muted>Their absolute-position scheme is represented by sinusoidal (a learned table "
                   "cannot run past its length).</p>")
    return verdicts


class Tasks(Part):
    name = "tasks"
    split_in_record = False  # no text from the corpus

    def model(self, profile: Profile):
        return profile.tasks.model

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        specs = [resolve_scheme(s, profile.tasks.model, max_positions=task_max_positions(profile)) for s in schemes]
        check_arch(profile.arch, profile.tasks.model)
        settings = settings_hash({"tasks": profile.tasks})
        return [Run(self.name, seed, arch_label(lab, profile.arch), sp, settings, profile=profile.name,
                    arch=profile.arch) for seed in profile.seeds_for(self.name) for lab, sp in specs]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        return run_tasks(ctx, runs)

    def summary(self, record: dict[str, Any]) -> str:
        ok = [r for r in record.get("eval", []) if "correct" in r]
        acc = sum(r["correct"] for r in ok) / max(1, sum(r["count"] for r in ok))
        return f"mean exact match {acc:.2f}"

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        return Section(task_section(page, records), sources=SOURCES)


PART = Tasks()
