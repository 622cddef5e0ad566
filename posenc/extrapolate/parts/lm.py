"""The ``lm`` part (``--part lm``): language modelling per scheme, perplexity by length.

Protocol (Press et al. 2022, arXiv:2108.12409): train at length L, score the same held-out bytes at
L·{1, 1.5, 2, 4, 8, 16}, with non-overlapping and sliding windows (``posenc.extrapolate.data``).
Claims: Press et al.'s order at the longest length, "does not degrade" as non-inferiority on the
same bytes at positions past L (``posenc.stats.findings``), and the learned table's limit;
and those of positions that depend on content (the rows ``profile.lm_rows``): FoX against RoPE and NoPE, DAPE-KERPLE against KERPLE, stick-breaking past L, and
Llama 4's RoPE/NoPE layer pattern against RoPE (``content_verdicts``, section ``#content``); PoPE and
FoPE against RoPE at the longest length (``length_verdicts``, the full profile's rows too).
BiPE's rows (the structured positions' claims, ``profile.bipe_rows``, on the part's seeds: ``bipe_runs``, added by ``parts.structure``) read ``(segment, offset)`` of
the lines of the bytes (``posenc.extrapolate.structured_positions``; any ``bipe``/``bipe_bias``/``hirope``
spec does); their claims are in ``posenc.extrapolate.parts.structure`` (``#hierarchical``).
The trained RoPE model is saved for the ``scaling`` part (``posenc.extrapolate.parts.scaling``).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from posenc.extrapolate import figures as F
from posenc.extrapolate import structured_positions as structured
from posenc.stats import estimates as stats
from posenc.extrapolate.arch import build_model
from posenc.extrapolate.data import LMData, load_corpus, sample_batch, split, windows
from posenc.extrapolate.distributed import Dist, all_sum
from posenc.extrapolate.evaluate import cannot_run
from posenc.stats.findings import Verdict, position_claim, ppl_claim
from posenc.extrapolate.model import TinyGPT, check_arch, pattern_label, token_nll
from posenc.stats.page_parts import Page, e, missing
from posenc.stats.page_parts import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run, arch_label, by_seed, resolve_scheme
from posenc.extrapolate.profiles import Profile, content_lm_rows, settings_hash
from posenc.extrapolate.runs import Context, curve, train_with_bar
from posenc.stats.estimates import LMTable

PRESS = "Press et al. 2022"  # ALiBi; WikiText-103, trained at 512, tested to 15512 (~30L)
LIN = "Lin et al. 2025 (FoX)"
ZHENG = "Zheng et al. 2024 (DAPE)"
TAN = "Tan et al. 2025 (stick-breaking)"
YANG = "Yang et al. 2025 (RoPE to NoPE)"
POPE = "Gopalakrishnan et al. 2025 (PoPE)"
FOPE = "Hua et al. 2024 (FoPE)"
SOURCES = {PRESS: "WikiText-103, 247M parameters, trained at 512 tokens, tested to 15512 (~30L)",
           LIN: "the Forgetting Transformer, no other positional encoding, against RoPE and NoPE transformers; "
                "language models trained on LongCrawl64 at long context (up to 760M parameters)",
           ZHENG: "DAPE's MLP over the scores and the bias (width 32) around ALiBi, KERPLE and FIRE; trained at 128 "
                  "or 512 tokens, perplexity far past the training length",
           TAN: "stick-breaking attention without any positional encoding, against softmax attention with RoPE; "
                "language models evaluated past their training length",
           YANG: "RoPE layers interleaved with NoPE layers (Llama 4: NoPE with a query temperature in one layer of "
                 "four) against RoPE in every layer; long-context evaluations",
           POPE: "polar positions (softplus magnitudes, positional phases) against RoPE; language models evaluated "
                 "zero-shot up to 10x their training length",
           FOPE: "each dimension a Fourier series of the trained frequencies, the undertrained ones clipped, against "
                 "RoPE; perplexity and passkey retrieval past the training length"}
CONTENT_COMMAND = "posenc report --profile full --part lm"
"""What measures the content claims: the full profile's ``lm_rows``, run after its schemes on three
seeds (the quick profile has none: three seeds of them do not fit its time; ``--scheme`` replaces
both lists: name each row and its baselines)."""
PATTERN = pattern_label(["rope", "rope", "rope", "nope_temperature"])  # the full profile's, as its runs are labelled


# -- runs --------------------------------------------------------------------------------------

def lm_data(profile: Profile, corpus: str | None) -> tuple[LMData, str, str]:
    """The corpus split for language modelling, its source and hash."""
    text = load_corpus(corpus, max_bytes=profile.lm.corpus_bytes, seed=profile.lm.data_seed)
    data = split(text, heldout_tokens=profile.lm.heldout_tokens, lengths=profile.lm.lengths())
    return data, text.source, text.sha256


def lm_settings(profile: Profile, corpus_sha: str) -> str:
    return settings_hash({"lm": profile.lm, "corpus": corpus_sha})


def lm_specs(profile: Profile, schemes: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(label, full spec)`` of each scheme, sized for the language model."""
    return [resolve_scheme(s, profile.lm.model, max_positions=profile.lm.train_length) for s in schemes]


