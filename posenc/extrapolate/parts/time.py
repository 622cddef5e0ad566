"""The time part (``--part time``): positions in time across frame rates.

Synthetic audio-like frames (noise vectors) carry two marked events at random times; the label
says which came first and whether they were more than ``gap_seconds`` apart. A model is trained at
one frame rate and duration and evaluated at other rates and longer durations, with positions given
as **frame indices** or as **time** (seconds × the training frame rate: the same numbers at the
training rate, so one trained model is evaluated both ways). Time positions should carry over
across frame rates where indices cannot: at twice the frame rate a one-second gap is twice as many
frames. The model and its training: ``posenc.extrapolate.vision``; the paired statistics:
``posenc.extrapolate.accuracy``.

**The video protocol** (a scheme with three axes, found from its structure: ``mrope``,
``videorope``, ``rope:axes=3``): each frame is a small grid of ``VIDEO.grid`` patches, each the
frame's vector plus noise of its own, so a clip is ``T·h·w`` tokens with positions ``(t, r, c)``.
The positions are the scheme's own: M-RoPE's (Qwen2-VL's ``(i, r, c)`` of frame ``i``,
``posenc.mrope_positions``) or VideoRoPE's diagonal layout (``t = δ·i``, the grid centred on
``(t, t, t)``, temporal spacing ``δ = VIDEO.temporal_spacing``, ``posenc.encodings.videorope``), in a
model of ``VIDEO.n_head`` heads (one: M-RoPE's time then has Qwen2-VL's share of the pairs).
"Time" positions scale the temporal step by ``train_rate / rate`` (frame ``i`` at ``i·step``, real),
Qwen2.5-VL's alignment of temporal positions to absolute time without its floor. VideoRoPE's claim
(Wei et al. 2025): beside M-RoPE it extrapolates to longer videos (``video_verdicts``).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

import posenc
from posenc import registry
from posenc.extrapolate.accuracy import AccuracyTable, accuracy_cell, finish_axes, paired_claim
from posenc.stats.findings import Verdict
from posenc.stats.page_parts import Page, e, status
from posenc.stats.page_parts import table as html_table
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run
from posenc.extrapolate.profiles import VIDEO, Profile, TimeSettings, VideoSettings, settings_hash
from posenc.extrapolate.runs import Context
from posenc.extrapolate.vision import SetTransformer, accuracy_row, fit_seeds, pattern_cannot, right_or_wrong
from posenc.spec import fill_sizes

CONTINUOUS = "positions as continuous time"


CHANCE_TIME = 0.25  # four labels: order × (gap over the threshold)
VIDEOROPE = "Wei et al. 2025 (VideoRoPE)"
VIDEOROPE_SETTING = ("Qwen2-VL-7B fine-tuned on 1.3M videos at up to 64k tokens with VideoRoPE or M-RoPE, evaluated on "
                     "long-video understanding and retrieval (LongVideoBench, MLVU, V-NIAH-D) at longer contexts")
VIDEO_AXES = 3  # (t, r, c): a scheme with three axes runs under the video protocol


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


def video_batch(n: int, *, rate: float, seconds: float, s: TimeSettings, v: VideoSettings, g: torch.Generator
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``time_batch``'s clips as videos: ``(tokens [n, T·h·w, F], labels [n], frame_times [T])``.

    Each frame is an ``h × w`` grid of patches, every patch the frame's vector (its events: a
    frame-wide flash) plus noise of its own; the tokens run frame by frame, row-major within a frame
    (``grid_positions``'s order). With the events at one random patch instead, M-RoPE (two of eight
    frequency pairs on time at head_dim 16) stayed at chance after the quick profile's 200 steps.
    """
    x, labels, times = time_batch(n, rate=rate, seconds=seconds, s=s, g=g)  # (n, T, F)
    frames, patches = x.shape[1], v.grid[0] * v.grid[1]
    video = x[:, :, None] + 0.5 * torch.randn(n, frames, patches, s.frame_dim, generator=g)  # (n, T, P, F)
    return video.flatten(1, 2), labels, times  # (n, T·P, F)


def video_positions(scheme: str, frames: int, v: VideoSettings, step: float = 1.0) -> torch.Tensor:
    """``[T·h·w, 3]`` positions ``(t, r, c)`` of a clip of ``frames`` frames, frame ``i`` at time
    ``i·step`` (``step`` 1: frame indices): VideoRoPE's diagonal layout with spacing ``δ·step``
    (offset so that the grid, centred on the diagonal, stays non-negative), else M-RoPE's grid
    ``(i·step, r, c)`` (int64 when ``step`` is 1)."""
    h, w = v.grid
    if scheme == "videorope":
        from posenc.encodings.videorope import videorope_positions

        return videorope_positions([{"video": [frames, h, w]}], offset=(max(h, w) - 1) // 2,
                                   temporal_spacing=v.temporal_spacing * step)
    pos = posenc.mrope_positions([{"video": [frames, h, w]}])  # (T·h·w, 3): (i, r, c)
    if step == 1:
        return pos
    pos = pos.double()
    pos[:, 0] *= step
    return pos


