"""The time part (``--part time``): positions in time across frame rates.

Synthetic audio-like frames (noise vectors) carry two marked events at random times; the label
says which came first and whether they were more than ``gap_seconds`` apart. A model is trained at
one frame rate and duration and evaluated at other rates and longer durations, with positions given
as **frame indices** or as **time** (seconds × the training frame rate: the same numbers at the
training rate, so one trained model is evaluated both ways). Time positions should carry over
across frame rates where indices cannot: at twice the frame rate a one-second gap is twice as many
frames. The model and its training: ``posenc.extrapolate.vision``; the paired statistics:
``posenc.extrapolate.accuracy``.
"""

from __future__ import annotations

from typing import Any

import torch

import posenc
from posenc import registry
from posenc.extrapolate.accuracy import AccuracyTable, accuracy_cell, finish_axes, paired_claim
from posenc.extrapolate.findings import Verdict
from posenc.extrapolate.page import Page, e, status
from posenc.extrapolate.page import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run
from posenc.extrapolate.profiles import Profile, TimeSettings, settings_hash
from posenc.extrapolate.runs import Context
from posenc.extrapolate.vision import SetTransformer, accuracy_row, fit_seeds, pattern_cannot, right_or_wrong
from posenc.spec import fill_sizes

CONTINUOUS = "positions as continuous time"


CHANCE_TIME = 0.25  # four labels: order × (gap over the threshold)


# -- runs --------------------------------------------------------------------------------------

