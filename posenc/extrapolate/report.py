"""``posenc report``: the benchmark and the analysis as one self-contained, offline HTML page.

Runs (or reuses, from ``OUT/results.jsonl``) the extrapolation benchmark of a profile, then writes
``OUT/index.html`` with every figure embedded as a base64 PNG (also saved under ``OUT/figures/``).
A Content-Security-Policy forbids the page any network fetch. Sections: what was measured and
the verdict on each claim of the papers; the seed claims demonstrated with ``posenc.plot`` and
``posenc.demo``; perplexity and accuracy by length with tables; RoPE scalings; hardware,
versions, timings and settings.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc import environment
from posenc.extrapolate import figures as F
from posenc.extrapolate import findings, stats, vision_report
from posenc.extrapolate.demos import demonstrations
from posenc.extrapolate.page import Page, e, status
from posenc.extrapolate.page import table as html_table
from posenc.extrapolate.profiles import Profile


def _missing(reason: str | None) -> str:
    """The cell of a result that is not there: a scheme that cannot run there, or not measured."""
    return "—" if reason is None else f'<span class=muted title="{e(reason)}">cannot run</span>'


def _params(records: list[dict[str, Any]]) -> dict[str, int]:
    """Parameters of each scheme's model (schemes differ: a learned table or a bias table adds some)."""
    return {r["label"]: r["params"] for r in records if "params" in r}


def _ppl_table(table: stats.LMTable, labels: list[str], mode: str, params: dict[str, int] | None = None) -> str:
    rows = []
    for label in labels:
        cells = [e(label)] + ([f"{params[label]:,}" if label in params else "—"] if params is not None else [])
        for t in table.lengths:
            est = table.estimate(label, mode, t)
            if est is not None:
                lo, hi = est.ppl_interval()
                extra = f", seed sd {est.seed_sd:.3f}" if est.seeds > 1 else ""
                cells.append(f"{est.ppl:.2f} <span class=muted>[{lo:.2f}–{hi:.2f}{extra}]</span>")
            else:
                cells.append(_missing(table.cannot.get(label, {}).get(t)))
        rows.append(cells)
    head = ["scheme"] + (["parameters"] if params is not None else []) + [
        f"{t} ({t / table.train_length:g}L)" for t in table.lengths]
    return html_table(head, rows)


def _position_table(table: stats.LMTable, labels: list[str]) -> str:
    """Perplexity of the same held-out bytes by their position in the window (``nll-by-position``)."""
    buckets = table.buckets()
    L = table.train_length
    rows = []
    for label in labels:
        cells = [e(label)]
        for b in buckets:
            est = table.position(label, b)
            if est is None:
                cells.append(_missing(table.cannot.get(label, {}).get(b.length)))
                continue
            lo, hi = est.ppl_interval()
            cells.append(f"{est.ppl:.3f} <span class=muted>[{lo:.3f}–{hi:.3f}]</span>")
        rows.append(cells)
    head = ["scheme"] + [f"positions {b.name(L)}<br><span class=muted>{e(F.MODES[b.mode].split(' (')[0])} of "
                         f"{b.length}</span>" for b in buckets]
    return html_table(head, rows)


def _p(v: findings.Verdict) -> str:
    if v.p is None:
        return "<span class=muted>no test</span>"
    return f"{v.p:.2g} → {v.p_holm:.2g}" if v.p_holm is not None else f"{v.p:.2g}"


def _verdict_cell(v: findings.Verdict) -> str:
    return status(v.status) + (' <span class=muted>(indicative, one seed)</span>' if v.indicative and v.seeds == 1
                               else f' <span class=muted>(indicative, {v.seeds} seeds)</span>' if v.indicative else "")


