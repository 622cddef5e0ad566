"""The rotary cases: every shape (then a decoding step) x dtype x layout x rotary_dim, the
candidates timed on each (posenc's module, ``apply_rotary`` allocating and into a warm ``out``,
the cos/sin alone, the two baselines and the peers), and the goals stated as ratios of them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from posenc.bench.peers import _hf_rotary, _hf_step, _ret_rotary
from posenc.bench.profiles import Profile
from posenc.bench.timing import time_interleaved


@dataclass(frozen=True)
class RotaryCase:
    batch: int
    heads: int
    length: int
    head_dim: int
    dtype: str
    layout: str
    rotary_dim: int
    offset: int = 0  # positions are offset..offset+length-1

    @property
    def label(self) -> str:
        part = "" if self.rotary_dim == self.head_dim else f" rd={self.rotary_dim}"
        at = f" @{self.offset}" if self.offset else ""
        dt = {"float32": "f32", "bfloat16": "bf16"}.get(self.dtype, self.dtype)
        return f"{self.batch}x{self.heads}x{self.length}x{self.head_dim}{at} {dt} {self.layout[:5]}{part}"


def rotary_cases(profile: Profile) -> list[RotaryCase]:
    """Every shape (then decoding step) x dtype x layout, with full and (if ``profile.partial``)
    half rotary_dim."""
    cases = []
    for b, h, length, d, offset in [(*shape, 0) for shape in profile.shapes] + list(profile.decode):
        for dtype in profile.dtypes:
            for layout in profile.layouts:
                for rd in (d, d // 2) if profile.partial else (d,):
                    cases.append(RotaryCase(b, h, length, d, dtype, layout, rd, offset))
    return cases


BASELINES = ("copy_", "clone")
PAIRED = ("transformers", "transformers_step", "posenc_step")  # candidates that rotate q and k in one call: timed on both, halved


def _rotary_candidates(case: RotaryCase, x, positions) -> tuple[dict[str, Callable], dict[str, str], Callable]:
    """Functions ``x -> out``, the reasons for missing peers, and posenc's cos/sin alone."""
    import torch

    import posenc
    from posenc.rotary import apply_rotary

    pe = posenc.build({"scheme": "rope", "head_dim": case.head_dim, "rotary_dim": case.rotary_dim,
                       "layout": case.layout})
    cos, sin = pe.cos_sin(positions, x.dtype)  # (L, rd/2)
    warm = torch.empty_like(x)  # one preallocated output, written by every call: no allocation
    fns: dict[str, Callable] = {
        "copy_": lambda t: warm.copy_(t),
        "clone": lambda t: t.clone(),
        "posenc": lambda t: pe(t, positions),
        "posenc_apply": lambda t: apply_rotary(t, cos, sin, layout=case.layout),
        "posenc_out": lambda t: apply_rotary(t, cos, sin, layout=case.layout, out=warm),
    }
    missing: dict[str, str] = {}
    if case.offset:  # a decoding step: the rope module on q and on k (each finds its own cos/sin)
        fns["posenc_step"] = lambda t: (pe(t, positions), pe(t, positions))
    peers = {"transformers": ("half", lambda: _hf_rotary(case, x, positions)),
             "rotary_embedding_torch": ("interleaved", lambda: _ret_rotary(case, x))}
    if case.offset:
        peers["transformers_step"] = ("half", lambda: _hf_step(case, x, positions))
    for name, (layout, make) in peers.items():
        if case.layout != layout:
            missing[name] = f"n/a ({layout} layout only)"
            continue
        try:
            fns[name] = make()
        except ImportError as e:
            missing[name] = f"not installed ({e.name})"
    return fns, missing, lambda: pe.cos_sin(positions, x.dtype)


def _forward_backward(fn: Callable, x, grad) -> Callable[[], object]:
    """One forward and the backward to ``x`` (``autograd.grad``: nothing accumulates)."""
    import torch

    def run():
        out = fn(x)
        outs = list(out) if isinstance(out, tuple) else [out]
        return torch.autograd.grad(outs, x, [grad] * len(outs))

    return run


