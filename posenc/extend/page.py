"""``OUT/index.html`` of ``posenc extend``: one offline page (figures as data URIs, the report's
``Page``), conclusions first: the verdicts, then perplexity per bucket and length, the passkey
heatmaps, time and memory, and each method's parameters."""

from __future__ import annotations

import html
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from posenc.extend.methods import LENGTH_DEPENDENT
from posenc.extend.verdicts import claims, measured_by, shown_methods
from posenc.stats.page_parts import Page, status, table

e = html.escape


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def bucket_table(nll, methods: list[str], length: int, passages: int, bucket: int) -> tuple[list[str], dict]:
    """``(head, {method: [ppl per bucket]})``: exp of the mean over passages of each bucket's mean NLL.
    The loss of the token at position ``t`` counts in bucket ``t // bucket``; a head names a bucket by its
    first position, and a last bucket holding fewer than ``bucket`` tokens says how many it holds."""
    rows: dict[str, list[float]] = {}
    n_buckets = math.ceil((length - 1) / bucket) if length > 1 else 0
    positions = np.arange(1, length)
    for m in methods:
        per = [x for x in (nll(m, length, p) for p in range(passages)) if x is not None]
        if not per:
            continue
        rows[m] = [math.exp(float(np.mean([x[(positions // bucket) == b].mean() for x in per])))
                   for b in range(n_buckets)]
    head = [f"{b * bucket // 1024}k" if bucket % 1024 == 0 else str(b * bucket) for b in range(n_buckets)]
    last = length - (n_buckets - 1) * bucket if n_buckets else 0  # positions (n-1)·bucket … length − 1
    if n_buckets > 1 and last < bucket:
        head[-1] += f" ({last} tokens)"
    return head, rows


def plain_log_axis(axis) -> None:
    """Tick labels of a log axis written as plain numbers (36, not 3.6 × 10¹)."""
    from matplotlib.ticker import FuncFormatter, LogLocator

    plain = FuncFormatter(lambda v, _: f"{v:.4g}")
    axis.set_major_formatter(plain)
    axis.set_minor_locator(LogLocator(subs=(2.0, 3.0, 5.0)))
    axis.set_minor_formatter(plain)


def _curves(rows: dict, head: list[str], length: int, context: int, bucket: int, title: str = ""):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 3.6))
    markers = "osD^vP*X"
    for i, (m, ys) in enumerate(rows.items()):
        ax.plot([(b + 0.5) * bucket for b in range(len(ys))], ys, marker=markers[i % len(markers)], label=m,
                color=f"C{i}")
    ax.axvline(context, color="#999", linestyle="--", linewidth=1)
    ax.set_yscale("log")
    plain_log_axis(ax.yaxis)
    ax.set_xlabel(f"position (bucket of {bucket} tokens); dashed: the model's context {context}")
    ax.set_ylabel("perplexity")
    ax.set_title(title or f"perplexity by position, the first {length} tokens")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    fig.tight_layout()
    return fig


def _heatmaps(correct, methods: list[str], lengths: list[int], depths: list[float]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(methods), figsize=(2.2 * len(methods) + 1, 2.6), squeeze=False)
    for ax, m in zip(axes[0], methods):
        grid = np.full((len(lengths), len(depths)), np.nan)
        for i, n in enumerate(lengths):
            got = correct(m, n)
            for j, d in enumerate(depths):
                hits = [v for (dd, _), v in got.items() if dd == d]
                if hits:
                    grid[i, j] = np.mean(hits)
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(depths)), [f"{d:g}" for d in depths])
        ax.set_yticks(range(len(lengths)), [str(n) for n in lengths])
        ax.set_title(m)
        ax.set_xlabel("depth")
        for i in range(len(lengths)):
            for j in range(len(depths)):
                ax.text(j, i, "—" if np.isnan(grid[i, j]) else f"{grid[i, j]:.0%}", ha="center", va="center",
                        color="w" if not np.isnan(grid[i, j]) and grid[i, j] < 0.5 else "k", fontsize=8)
    axes[0][0].set_ylabel("length")
    fig.tight_layout()
    return fig


def verdict_rows(verdicts) -> list[list[str]]:
    rows = []
    for v in verdicts:
        t = v.test
        effect = "—" if t is None else f"{t.effect:+.4f} [{t.interval()[0]:+.4f}, {t.interval()[1]:+.4f}]"
        mde = "—" if v.mde is None else f"{v.mde:.4f}"
        rows.append([e(v.source), e(v.claim), e(v.measured), status(v.status), effect + (f" {e(v.unit)}" if t else ""),
                     mde, "—" if v.p_holm is None else f"{v.p_holm:.3g}", str(v.seeds) if v.seeds else "—"])
    return rows


def write_page(out: Path, settings: dict[str, Any], records: list[dict[str, Any]], *, others: int = 0) -> Path:
    """Writes ``out/index.html`` (and ``out/summary.json``: the tables and what the run can and cannot decide)
    from the records; returns its path. ``others``: records of other set-ups in the folder (not shown)."""
    from posenc.extend import scope

    grid = settings["grid"]
    lengths, context, bucket = grid["lengths"], grid["context"], grid["bucket"]
    methods = shown_methods(settings, records)
    earlier = [m for m in methods if m not in grid["methods"]]
    passages = len(settings["passages"])
    nll, correct = measured_by(records, lengths)
    verdicts = claims(nll, correct, context=context, lengths=lengths, passages=passages, methods=methods,
                      trials=grid.get("trials", 1))
    name = settings.get("name") or Path(settings["model"]).name
    page, drawn = Page(), []  # drawn: the figures, closed once the page has them
    page.add(f"<h1>posenc extend: {e(name)} to {grid['to']} tokens</h1>")
    seconds = sum(r.get("seconds", 0.0) for r in records)
    peak = max((r.get("vm_hwm") or 0 for r in records), default=0)
    where = ", ".join(p["document"] + "@" + str(p["start"]) for p in settings["passages"])
    have = [m for m in methods if any(r["method"] == m for r in records)]
    yet = [m for m in methods if m not in have]
    page.add(f"<p>{plural(len(records), 'measurement')} ({', '.join(have) or 'none yet'}"
             f"{'; not measured yet: ' + ', '.join(yet) if yet else ''}), "
             f"{seconds / 60:.1f} min of forwards, peak memory (VmHWM) {peak / 2**30:.2f} GiB; context L₀ = {context}, "
             f"factor {grid['factor']:g} for every method; {plural(passages, 'passage')} of {grid['to']} tokens "
             f"({e(where)}).</p>")
    if earlier:
        page.add(f"<p class=muted>Also shown: {e(', '.join(earlier))}, measured in this folder by an earlier run "
                 "of the same set-up (model, text, --to, bucket).</p>")
    if others:
        page.add(f"<p class=muted>Not shown: {plural(others, 'record')} of other set-ups (another --to, text or "
                 "bucket) in results.jsonl.</p>")
    for m, why in (settings.get("unavailable") or {}).items():
        page.add(f"<p class=muted>{e(m)}: not run ({e(str(why))}).</p>")
    if not any(r["kind"] == "passkey" for r in records):
        page.add("<p class=muted>Passkey: " + ("not asked for (--trials 0)." if grid.get("trials", 1) == 0 else
                                                "nothing measured yet.") + "</p>")
    decides = scope.lines(verdicts, settings, records)
    page.add("<h2 id=scope>What this run can and cannot decide</h2><ul>" +
             "".join(f"<li>{_scope_html(line)}</li>" for line in decides) + "</ul>")
    page.add("<h2 id=verdicts>Verdicts</h2>")
    page.add("<p>Each perplexity claim's effect per passage (the unit: a pretrained model has no seeds), the "
             "report's test (posenc.stats.procedure) on the spread between its own passages, Holm per paper; "
             "passkey claims by McNemar's exact test on the paired prompts. The effect with its 95% interval, the "
             "detectable effect (80% power), the adjusted p, the passages (or prompts) behind it.</p>")
    page.add(table(["source", "claim", "measured", "verdict", "effect", "detectable", "p (Holm)", "units"],
                   verdict_rows(verdicts), text=True))
    summary: dict[str, Any] = {"verdicts": [[v.source, v.claim, v.status] for v in verdicts], "ppl": {}, "passkey": {},
                               "scope": decides}
    forwards = {m: (lengths if m in LENGTH_DEPENDENT else [lengths[-1]]) for m in methods}
    for n in lengths:
        head, rows = bucket_table(nll, methods, n, passages, bucket)
        if not rows:
            continue
        summary["ppl"][str(n)] = rows
        cut = [m for m in rows if n not in forwards[m]]
        own = [m for m in rows if n in forwards[m]]
        source = "; ".join(([f"{', '.join(own)}: their own {n}-token forwards"] if own else []) +
                           ([f"{', '.join(cut)}: the first {n} tokens of their {lengths[-1]}-token forwards "
                             "(a static method's angles do not depend on the length)"] if cut else []))
        page.add(f"<h2 id=ppl-{n}>Perplexity per {bucket} tokens, the first {n} tokens</h2>")
        page.add(f"<p>Mean over {plural(passages, 'passage')}; columns: the first position of each bucket. {e(source)}."
                 "</p>")
        page.add(table(["method"] + head + ["all"], [[m] + [f"{x:.2f}" for x in ys] +
                       [f"{math.exp(np.mean(np.log(ys))):.2f}"] for m, ys in rows.items()]))
        title = f"{name}: perplexity by position, the first {n} tokens"
        page.figure(f"ppl_{n}", lambda rows=rows, head=head, n=n, title=title: drawn.append(
            _curves(rows, head, n, context, bucket, title)) or drawn[-1],
                    f"Perplexity by position in the first {n} tokens, mean over the passages.")
    pk_lengths = sorted({r["length"] for r in records if r["kind"] == "passkey"})
    if pk_lengths:
        page.add("<h2 id=passkey>Passkey retrieval</h2>")
        acc = {m: [np.mean(list(correct(m, n).values())) if correct(m, n) else math.nan for n in pk_lengths]
               for m in methods}
        summary["passkey"] = {m: dict(zip(map(str, pk_lengths), v)) for m, v in acc.items()}
        prompts = len(grid["depths"]) * grid.get("trials", 1)
        page.add(f"<p>Accuracy over {plural(prompts, 'prompt')} per length (depths "
                 f"{', '.join(f'{d:g}' for d in grid['depths'])}); columns: the prompt's length in tokens.</p>")
        page.add(table(["method"] + [str(n) for n in pk_lengths],
                       [[m] + ["—" if math.isnan(a) else f"{a:.0%}" for a in v] for m, v in acc.items()]))
        page.figure("passkey", lambda: drawn.append(_heatmaps(correct, methods, pk_lengths, grid["depths"])) or drawn[-1],
                    "Passkey accuracy by length and depth, per method (exact match of a greedy answer).")
    page.add("<h2 id=methods>Methods and their parameters</h2>")
    params = {r["method"]: r["params"] for r in records}
    page.add(table(["method", "posenc spec"], [[m, f"<code>{e(json.dumps(params[m]['scaling']))}</code>"
                                                if m in params else "not measured yet"] for m in methods], text=True))
    timed = sorted((r for r in records if "seconds" in r),
                   key=lambda r: (r["kind"], r["length"], r["method"], r.get("passage", 0), r.get("depth", 0),
                                  r.get("trial", 0)))
    page.add("<h2 id=time>Time per forward</h2><p>Each measurement's forward: the seconds it took and torch's "
             "threads.</p>")
    page.add(table(["method", "measurement", "tokens", "seconds", "threads"],
                   [[e(r["method"]), e(_what(r)), str(r["length"]), f"{r['seconds']:.1f}", str(r.get("threads"))]
                    for r in timed], text=True))
    if drawn:
        import matplotlib.pyplot as plt

        for fig in drawn:
            plt.close(fig)
    path = out / "index.html"
    path.write_text(page.html(f"posenc extend: {name} to {grid['to']}"), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float), encoding="utf-8")
    return path


def _what(record: dict[str, Any]) -> str:
    if record["kind"] == "ppl":
        return f"perplexity, passage {record['passage']}"
    return f"passkey, depth {record['depth']:g}, trial {record['trial']}"


def _scope_html(line: str) -> str:
    """A line of ``scope.lines`` with its command in ``<code>``."""
    import re

    found = re.search(r": (\S*posenc extend .*?)  \[(.*)\]$", line)
    if not found:
        return e(line)
    return f"{e(line[:found.start()])}: <code>{e(found.group(1))}</code> ({e(found.group(2))})"


def render(out: str | Path) -> Path:
    """Redraws ``out/index.html`` from the records there (a run in progress, or stopped)."""
    from posenc.stats.results import load

    out = Path(out)
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    everything = load(out / "results.jsonl").values()
    records = [r for r in everything if r.get("setup") == settings["setup"]]
    return write_page(out, settings, records, others=len(everything) - len(records))