def _verdicts(verdicts: list[findings.Verdict]) -> str:
    rows = [[e(v.source), e(v.claim), e(v.measured), _p(v), _verdict_cell(v)] for v in verdicts]
    sources = [src for src in findings.SETTINGS if any(v.source == src for v in verdicts)]
    where = "".join(f"<li>{e(src)}: {e(findings.SETTINGS[src])}</li>" for src in sources)
    tested = sum(v.p is not None for v in verdicts)
    members = ", ".join(dict.fromkeys(v.source for v in verdicts if v.p is not None)) or "none"
    family = (f"<p class=muted>p: the test's two-sided p-value → Holm-adjusted over the family of the {tested} "
              f"verdicts with a test on this page, all parts together (their sources: {e(members)}); a "
              f"verdict needs an adjusted p below {findings.ALPHA}. Behind fewer than {findings.MIN_SEEDS} "
              "seeds a verdict is indicative: the spread between training runs is not in its error.</p>")
    return ((f"<ul class=muted>{where}</ul>" if where else "") + family
            + html_table(["source", "the paper found", "measured here", "p", "verdict"], rows, text=True))


def _honesty(verdicts: list[findings.Verdict]) -> str:
    bad = [v for v in verdicts if v.status == "disagrees"]
    unclear = [v for v in verdicts if v.status == "no clear difference"]
    parts = []
    if bad:
        parts.append("<p><b>Where this run disagrees with the papers:</b></p><ul>"
                     + "".join(f"<li>{e(v.claim)} ({e(v.source)}): measured {e(v.measured)}</li>" for v in bad)
                     + "</ul>")
    else:
        parts.append("<p>No measured difference contradicts the papers (Holm-adjusted p below 0.05).</p>")
    if unclear:
        parts.append(f"<p>{len(unclear)} claim(s) show no clear difference at this scale (Holm-adjusted p of 0.05 "
                     "or more): the run neither confirms nor refutes them — " + "; ".join(e(v.claim) for v in unclear)
                     + ".</p>")
    return "".join(parts)


def _headline(lm_recs: list[dict[str, Any]]) -> str:
    """The measured order at the longest length, best first."""
    if not lm_recs:
        return ""
    table = stats.lm_table(lm_recs)
    long = max(table.lengths)
    ranked = sorted(((est.ppl, lab) for lab in table.labels()
                     if (est := table.estimate(lab, "nonoverlap", long)) is not None))
    blocked = [lab for lab in table.labels() if long in table.cannot.get(lab, {})]
    order = " &lt; ".join(f"{e(lab)} {ppl:.2f}" for ppl, lab in ranked)
    tail = f"; cannot run there: {e(', '.join(blocked))}" if blocked else ""
    return (f"<p><b>Measured perplexity at {long} tokens ({long // table.train_length}× the training length), "
            f"best first:</b> {order}{tail}.</p>")


def _scale_note(profile: Profile, lm_records: list[dict[str, Any]]) -> str:
    lm = profile.lm
    counts = sorted(set(_params(lm_records).values()))
    params = None
    if counts:
        params = f"{counts[0]:,}" if len(counts) == 1 else f"{counts[0]:,}–{counts[-1]:,}, by scheme"
    tokens = lm.train.steps * lm.train.batch_size * lm.train_length
    if not lm_records:  # no language modelling in this report: its model's scale says nothing here
        return ('<p class="note">These are the numbers this small run measured, not a reproduction of the papers: a '
                "claim is marked as agreeing only when its test, Holm-corrected over the page's verdicts, has p below "
                "0.05, and any disagreement is listed, not hidden.</p>")
    return (f'<p class="note">Scale: a {lm.model.n_layer}-layer decoder, width {lm.model.n_embd}, '
            f"{lm.model.n_head} heads ({params or '?'} parameters), trained for {lm.train.steps} steps of "
            f"{lm.train.batch_size} × {lm.train_length} bytes ({tokens:,} training tokens), {len(profile.seeds)} "
            f"seed(s). Press et al. trained 247M-parameter models on WikiText-103 at 512 tokens; Kazemnejad et al. "
            "trained on each task separately for far longer. These are the numbers this small run measured, not "
            "a reproduction of the papers: a claim is marked as agreeing only when its test, Holm-corrected over the "
            "page's verdicts, has p below 0.05, and any disagreement is listed, not hidden.</p>")