def video_settings(s: TimeSettings, v: VideoSettings = VIDEO) -> TimeSettings:
    """The time settings of a video run: the model with the video protocol's heads (``VideoSettings.n_head``)."""
    return dataclasses.replace(s, model=dataclasses.replace(s.model, n_head=v.n_head))


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
        axes = getattr(pe, "axes", 1)
        if axes not in (1, VIDEO_AXES):
            out.append((label, spec, f"cannot: {given['scheme']!r} has {pe.axes} axes; frames have one (time), "
                                     "video patches three (time, row, column)"))
            continue
        if axes == VIDEO_AXES:  # sized for the video model's heads
            spec = time_spec(given, video_settings(settings))
            out.append((label if plain else spec_label(spec), spec, "video"))
            continue
        out.append((label, spec, ""))
    return out


def run_time(settings: TimeSettings, spec: dict[str, Any], seeds: list[int], mode: str = "",
             video: VideoSettings = VIDEO) -> list[dict[str, Any]]:
    """The bodies of one scheme's ``seeds``, trained together; ``mode`` "video": the video protocol."""
    s = settings
    if mode.startswith("cannot: "):
        return [{"cannot_run": mode[len("cannot: "):], "train_rate": s.train_rate, "eval": []} for _ in seeds]
    is_video = mode == "video"
    if is_video:
        s = video_settings(s, video)

    def clips(n: int, rate: float, seconds: float, g: torch.Generator):
        if is_video:
            return video_batch(n, rate=rate, seconds=seconds, s=s, v=video, g=g)
        return time_batch(n, rate=rate, seconds=seconds, s=s, g=g)

    def positions(unit: str, times: torch.Tensor, rate: float) -> torch.Tensor:
        """Frame indices, or seconds × the training rate: ``[T]``, or ``[T·h·w, 3]`` for a video."""
        if is_video:
            per_frame = 1.0 if unit == "index" else s.train_rate / rate
            return video_positions(spec["scheme"], len(times), video, per_frame)
        return torch.arange(len(times)) if unit == "index" else times * s.train_rate  # (T,)

    frames = int(round(s.train_seconds * s.train_rate))
    pos = positions("index", torch.zeros(frames), s.train_rate)  # at the training rate, indices = seconds × rate
    def batches(g: torch.Generator):
        def next_batch(step: int):
            x, y, _ = clips(s.train.batch_size, s.train_rate, s.train_seconds, g)
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
            x, y, times = clips(s.eval_examples, rate, duration, ge)
            for unit in ("index", "time"):
                if unit == "time" and not real:
                    continue  # nope has no positions; table schemes take only integers
                p = positions(unit, times, rate)
                rows.append(accuracy_row(right_or_wrong(model, x, y, p), rate=rate, seconds=duration,
                                         frames=len(times), positions=unit))
        body = {"train_loss": [round(v, 5) for v in losses[:: max(1, len(losses) // 100)]],
                "train_seconds": round(seconds, 2), "params": model.num_params(),
                "train_rate": s.train_rate, "train_duration": s.train_seconds, "eval": rows}
        if is_video:
            body["video"] = {"grid": list(video.grid), "temporal_spacing": video.temporal_spacing,
                             "n_head": video.n_head}
        out.append(body)
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


def video_verdicts(t: AccuracyTable, train_rate: float, train_seconds: float) -> list[Verdict]:
    """VideoRoPE's claim under the video protocol: at every test condition longer than training,
    VideoRoPE beats M-RoPE (paired: the same clips; positions in seconds, which at the training rate
    are the frame indices); "not measured" when either row is missing or is at chance as trained."""
    longer = [(r, s) for r, s in dict.fromkeys((r, s) for r, s, _ in t.columns) if s > train_seconds]
    if not longer:
        return [Verdict(VIDEOROPE, "VideoRoPE beats M-RoPE on clips longer than trained",
                        "not measured (no test clip longer than training)", "not measured")]
    trained = [(lab, t.get(lab, (train_rate, train_seconds, "time"))) for lab in ("mrope", "videorope")]
    chance = [f"{lab} {c.accuracy:.3f} ± {c.se:.3f}" for lab, c in trained
              if c is not None and c.accuracy - CHANCE_TIME <= 2 * c.se]  # nothing learned: nothing to extrapolate
    out = []
    for r, s in longer:
        claim = (f"at {_when(r, s)} (trained at {_when(train_rate, train_seconds)}), VideoRoPE beats M-RoPE "
                 "(video protocol, positions in seconds)")
        if chance:
            out.append(Verdict(VIDEOROPE, claim, "not measured (at chance at the training condition: "
                                                 f"{', '.join(chance)})", "not measured"))
            continue
        d = t.diff(("videorope", (r, s, "time")), ("mrope", (r, s, "time")))
        out.append(paired_claim(VIDEOROPE, claim, d, f"videorope − mrope at {_when(r, s)}"))
    return out


def _video_note(records: list[dict[str, Any]], t: AccuracyTable, train_rate: float, train_seconds: float
                ) -> tuple[str, list[Verdict]]:
    """The video protocol's paragraph and VideoRoPE's verdicts (none when no video row ran)."""
    video = next((r["video"] for r in records if "video" in r), None)
    if video is None:
        return ("<p>No video rows here: <code>posenc report --profile full --part time</code> runs M-RoPE and "
                "VideoRoPE under the video protocol (or <code>--part time --scheme mrope --scheme videorope</code>)."
                "</p>"), []
    h, w = video["grid"]
    verdicts = video_verdicts(t, train_rate, train_seconds)
    text = (f'<div id="time-video"><h3>Video: VideoRoPE against M-RoPE</h3><p>The schemes with three axes read each '
            f"frame as a {h}×{w} grid of patches, each the frame's vector (its events flash the whole frame) plus "
            "noise of its own (the same clips for both). M-RoPE's positions are Qwen2-VL's "
            "<code>(i, r, c)</code> of frame <i>i</i> (time on the highest frequencies); VideoRoPE's are its "
            "diagonal layout, <code>t = δ·i</code> and the grid centred on "
            f"<code>(t, t, t)</code>, δ = {video['temporal_spacing']:g}, time on the lowest frequencies; the model "
            f"has {video.get('n_head', 4)} head(s). Positions in "
            "seconds scale the temporal step by the training rate over the clip's. "
            f"{e(VIDEOROPE)}: {e(VIDEOROPE_SETTING)}.</p>"
            + html_table(["the paper found", "measured here", "verdict"],
                         [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True) + "</div>")
    return text, verdicts


def time_figure(t: AccuracyTable, conditions: list[tuple[float, float]]):
    """Accuracy per test condition: a scheme's colour (``figures.styles``), frame indices solid and
    positions in seconds dashed with the next marker; bands: 95% intervals."""
    from matplotlib.figure import Figure

    from posenc.extrapolate.figures import line, look, styles, variant

    kinds = ("index", "time")
    keys = [(label, unit) for label in t.labels for unit in kinds]
    st = styles(keys, lambda k: None if look(k[0]) is None else variant(look(k[0]), kinds.index(k[1])))
    fig = Figure(figsize=(9.6, 3.8), layout="constrained")
    ax = fig.subplots()
    xs = list(range(len(conditions)))
    for label, unit in keys:
        pts = [(x, t.get(label, (r, s, unit))) for x, (r, s) in zip(xs, conditions)]
        pts = [(x, c) for x, c in pts if c is not None]
        if pts:
            line(ax, [x for x, _ in pts], [c.accuracy for _, c in pts], st[(label, unit)], f"{label}, {unit}",
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
        for unit in ("index", "time"):
            if unit == "time" and not any(t.get(lab, (r, s, "time")) for r, s in conditions):
                continue
            rows.append([e(f"{lab}, {unit}")] + [accuracy_cell(t.get(lab, (r, s, unit)), t.cannot.get(lab))
                                                 for r, s in conditions])
    page.add(html_table(["scheme, positions"] + [e(_when(r, s)) + (" (train)" if (r, s) == (rate, dur) else "")
                                                 for r, s in conditions], rows))
    verdicts, answers = time_verdicts(t, rate, dur)
    page.add("".join(f"<p><b>{e(a)}</b></p>" for a in answers) or
             "<p>No scheme here takes positions in seconds, so the question is not measured.</p>")
    if verdicts:
        page.add(html_table(["the expectation", "measured here", "verdict"],
                            [[e(v.claim), e(v.measured), status(v.status)] for v in verdicts], text=True))
    note, video = _video_note(records, t, rate, dur)
    page.add(note)
    return verdicts + video


class Time(Part):
    name = "time"

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        self.note_own_model(profile, log)
        items = time_items(profile.time, schemes if custom else None)
        settings = settings_hash({"time": profile.time})
        video = settings_hash({"time": profile.time, "video": VIDEO})  # the video runs' (the others keep their keys)

        def variant(mode: str) -> dict[str, Any]:
            return {"protocol": "video"} if mode == "video" else {"cannot": mode} if mode else {}

        return [Run(self.name, seed, lab, sp, video if mode == "video" else settings, variant(mode), profile.name)
                for seed in profile.seeds_for(self.name) for lab, sp, mode in items]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        v = runs[0].variant
        mode = "video" if v.get("protocol") == "video" else v.get("cannot", "")
        return run_time(ctx.profile.time, runs[0].spec, [r.seed for r in runs], mode)

    def summary(self, record: dict[str, Any]) -> str:
        rows = record.get("eval", [])
        first, last = rows[0], rows[-1]
        return (f"accuracy {first['accuracy']:.2f} at rate {first['rate']:g} -> "
                f"{last['accuracy']:.2f} at rate {last['rate']:g}")

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        verdicts = time_section(page, records)
        return Section(verdicts, sources={VIDEOROPE: VIDEOROPE_SETTING} if any(
            v.source == VIDEOROPE for v in verdicts) else {})


PART = Time()