def lm_model(ctx: Context, spec: dict[str, Any], seed: int, arch: str = "transformer") -> TinyGPT:
    torch.manual_seed(seed)  # same initial weights for every scheme of an arch (the pe is built last)
    model = build_model(dataclasses.replace(ctx.profile.lm.model, vocab_size=256), spec, arch=arch).to(ctx.dist.device)
    fn = structured.for_spec(spec)  # BiPE's segments of lines, HiRoPE's (line, token); None: 0..L-1
    if fn is not None and isinstance(model, TinyGPT):
        model.positions_fn = fn
    return model


def lm_batches(ctx: Context, seed: int, *, batch: int, length: int):
    g = torch.Generator().manual_seed(seed)
    if ctx.data is None:
        raise RuntimeError("language-modelling data were not loaded")
    train_tokens = ctx.data.train
    return lambda step: (sample_batch(train_tokens, batch=batch, length=length, generator=g), None)


def lm_eval(ctx: Context, model: TinyGPT, *, set_pe: Callable[[int], None] | None = None) -> list[dict[str, Any]]:
    """NLL per length and mode; ``set_pe(length)`` re-scales RoPE per length (zero-shot scaling)."""
    lm = ctx.profile.lm
    out: list[dict[str, Any]] = []
    for length, mult in zip(lm.lengths(), lm.multipliers):
        if set_pe is not None:
            set_pe(length)
        reason = cannot_run(model, length)
        for mode in ("nonoverlap", "sliding"):
            row: dict[str, Any] = {"mode": mode, "length": length, "mult": mult}
            if reason is not None:
                row["cannot_run"] = reason
            else:
                blocks = lm_block_nll(model, ctx.data, length, mode, eval_tokens=lm.eval_tokens, dist=ctx.dist)
                row["nll"] = round(float(blocks.mean()), 6)
                row["block_nll"] = [round(float(b), 6) for b in blocks]
            out.append(row)
    return out


def checkpoint_path(ctx: Context, run: Run) -> Path:
    return ctx.checkpoints / f"{run.key}.pt"


def save_checkpoint(ctx: Context, run: Run, model: TinyGPT) -> None:
    if not ctx.dist.main:
        return
    ctx.checkpoints.mkdir(parents=True, exist_ok=True)
    path = checkpoint_path(ctx, run)
    tmp = path.with_suffix(".tmp")
    torch.save(model.state_dict(), tmp)
    os.replace(tmp, path)  # atomic: a killed save leaves no half checkpoint


