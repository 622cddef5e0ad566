"""The tasks part (``--part tasks``): copy, reverse, sort, add and passkey, trained on sizes ≤ n,
exact match at larger sizes (Kazemnejad et al. 2023, arXiv:2305.19466); and where the profile
selects them, the content tasks of contextual positions: counting with 1, 3 and 5 variables,
selective copy and flip-flop, sparser at test (Golovneva et al. 2024, arXiv:2405.18719; Liu et al.
2023, arXiv:2306.00946; formats in ``posenc.extrapolate.task_generators``).

One model per scheme learns every task of the profile (one task per batch, in turn); Kazemnejad et
al.'s verdicts use only their tasks' cells whose sequences are longer than every training sequence;
CoPE's counting order uses the counting cells at the trained size (the paper's test error is in
distribution). Both compare two schemes example by example (McNemar's exact test on the same
examples, pooled over those cells and the seeds).

The structured positions' rows are built (``structure_runs``) and run here, and planned beside this part's runs by
``posenc.extrapolate.parts.structure`` (``Structure.extend``; their claims and tables are there too):
addition learned alone (``profile.addition``) with Abacus
and coupled positions, and the algorithmic tasks' models of ``profile.randomized`` trained with
randomized positions (``posenc.extrapolate.structured_positions``); their records carry their ``variant``
and stay out of this section's tables and verdicts.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import torch

from posenc.extrapolate import figures as F
from posenc.extrapolate import structured_positions as structured
from posenc.stats import estimates as stats
from posenc.extrapolate import task_generators as T
from posenc.extrapolate.arch import build_model
from posenc.extrapolate.distributed import Dist, all_sum
from posenc.extrapolate.evaluate import cannot_run
from posenc.stats.findings import Verdict, mcnemar_verdict
from posenc.extrapolate.model import TinyGPT, check_arch
from posenc.stats.page_parts import Page, e, exact_match_tables, missing, pooled_error_cell
from posenc.stats.page_parts import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run, arch_label, by_seed, resolve_scheme
from posenc.extrapolate.profiles import STRUCTURE_POSITIONS, Profile, TaskSettings, settings_hash
from posenc.extrapolate.runs import Context, curve, train_with_bar
from posenc.stats.estimates import TaskTable, learned_tasks, mean_reciprocal_rank, task_cells

KAZEMNEJAD = "Kazemnejad et al. 2023"  # algorithmic tasks, train sizes <= 20, test to 40
GOLOVNEVA = "Golovneva et al. 2024"  # CoPE: counting, test error with 1/3/5 variables
SOURCES = {KAZEMNEJAD: "algorithmic tasks, each trained separately, train sizes ≤ 20, test to 40",
           GOLOVNEVA: "counting, one model per number of variables, up to 512 statements, 4 layers of width 256; "
                      "test error in distribution"}

TASKS_COMMAND = "posenc report --profile full --part tasks"
"""What measures the tasks' claims where the profile leaves the tasks out (the quick one)."""

COPE_ORDER = (("contextual", ("cope",), 1.2), ("relative", ("shaw", "t5"), 17.8),
              ("absolute", ("learned", "sinusoidal"), 67.6))
"""The three kinds of CoPE's counting claim with their test error (%) on 3 variables; each is played
by the first of its schemes that has runs. Their relative PE is a learned vector per relative
distance dotted with the query (posenc's ``shaw``; ``t5``'s learned scalar bias stands in without
it); their absolute PE is a learned table (``learned``; ``sinusoidal`` without it)."""


KAZEMNEJAD_MRR = {"nope": 0.69, "t5": 0.55, "alibi": 0.50, "rope": 0.33, "sinusoidal": 0.22}
"""Their mean reciprocal ranks; their absolute scheme runs past the training length, so the
sinusoidal one stands for it here (a learned table cannot run there at all)."""


# -- runs --------------------------------------------------------------------------------------

CONTENT_GROUP = {"tasks": "content"}
"""The ``variant`` of a run of the content tasks' own models (``Profile.content_tasks``)."""


def task_max_positions(profile: Profile, ts: TaskSettings | None = None) -> int:
    """The longest training sequence of the models that learn ``ts`` (default: ``profile.tasks``)."""
    ts = profile.tasks if ts is None else ts
    return max(T.seq_len(t, ts.max_size) for t in T.trained(ts.tasks))


