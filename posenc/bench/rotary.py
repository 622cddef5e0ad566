"""The rotary cases: every shape (then a decoding step) x dtype x layout x rotary_dim, the
candidates timed on each (posenc's module, ``apply_rotary`` allocating and into a warm ``out``,
the cos/sin alone, the two baselines and the peers), and the goals stated as ratios of them.

On a CUDA device everything a candidate touches (x, cos/sin, the warm ``out``, the modules'
tables) lives on the device, each sample is synchronized (``time_interleaved``), posenc's
``apply_rotary`` and module run its Triton kernel, ``copy_`` is the HBM roofline, and Liger-Kernel
and flash-attn join the peers. ``bandwidth`` is what ``copy_`` and ``apply_rotary(out=)`` achieve:
the bytes of ``x`` read plus those of ``out`` written, per second (cos/sin, ``1/(B·H)`` of that,
not counted).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

from posenc.bench.peers import (INPUT_LAYOUTS, NotApplicable, _flash_rotary, _hf_rotary, _hf_step, _liger_rotary,
                                _ret_rotary)
from posenc.bench.profiles import Profile, RotaryCase
from posenc.bench.timing import time_interleaved


def rotary_cases(profile: Profile, device: str = "cpu") -> list[RotaryCase]:
    """Every shape (on CUDA also ``profile.cuda_shapes``; then decoding step) x dtype x layout, with
    full and (if ``profile.partial``) half rotary_dim."""
    shapes = profile.shapes + (profile.cuda_shapes if device.startswith("cuda") else ())
    cases = []
    for b, h, length, d, offset in [(*shape, 0) for shape in shapes] + list(profile.decode):
        for dtype in profile.dtypes:
            for layout in profile.layouts:
                for rd in (d, d // 2) if profile.partial else (d,):
                    cases.append(RotaryCase(b, h, length, d, dtype, layout, rd, offset))
    return cases


BASELINES = ("copy_", "clone")
# candidates that rotate q and k in one call: timed on both, halved
PAIRED = ("transformers", "transformers_step", "posenc_step", "liger_kernel")
CUDA_ONLY = ("liger_kernel", "flash_attn")  # peers whose Triton kernels take CUDA tensors only
CUDA_ONLY_ON_CPU = False
"""The tests set this to build the CUDA-only peers for CPU tensors too (with stand-ins for them)."""


def _rotary_candidates(case: RotaryCase, x, positions) -> tuple[dict[str, Callable], dict[str, str], Callable]:
    """Functions ``x -> out``, the reasons for missing peers, and posenc's cos/sin alone; all on
    ``x``'s device (``positions`` already there)."""
    import torch

    import posenc
    from posenc.rotary import apply_rotary

    pe = posenc.build({"scheme": "rope", "head_dim": case.head_dim, "rotary_dim": case.rotary_dim,
                       "layout": case.layout}).to(x.device)
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

    def flash():  # its tables cover positions 0 .. offset + L - 1; it starts at row `offset`
        return _flash_rotary(case, *pe.cos_sin(torch.arange(case.offset + case.length, device=x.device), x.dtype))

    # name: (the one layout it takes, or None for both; its builder)
    peers = {"transformers": ("half", lambda: _hf_rotary(case, x, positions)),
             "rotary_embedding_torch": ("interleaved", lambda: _ret_rotary(case, x)),
             "liger_kernel": ("half", lambda: _liger_rotary(case, x, cos, sin)),
             "flash_attn": (None, flash)}
    if case.offset:
        peers["transformers_step"] = ("half", lambda: _hf_step(case, x, positions))
    for name, (layout, make) in peers.items():
        if name in CUDA_ONLY and not (x.is_cuda or CUDA_ONLY_ON_CPU):
            missing[name] = "n/a (CUDA only)"
        elif layout is not None and case.layout != layout:
            missing[name] = f"n/a ({layout} layout only)"
        else:
            try:
                fns[name] = make()
            except ImportError as e:
                missing[name] = f"not installed ({e.name})"
            except NotApplicable as e:
                missing[name] = f"n/a ({e})"
    return fns, missing, lambda: pe.cos_sin(positions, x.dtype)