def run_lm(ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
    """One configuration's seeds (``runs``), trained as one stacked model; a body per seed."""
    lm, run = ctx.profile.lm, runs[0]
    models = [lm_model(ctx, run.spec, r.seed, run.arch) for r in runs]
    t0 = time.perf_counter()
    curves = train_with_bar(ctx, models, lm.train, [lm_batches(ctx, r.seed, batch=lm.train.batch_size,
                                                               length=lm.train_length) for r in runs],
                            f"lm {run.label}")
    seconds = (time.perf_counter() - t0) / len(runs)  # each seed's share
    out = []
    for r, model, losses in zip(runs, models, curves):
        if run.spec["scheme"] == "rope" and run.arch == ctx.profile.arch:
            save_checkpoint(ctx, r, model)  # the base of the scaling runs
        out.append({"train_loss": curve(losses), "train_seconds": round(seconds, 2), "params": model.num_params(),
                    "train_length": lm.train_length, "eval": lm_eval(ctx, model)})
    return out


@torch.no_grad()
def lm_block_nll(model: TinyGPT, data: LMData, length: int, mode: str, *, eval_tokens: int,
                 dist: Dist) -> torch.Tensor:
    """Mean NLL (nats/token) of each block of ``data.block`` held-out targets: ``[N / block]``.

    Every length and mode scores the same targets ``1..N``; ranks split the windows.
    """
    model.eval()
    n = data.n_heldout
    sums = torch.zeros(n // data.block, dtype=torch.float64)
    ws = windows(n, length, mode)[dist.rank::dist.world]
    per_batch = max(1, eval_tokens // length)
    span = torch.arange(length + 1)
    for i in range(0, len(ws), per_batch):
        group = ws[i:i + per_batch]
        idx = torch.tensor([w.start for w in group]).unsqueeze(1) + span  # (b, T+1) stream indices
        x = data.heldout[idx].long().to(dist.device)
        nll = token_nll(model(x[:, :-1]), x[:, 1:]).double().cpu()  # (b, T)
        scored = torch.arange(length) >= torch.tensor([w.score_from for w in group]).unsqueeze(1)  # (b, T)
        block = (idx[:, 1:] - 1) // data.block  # (b, T): block of each target
        sums.index_add_(0, block[scored], nll[scored])
    return all_sum(sums, dist) / data.block


# -- claims ------------------------------------------------------------------------------------

def lm_verdicts(table: LMTable) -> list[Verdict]:
    L = table.train_length
    long = max(table.lengths) if table.lengths else L
    x = f"{long // L}L" if L else "long"
    return [
        position_claim(table, PRESS, "ALiBi does not degrade past L: 19.73 at L → 18.31 at 30L "
                       f"(here: positions past L within a {x} window, non-inferiority, margin 2% perplexity)",
                       "alibi", degrades=False),
        position_claim(table, PRESS, f"sinusoidal degrades: 20.05 at L → 406 at 30L (here: positions past L "
                       f"within a {x} window)", "sinusoidal", degrades=True),
        position_claim(table, PRESS, f"rotary degrades: 20.07 at L → 79.25 at 30L (here: positions past L "
                       f"within a {x} window)", "rope", degrades=True),
        ppl_claim(table, PRESS, f"at {x}, ALiBi beats sinusoidal", ("alibi", long), ("sinusoidal", long)),
        ppl_claim(table, PRESS, f"at {x}, ALiBi beats rotary", ("alibi", long), ("rope", long)),
        ppl_claim(table, PRESS, f"at {x}, rotary beats sinusoidal (79.25 vs 406 at 30L)",
                  ("rope", long), ("sinusoidal", long)),
        ppl_claim(table, PRESS, f"at {x}, ALiBi beats T5 (T5 holds to ~5L, then rises)",
                  ("alibi", long), ("t5", long)),
        _learned_verdict(table),
    ]


def rope_nope_label(records: list[dict[str, Any]], profile: Profile | None = None) -> str:
    """The label of the first transformer run of a RoPE/NoPE layer pattern (rope and
    nope_temperature entries, both present), e.g. ``"layers: rope x3, nope_temperature"``; when
    there is none, the pattern ``profile``'s model would run (``content_lm_rows``: a 2-layer model's
    is ``"layers: rope, nope_temperature"``, so that its claim reads as a run of that profile
    decides it), else ``PATTERN``."""
    for r in records:
        spec = r.get("spec") or {}
        if spec.get("scheme") == "layers" and r.get("arch", "transformer") == "transformer":
            names = {entry.get("scheme") for entry in spec.get("pattern", ())}
            if names == {"rope", "nope_temperature"}:
                return r["label"]
    if profile is None:
        return PATTERN
    return pattern_label(json.loads(content_lm_rows(profile.lm.model.n_layer)[-1]))


def _missing(table: LMTable, source: str, claim: str, labels: tuple[str, ...]) -> Verdict | None:
    """"not measured" naming the schemes with no runs and the command that runs them; None if all ran."""
    gone = [lab for lab in labels if lab not in table.labels()]
    if not gone:
        return None
    return Verdict(source, claim, f"missing: no runs of {', '.join(gone)} ({CONTENT_COMMAND} runs them)",
                   "not measured")


def content_verdicts(table: LMTable, pattern: str = PATTERN) -> list[Verdict]:
    """The claims of positions that depend on content, at the longest length (16L) or past L:
    FoX (no other position) beats RoPE and NoPE; DAPE around KERPLE beats KERPLE; stick-breaking
    does not degrade past L (non-inferiority, as ALiBi's); the RoPE/NoPE layer pattern
    (``pattern``, its label) beats RoPE. A claim whose schemes have no runs is "not measured"."""
    long = max(table.lengths) if table.lengths else table.train_length
    x = f"{long // table.train_length}L" if table.train_length else "long"
    claims = [
        (LIN, f"at {x}, FoX (a forget gate, no other position) beats RoPE", ("fox", "rope"),
         lambda c: ppl_claim(table, LIN, c, ("fox", long), ("rope", long))),
        (LIN, f"at {x}, FoX beats NoPE", ("fox", "nope"),
         lambda c: ppl_claim(table, LIN, c, ("fox", long), ("nope", long))),
        (ZHENG, f"at {x}, DAPE around KERPLE beats KERPLE", ("dape", "kerple"),
         lambda c: ppl_claim(table, ZHENG, c, ("dape", long), ("kerple", long))),
        (TAN, f"stick-breaking holds past its training length (here: positions past L within a {x} window, "
              "non-inferiority, margin 2% perplexity)", ("stick_breaking",),
         lambda c: position_claim(table, TAN, c, "stick_breaking", degrades=False)),
        (YANG, f"at {x}, RoPE layers with a NoPE layer (Llama 4's pattern, {pattern}) beat RoPE in every layer",
         (pattern, "rope"), lambda c: ppl_claim(table, YANG, c, (pattern, long), ("rope", long))),
    ]
    return [_missing(table, source, claim, labels) or check(claim) for source, claim, labels, check in claims]


def length_verdicts(table: LMTable) -> list[Verdict]:
    """PoPE's and FoPE's length-generalisation claims (the full profile's ``LENGTH_LM_ROWS``): each beats
    RoPE at the longest length; "not measured" without their runs."""
    long = max(table.lengths) if table.lengths else table.train_length
    x = f"{long // table.train_length}L" if table.train_length else "long"
    claims = [(POPE, f"at {x}, PoPE beats RoPE", "pope"), (FOPE, f"at {x}, FoPE beats RoPE", "fope")]
    return [_missing(table, source, claim, (row, "rope")) or ppl_claim(table, source, claim, (row, long), ("rope", long))
            for source, claim, row in claims]


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


# -- section -----------------------------------------------------------------------------------

def _params(records: list[dict[str, Any]]) -> dict[str, int]:
    """Parameters of each scheme's model (schemes differ: a learned table or a bias table adds some)."""
    return {r["label"]: r["params"] for r in records if "params" in r}


def ppl_table(table: stats.LMTable, labels: list[str], mode: str, params: dict[str, int] | None = None) -> str:
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
                cells.append(missing(table.cannot.get(label, {}).get(t)))
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
                cells.append(missing(table.cannot.get(label, {}).get(b.length)))
                continue
            lo, hi = est.ppl_interval()
            cells.append(f"{est.ppl:.3f} <span class=muted>[{lo:.3f}–{hi:.3f}]</span>")
        rows.append(cells)
    head = ["scheme"] + [f"positions {b.name(L)}<br><span class=muted>{e(F.MODES[b.mode].split(' (')[0])} of "
                         f"{b.length}</span>" for b in buckets]
    return html_table(head, rows)


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
            f"{lm.train.batch_size} × {lm.train_length} bytes ({tokens:,} training tokens), "
            f"{len({r['seed'] for r in lm_records})} seed(s). Press et al. trained 247M-parameter models on "
            "WikiText-103 at 512 tokens; Kazemnejad et al. trained on each task separately for far longer. These are the numbers this small run measured, not "
            "a reproduction of the papers: a claim is marked as agreeing only when its test, Holm-corrected over the "
            "page's verdicts, has p below 0.05, and any disagreement is listed, not hidden.</p>")


def _lm_section(page: Page, profile: Profile, lm_recs: list[dict[str, Any]]) -> list[Verdict]:
    page.add("<h2>Language modelling: perplexity by evaluation length</h2>")
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
             f"{' and the seed spread (Student t)' if len({r['seed'] for r in lm_recs}) > 1 else ''}; differences between schemes "
             "are paired block by block and seed by seed.</p>")
    page.figure("perplexity", lambda: F.perplexity(table, labels),
                "Perplexity per byte (lower is better) against evaluation length; bands: 95% intervals; "
                f"{F.LINE_STYLES}; grey dashed line: training length.")
    params = _params(lm_recs)
    for mode, name in F.MODES.items():
        page.add(f"<h3>{e(name)}</h3>" + ppl_table(table, labels, mode, params if mode == "nonoverlap" else None))
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
                "Perplexity per byte of the same held-out bytes by their position within the window; bands: 95% "
                f"intervals; {F.LINE_STYLES}; grey dashed line: L.")
    page.add(_position_table(table, labels) + "</div>")
    page.figure("lm_training_loss", lambda: F.losses(lm_recs, steps=profile.lm.train.steps,
                                                     title="language-modelling training loss"),
                "Training loss per scheme (same batches for every scheme): the mean over its seeds, the band "
                "their range.")
    return lm_verdicts(table) + length_verdicts(table) + content_section(page, table, rope_nope_label(lm_recs, profile))