def bench_rotary_case(case: RotaryCase, profile: Profile) -> dict:
    """Median forward and forward+backward times of every candidate on one case."""
    import torch

    torch.manual_seed(0)
    dtype = getattr(torch, case.dtype)
    x = torch.randn(case.batch, case.heads, case.length, case.head_dim, dtype=dtype)  # (B, H, L, D)
    positions = torch.arange(case.length) + case.offset
    fns, missing, cos_sin = _rotary_candidates(case, x, positions)
    forward = {n: (lambda f=f: f(x)) for n, f in fns.items()}
    forward["posenc_cos_sin"] = cos_sin
    xg, grad = x.detach().requires_grad_(True), torch.randn_like(x)
    backward = {n: _forward_backward(f, xg, grad) for n, f in fns.items() if n not in BASELINES + ("posenc_out",)}
    warm_x, warm_g = torch.empty_like(x), torch.empty_like(x)
    backward["copy_"] = lambda: (warm_x.copy_(x), warm_g.copy_(grad))  # the forward's and the gradient's
    backward["clone"] = lambda: (x.clone(), grad.clone())
    times = {}
    for pass_, candidates in (("forward", forward), ("forward+backward", backward)):
        times[pass_] = time_interleaved(candidates, repeats=profile.repeats, min_sample_s=profile.min_sample_s)
        for name in PAIRED:
            if name in times[pass_]:
                times[pass_][name] /= 2
    expect = fns["posenc"](x).float()
    diffs = {}
    for name, f in fns.items():
        if name not in BASELINES + ("posenc",):
            out = f(x)
            diffs[name] = float(((out[0] if isinstance(out, tuple) else out).float() - expect).abs().max())
    return {"case": asdict(case), "label": case.label, "bytes": x.numel() * x.element_size(),
            "seconds": times, "missing": missing, "max_abs_diff_vs_posenc": diffs}


ROTARY_GOALS = {
    # name: (numerator, denominator, bound, "<=" or ">=", which cases, what it says)
    "out_vs_copy_": ("posenc_out", "copy_", 1.5, "<=", "prefill",
                     "apply_rotary(out=) within 1.5x of copy_ into warm memory"),
    "alloc_vs_clone": ("posenc_apply", "clone", 1.2, "<=", "prefill",
                       "allocating apply_rotary within 1.2x of clone()"),
    "vs_transformers": ("transformers", "posenc", 2.0, ">=", "prefill",
                        "rope module at least 2x faster than transformers' apply_rotary_pos_emb"),
    "decode_vs_transformers": ("transformers_step", "posenc_step", 1.0, ">=", "decode",
                               "decoding step (q and k, cos/sin from positions): posenc no slower than "
                               "transformers"),
}


def rotary_goals(rows: list[dict]) -> dict[str, dict]:
    """Each goal of ``ROTARY_GOALS`` on the forward pass: the worst ratio over its cases and whether it holds."""
    goals = {}
    for name, (num, den, bound, sense, cases, what) in ROTARY_GOALS.items():
        ratios = {}
        for row in rows:
            if (row["case"]["offset"] > 0) != (cases == "decode"):
                continue
            t = row["seconds"]["forward"]
            if t.get(num) is not None and t.get(den) is not None:
                ratios[row["label"]] = t[num] / t[den]
        if not ratios:
            goals[name] = {"what": what, "measured": False}
            continue
        worst = (max if sense == "<=" else min)(ratios, key=ratios.get)
        ok = [r <= bound if sense == "<=" else r >= bound for r in ratios.values()]
        goals[name] = {"what": what, "measured": True, "met": all(ok), "cases_met": sum(ok),
                       "cases": len(ok), "worst_case": worst, "worst_ratio": ratios[worst],
                       "ratio": f"{num} / {den}", "bound": f"{sense} {bound}"}
    return goals


def rotary_goal_lines(rows: list[dict]) -> list[str]:
    lines = []
    for g in rotary_goals(rows).values():
        if not g["measured"]:
            lines.append(f"goal: {g['what']}: not measured in this profile")
            continue
        lines.append(f"goal: {g['what']}: {'met' if g['met'] else 'NOT met'} ({g['cases_met']} of {g['cases']} "
                     f"cases within; forward; {g['ratio']} {g['bound']}; worst {g['worst_ratio']:.2f} at "
                     f"{g['worst_case']})")
    return lines