def _lm_section(page: Page, profile: Profile, lm_recs: list[dict[str, Any]]) -> list[findings.Verdict]:
    page.add("<h2>3. Language modelling: perplexity by evaluation length</h2>")
    if not lm_recs:
        page.add("<p>Not run in this profile.</p>")
        return []
    table = stats.lm_table(lm_recs)
    labels = list(dict.fromkeys(r["label"] for r in lm_recs))
    src = lm_recs[0].get("corpus") or {}
    page.add(_split_note(src.get("split")))
    n_blocks = next((len(row["block_nll"]) for r in lm_recs for row in r["eval"] if "block_nll" in row), 0)
    page.add(f"<p>Trained at L = {table.train_length} bytes on <code>{e(str(src.get('source', '?')))}</code> "
             f"(sha256 {e(str(src.get('sha256', '?'))[:12])}…); every length is scored on the same "
             f"{n_blocks * table.lengths[-1]:,}-byte held-out stream, "  # blocks of the longest length
             f"so lengths differ only in context. Intervals are 95% from {n_blocks} blocks of the stream "
             "(Newey–West errors: neighbouring blocks are correlated)"
             f"{' and the seed spread (Student t)' if len(profile.seeds) > 1 else ''}; differences between schemes "
             "are paired block by block and seed by seed.</p>")
    page.figure("perplexity", lambda: F.perplexity(table, labels),
                "Perplexity per byte (lower is better) against evaluation length; dashed: training length.")
    params = _params(lm_recs)
    for mode, name in F.MODES.items():
        page.add(f"<h3>{e(name)}</h3>" + _ppl_table(table, labels, mode, params if mode == "nonoverlap" else None))
    L = table.train_length
    page.add('<div id="nll-by-position"><h3>Perplexity by position within the window: context separated from '
             "length</h3>"
             f"<p>The same held-out bytes scored at different positions of a window: positions 0–L (non-overlapping "
             f"windows of L = {L}), L/2–L (sliding windows of L: the trained positions with the most context) and "
             "T/2–T (sliding windows of T, every target in a window's last half) for each T ≥ 2L. Every column "
             "scores the same bytes (the stream's first block, which the first windows score at smaller "
             "positions, is left out), so a column differs from another only in the position and context of the "
             "bytes. In a causal model position and context cannot be told apart; more context can only help a "
             "model that uses it, so a rise past L is the encoding failing, and a fall past L mixes extrapolation "
             "with the gain from context. The claims about degrading past L compare the last column with the "
             "L/2–L column.</p>")
    page.figure("nll_by_position", lambda: F.by_position(table, labels),
                "Perplexity per byte of the same held-out bytes by their position within the window; dashed: L.")
    page.add(_position_table(table, labels) + "</div>")
    page.figure("lm_training_loss", lambda: F.losses(lm_recs, steps=profile.lm.train.steps,
                                                     title="language-modelling training loss"),
                "Training loss per scheme (same batches for every scheme).")
    return findings.lm_verdicts(table)