CONTENT_PLAYERS = ("fox", "fox (gate=bias_only)", "cope", "dape", "stick_breaking")
CONTENT_BASELINES = ("rope", "nope", "kerple", "alibi")


def content_section(page: Page, table: LMTable, pattern: str) -> list[Verdict]:
    """Positions that depend on content (``#content``): their rows beside their baselines, and
    their claims in words, agreeing or not, before Holm (the summary has them after it)."""
    verdicts = content_verdicts(table, pattern)
    page.add('<div id="content"><h3>Positions that depend on content</h3>'
             "<p>FoX adds a learned forget gate's log-sum between key and query to the scores and no other "
             "position; CoPE counts the keys whose gate fires; DAPE passes the scores and KERPLE's bias through a "
             "small MLP; stick-breaking attention replaces the softmax with a break of the remaining mass from the "
             "query backwards, without any position; Llama 4 puts NoPE (with a query temperature) in one block of "
             "four and RoPE in the rest (a model of two blocks runs one of two). CoPE's row has no claim here: its "
             "own claim is about counting, and its verdicts are in the "
             '<a href="#tasks">tasks section</a> when the content tasks ran.</p>')
    labels = [lab for lab in (*CONTENT_PLAYERS, pattern) if lab in table.labels()]
    if labels:
        labels += [lab for lab in CONTENT_BASELINES if lab in table.labels()]
        page.add(ppl_table(table, labels, "nonoverlap"))
    else:
        page.add(f"<p>No runs of these schemes here: <code>{e(CONTENT_COMMAND)}</code> runs them on three seeds (the "
                 "full profile's rows, after its schemes; the quick profile leaves them out, as three seeds of them do "
                 "not fit its time), or <code>posenc report --part lm --scheme fox --scheme rope --scheme nope "
                 "...</code> with each scheme named (--scheme replaces the list).</p>")
    groups: dict[str, list[Verdict]] = {}
    for v in verdicts:
        groups.setdefault(v.status, []).append(v)
    words = (("agrees", "Agrees with the papers"), ("disagrees", "Does not agree (the opposite was measured)"),
             ("no clear difference", "No clear difference at this scale"), ("not measured", "Not measured"))
    page.add("<ul>" + "".join(f"<li><b>{e(name)}:</b> " + "; ".join(f"{e(v.claim)} ({e(v.source)}; {e(v.measured)})"
                                                                     for v in groups[status]) + ".</li>"
                              for status, name in words if status in groups) + "</ul>"
             "<p class=muted>Before Holm's correction; the summary's verdict table has them after it, with the "
             "page's other claims.</p></div>")
    return verdicts


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


