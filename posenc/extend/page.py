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

from posenc.extend.verdicts import claims, measured_by, runnable
from posenc.extrapolate.page import Page, status, table

e = html.escape


def bucket_table(nll, methods: list[str], length: int, passages: int, bucket: int) -> tuple[list[str], dict]:
    """``(head, {method: [ppl per bucket]})``: exp of the mean over passages of each bucket's mean NLL."""
    rows: dict[str, list[float]] = {}
    n_buckets = math.ceil((length - 1) / bucket) if length > 1 else 0
    for m in methods:
        per = [x for x in (nll(m, length, p) for p in range(passages)) if x is not None]
        if not per:
            continue
        positions = np.arange(1, length)
        rows[m] = [math.exp(float(np.mean([x[(positions // bucket) == b].mean() for x in per])))
                   for b in range(n_buckets)]
    head = [f"{b * bucket // 1024}k" if bucket % 1024 == 0 else str(b * bucket) for b in range(n_buckets)]
    return head, rows


def _curves(rows: dict, head: list[str], length: int, context: int, bucket: int):
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
    ax.set_xlabel(f"position (bucket of {bucket} tokens); dashed: the model's context {context}")
    ax.set_ylabel("perplexity")
    ax.set_title(f"perplexity by position, {length}-token forwards")
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
                     mde, "—" if v.p_holm is None else f"{v.p_holm:.3g}", str(v.seeds)])
    return rows


def write_page(out: Path, settings: dict[str, Any], records: list[dict[str, Any]]) -> Path:
    """Writes ``out/index.html`` (and ``out/summary.json``: the tables) from the records; returns its path."""
    grid = settings["grid"]
    lengths, context, bucket = grid["lengths"], grid["context"], grid["bucket"]
    methods = runnable(settings)
    passages = len(settings["passages"])
    nll, correct = measured_by(records, lengths)
    verdicts = claims(nll, correct, context=context, lengths=lengths, passages=passages, methods=methods)
    page = Page()
    page.add(f"<h1>posenc extend: {e(Path(settings['model']).name)} to {grid['to']} tokens</h1>")
    seconds = sum(r.get("seconds", 0.0) for r in records)
    peak = max((r.get("vm_hwm") or 0 for r in records), default=0)
    page.add(f"<p>{len(records)} measurements, {seconds / 3600:.2f} h of forwards, peak memory (VmHWM) "
             f"{peak / 2**30:.2f} GiB; context L₀ = {context}, factor {grid['factor']:g} for every method; "
             f"{passages} passages ({e(', '.join(p['document'] + '@' + str(p['start']) for p in settings['passages']))}).</p>")
    page.add("<h2 id=verdicts>Verdicts</h2>")
    page.add("<p>Each perplexity claim's effect per passage (the unit: a pretrained model has no seeds), the "
             "report's test (posenc.extrapolate.verdicts) on the spread between its own passages, Holm per paper; "
             "passkey claims by McNemar's exact test on the paired prompts. The effect with its 95% interval, the "
             "detectable effect (80% power), the adjusted p, the passages (or prompts) behind it.</p>")
    page.add(table(["source", "claim", "measured", "verdict", "effect", "detectable", "p (Holm)", "units"],
                   verdict_rows(verdicts), text=True))
    summary: dict[str, Any] = {"verdicts": [[v.source, v.claim, v.status] for v in verdicts], "ppl": {}, "passkey": {}}
    for n in lengths:
        head, rows = bucket_table(nll, methods, n, passages, bucket)
        if not rows:
            continue
        summary["ppl"][str(n)] = rows
        page.add(f"<h2 id=ppl-{n}>Perplexity per {bucket} tokens, {n}-token forwards</h2>")
        page.add(table(["method"] + head + ["all"], [[m] + [f"{x:.2f}" for x in ys] +
                       [f"{math.exp(np.mean(np.log(ys))):.2f}"] for m, ys in rows.items()]))
        page.figure(f"ppl_{n}", lambda rows=rows, head=head, n=n: _curves(rows, head, n, context, bucket),
                    f"Perplexity by position at {n} tokens, mean over the passages.")
    pk_lengths = sorted({r["length"] for r in records if r["kind"] == "passkey"})
    if pk_lengths:
        page.add("<h2 id=passkey>Passkey retrieval</h2>")
        acc = {m: [np.mean(list(correct(m, n).values())) if correct(m, n) else math.nan for n in pk_lengths]
               for m in methods}
        summary["passkey"] = {m: dict(zip(map(str, pk_lengths), v)) for m, v in acc.items()}
        page.add(table(["method"] + [str(n) for n in pk_lengths],
                       [[m] + ["—" if math.isnan(a) else f"{a:.0%}" for a in v] for m, v in acc.items()]))
        page.figure("passkey", lambda: _heatmaps(correct, methods, pk_lengths, grid["depths"]),
                    "Passkey accuracy by length and depth, per method (exact match of a greedy answer).")
    page.add("<h2 id=methods>Methods and their parameters</h2>")
    params = {r["method"]: r["params"] for r in records}
    page.add(table(["method", "posenc spec"], [[m, f"<code>{e(json.dumps(params[m]['scaling']))}</code>"
                                                if m in params else "not measured yet"] for m in methods], text=True))
    for m, why in (settings.get("unavailable") or {}).items():
        page.add(f"<p class=muted>{e(m)}: not run ({e(str(why))}).</p>")
    times = sorted({(r["length"], r["seconds"], r.get("threads")) for r in records if r["kind"] == "ppl"})
    page.add("<h2 id=time>Time per forward</h2>" + table(["length", "seconds", "threads"],
                                                         [[str(n), f"{s:.0f}", str(t)] for n, s, t in times]))
    path = out / "index.html"
    path.write_text(page.html(f"posenc extend to {grid['to']}"), encoding="utf-8")
    (out / "summary.json").write_text(json.dumps(summary, indent=1, default=float), encoding="utf-8")
    return path


def render(out: str | Path) -> Path:
    """Redraws ``out/index.html`` from the records there (a run in progress, or stopped)."""
    from posenc.extrapolate.results import load

    out = Path(out)
    settings = json.loads((out / "settings.json").read_text(encoding="utf-8"))
    records = [r for r in load(out / "results.jsonl").values() if r.get("setup") == settings["setup"]]
    return write_page(out, settings, records)
