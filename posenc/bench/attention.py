"""The attention cases: a bias scheme through ``posenc.attention`` (auto, and FlexAttention by
name), a materialized map and plain causal SDPA (the floor), forward and forward+backward, each in
a fresh process under an address-space cap; and the goals of bias attention at length judged on their rows. Content
schemes (positions that depend on content: fox, cope, dape over kerple, stick_breaking) train at the profile's
``content_lengths`` on their blockwise backend (FoX with a ``hidden`` of width H·D)."""

from __future__ import annotations

import contextlib
import statistics
import time

from posenc.bench.memory import in_fresh_process, peak_rss_gb
from posenc.bench.profiles import Profile


def attention_child(spec: dict) -> dict:
    """Runs one attention case in this (fresh) process: seconds and peak RSS in GiB."""
    if spec.get("memory_cap_gb"):
        import resource

        cap = int(spec["memory_cap_gb"] * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    import torch

    import posenc
    from posenc.attn import _choose_backend

    if spec.get("threads"):
        torch.set_num_threads(spec["threads"])
    after_import = peak_rss_gb()
    torch.manual_seed(0)
    h, length, d = spec["heads"], spec["length"], spec["head_dim"]
    train = spec.get("pass", "forward") == "forward+backward"
    q, k, v = (torch.randn(1, h, length, d, requires_grad=train) for _ in range(3))  # (B, H, L, D)
    grad = torch.randn(1, h, length, d) if train else None
    after_inputs = peak_rss_gb()
    if spec["method"] == "sdpa_floor":
        def forward():
            return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        from posenc.spec import fill_sizes

        pe = posenc.build(fill_sizes({"scheme": spec["scheme"]}, dim=h * d, num_heads=h, head_dim=d))
        backend = {"posenc": "auto", "blockwise": "blockwise", "flex": "flex"}.get(spec["method"], "materialize")
        # a content scheme that reads the layer's input (FoX's gate) gets one of width H·D, trained too
        hidden = torch.randn(1, length, pe.d_model, requires_grad=train) if getattr(pe, "reads_hidden", False) else None
        extra = {} if hidden is None else {"hidden": hidden}

        def forward():
            return posenc.attention(q, k, v, pe, causal=True, backend=backend, **extra)

    def call():
        if not train:
            with torch.no_grad():
                return forward()
        forward().backward(grad)  # gradients of q, k, v and the scheme's parameters

    chosen = None
    if spec["method"] == "posenc":  # the backend auto takes for this case (the one chooser, every kind)
        with torch.no_grad() if not train else contextlib.nullcontext():
            chosen = _choose_backend("auto", q, k, v, pe)
    times = []
    with torch.no_grad():
        for n in spec.get("warm_lengths", ()):  # dynamo's cache warmed by other shapes first, as in a loop
            posenc.attention(q[:, :, :n], k[:, :, :n], v[:, :, :n], pe, causal=True, backend="flex")
    for _ in range(1 + spec["repeats"]):
        t0 = time.perf_counter()
        call()
        times.append(time.perf_counter() - t0)
    return {"first_s": times[0], "seconds": statistics.median(times[1:] or times),
            "rss_after_import_gb": after_import, "rss_after_inputs_gb": after_inputs,
            "peak_rss_gb": peak_rss_gb(), **({"backend": chosen} if chosen else {})}


def run_attention_case(spec: dict, timeout: float = 900.0) -> dict:
    """``attention_child(spec)`` in a fresh interpreter; an error or a timeout is reported, not raised."""
    return in_fresh_process("posenc.bench.attention", "attention_child", spec, timeout)


WARM_LENGTHS = tuple(range(64, 64 + 9 * 13, 13))  # 9 distinct lengths: past dynamo's limit of 8 per code object
TRAIN_LIMIT = 32768  # forward+backward cases at lengths given explicitly: up to the goals' largest


def attention_specs(profile: Profile, threads: int | None = None, *, lengths: tuple[int, ...] | None = None,
                    schemes: tuple[str, ...] | None = None) -> list[dict]:
    """The floor, then each scheme through posenc (auto, and FlexAttention by name) and (where it
    fits) a materialized map; forward, then forward+backward at the lengths up to ``train_max``.

    ``lengths``/``schemes`` replace the profile's (``posenc bench --lengths/--schemes``); given
    lengths get forward+backward cases up to ``TRAIN_LIMIT``. The auto backend's choice is recorded
    in each row (``backend``; on the CPU, ``blockwise`` at these sizes). A FlexAttention case first
    calls it at the ``WARM_LENGTHS`` (more distinct lengths than dynamo's recompile limit, as a
    training loop with variable lengths would), then times its own length: the first call, and the
    median of ``attention_repeats`` later calls; the others have nothing to compile and are timed once.
    """
    specs = []
    base = {"heads": profile.heads, "head_dim": profile.head_dim, "repeats": 0, "threads": threads,
            "memory_cap_gb": profile.memory_cap_gb}
    for length in profile.lengths if lengths is None else lengths:
        fwd = {**base, "pass": "forward", "length": length}
        specs.append({**fwd, "scheme": "none", "method": "sdpa_floor"})
        for scheme in profile.schemes if schemes is None else schemes:
            specs.append({**fwd, "scheme": scheme, "method": "posenc"})
            if _content(scheme):  # no flex (FoX's is posenc.attention's, chosen off the CPU) nor bias map
                continue
            specs.append({**fwd, "scheme": scheme, "method": "flex", "repeats": profile.attention_repeats,
                          "warm_lengths": WARM_LENGTHS})
            if length <= profile.materialize_max:
                specs.append({**fwd, "scheme": scheme, "method": "materialized"})
        if length > (profile.train_max if lengths is None else TRAIN_LIMIT):
            continue
        train = {**base, "pass": "forward+backward", "length": length}
        specs.append({**train, "scheme": "none", "method": "sdpa_floor"})
        for scheme in profile.train_schemes if schemes is None else schemes:
            specs.append({**train, "scheme": scheme, "method": "posenc"})  # auto: blockwise at length
    if schemes is None:  # positions that depend on content: training at their length
        for length in profile.content_lengths:
            train = {**base, "pass": "forward+backward", "length": length}
            specs += [{**train, "scheme": scheme, "method": "posenc"} for scheme in profile.content_schemes]
    return specs


def _content(scheme: str) -> bool:
    from posenc import registry

    return scheme in registry.schemes("content")


def pass_of(row: dict) -> str:
    """An attention row's pass: ``"forward"`` or ``"forward+backward"`` (``"forward"`` where the row does not say)."""
    return row.get("pass", "forward")


GOAL_LENGTH, GOAL_PEAK_GB = 32768, 1.5


def goal_line(rows: list[dict]) -> str:
    """The issue's goal: ALiBi and T5 forward at L=32768 under 1.5 GB peak RSS on CPU."""
    peaks = {r["scheme"]: r.get("peak_rss_gb") for r in rows
             if r["method"] == "posenc" and r["length"] == GOAL_LENGTH and pass_of(r) == "forward"}
    if not peaks:
        return f"goal (L={GOAL_LENGTH} under {GOAL_PEAK_GB} GB): not measured in this profile"
    met = all(p is not None and p < GOAL_PEAK_GB for p in peaks.values())
    shown = ", ".join(f"{k} {'error' if p is None else f'{p:.2f} GB'}" for k, p in peaks.items())
    return f"goal (L={GOAL_LENGTH} under {GOAL_PEAK_GB} GB peak): {'met' if met else 'NOT met'}: {shown}"


# The goals of bias attention at length: (pass, length, what, bound); a bound on the peak in GB, on seconds, or on the
# time as a multiple of the floor (causal SDPA without a bias, same pass and length).
TRAINING_GOALS = (
    ("forward+backward", 8192, "peak_gb", 2.0),
    ("forward+backward", 32768, "peak_gb", 4.0),
    ("forward+backward", 8192, "alibi_seconds", 22.0),
    ("forward", 131072, "peak_gb", 3.0),
    ("forward", 32768, "x_floor", 2.0),
)


def training_goal_lines(rows: list[dict]) -> list[str]:
    """One line per goal (bias attention that trains at length; long forward): met,
    NOT met, or not measured, with the numbers, judged on posenc's auto backend (what a caller
    gets without asking for one)."""
    lines = []
    for pass_, length, what, bound in TRAINING_GOALS:
        cases = [r for r in rows if pass_of(r) == pass_ and r["length"] == length and r["method"] == "posenc"]
        if what == "alibi_seconds":
            cases = [r for r in cases if r["scheme"] == "alibi"]
        label = f"goal ({'fwd' if pass_ == 'forward' else 'fwd+bwd'} L={length}, " + {
            "peak_gb": f"peak under {bound} GB", "alibi_seconds": f"ALiBi under {bound} s",
            "x_floor": f"under {bound}x causal SDPA"}[what] + ")"
        if not cases:
            lines.append(f"{label}: not measured in this run")
            continue
        floor = next((r.get("seconds") for r in rows if r["method"] == "sdpa_floor" and pass_of(r) == pass_
                      and r["length"] == length), None)
        best: dict[str, float | None] = {}
        for r in cases:
            value = {"peak_gb": r.get("peak_rss_gb"), "alibi_seconds": r.get("seconds"),
                     "x_floor": None if floor is None or "seconds" not in r else r["seconds"] / floor}[what]
            old = best.get(r["scheme"])
            best[r["scheme"]] = value if old is None else (old if value is None else min(old, value))
        met = all(x is not None and x <= bound for x in best.values())
        shown = ", ".join(f"{k} {'error' if x is None else f'{x:.2f}'}" for k, x in best.items())
        lines.append(f"{label}: {'met' if met else 'NOT met'}: {shown}")
    return lines
