"""``posenc report``: the benchmark and the analysis as one self-contained, offline HTML page.

Runs (or reuses, from ``OUT/results.jsonl``) the extrapolation benchmark of a profile, then writes
``OUT/index.html`` with every figure embedded as a base64 PNG (also saved under ``OUT/figures/``).
A Content-Security-Policy forbids the page any network fetch. Sections: what was measured and
the verdict on each claim of the papers; the seed claims demonstrated with ``posenc.plot`` and
``posenc.demo``; perplexity and accuracy by length with tables; RoPE scalings; hardware,
versions, timings and settings. Each part's section, its claims and its lines of the summary are
that part's (``posenc.extrapolate.parts``); this page knows them only through ``Part.section``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posenc import environment
from posenc.extrapolate import yours
from posenc.stats import findings
from posenc.extrapolate.demos import demonstrations
from posenc.extrapolate.glance import forest_svg, recorded_mark, verdict_table
from posenc.extrapolate import kept_extend
from posenc.extrapolate.kept import RECORDS_DIR, fill, load_sets
from posenc.stats.page_parts import Page, e, number_sections, status
from posenc.stats.page_parts import table as html_table
from posenc.extrapolate.parts import PARTS, owner
from posenc.extrapolate.profiles import Profile


def _p(v: findings.Verdict) -> str:
    if v.p is None:
        return "<span class=muted>no test</span>"
    return f"{v.p:.2g} → {v.p_holm:.2g}" if v.p_holm is not None else f"{v.p:.2g}"


def _verdict_cell(v: findings.Verdict) -> str:
    return status(v.status) + recorded_mark(v)


def _verdicts(verdicts: list[findings.Verdict], settings: dict[str, str]) -> str:
    """The summary's detailed verdict table; ``settings``: the papers' settings by source (the parts')."""
    rows = [[e(v.source), e(v.claim), e(v.measured), _p(v), _verdict_cell(v)] for v in verdicts]
    sources = [src for src in settings if any(v.source == src for v in verdicts)]
    where = "".join(f"<li>{e(src)}: {e(settings[src])}</li>" for src in sources)
    family = (f"<p class=muted>p: the seed-level test's p (both tails) → Holm-adjusted within its paper (the claims "
              f"of one source are one family); a verdict needs an adjusted p below {findings.ALPHA}. A claim on fewer "
              f"than {findings.MIN_SEEDS} seeds is not decided (needs seeds): its windows or examples leave the spread "
              "between training runs out of its error. The parts' own tables below decide each claim alone (its own seeds, "
              "a family of one); these verdicts, pooled within the part and corrected per paper, are the page's.</p>")
    return ((f"<ul class=muted>{where}</ul>" if where else "") + family
            + html_table(["source", "the paper found", "measured here", "p", "verdict"], rows, text=True))


def _honesty(verdicts: list[findings.Verdict]) -> str:
    bad = [v for v in verdicts if v.status == "disagrees"]
    unclear = [v for v in verdicts if v.status == "no clear difference"]
    needs = [v for v in verdicts if v.status == findings.NEEDS_SEEDS]
    parts = []
    if bad:
        parts.append("<p><b>Where this run disagrees with the papers:</b></p><ul>"
                     + "".join(f"<li>{e(v.claim)} ({e(v.source)}): measured {e(v.measured)}</li>" for v in bad)
                     + "</ul>")
    else:
        parts.append("<p>No measured difference contradicts the papers (Holm-adjusted p below 0.05).</p>")
    if unclear:
        parts.append(f"<p>{len(unclear)} claim(s) show no clear difference at this scale (Holm-adjusted p of 0.05 "
                     "or more; the detectable effect above says how small a difference was ruled out): the run "
                     "neither confirms nor refutes them — " + "; ".join(e(v.claim) for v in unclear) + ".</p>")
    if needs:
        parts.append(f"<p>{len(needs)} claim(s) are measured on fewer than {findings.MIN_SEEDS} seeds and not decided "
                     f"(needs seeds); <code>{e(findings.FULL_COMMAND)}</code> measures every claim on three — "
                     + "; ".join(e(v.claim) for v in needs) + ".</p>")
    return "".join(parts)


def _glance(verdicts: list[findings.Verdict]) -> str:
    """The verdicts at a glance: the table (``#verdicts``) and the forest plot (``#forest``)."""
    verdicts_now = [v for v in verdicts if v.recorded is None]  # the forest: this run's tests alone
    tested = [v for v in verdicts_now if v.test is not None]
    caption = (f"<p class=muted>Forest plot of the {len(tested)} claims with a test: each claim's effect in its "
               "standard errors toward the paper's side (0: no difference, or the margin of a non-inferiority "
               "claim), its 95% interval, and shaded the band its paper's Holm correction leaves undecided "
               "(its first step). Green: agrees; red: disagrees; amber: no clear difference.</p>")
    return ('<h3 id="at-a-glance">The verdicts at a glance</h3>' + verdict_table(verdicts)
            + f"<figure>{forest_svg(verdicts_now)}<figcaption>{caption}</figcaption></figure>")


def _method(profile: Profile) -> str:
    """The method in plain words (what the verdicts above rest on)."""
    seeds = len(profile.seeds)
    seed_text = (f"{seeds} seed{'s' * (seeds > 1)} (training runs with different initial weights and batches), "
                 "paired by their number")
    rows = {"lm_rows": ("lm", "the content rows of <code>lm</code>"),  # rows within a part: named as such
            "content_tasks": ("tasks", "the content tasks' models of <code>tasks</code>")}
    more = [(rows[part][1] if part in rows else f"<code>{e(part)}</code>", len(s)) for part, s in profile.part_seeds
            if part in (*profile.parts, "hybrid") or (part in rows and rows[part][0] in profile.parts)]
    if more:  # some parts train other seeds than the profile's
        seed_text = (", ".join(f"{n} seed{'s' * (n > 1)} for {part}" for part, n in more)
                     + f", {seeds} seed{'s' * (seeds > 1)} for the other parts (training runs with different initial "
                     "weights and batches), paired by their number")
    seed_text += (f". A verdict needs {findings.MIN_SEEDS} seeds: its error is the spread of the seeds' values, "
                  "which holds the held-out data's noise and the spread between training runs. A claim on fewer "
                  "seeds is not decided (<i>needs seeds</i>), however small its windows' or examples' error: that "
                  "error leaves the training runs out, and deciding on it made the page most confident where it "
                  f"knew least. <code>{e(findings.FULL_COMMAND)}</code> measures every claim on three seeds")
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
        "<b>The test behind a verdict.</b> Each claim is an effect measured on every seed (ΔNLL on the same "
        "bytes, Δaccuracy on the same examples) with its held-out error on that seed (Newey–West over "
        "neighbouring windows, or over examples). <i>Seeds pooled within a part:</i> three seeds give a claim's "
        "own spread two degrees of freedom, so Student's t would need 4.3 standard errors for p &lt; 0.05 and 9.9 "
        "for 0.01 — no paper with several claims could have one decided. The claims of one part come from the "
        "same seeds of similar models, so the procedure takes the training runs to spread each claim in "
        "proportion to its held-out noise (one dispersion factor per part, as in quasi-likelihood), estimated "
        "from all the part's claims: the test then has the part's degrees of freedom (14 for seven claims on "
        "three seeds), exactly under that model. A claim whose seeds spread out of line with the rest of its "
        "part (an F test at 10%) is tested on its own seeds instead, so pooling cannot understate its error. "
        "<i>Both tails:</i> each tail is tested at α/2 — agrees from the paper's side, disagrees from the "
        "other; a one-sided test that also reported the other tail would decide 2α of claims that have no "
        "effect. <i>One family per paper:</i> Holm's correction at 0.05 over the claims of one source — a "
        "reader judges a paper by its claims, and the claims of different papers do not answer one question "
        "(the whole page as one family needed about 26 standard errors at three seeds). <i>Detectable effect:</i> "
        "for each claim the smallest difference its test detects with 80% power after its paper's correction "
        "(noncentral t), in its own units, so \"no clear difference\" says how large a difference is ruled out. "
        "Checked on simulated results by <code>make test</code> (tests/test_verdicts.py): with no effect at most "
        "5% of papers get a verdict, at the stated detectable effect 80% or more of claims are decided, and the "
        "rate stays within its binomial bound when the claims' seeds spread up to 2× differently (7.7% at 10×: "
        "more seeds are the cure there). \"Does not degrade\" is a non-inferiority test: "
        "the increase must be significantly below a margin of 2% perplexity.",
    ]
    return ('<h2 id="method">Method, in plain words</h2><ul>' + "".join(f"<li>{x}</li>" for x in items) + "</ul>")