def time_batch(n: int, *, rate: float, seconds: float, s: TimeSettings, g: torch.Generator
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(frames [n, T, F], labels [n], frame_times [T])`` for clips of ``seconds`` at ``rate``.

    Two events A and B, ``Δ = |t_A − t_B|`` uniform in [0.1, 2·gap] seconds (so about half are
    over the gap), placed at random in the clip; label ``2·[A first] + [Δ > gap]``.
    """
    frames = max(2, int(round(seconds * rate)))
    dim = s.frame_dim
    markers = torch.zeros(2, dim)
    markers[0, 0] = markers[1, 1] = 3.0  # event A, event B: one channel each, well above the noise
    x = 0.5 * torch.randn(n, frames, dim, generator=g)
    gap = 0.1 + (2 * s.gap_seconds - 0.1) * torch.rand(n, generator=g)  # (n,) seconds
    gap = torch.minimum(gap, torch.tensor(seconds - 1.0 / rate))
    start = torch.rand(n, generator=g) * (seconds - gap - 0.5 / rate).clamp(min=0)
    a_first = torch.rand(n, generator=g) < 0.5
    t_a = torch.where(a_first, start, start + gap)
    t_b = torch.where(a_first, start + gap, start)
    i_a = (t_a * rate).round().long().clamp(max=frames - 1)
    i_b = (t_b * rate).round().long().clamp(max=frames - 1)
    rows = torch.arange(n)
    x[rows, i_a] += markers[0]
    x[rows, i_b] += markers[1]
    # the label from the frames as sampled (rounding to frames can move an event by half a frame)
    dt = (i_b - i_a).double() / rate
    labels = 2 * (dt > 0).long() + (dt.abs() > s.gap_seconds).long()
    return x, labels, torch.arange(frames, dtype=torch.float64) / rate


def time_items(settings: TimeSettings, schemes: list[Any] | None) -> list[tuple[str, dict[str, Any], str]]:
    """``(label, spec, "" or "cannot: REASON")`` of the time runs: the profile's schemes or the user's."""
    from posenc.spec import as_spec, label as spec_label

    out = []
    for text in schemes or settings.schemes:
        if (cannot := pattern_cannot(text, "time")) is not None:
            out.append(cannot)
            continue
        given = as_spec(text)
        plain = isinstance(text, str) and text.strip() == given["scheme"]
        label = given["scheme"] if plain else str(text).strip()
        try:
            spec = time_spec(given, settings)
            pe = posenc.build(spec)
        except (ValueError, TypeError) as e:
            out.append((label, dict(given), f"cannot: {str(e).splitlines()[0]}"))
            continue
        if not plain:
            label = spec_label(spec)
        if getattr(pe, "axes", 1) != 1:
            out.append((label, spec, f"cannot: {given['scheme']!r} has {pe.axes} axes; frames have one (time)"))
            continue
        out.append((label, spec, ""))
    return out


def run_time(settings: TimeSettings, spec: dict[str, Any], seeds: list[int], mode: str = "") -> list[dict[str, Any]]:
    """The bodies of one scheme's ``seeds``, trained together."""
    s = settings
    if mode.startswith("cannot: "):
        return [{"cannot_run": mode[len("cannot: "):], "train_rate": s.train_rate, "eval": []} for _ in seeds]
    frames = int(round(s.train_seconds * s.train_rate))
    pos = torch.arange(frames)  # at the training rate, frame indices = seconds × train_rate
    def batches(g: torch.Generator):
        def next_batch(step: int):
            x, y, _ = time_batch(s.train.batch_size, rate=s.train_rate, seconds=s.train_seconds, s=s, g=g)
            return x, pos, y
        return next_batch

    models, curves, seconds = fit_seeds(
        seeds, s.train, lambda: SetTransformer(s.model, spec, in_dim=s.frame_dim, classes=4), batches)
    out = []
    for model, losses in zip(models, curves):
        real = getattr(model.pe, "real_positions", False)  # NoPE's is False
        rows = []
        for rate, duration in s.test:
            ge = torch.Generator().manual_seed(100_000 + int(rate * 1000) + int(duration * 10))  # same for every run
            x, y, times = time_batch(s.eval_examples, rate=rate, seconds=duration, s=s, g=ge)
            for kind in ("index", "time"):
                if kind == "time" and not real:
                    continue  # nope has no positions; table schemes take only integers
                p = torch.arange(x.shape[1]) if kind == "index" else times * s.train_rate  # (T,)
                rows.append(accuracy_row(right_or_wrong(model, x, y, p), rate=rate, seconds=duration,
                                         frames=x.shape[1], positions=kind))
        out.append({"train_loss": [round(v, 5) for v in losses[:: max(1, len(losses) // 100)]],
                    "train_seconds": round(seconds, 2), "params": model.num_params(),
                    "train_rate": s.train_rate, "train_duration": s.train_seconds, "eval": rows})
    return out


def time_spec(name: Any, s: TimeSettings) -> dict[str, Any]:
    spec = fill_sizes(name, dim=s.model.n_embd, num_heads=s.model.n_head, length=int(
        max(r * d for r, d in (*s.test, (s.train_rate, s.train_seconds)))), head_dim=s.model.head_dim)
    return registry.normalize_spec(spec)


# -- claims and section ----------------------------------------------------------------------

def _when(rate: float, seconds: float) -> str:
    return f"{rate:g} fps for {seconds:g} s"


def time_verdicts(t: AccuracyTable, train_rate: float, train_seconds: float) -> tuple[list[Verdict], list[str]]:
    """Per scheme with time positions, per test condition at another frame rate: time − index
    (paired, the same model on the same clips); and the answer in words."""
    out, answers = [], []
    conditions = list(dict.fromkeys((r, s) for r, s, _ in t.columns))
    other = [(r, s) for r, s in conditions if r != train_rate]
    for label in t.labels:
        if not any(t.get(label, (r, s, "time")) for r, s in conditions):
            continue  # no time positions (no position, or a table of integer rows)
        wins = []
        for r, s in other:
            claim = f"{label}: at {_when(r, s)} (trained at {_when(train_rate, train_seconds)}), positions in " \
                    "seconds beat frame indices"
            d = t.diff((label, (r, s, "time")), (label, (r, s, "index")))
            v = paired_claim(CONTINUOUS, claim, d, f"time − index at {_when(r, s)}")
            out.append(v)
            wins.append((r, s, v.status))
        if wins:
            yes = [_when(r, s) for r, s, st in wins if st == "agrees"]
            no = [_when(r, s) for r, s, st in wins if st == "disagrees"]
            flat = [_when(r, s) for r, s, st in wins if st == "no clear difference"]
            text = f"{label}: "
            text += (f"positions in seconds carry over where frame indices do not at {', '.join(yes)}"
                     if yes else "positions in seconds do not beat frame indices beyond 2 SE at any other frame rate")
            if no:
                text += f"; frame indices do better at {', '.join(no)}"
            if flat:
                text += f"; no clear difference at {', '.join(flat)}"
            longer = [(r, s) for r, s in conditions if r == train_rate and s > train_seconds]
            held = [f"{t.get(label, (r, s, 'index')).accuracy:.2f} at {_when(r, s)}" for r, s in longer
                    if t.get(label, (r, s, "index")) is not None]
            trained = t.get(label, (train_rate, train_seconds, "index"))
            if held and trained is not None:  # at the training rate the two are the same positions
                text += (f". Longer clips at the training rate (the same positions either way): accuracy "
                         f"{', '.join(held)}, against {trained.accuracy:.2f} as trained")
            answers.append(text + ".")
    return out, answers


def time_figure(t: AccuracyTable, conditions: list[tuple[float, float]]):
    """Accuracy per test condition: a scheme's colour (``figures.styles``), frame indices solid and
    positions in seconds dashed with the next marker; bands: 95% intervals."""
    from matplotlib.figure import Figure

    from posenc.extrapolate.figures import line, look, styles, variant

    kinds = ("index", "time")
    keys = [(label, kind) for label in t.labels for kind in kinds]
    st = styles(keys, lambda k: None if look(k[0]) is None else variant(look(k[0]), kinds.index(k[1])))
    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(conditions)))
    for label, kind in keys:
        pts = [(x, t.get(label, (r, s, kind))) for x, (r, s) in zip(xs, conditions)]
        pts = [(x, c) for x, c in pts if c is not None]
        if pts:
            line(ax, [x for x, _ in pts], [c.accuracy for _, c in pts], st[(label, kind)], f"{label}, {kind}",
                 ms=3.5, lw=1.2, lo=[max(c.accuracy - 1.96 * c.se, 0.0) for _, c in pts],
                 hi=[min(c.accuracy + 1.96 * c.se, 1.0) for _, c in pts])
    ax.set_xticks(xs)
    ax.set_xticklabels([f"{r:g} fps\n{s:g} s" for r, s in conditions], fontsize=8)
    finish_axes(ax, CHANCE_TIME, "test frame rate and clip duration; dotted: chance")
    return fig


def time_section(page: Page, records: list[dict[str, Any]]) -> list[Verdict]:
    """The "Time" section; its verdicts."""
    page.add("<h2 id=time>Time: frame indices or seconds across frame rates</h2>")
    if not records:
        page.add("<p>Not run in this profile (<code>posenc extrapolate --part time</code>).</p>")
        return []
    t = AccuracyTable(records, lambda row: (row["rate"], row["seconds"], row["positions"]))
    first = next((r for r in records if "train_rate" in r), {})
    rate, dur = first.get("train_rate", 0.0), first.get("train_duration", 0.0)
    conditions = list(dict.fromkeys((r, s) for r, s, _ in t.columns))
    n = next((row["count"] for r in records for row in r.get("eval", [])), 0)
    page.add(f"<p>Synthetic audio-like clips (noise frames) carry two marked events; the label says which came "
             "first and whether they were more than a fixed number of seconds apart (four classes, chance "
             f"{CHANCE_TIME:.2f}). One model per scheme is trained at {_when(rate, dur)} and evaluated on {n} "
             "fixed clips per condition at other frame rates and longer durations, with positions given as "
             f"<b>frame indices</b> or as <b>time</b> (seconds × {rate:g}, the training rate: the same numbers "
             "in training, so one trained model is evaluated both ways). At twice the frame rate a one-second gap "
             "is twice as many frames, so only time positions keep its meaning. Schemes that take only integer "
             "positions (a learned table) or none have index rows only.</p>")
    page.figure("time_accuracy", lambda: time_figure(t, conditions),
                "Accuracy per test condition (bands: 95% intervals); solid: frame indices, dashed: positions in "
                "seconds, in the scheme's colour.")
    rows = []
    for lab in t.labels:
        for kind in ("index", "time"):
            if kind == "time" and not any(t.get(lab, (r, s, "time")) for r, s in conditions):
                continue
            rows.append([e(f"{lab}, {kind}")] + [accuracy_cell(t.get(lab, (r, s, kind)), t.cannot.get(lab))
                                                 for r, s in conditions])
    page.add(html_table(["scheme, positions"] + [e(_when(r, s)) + (" (train)" if (r, s) == (rate, dur) else "")
                                                 for r, s in conditions], rows))
    verdicts, answers = time_verdicts(t, rate, dur)
    page.add("".join(f"<p><b>{e(a)}</b></p>" for a in answers) or
             "<p>No scheme here takes positions in seconds, so the question is not measured.</p>")
    if verdicts:
        page.add(html_table(["the expectation", "measured here", "verdict"],
                            [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True))
    return verdicts


class Time(Part):
    name = "time"

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        self.note_own_model(profile, log)
        items = time_items(profile.time, schemes if custom else None)
        settings = settings_hash({"time": profile.time})
        return [Run(self.name, seed, lab, sp, settings, {"cannot": mode} if mode else {}, profile.name)
                for seed in profile.seeds_for(self.name) for lab, sp, mode in items]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        return run_time(ctx.profile.time, runs[0].spec, [r.seed for r in runs], runs[0].variant.get("cannot", ""))

    def summary(self, record: dict[str, Any]) -> str:
        rows = record.get("eval", [])
        first, last = rows[0], rows[-1]
        return (f"accuracy {first['accuracy']:.2f} at rate {first['rate']:g} -> "
                f"{last['accuracy']:.2f} at rate {last['rate']:g}")

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        return Section(time_section(page, records))


PART = Time()