def _hybrid_section(page: Page, lm_recs: list[dict[str, Any]]) -> tuple[list[findings.Verdict], list[str]]:
    """The recurrent baseline: the hybrid's rows against the transformer's; its verdicts and answers."""
    page.add("<h3 id=hybrid>Recurrence instead of position: the hybrid (attention and ssm blocks)</h3>")
    hybrid = [r for r in lm_recs if r.get("arch", "transformer") == "hybrid"]  # older records: transformer
    if not hybrid:
        page.add("<p>No hybrid runs in this profile (<code>posenc extrapolate --arch hybrid</code>).</p>")
        return [], []
    table = stats.lm_table(lm_recs)
    page.add("<p>The <b>hybrid</b> rows replace every other attention block of the same decoder with an "
             "<code>ssm</code> block (a diagonal linear state-space layer, S4D/Mamba-style, then the same MLP), as "
             "Jamba interleaves Mamba and attention layers; the positional scheme acts in the remaining attention "
             f"blocks only. {e(_why_recurrent())}. Below, a scheme <i>degrades</i> when the NLL of the same bytes "
             "at the farthest positions exceeds their NLL at positions L/2–L by more than two standard errors "
             "(paired, block by block; context held equal, as in the claims of section 1).</p>")
    labels = [lab for lab in (findings.HYBRID_NOPE, findings.HYBRID_ROPE, "nope", *findings.PEERS)
              if lab in table.labels()]
    labels += [lab for lab in dict.fromkeys(r["label"] for r in hybrid) if lab not in labels]
    L, long = table.train_length, max(table.lengths)
    rows = []
    for lab in labels:
        t = findings.trend(table, lab)
        if t is None:
            rows.append([e(lab), "—", "—", "—", _missing(table.cannot.get(lab, {}).get(long))])
            continue
        rows.append([e(lab), f"{t.ppl_at_l:.2f}", f"{t.ppl_long:.2f}", f"{t.delta:+.4f} ± {t.se:.4f}",
                     "degrades" if t.degrades else "does not degrade"])
    buckets = table.buckets()
    near, far = (buckets[1].name(L), buckets[-1].name(L)) if len(buckets) > 2 else ("L/2–L", "far")
    page.add(html_table(["scheme", f"ppl at positions {near}", f"ppl at positions {far}",
                         f"ΔNLL ({far} − {near}) ± SE", "past L"], rows))
    answers = findings.hybrid_answers(table)
    page.add("".join(f"<p><b>{e(a)}</b></p>" for a in answers))
    return findings.hybrid_verdicts(table), answers


def _why_recurrent() -> str:
    from posenc.demo import WHY_RECURRENT

    return "The ssm blocks take no position: " + WHY_RECURRENT


def _split_note(info: dict[str, Any] | None) -> str:
    if not info:
        return ""
    return (f'<p class="note" id="contamination">Split: {info["documents_train"]} training documents '
            f'({info["bytes_train"]:,} bytes) and {info["documents_heldout"]} held-out documents '
            f'({info["bytes_heldout"]:,} bytes), whole documents drawn with a seed from across the corpus '
            f'({info["dropped_exact"]} exact and {info["dropped_near"]} near copies dropped). Contamination: '
            f'overlap_32 = {info["overlap_32"]:.4f}, overlap_128 = {info["overlap_128"]:.4f} (the share of held-out '
            "32- and 128-byte strings found verbatim in the training text; goal ≤ 0.01 for 128). "
            "<code>posenc data</code> prints the same figures.</p>")


def _scaling_section(page: Page, lm_recs: list[dict[str, Any]],
                     sc_recs: list[dict[str, Any]]) -> list[findings.Verdict]:
    page.add("<h2>4. RoPE scalings on the trained RoPE model</h2>")
    if not sc_recs or not lm_recs:
        page.add("<p>Not run in this profile (it needs an unscaled <code>rope</code> scheme).</p>")
        return []
    lm, sc = stats.lm_table(lm_recs), stats.lm_table(sc_recs)
    labels = {(r["variant"]["type"], r["variant"]["mode"]): r["label"] for r in sc_recs}
    # the LM run the scalings start from: the one with their base spec (its label may be "rope (base=500)")
    arch = sc_recs[0].get("arch", "transformer")  # and the same model (a hybrid rope has the same spec)
    base = next((r["label"] for r in lm_recs if r["spec"] == sc_recs[0]["spec"]
                 and r.get("arch", "transformer") == arch), "rope")
    factor = next((r["variant"]["factor"] for r in sc_recs if r["variant"]["mode"] == "fine-tune"), 4)
    page.add("<p>Zero-shot: the trained RoPE model's frequencies are rescaled at each length T with factor T/L "
             f"(no training). Fine-tuned: a short fine-tune at {factor}L with factor {factor} (and a control "
             f"fine-tuned at {factor}L without scaling), then evaluated at every length.</p>" + _yarn_note(sc_recs))
    page.figure("rope_scalings", lambda: F.scaling(lm, sc, labels, base=base),
                "RoPE scalings: zero-shot and after a fine-tune.")
    merged = stats.LMTable({**lm.blocks, **sc.blocks}, {**lm.cannot, **sc.cannot},
                           sorted(set(lm.lengths) | set(sc.lengths)), lm.train_length)
    page.add(_ppl_table(merged, [base, *labels.values()], "nonoverlap"))
    return findings.scaling_verdicts(lm, sc, labels, int(factor), base=base)