def _forward_backward(fn: Callable, x, grads) -> Callable[[], object]:
    """One forward and the backward to ``x`` (``autograd.grad``: nothing accumulates); ``grads``: one
    gradient per output, each its own tensor (a peer may rotate them in place, as Liger-Kernel does)."""
    import torch

    def run():
        out = fn(x)
        outs = list(out) if isinstance(out, tuple) else [out]
        return torch.autograd.grad(outs, x, grads[:len(outs)])

    return run


def _synchronize(device):
    """What ``time_interleaved`` calls around each sample: CUDA's synchronize, nothing on the CPU."""
    import torch

    return (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else None


def bench_rotary_case(case: RotaryCase, profile: Profile, device: str = "cpu") -> dict:
    """Median forward and forward+backward times of every candidate on one case, on ``device``."""
    import torch

    device = torch.device(device)
    torch.manual_seed(0)
    dtype = getattr(torch, case.dtype)
    x = torch.randn(case.batch, case.heads, case.length, case.head_dim, dtype=dtype).to(device)  # (B, H, L, D)
    positions = torch.arange(case.length, device=device) + case.offset
    fns, missing, cos_sin = _rotary_candidates(case, x, positions)

    def given(name, t):  # the tensor candidate `name` is called with: t, or t in the peer's own layout
        return INPUT_LAYOUTS[name][0](t) if name in INPUT_LAYOUTS else t

    forward = {n: (lambda f=f, t=given(n, x): f(t)) for n, f in fns.items()}
    forward["posenc_cos_sin"] = cos_sin
    xg, grad = x.detach().requires_grad_(True), torch.randn_like(x)
    grads = (grad, grad.clone())  # for q and k where a candidate returns both
    backward = {}
    for n, f in fns.items():
        if n in INPUT_LAYOUTS:  # its own copies (given() copies), in its layout
            backward[n] = _forward_backward(f, given(n, x).detach().requires_grad_(True),
                                            (given(n, grad), given(n, grad)))
        elif n not in BASELINES + ("posenc_out",):
            backward[n] = _forward_backward(f, xg, grads)
    warm_x, warm_g = torch.empty_like(x), torch.empty_like(x)
    backward["copy_"] = lambda: (warm_x.copy_(x), warm_g.copy_(grad))  # the forward's and the gradient's
    backward["clone"] = lambda: (x.clone(), grad.clone())
    times = {}
    for pass_, candidates in (("forward", forward), ("forward+backward", backward)):
        times[pass_] = time_interleaved(candidates, repeats=profile.repeats, min_sample_s=profile.min_sample_s,
                                        synchronize=_synchronize(device))
        for name in PAIRED:
            if name in times[pass_]:
                times[pass_][name] /= 2
    expect = fns["posenc"](x).float()
    diffs = {}
    for name, f in fns.items():
        if name not in BASELINES + ("posenc",):
            out = f(given(name, x))  # a fresh input: a peer may rotate its input in place
            out = out[0] if isinstance(out, tuple) else out
            if name in INPUT_LAYOUTS:
                out = INPUT_LAYOUTS[name][1](out)
            diffs[name] = float((out.float() - expect).abs().max())
    nbytes = x.numel() * x.element_size()
    moved = 2 * nbytes  # x read, out written
    bandwidth = {n: moved / times["forward"][n] / 1e9 for n in ("copy_", "posenc_out")}
    return {"case": asdict(case), "label": case.label, "device": str(x.device), "bytes": nbytes,
            "seconds": times, "bandwidth_gb_s": bandwidth, "missing": missing, "max_abs_diff_vs_posenc": diffs}


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