def _environment_section(page: Page, profile: Profile, records: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    # this machine and its versions (a page of kept records: the machine its provenance names); how the runs
    # were spread: their env
    here = {**environment.capture(), **meta.get("machine", {})}
    env = records[-1]["env"] if records else {}
    page.add("<h2>Hardware, versions, timing and settings</h2>")
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
    page.add(f'<details id="settings"><summary>Settings: profile <code>{e(profile.name)}</code></summary>'
             f"<p>{e(profile.description)}</p><pre>{e(json.dumps(profile.to_dict(), indent=1, default=str))}</pre>"
             "</details>")
    specs = {r["label"]: r["spec"] for r in records if owner(r["part"]).lists_specs}
    page.add("<details><summary>scheme specs</summary><pre>" + e(json.dumps(specs, indent=1)) + "</pre></details>")


def _in_effect(profile: Profile, records: list[dict[str, Any]], command: str) -> str:
    """Every flag the command line leaves at its default, with the value it took here."""
    env = records[-1].get("env", {}) if records else {}
    corpus = next((r["corpus"] for r in records if r.get("corpus")), None)
    seeds = dict(profile.part_seeds)
    values = [("--scheme", " ".join(f"--scheme {shlex.quote(str(x))}" for x in profile.schemes)),
              ("--part", " ".join(f"--part {x}" for x in profile.parts)),
              ("--seeds", "--seeds " + ",".join(map(str, profile.seeds))
               + "".join(f" ({part}: {','.join(map(str, s))})" for part, s in seeds.items())),
              ("--arch", f"--arch {profile.arch}"),
              ("--corpus", "--corpus " + (shlex.quote(str(corpus["source"])) if corpus and not
                                          str(corpus.get("source", "")).startswith("stdlib:") else
                                          "(none given: the Python standard library's files)")),
              ("--jobs", f"--jobs {env.get('jobs', 'auto')}"), ("--threads", f"--threads {env.get('threads', 'auto')}"),
              ("--device", f"--device {env.get('device', 'cpu')}")]
    rest = [text for flag, text in values if f"{flag} " not in command + " "]
    return f' <span id="in-effect">(in effect: {e("; ".join(rest))})</span>' if rest else ""


def render(profile: Profile, records: list[dict[str, Any]], meta: dict[str, Any], *, draw: bool = True) -> Page:
    """The whole page for ``records`` (the plan's results, in plan order): the summary, the
    demonstrations, each part's section (``posenc.extrapolate.parts.PARTS``, in order), the method.
    ``draw=False``: no figure (the verdicts and tables alone). ``meta["banner"]``: HTML above the title (a
    page of kept records says so); ``meta["machine"]``: the machine the hardware table names (default: this one)."""
    page = Page(draw=draw)
    page.add(meta.get("banner", ""))
    command = meta.get("command") or f"posenc report --profile {profile.name}"
    if profile.name == "smoke":
        page.add('<p id="smoke-banner" class="note"><b>Smoke profile: its numbers mean nothing.</b> Its models train '
                 "for a few steps to check that the page renders; no verdict here says anything about the papers. "
                 "<code>posenc report</code> (the quick profile) or <code>--profile full</code> measures them.</p>")
    page.add(f"<h1>posenc report — train short, test long (profile <code>{e(profile.name)}</code>)</h1>"
             f"<p class=muted>Generated {e(meta['generated'])} by <code id=\"command\">{e(command)}</code>"
             f"{_in_effect(profile, records, command)}. Offline: "
             "every figure is embedded; the page fetches nothing. "
             '<a id="explorer-link" href="explorer/index.html">Interactive explorer</a> (<code>posenc explore</code>, '
             "written next to this page).</p>")
    body = Page(draw=draw)
    demonstrations(body)
    extend_sets = meta.get("kept_extend")  # the kept posenc extend runs (the pretrained section shows them)
    sections = [part.section(body, part.records(records), profile,
                             **({"kept": extend_sets} if part.shows_kept_extend else {})) for part in PARTS]
    yours.section(body, records)  # #plugins: the --plugin schemes against every baseline
    # each part's claims share a seed spread (a part's own pools: its verdicts' ``pool``)
    pooled = [dataclasses.replace(v, pool=v.pool or part.name or "lm") for part, s in zip(PARTS, sections)
              for v in s.verdicts]
    verdicts = findings.adjust(pooled)
    kept_sets = meta.get("kept_sets")
    if kept_sets is not None:  # the claims not measured now: the kept verdicts, marked (posenc.extrapolate.kept)
        verdicts = fill(verdicts, kept_sets[0], include_smoke=profile.name == "smoke")
    settings = {src: text for s in sections for src, text in s.sources.items()}
    meta["render_seconds"] = time.perf_counter() - meta["render_start"]
    meta["wall_seconds"] = time.perf_counter() - meta["start"]
    _environment_section(body, profile, records, meta)
    arch_note = ("" if profile.arch == "transformer" else
                 f'<p class="note">Every run here is a <b>{e(profile.arch)}</b> (--arch {e(profile.arch)}): the '
                 "papers' claims about transformers name plain scheme labels, so they show as not measured; the "
                 "scaling claims and Jamba's are measured on these runs.</p>")
    summary = Page()
    summary.add("<h2 id=\"summary\">Summary: the papers' claims against this run</h2>" + arch_note
                + _kept_note(meta.get("kept", [])) + _recorded_note(verdicts, meta.get("kept_sets"),
                                                                    meta.get("kept_extend"))
                + _glance(verdicts)
                + "".join(s.summary for s in sections) + '<h3 id="verdict-details">Every verdict, with what was '
                "measured</h3>" + _verdicts(verdicts, settings) + _honesty(verdicts) + _method(profile))
    numbered, toc = number_sections(summary.parts + body.parts)
    page.add(toc)
    page.parts += numbered
    page.figures.update(body.figures)
    page.errors += body.errors
    return page


def kept_records(path: Path, profile: Profile, planned: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records of ``path`` for ``profile``'s parts whose scheme this process cannot build (a
    ``--plugin``'s scheme, the plugin not given this time): ``--no-run`` keeps them on the page
    rather than dropping them. Of one configuration and seed, the last written (an edited plugin's)."""
    from posenc import plugins
    from posenc.stats.results import load

    have = {r["key"] for r in planned}
    out: dict[tuple, dict[str, Any]] = {}
    for record in load(path).values():
        if (record.get("profile") == profile.name and record.get("part") in (*profile.parts, "hybrid")
                and record["key"] not in have and not plugins.buildable(record.get("spec"))):
            out[(record["part"], record.get("label"), record.get("arch"), record.get("seed"),
                 json.dumps(record.get("variant"), sort_keys=True), record.get("settings"))] = record
    return list(out.values())


def _seconds(x: float | None) -> str:
    return "? s" if x is None else f"{x:.0f} s"


def _recorded_note(verdicts: list[findings.Verdict], kept_sets, kept_extend_sets=None) -> str:
    """``#recorded``: how many claims the page shows from kept records, which are stale, which sets were refused
    (the benchmark's kept sets and the kept ``posenc extend`` runs)."""
    if kept_sets is None:
        return ""
    sets, refused = kept_sets
    if kept_extend_sets is not None:
        sets, refused = [*sets, *kept_extend_sets[0]], [*refused, *kept_extend_sets[1]]
    shown = [v for v in verdicts if v.recorded is not None]
    stale = [v for v in shown if v.recorded.stale]
    missing = sum(v.status == "not measured" for v in verdicts)
    items = "".join(f"<li>{e(k.name)}: {len(k.records)} records, commit {e(str(k.provenance['commit'])[:12])}, "
                    f"{e(k.provenance['date'])}, {e(k.recorded().machine)}, {_seconds(k.provenance['wall_seconds'])} wall, "
                    f"{_seconds(k.provenance['cpu_seconds'])} CPU; <code>{e(k.provenance['command'])}</code>"
                    + (f' — <span class="stale">stale</span>: {len(k.stale)} record(s) whose set-up hash today\'s '
                       "plan of that command lacks" if k.stale else "") + "</li>" for k in sets)
    refusals = "".join(f'<li class="refused">{e(r)}</li>' for r in refused)
    return (f'<p class="note" id="recorded">{len(shown)} claim(s) not measured by this run are shown from kept '
            f"records, marked <i>recorded</i> with their commit, date, machine and the command that measures them "
            f"again ({len(stale)} <i>stale</i>: their set-up differs from today's code); {missing} claim(s) remain not "
            "measured. Kept records are results exactly as a run wrote them (posenc/extrapolate/records, "
            "docs/guide/benchmark.md#kept-records).</p>"
            + (f"<ul class=muted>{items}</ul>" if items else "")
            + (f"<p class=note>Refused kept records:</p><ul>{refusals}</ul>" if refusals else ""))


def _kept_names(kept: list[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r.get("label", "?") for r in kept))


def _kept_note(kept: list[dict[str, Any]]) -> str:
    if not kept:
        return ""
    return (f'<p class="note" id="kept">Kept from results.jsonl: {len(kept)} result(s) of schemes this command cannot '
            f"build ({e(', '.join(_kept_names(kept)))}: their --plugin was not given), shown as they were recorded; "
            "give the same <code>--plugin</code> to check them against their plugin's current source.</p>")


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def make_report(profile: Profile, *, out: str | os.PathLike = "report", run_benchmark: bool = True,
                log: Callable[[str], None] | None = None, command: str | None = None,
                records_dir: str | os.PathLike | None = RECORDS_DIR, **run_kw: Any) -> Path | None:
    """Runs (or reuses) the benchmark into ``out/results.jsonl`` and writes ``out/index.html``.

    ``command``: the command line shown in the page's header (the CLI's, every flag); returns
    the page's path (None on ranks other than 0 under torchrun). ``records_dir``: the kept records
    that show the claims this run does not measure (``posenc.extrapolate.kept``; None: none).
    """
    from posenc.extrapolate.driver import iter_runs
    from posenc.stats.results import load

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
    kept = [] if run_benchmark else kept_records(results, profile, records)
    if kept:
        records += kept
        print(f"posenc report: kept {len(kept)} result(s) of schemes this command cannot build "
              f"({', '.join(_kept_names(kept))}: give their --plugin to build them)", file=sys.stderr)
    if not records:
        raise ValueError(f"no results for profile {profile.name!r} in {str(results)!r}; run without --no-run")
    render_start = time.perf_counter()
    meta = {"start": start, "render_start": render_start, "bench_seconds": render_start - start,
            "new": sum(r["key"] not in before for r in records), "reused": sum(r["key"] in before for r in records),
            "generated": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "command": command, "kept": kept,
            "kept_sets": load_sets(records_dir) if records_dir is not None else None,
            "kept_extend": kept_extend.load_sets(records_dir) if records_dir is not None else None}
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