class LM(Part):
    name = "lm"

    def model(self, profile: Profile):
        return profile.lm.model

    def load(self, profile: Profile, corpus: str | None):
        return lm_data(profile, corpus) if self.name in profile.parts else None

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        check_arch(profile.arch, profile.lm.model)
        settings = lm_settings(profile, corpus_sha)
        # --scheme replaces the profile's rows too; a layer pattern is a transformer's (``--arch hybrid``: none)
        rows = [] if custom or profile.arch != "transformer" else profile.lm_rows
        groups = [(lm_specs(profile, schemes), profile.seeds_for(self.name)),
                  (lm_specs(profile, rows), profile.seeds_for("lm_rows", self.name))]
        return [Run(self.name, seed, arch_label(lab, profile.arch), sp, settings, profile=profile.name,
                    arch=profile.arch) for seed, (lab, sp) in by_seed(groups)]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        return run_lm(ctx, runs)

    def summary(self, record: dict[str, Any]) -> str:
        return ppl_summary(record)

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        verdicts = _lm_section(page, profile, records)
        return Section(verdicts, _scale_note(profile, records) + _headline(records), SOURCES)


def bipe_runs(profile: Profile, corpus_sha: str) -> list[Run]:
    """BiPE's language models (``profile.bipe_rows``) on the part's seeds: the structured positions'
    rows, which ``parts.structure`` adds beside this part's runs (``Structure.extend``)."""
    settings = lm_settings(profile, corpus_sha)
    return [Run(LM.name, seed, arch_label(lab, profile.arch), sp, settings, profile=profile.name, arch=profile.arch)
            for seed in profile.seeds_for(LM.name) for lab, sp in lm_specs(profile, profile.bipe_rows)]


def ppl_summary(record: dict[str, Any]) -> str:
    """Perplexity at the shortest and longest length that ran."""
    import math

    done = [r for r in record.get("eval", []) if r.get("mode", "nonoverlap") == "nonoverlap" and "nll" in r]
    if not done:
        return "no length could run"
    first, last = done[0], done[-1]
    return (f"ppl {math.exp(first['nll']):.2f} at {first['length']} -> "
            f"{math.exp(last['nll']):.2f} at {last['length']}")


PART = LM()