def _yarn_note(sc_recs: list[dict[str, Any]]) -> str:
    from posenc.extrapolate.plan import yarn_betas
    from posenc.scaling import yarn_correction_range

    spec, L = sc_recs[0]["spec"], sc_recs[0].get("train_length")
    if "head_dim" not in spec or not L or not any(r["variant"]["type"] == "yarn" for r in sc_recs):
        return ""
    d, base = spec["head_dim"], spec.get("base", 10000.0)
    betas = yarn_betas(d, base, L)
    low, high = yarn_correction_range(d, base, L, betas["beta_fast"], betas["beta_slow"])
    plow, phigh = yarn_correction_range(d, base, L, 32.0, 1.0)
    return (f"<p class=muted>YaRN here: beta_fast = {betas['beta_fast']:.3g}, beta_slow = {betas['beta_slow']:.3g} "
            f"(rotations over L₀ = {L}), sized so its ramp runs from pair {low} to pair {high} of {d // 2}, the same "
            "share of the pairs as the paper's 32/1 at head_dim 128 and L₀ = 4096 (pairs 20–46 of 64). The paper's "
            f"32/1 would ramp from pair {plow} to {phigh} here and interpolate every later pair exactly as linear "
            "does. Even so, with so few pairs, \"YaRN beats linear\" tests YaRN's split of the frequencies and its "
            "attention temperature together.</p>")


def _task_section(page: Page, task_recs: list[dict[str, Any]]) -> list[findings.Verdict]:
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
                    cells.append(_missing(table.cannot.get(label, {}).get(task, {}).get(s)))
            rows.append(cells)
        page.add(f'<div class="side"><h3>{e(task)}</h3>'
                 + html_table(["scheme"] + [f"n={s}" for s in table.sizes], rows) + "</div>")
    verdicts, mrr, learned = findings.task_verdicts(table)
    unlearned = [t for t in table.tasks if t not in learned]
    if unlearned:
        page.add(f'<p class="note">Not learned at this scale (no scheme reaches 50% exact match even at the '
                 f"trained size {table.max_size}): {', '.join(unlearned)}. These say nothing about length "
                 "generalisation and are left out of the ranking and the verdicts below.</p>")
    if mrr:
        rows = [[e(k), f"{findings.KAZEMNEJAD_MRR[k]:.2f}", f"{v:.2f}"] for k, v in mrr.items()]
        page.add(f"<h3>Mean reciprocal rank on the cells beyond the trained positions ({', '.join(learned)})</h3>"
                 + html_table(["scheme", "Kazemnejad et al. 2023", "measured"], rows)
                 + "<p class=muted>Their absolute-position scheme is represented by sinusoidal (a learned table "
                   "cannot run past its length).</p>")
    return verdicts