def task_settings_hash(profile: Profile, ts: TaskSettings | None = None) -> str:
    """The settings the runs learning ``ts`` (default: ``profile.tasks``) depend on; the content tasks'
    generators when one is selected (so the algorithmic tasks keep the keys they had before there
    were content tasks)."""
    ts = profile.tasks if ts is None else ts
    if any(t in T.CONTENT for t in ts.tasks):
        return settings_hash({"tasks": ts, "generators": T.GENERATORS})
    return settings_hash({"tasks": ts})


ADDITION = "addition"
"""The ``variant["tasks"]`` of a run of the addition models (``Profile.addition``, the structured positions' claims)."""
RANDOMIZED = "randomized"
"""The ``variant["positions"]`` of a run trained with Ruoss et al.'s randomized positions."""


def structured_record(record: dict[str, Any]) -> bool:
    """A record of the structured positions' task rows (addition alone, randomized positions): its section is
    ``#hierarchical`` (``posenc.extrapolate.parts.structure``), not the tasks section's tables."""
    variant = record.get("variant") or {}
    return variant.get("tasks") == ADDITION or "positions" in variant


def run_settings(profile: Profile, run: Run) -> TaskSettings:
    """What ``run`` learns: ``profile.content_tasks`` for a run of the content tasks' own models,
    ``profile.addition.tasks`` for an addition model."""
    if run.variant.get("tasks") == ADDITION:
        if profile.addition is None:
            raise ValueError("a run of the addition models needs a profile with addition")
        return profile.addition.tasks
    if run.variant == CONTENT_GROUP:
        if profile.content_tasks is None:
            raise ValueError("a run of the content tasks' models needs a profile with content_tasks")
        return profile.content_tasks
    return profile.tasks


def check_task_groups(profile: Profile) -> None:
    """The content tasks' models and the models of ``profile.tasks`` learn different tasks (a cell
    of the page comes from one model)."""
    if profile.content_tasks is None:
        return
    both = sorted(set(profile.tasks.tasks) & set(profile.content_tasks.tasks))
    if both:
        raise ValueError(f"tasks {', '.join(both)} are in both profile.tasks and profile.content_tasks; "
                         "a task is learned by the models of one of them")


def _task_batches(ts, seed: int):
    g = torch.Generator().manual_seed(seed)
    learn = T.trained(ts.tasks)  # an evaluation-only task (flip_flop_sparse) trains as the one it tests

    def next_batch(step: int):
        b = T.train_batch(learn[step % len(learn)], batch=ts.train.batch_size, max_size=ts.max_size, g=g)
        return b.tokens, b.mask
    return next_batch