def _method(profile: Profile) -> str:
    """The method in plain words (what the verdicts above rest on)."""
    seeds = len(profile.seeds)
    seed_text = (f"{seeds} seeds (training runs with different initial weights and batches); seeds are paired by "
                 "their number, and intervals and tests use Student's t with seeds − 1 degrees of freedom"
                 if seeds >= findings.MIN_SEEDS else
                 f"{seeds} seed{'s' * (seeds > 1)}: the spread between training runs is not measured, so every "
                 "verdict is marked indicative (the full profile has three seeds)")
    items = [
        "<b>Clean split.</b> The text is drawn as whole documents (the standard library's files, or pieces of "
        "about 4 KB of your file) in an order fixed by a seed, from across the corpus. Exact copies and near "
        "copies (half of a document's sampled 64-byte strings already seen) are dropped; a document that shares "
        "more than 1% of its 128-byte strings with another is kept for training only. No document is on both "
        "sides. The contamination figures say how much of the held-out text still occurs verbatim in training.",
        f"<b>Seeds.</b> {seed_text}.",
        "<b>Fair settings.</b> Every scheme trains on the same batches from the same initial shared weights. "
        "Settings that depend on length follow the training length: T5's buckets reach just past it (every "
        "bucket gets a gradient), FIRE's threshold is the training length, YaRN's ramp is sized to the model's "
        "head size. Parameter counts differ by scheme and are in the tables.",
        "<b>Context against extrapolation.</b> Whole-window perplexities at different lengths differ in context "
        "as well as in positions, so they are compared across schemes at one length only. Claims about "
        "degrading past L compare the same bytes at positions past L with positions L/2–L (the table "
        "<i>nll-by-position</i>).",
        "<b>Tasks.</b> One model learns all tasks; verdicts use only the cells whose sequences are longer than "
        "any training sequence, and compare two schemes example by example (McNemar's exact test).",
        f"<b>Statistics.</b> Perplexity differences are paired block by block on the same bytes; errors allow for "
        "the correlation of neighbouring blocks (Newey–West). All verdicts with a test form one family, "
        f"corrected with Holm's method at {findings.ALPHA}. \"Does not degrade\" is a non-inferiority test: "
        "the increase must be significantly below a margin of 2% perplexity.",
    ]
    return ('<h2 id="method">Method, in plain words</h2><ul>' + "".join(f"<li>{x}</li>" for x in items) + "</ul>")