def run_tasks(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One configuration's seeds (``runs``), trained together; a body per seed."""
    run = runs[0]
    ts = run_settings(ctx.profile, run)
    models = []
    for r in runs:
        torch.manual_seed(r.seed)
        models.append(build_model(dataclasses.replace(ts.model, vocab_size=max(ts.model.vocab_size,
                                                                               T.vocab_size(ts.tasks))),
                                  run.spec, arch=run.arch).to(ctx.dist.device))
        fn = positions_fn(ctx.profile, r)
        if fn is not None:
            models[-1].positions_fn = fn
    t0 = time.perf_counter()
    curves = train_with_bar(ctx, models, ts.train, [_task_batches(ts, r.seed) for r in runs], f"tasks {run.label}")
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    trained = task_max_positions(ctx.profile, ts)  # one model learns every task: its longest training sequence
    extra = {"variant": run.variant} if run.variant.get("tasks") == ADDITION or "positions" in run.variant else {}
    return [{**_task_record(ctx, ts, model, losses, seconds, trained), **extra}
            for model, losses in zip(models, curves)]


def positions_fn(profile: Profile, run: Run):
    """The positions ``run``'s model makes from its tokens (``posenc.extrapolate.structured_positions``):
    Abacus or coupled digit positions, randomized training positions; None: ``0..L-1``."""
    structure = run.variant.get("positions")
    seed = 7_000_003 + run.seed  # the draws' own stream (the batches' generator is seeded with the seed)
    if structure == "abacus":
        return structured.abacus(profile.addition.offset(), seed)
    if structure == "coupling":
        return structured.coupled(profile.addition.offset(), seed, markers=(T.PLUS, T.SEP))
    if structure == RANDOMIZED:
        return structured.randomized(int(run.variant["max_positions"]), seed)
    return None


def addition_table_rows(profile: Profile) -> int:
    """Rows of the learned table over Abacus or coupled positions: every training position (the
    largest offset, the sum's digits, the start) and the longest test sequence (so no test is refused)."""
    ts = profile.addition.tasks
    return max(profile.addition.offset() + ts.max_size + 3, T.seq_len("add", max(ts.test_sizes)))


def structure_runs(profile: Profile) -> list[Run]:
    """The structured positions' task runs on the part's seeds: the addition models (Abacus and
    coupled positions, a learned table over them with no position in attention, against plain
    schemes) and the models of ``profile.tasks`` with randomized positions; ``parts.structure``
    adds them beside this part's runs (``Structure.extend``: none with ``--scheme`` or on another
    architecture than the transformer)."""
    groups = []
    add = profile.addition
    if add is not None:
        settings = settings_hash({"addition": add})  # its tasks and the training offsets
        items = []
        for name in add.schemes:
            if name in STRUCTURE_POSITIONS:  # a learned table over the digits' positions, NoPE attention
                _, spec = resolve_scheme("learned", add.tasks.model, max_positions=addition_table_rows(profile))
                items.append((name, spec, settings, {"tasks": ADDITION, "positions": name}))
            else:
                lab, spec = resolve_scheme(name, add.tasks.model, max_positions=task_max_positions(profile, add.tasks))
                items.append((lab, spec, settings, {"tasks": ADDITION}))
        groups.append((items, profile.seeds_for("tasks")))
    if profile.randomized:
        settings = task_settings_hash(profile)
        specs = [resolve_scheme(s, profile.tasks.model, max_positions=task_max_positions(profile))
                 for s in profile.randomized]
        variant = {"positions": RANDOMIZED, "max_positions": profile.randomized_max_positions}
        groups.append(([(f"{lab} + randomized", sp, settings, variant) for lab, sp in specs],
                       profile.seeds_for("tasks")))
    return [Run("tasks", seed, arch_label(lab, profile.arch), sp, settings, dict(variant), profile=profile.name,
                arch=profile.arch) for seed, (lab, sp, settings, variant) in by_seed(groups)]


def _task_record(ctx: Context, ts: TaskSettings, model: TinyGPT, losses: list[float], seconds: float,
                 trained: int) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for task in ts.tasks:
        for size in ts.sizes():
            mult = round(size / ts.max_size, 4)
            length = T.seq_len(task, size)
            row: dict[str, Any] = {"task": task, "size": size, "mult": mult, "length": length,
                                   "beyond_trained": length > trained}
            if task in T.COUNT_VARIABLES:
                row["variables"] = T.COUNT_VARIABLES[task]
            if task in T.FLIP_FLOP_IGNORE:
                row["p_ignore"] = T.FLIP_FLOP_IGNORE[task]
                row["p_ignore_trained"] = T.FLIP_FLOP_IGNORE[T.TRAINED_AS.get(task, task)]
            reason = cannot_run(model, length)
            if reason is not None:
                row["cannot_run"] = reason
            else:
                row.update(task_scores(model, task, size, count=ts.eval_examples, dist=ctx.dist))
            rows.append(row)
    return {"train_loss": curve(losses), "train_seconds": round(seconds, 2), "params": model.num_params(),
            "max_size": ts.max_size, "trained_positions": trained, "eval": rows}


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

def kazemnejad_claims() -> list[tuple[str, str, str]]:
    """Kazemnejad et al.'s order as paired claims: ``(better, worse, claim)``, neighbours in MRR."""
    order = list(KAZEMNEJAD_MRR)
    return [(better, worse, f"{better} generalises better than {worse} (MRR {KAZEMNEJAD_MRR[better]} vs "
             f"{KAZEMNEJAD_MRR[worse]})") for better, worse in zip(order, order[1:])]


def counting_claims() -> list[tuple[str, str, str]]:
    """CoPE's counting order as paired claims: ``(better kind, worse kind, claim)``."""
    return [(better, worse, f"counting: {better} positions ({'/'.join(names_b)}) make fewer errors than {worse} "
             f"ones ({'/'.join(names_w)}); test error with 3 variables {err_b}% vs {err_w}%")
            for (better, names_b, err_b), (worse, names_w, err_w) in zip(COPE_ORDER, COPE_ORDER[1:])]


def not_run_verdicts() -> list[Verdict]:
    """The tasks' claims on a page whose profile does not run the tasks (the quick one: their models
    cost more than three seeds of them fit in its time), each naming the command that measures it."""
    measured = f"not run here; {TASKS_COMMAND} measures it on three seeds"
    return ([Verdict(KAZEMNEJAD, claim, measured, "not measured") for _, _, claim in kazemnejad_claims()]
            + [Verdict(GOLOVNEVA, claim, measured, "not measured") for _, _, claim in counting_claims()])


def task_verdicts(table: TaskTable) -> tuple[list[Verdict], dict[str, float], list[str]]:
    """Kazemnejad et al.'s order on their tasks' cells beyond the trained positions (McNemar's
    exact test on the same examples, pooled over those cells and the seeds), the measured mean
    reciprocal ranks, and the tasks they are computed on (their tasks some scheme learned in
    distribution; the content tasks are not theirs)."""
    labels = [lab for lab in KAZEMNEJAD_MRR if lab in table.labels()]
    tasks = [t for t in learned_tasks(table) if t in T.ALGORITHMIC]
    cells = task_cells(table, tasks)
    mrr = mean_reciprocal_rank(table, labels, cells=cells) if cells and labels else {}
    out = []
    for better, worse, claim in kazemnejad_claims():
        v = (mcnemar_verdict(table, KAZEMNEJAD, claim, better, worse, cells, "beyond the trained positions",
                      f"; MRR {mrr.get(better, float('nan')):.2f} vs {mrr.get(worse, float('nan')):.2f}")
             if better in labels and worse in labels else None)
        out.append(v or Verdict(KAZEMNEJAD, claim, "not measured (no task learned, no cell beyond the trained "
                                                   "positions, or a scheme missing)", "not measured"))
    return out, mrr, tasks


def count_cells(table: TaskTable) -> list[tuple[str, int]]:
    """The counting cells CoPE's claim is checked on: every number of variables at the trained
    sizes (their test error is in distribution)."""
    return [(t, s) for t in T.COUNT_VARIABLES if t in table.tasks for s in table.sizes if s <= table.max_size]


def cope_players(table: TaskTable) -> dict[str, str | None]:
    """Which scheme plays each kind of CoPE's counting claim (``COPE_ORDER``; None: none has runs)."""
    return {kind: next((lab for lab in names if lab in table.runs), None) for kind, names, _ in COPE_ORDER}


def counting_verdicts(table: TaskTable) -> list[Verdict]:
    """CoPE's counting order, contextual < relative < absolute test error, as two paired claims
    on ``count_cells``; "not measured" (missing) when a kind has no runs. Nothing without counting."""
    cells = count_cells(table)
    if not any(t in T.COUNT_VARIABLES for t in table.tasks):
        return []
    players = cope_players(table)
    out = []
    for better, worse, claim in counting_claims():
        a, b = players[better], players[worse]
        if a is None or b is None:
            gone = " and ".join("/".join(n) for k, n, _ in COPE_ORDER if k in (better, worse) and players[k] is None)
            out.append(Verdict(GOLOVNEVA, claim, f"missing: no runs of {gone}", "not measured"))
            continue
        v = mcnemar_verdict(table, GOLOVNEVA, claim, a, b, cells, "of counting (1, 3, 5 variables) at the trained sizes")
        out.append(v or Verdict(GOLOVNEVA, claim, "not measured (no counting cell with per-example results)",
                                "not measured"))
    return out


def counting_table(table: TaskTable, labels: list[str]) -> str:
    """CoPE's table: test error (1 − exact match) by number of variables, at the trained sizes and,
    in grey, pooled over the cells beyond the trained positions; their 3-variable errors beside."""
    counts = [t for t in T.COUNT_VARIABLES if t in table.tasks]
    inside = lambda t: [(t, s) for s in table.sizes if s <= table.max_size]  # noqa: E731
    rows = [[e(lab)] + [f"{pooled_error_cell(table, lab, inside(t))} <span class=muted>"
                        f"({pooled_error_cell(table, lab, task_cells(table, [t]))})</span>" for t in counts]
            for lab in labels]
    players = cope_players(table)
    paper = [[f"Golovneva et al.: {kind} ({players[kind] or 'missing'})"]
             + [f"{err}%" if T.COUNT_VARIABLES[t] == 3 else "" for t in counts] for kind, _, err in COPE_ORDER]
    return html_table(["scheme"] + [f"{T.COUNT_VARIABLES[t]} variable{'s' * (T.COUNT_VARIABLES[t] > 1)}"
                                    for t in counts], rows + paper)


def content_section(page: Page, table: TaskTable, labels: list[str], tasks: list[str], models: str = "") -> list[Verdict]:
    """The content tasks' tables, CoPE's counting table and its verdicts; ``models``: a sentence on
    the models that learned them when they are not those of the algorithmic tasks."""
    page.add("<h3>Positions that count what matters: counting, selective copy, flip-flop</h3>"
             "<p>Tasks where what must be counted or found is decided by the tokens, not by their index. "
             "<b>count1/3/5</b> (Golovneva et al. 2024, CoPE): 2n statements <code>v =0</code>, <code>v ++</code>, "
             "<code>pass ;</code> on 1, 3 or 5 variables, then <code>print v</code>; the answer is how many times "
             "<code>v</code> was incremented since it was last set. <b>selective_copy</b>: n digits among 2n blanks, "
             "copied in order. <b>flip_flop</b> (Liu et al. 2023): n instructions write/ignore/read with a bit, then "
             f"read; the answer is the last written bit; ignore probability {T.FLIP_FLOP_IGNORE['flip_flop']} as "
             f"trained, and <b>flip_flop_sparse</b> the same model tested at {T.FLIP_FLOP_IGNORE['flip_flop_sparse']} "
             f"(longer and sparser than trained, their glitch test). {e(models)}</p>")
    sub = dataclasses.replace(table, tasks=tasks)
    page.figure("content_task_accuracy", lambda: F.accuracy(sub, labels),
                "Exact match against size on the content tasks; bands: 95% intervals; grey dashed line: largest "
                "trained size.")
    exact_match_tables(page, table, labels, tasks)
    if not any(t in T.COUNT_VARIABLES for t in tasks):
        return []
    page.add("<h3 id=counting>Counting: test error by number of variables (CoPE's table)</h3>" + counting_table(table, labels)
             + "<p class=muted>Error at the trained sizes; in brackets, pooled over the cells beyond the trained "
               "positions. Their models learn one number of variables each, at up to 512 statements; here one model "
               "learns every content task at up to 2n statements (see posenc.extrapolate.task_generators).</p>")
    return counting_verdicts(table)


def _models(recs: list[dict[str, Any]], tasks: tuple[str, ...]) -> tuple[list[dict[str, Any]], list[str], str]:
    """The records of models that learned any of ``tasks``: them, their labels, and a sentence on
    what they learned (their trained tasks, sizes and longest training sequence)."""
    mine = [r for r in recs if any(row["task"] in tasks for row in r.get("eval", []))]
    learned = list(dict.fromkeys(row["task"] for r in mine for row in r.get("eval", [])))
    longest = max((r.get("trained_positions", 0) for r in mine), default=0)
    size = max((r.get("max_size", 0) for r in mine), default=0)
    return mine, list(dict.fromkeys(r["label"] for r in mine)), (
        f"trained on all of {', '.join(T.trained(learned))} (one task per batch, in turn) with sizes 1…{size or '?'}; "
        f"the longest training sequence has {longest or '?'} tokens")


def task_section(page: Page, task_recs: list[dict[str, Any]]) -> list[Verdict]:
    page.add('<h2 id="tasks">Algorithmic tasks and passkey retrieval: exact match by size</h2>')
    if not task_recs:
        page.add("<p>Not run here. The quick profile (<code>make report</code>) leaves the tasks out: their "
                 "models cost the most of any part, and three seeds of them (a verdict rests on three) do not fit "
                 f"its time. <code>{e(TASKS_COMMAND)}</code> measures them on three seeds (<code>--profile quick "
                 "--part tasks</code> on the quick profile's smaller models). Their claims are listed in the "
                 "summary as not measured.</p>")
        return not_run_verdicts()
    table = stats.task_table(task_recs)
    algorithmic = [t for t in table.tasks if t not in T.CONTENT]
    content = [t for t in table.tasks if t in T.CONTENT]
    _, labels, what = _models(task_recs, T.ALGORITHMIC)
    page.add(f"<p>One model per scheme {what}. "
             "Exact match (every answer token right under greedy decoding) on the same fixed examples for every "
             "scheme. Cells show exact match and, in grey, the fraction of answer tokens right. Because one model "
             "learns every task, a larger size of a short task can still lie within the positions trained by a "
             "longer one: only the cells in <b>bold</b> (with †) have sequences longer than every training "
             "sequence — positions never trained. The verdicts use only "
             "those cells (McNemar's exact test on the same examples). Passkey allows a shortcut: the key is found "
             "by its content (the KEY marker among filler tokens), so a model can copy it without telling "
             "positions apart; it tests retrieval across unseen distances, not position arithmetic.</p>")
    if algorithmic:
        sub = dataclasses.replace(table, tasks=algorithmic)
        page.figure("task_accuracy", lambda: F.accuracy(sub, labels),
                    "Exact match against size; bands: 95% intervals; grey dashed line: largest trained size.")
    exact_match_tables(page, table, labels, algorithmic)
    verdicts, mrr, learned = task_verdicts(table)
    unlearned = [t for t in table.tasks if t not in learned and t in T.ALGORITHMIC]
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
    if content:
        mine, content_labels, what = _models(task_recs, T.CONTENT)
        together = all(any(row["task"] in T.ALGORITHMIC for row in r.get("eval", [])) for r in mine)
        verdicts += content_section(page, table, content_labels, content,
                                    "" if together else f"One model per scheme ({', '.join(content_labels)}) {what}.")
    return verdicts


class Tasks(Part):
    name = "tasks"
    split_in_record = False  # no text from the corpus

    def model(self, profile: Profile):
        return profile.tasks.model

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        """The models of ``profile.tasks``, one per scheme (``profile.task_schemes`` when it names them);
        then those of the content tasks
        (``profile.content_tasks``), one per scheme of ``content_task_schemes`` (``--scheme``: the
        user's schemes learn both), each seed's runs in that order."""
        if self.name not in profile.parts:
            return []
        check_task_groups(profile)
        mine = list(schemes) if custom or profile.task_schemes is None else list(profile.task_schemes)
        groups = [(profile.tasks, mine, {}, profile.seeds_for(self.name))]
        if profile.content_tasks is not None:
            groups.append((profile.content_tasks, list(schemes) if custom else list(profile.content_task_schemes),
                           CONTENT_GROUP, profile.seeds_for("content_tasks", self.name)))
        planned = []
        for ts, names, variant, seeds in groups:
            check_arch(profile.arch, ts.model)
            settings = task_settings_hash(profile, ts)
            specs = [resolve_scheme(s, ts.model, max_positions=task_max_positions(profile, ts)) for s in names]
            planned.append(([(lab, sp, settings, variant) for lab, sp in specs], seeds))
        return [Run(self.name, seed, arch_label(lab, profile.arch), sp, settings, dict(variant), profile=profile.name,
                    arch=profile.arch) for seed, (lab, sp, settings, variant) in by_seed(planned)]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        return run_tasks(ctx, runs)

    def summary(self, record: dict[str, Any]) -> str:
        ok = [r for r in record.get("eval", []) if "correct" in r]
        acc = sum(r["correct"] for r in ok) / max(1, sum(r["count"] for r in ok))
        return f"mean exact match {acc:.2f}"

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        verdicts = task_section(page, [r for r in records if not structured_record(r)])  # the structured positions': #hierarchical
        cited = {KAZEMNEJAD, *(v.source for v in verdicts)}
        return Section(verdicts, sources={k: v for k, v in SOURCES.items() if k in cited})


PART = Tasks()