def _environment_section(page: Page, profile: Profile, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    here = environment.capture()  # this machine and its versions; how the runs were spread: their env
    env = records[-1]["env"] if records else {}
    page.add("<h2>6. Hardware, versions, timing and settings</h2>")
    rows = [["CPU", e(here["processor"])], ["CPUs available", str(here["cpus"])],
            ["device", e(str(env.get("device", "cpu")))], ["parallel runs × DDP processes × torch threads",
             f"{env.get('jobs', 1)} × {env.get('world_size', 1)} × {env.get('threads', '?')}"],
            ["platform", e(here["platform"])], ["python", here["python"]],
            *[[name, e(str(here[name]))] for name in ("posenc", "torch", "numpy", "matplotlib", "scikit-learn")],
            ["benchmark runs", f"{len(records)} ({meta['new']} run now, {meta['reused']} reused from results.jsonl)"],
            ["compute time of the runs",
             f"{sum(r.get('seconds', 0) for r in records):.1f} s (as each run measured it)"],
            ["this report command", f"{meta['wall_seconds']:.1f} s wall (benchmark {meta['bench_seconds']:.1f} s, "
                                    f"analysis and figures {meta['render_seconds']:.1f} s)"],
            ["generated", e(meta["generated"])]]
    page.add(html_table(["", ""], rows))
    per = [[e(r["part"]), e(r["label"]), str(r["seed"]), f"{r.get('seconds', 0):.1f}",
            f"{r.get('train_seconds', 0):.1f}"] for r in records]
    page.add("<details><summary>time per run</summary>"
             + html_table(["part", "scheme", "seed", "seconds", "of which training"], per)
             + "</details>")
    page.add(f"<h3>Settings: profile <code>{e(profile.name)}</code></h3><p>{e(profile.description)}</p>"
             f"<pre>{e(json.dumps(profile.to_dict(), indent=1, default=str))}</pre>")
    specs = {r["label"]: r["spec"] for r in records if r["part"] != "scaling"}
    page.add("<details><summary>scheme specs</summary><pre>" + e(json.dumps(specs, indent=1)) + "</pre></details>")


def render(profile: Profile, records: list[dict[str, Any]], meta: dict[str, Any]) -> Page:
    """The whole page for ``records`` (the plan's results, in plan order)."""
    by_part = {p: [r for r in records if r["part"] == p] for p in ("lm", "scaling", "tasks")}
    page = Page()
    page.add(f"<h1>posenc report — train short, test long (profile <code>{e(profile.name)}</code>)</h1>"
             f"<p class=muted>Generated {e(meta['generated'])} by <code>posenc report --profile {e(profile.name)}"
             "</code>. Offline: every figure is embedded; the page fetches nothing. "
             '<a id="explorer-link" href="explorer/index.html">Interactive explorer</a> (<code>posenc explore</code>, '
             "written next to this page).</p>")
    body = Page()
    demonstrations(body)
    verdicts = _lm_section(body, profile, by_part["lm"])
    hybrid_verdicts, answers = _hybrid_section(body, by_part["lm"])
    verdicts += hybrid_verdicts
    verdicts += _scaling_section(body, by_part["lm"], by_part["scaling"])
    verdicts += _task_section(body, by_part["tasks"])
    verdicts += vision_report.image_section(body, [r for r in records if r["part"] == "image"])
    verdicts += vision_report.time_section(body, [r for r in records if r["part"] == "time"])
    verdicts = findings.adjust(verdicts)
    meta["render_seconds"] = time.perf_counter() - meta["render_start"]
    meta["wall_seconds"] = time.perf_counter() - meta["start"]
    _environment_section(body, profile, records, meta)
    arch_note = ("" if profile.arch == "transformer" else
                 f'<p class="note">Every run here is a <b>{e(profile.arch)}</b> (--arch {e(profile.arch)}): the '
                 "papers' claims about transformers name plain scheme labels, so they show as not measured; the "
                 "scaling claims and Jamba's are measured on these runs.</p>")
    page.add("<h2>1. Summary: the papers' claims against this run</h2>" + arch_note + _scale_note(profile, by_part["lm"])
             + _headline(by_part["lm"]) + "".join(f"<p>{e(a)}</p>" for a in answers)
             + _verdicts(verdicts) + _honesty(verdicts) + _method(profile))
    page.parts += body.parts
    page.figures.update(body.figures)
    page.errors += body.errors
    return page


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def make_report(profile: Profile, *, out: str | os.PathLike = "report", run_benchmark: bool = True,
                log: Callable[[str], None] | None = None, **run_kw: Any) -> Path | None:
    """Runs (or reuses) the benchmark into ``out/results.jsonl`` and writes ``out/index.html``.

    Returns the page's path (None on ranks other than 0 under torchrun).
    """
    from posenc.extrapolate.driver import iter_runs
    from posenc.extrapolate.results import load

    start = time.perf_counter()
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ValueError(f"--out {str(out)!r} exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    results = out / "results.jsonl"
    before = set(load(results))
    if not run_benchmark and not before:
        raise ValueError(f"no results in {str(results)!r} to render; run without --no-run first")
    records = list(iter_runs(profile, results=results, log=log, run_missing=run_benchmark, **run_kw))
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    if not records:
        raise ValueError(f"no results for profile {profile.name!r} in {str(results)!r}; run without --no-run")
    render_start = time.perf_counter()
    meta = {"start": start, "render_start": render_start, "bench_seconds": render_start - start,
            "new": sum(r["key"] not in before for r in records), "reused": sum(r["key"] in before for r in records),
            "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z")}
    page = render(profile, records, meta)
    (out / "figures").mkdir(exist_ok=True)
    for name, data in page.figures.items():
        _write_atomic(out / "figures" / name, data)
    index = out / "index.html"
    _write_atomic(index, page.html(f"posenc report ({profile.name})").encode())
    from posenc import explorer

    explorer.write(out / "explorer")  # the page the header links to
    for err in page.errors:
        print(f"posenc report: warning: {err}", file=sys.stderr)
    return index
