"""Run by tests/test_bounds.py in a fresh process with capped memory: every registered scheme,
every numeric key, extreme values, through ``posenc.build`` and the command line; with the
argument ``calls``, every public function and method instead (``CALLS``).

Prints one JSON line per case: ``{"case": ..., "outcome": ...}`` where outcome is ``module`` or
``ok`` (accepted; an accepted call's tensors are checked finite), ``error`` (ValueError/TypeError
naming the parameter), ``exit 0``/``exit 2``, or ``FAIL: ...`` (anything else: an escaped
exception, an error that does not name its parameter, another exit status, a case over its time
limit).
"""

from __future__ import annotations

import contextlib
import io
import json
import resource
import signal
import sys

VALUES = ("0", "-1", "1000000000", "1e308", "nan", "inf")
CASE_SECONDS = 30


class Hang(Exception):
    pass


def _alarm(signum, frame):
    raise Hang()


def numeric_keys():
    """``(scheme, key, extra SPEC items)`` for every numeric parameter, and every numeric key of
    every RoPE scaling type."""
    import inspect as pyinspect

    from posenc import registry, scaling

    for name in registry.schemes():
        s = registry.get(name)
        for key, default in s.params.items():
            if default is registry.REQUIRED or default is None or (
                    isinstance(default, (int, float)) and not isinstance(default, bool)):
                if key not in ("scaling", "layout", "variant"):
                    yield name, key, ""
    for kind, fn in scaling.SCALINGS.items():
        for p in list(pyinspect.signature(fn).parameters.values())[1:]:
            if p.name in ("head_dim", "base") or p.name.endswith("_factor") and p.default is pyinspect._empty:
                continue
            extra = {"factor": "factor=2,", "original_max_positions": "original_max_positions=64,"}
            needs = "".join(v for k, v in extra.items() if k != p.name and k in pyinspect.signature(fn).parameters)
            if kind == "longrope":
                needs += "short_factor=[1.0],long_factor=[1.0]," if p.name not in ("short_factor", "long_factor") else ""
            yield "rope", p.name, f"scaling={kind},{needs}"


def parse(value: str):
    return float(value) if value in ("nan", "inf", "1e308") else int(value)


def run_build(scheme: str, key: str, extra: str, value: str) -> str:
    import posenc
    from posenc.spec import fill_sizes, parse_spec

    try:
        spec = fill_sizes(parse_spec(f"{scheme}:{extra}head_dim=8" if extra else scheme), dim=8, num_heads=2, length=16)
        if extra:
            spec["scaling"][key] = parse(value)
        else:
            spec[key] = parse(value)
        posenc.build(spec)
        return "module"
    except (ValueError, TypeError):
        return "error"


def run_cli(command: str, scheme: str, key: str, extra: str, value: str) -> str:
    from posenc.cli import main

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main([command, f"{scheme}:{extra}{key}={value}", "--length", "16", "--dim", "8", "--heads", "2"])
        except SystemExit as e:
            rc = e.code
    lines = [l for l in err.getvalue().splitlines() if l.strip() and "%|" not in l]
    if rc not in (0, 2):
        return f"FAIL: exit {rc}: {err.getvalue()[-300:]}"
    if rc == 2 and len(lines) != 1:
        return f"FAIL: exit 2 with {len(lines)} lines on stderr: {err.getvalue()[-300:]}"
    return f"exit {rc}"


# -- every public function and method ---------------------------------------------------------

NUMBERS = (0, -1, 10**9, 2**63, 1e308, float("nan"), float("inf"), "8", None, True, [1])
"""The extreme values every numeric argument of ``CALLS`` gets (wrong types included)."""


def _tensors(shape, dtype=None):
    """``name -> tensor`` variants of a valid floating tensor of ``shape``: the tensor itself, a
    non-contiguous view of the same values, an expanded one, and wrong dtypes and shapes."""
    import torch

    base = torch.randn(*shape, dtype=dtype or torch.float32)
    out = {"valid": base, "noncontiguous": base.transpose(-1, -2).contiguous().transpose(-1, -2),
           "expanded": base[..., :1, :].expand(base.shape), "int64": base.long(), "float16": base.half(),
           "rank-1": base.reshape(-1), "extra-dim": base[None], "empty-last": base[..., :0],
           "nan": torch.full_like(base, float("nan")), "list": base.tolist()}
    if base.dim() > 1:
        out["strided"] = torch.randn(*shape[:-1], 2 * shape[-1], dtype=base.dtype)[..., ::2]
    return out


def _positions(length, axes=1):
    """Position variants: valid, non-contiguous, expanded, negative, float, int64 extremes, wrong shapes."""
    import torch

    base = torch.arange(length) if axes == 1 else torch.arange(length)[:, None].repeat(1, axes)
    return {"valid": base, "expanded": torch.zeros(1, dtype=torch.long).expand(length) if axes == 1 else base,
            "strided": torch.arange(2 * length)[::2] if axes == 1 else base, "negative": base - 1,
            "float": base.float(), "int64-max": torch.full_like(base, 2**63 - 1), "short": base[:-1],
            "extra-dim": base[None, None], "list": base.tolist()}


def calls():
    """``(case, parameter, call)`` for every public function and method and every extreme value
    of each argument: the parameter must be named by the error a bad value raises."""
    import torch

    import posenc
    from posenc.interop import resize_grid
    from posenc.ssm import DiagonalSSM, diagonal_scan

    for v in NUMBERS:
        yield f"grid_positions(shape=({v!r}, 2))", "shape", lambda v=v: posenc.grid_positions((v, 2))
        yield f"grid_positions(shape={v!r})", "shape", lambda v=v: posenc.grid_positions(v)
        yield f"grid_positions(offset={v!r})", "offset", lambda v=v: posenc.grid_positions((2, 3), offset=v)
        yield f"mrope_positions(offset={v!r})", "offset", lambda v=v: posenc.mrope_positions([{"text": 2}], offset=v)
        yield f"mrope_positions(text={v!r})", "segments", lambda v=v: posenc.mrope_positions([{"text": v}])
        yield f"mrope_positions(image=[{v!r}, 2])", "segments", lambda v=v: posenc.mrope_positions([{"image": [v, 2]}])
        yield f"mrope_positions(video=[{v!r}, 2, 2])", "segments", lambda v=v: posenc.mrope_positions(
            [{"video": [v, 2, 2]}])
        yield f"mrope_positions(time_interval={v!r})", "time_interval", lambda v=v: posenc.mrope_positions(
            [{"video": [3, 2, 2], "time_interval": v}])
        yield f"mrope_positions(time_dtype={v!r})", "time_dtype", lambda v=v: posenc.mrope_positions(
            [{"text": 2}], time_dtype=v)
        yield f"packing([{v!r}])", "doc_lengths", lambda v=v: posenc.packing([v])
        yield f"packing([3, {v!r}])", "doc_lengths", lambda v=v: posenc.packing([3, v])
        yield f"packing(cu_seqlens=[0, {v!r}])", "cu_seqlens", lambda v=v: posenc.packing(cu_seqlens=[0, v])
        yield f"shard_positions(length={v!r})", "length", lambda v=v: posenc.shard_positions(v, 1, 0)
        yield f"segment_positions(separators=[{v!r}])", "separators", lambda v=v: posenc.segment_positions(
            b"a.b", [v])
        yield f"digit_positions(offset={v!r})", "offset", lambda v=v: posenc.digit_positions(b"12+3", b"0123456789",
                                                                                         offset=v)
        yield f"digit_positions(digit_ids=[{v!r}])", "digit_ids", lambda v=v: posenc.digit_positions(b"12", [v])
        yield f"coupled_positions(offset={v!r})", "offset", lambda v=v: posenc.coupled_positions(
            b"1+2=3", b"0123456789", plus=b"+", equals=b"=", offset=v)
        yield f"coupled_positions(plus={v!r})", "plus", lambda v=v: posenc.coupled_positions(
            b"1+2=3", b"0123456789", plus=v, equals=b"=")
        yield f"randomized_positions(length={v!r})", "length", lambda v=v: posenc.randomized_positions(v, 10)
        yield f"randomized_positions(max_positions={v!r})", "max_positions", lambda v=v: posenc.randomized_positions(
            2, v)
        yield f"randomized_positions(batch={v!r})", "batch", lambda v=v: posenc.randomized_positions(2, 10, batch=v)
        yield f"randomized_positions(seed={v!r})", "seed", lambda v=v: posenc.randomized_positions(2, 10, seed=v)
        yield f"shard_positions(world_size={v!r})", "world_size", lambda v=v: posenc.shard_positions(8, v, 0)
        yield f"shard_positions(rank={v!r})", "rank", lambda v=v: posenc.shard_positions(8, 2, v)
        yield f"resize_grid(old_grid=[{v!r}, 2])", "old_grid", lambda v=v: resize_grid(torch.zeros(4, 3), [v, 2], [3, 3])
        yield f"resize_grid(new_grid=[{v!r}, 2])", "new_grid", lambda v=v: resize_grid(torch.zeros(4, 3), [2, 2], [v, 2])
        yield f"resize_grid(extra_tokens={v!r})", "extra_tokens", lambda v=v: resize_grid(
            torch.zeros(4, 3), [2, 2], [3, 3], extra_tokens=v)
        yield f"resize_grid(antialias={v!r})", "antialias", lambda v=v: resize_grid(
            torch.zeros(4, 3), [2, 2], [1, 1], antialias=v)
        yield f"resize_grid(mode={v!r})", "mode", lambda v=v: resize_grid(torch.zeros(4, 3), [2, 2], [3, 3], mode=v)
        for key in ("d_model", "d_state", "dt_min", "dt_max", "chunk"):
            kwargs = {"d_model": 4, key: v}
            yield f"DiagonalSSM({key}={v!r})", key, lambda kw=kwargs: DiagonalSSM(**kw)(torch.randn(1, 3, 4))
        yield f"DiagonalSSM()(return_state={v!r})", "return_state", lambda v=v: DiagonalSSM(4)(
            torch.randn(1, 3, 4), return_state=v)
        yield f"diagonal_scan(chunk={v!r})", "chunk", lambda v=v: diagonal_scan(torch.randn(1, 3, 4), torch.ones(4),
                                                                               chunk=v)
        qkv = [torch.randn(1, 2, 5, 8) for _ in range(3)]
        yield f"attention(scale={v!r})", "scale", lambda v=v: posenc.attention(*qkv, scale=v)
        yield f"attention(causal={v!r})", "causal", lambda v=v: posenc.attention(*qkv, causal=v)
        yield f"attention(backend={v!r})", "backend", lambda v=v: posenc.attention(*qkv, backend=v)
        alibi = posenc.build({"scheme": "alibi", "num_heads": 2})
        yield f"attention(alibi, scale={v!r})", "scale", lambda v=v: posenc.attention(*qkv, alibi, scale=v)
        yield f"apply_rotary(layout={v!r})", "layout", lambda v=v: posenc.apply_rotary(
            qkv[0], torch.ones(5, 4), torch.ones(5, 4), layout=v)
        yield f"apply_rotary(out={v!r})", "out", lambda v=v: posenc.apply_rotary(
            qkv[0], torch.ones(5, 4), torch.ones(5, 4), out=v)
        yield f"context_parallel_attention(positions={v!r})", "positions", lambda v=v: posenc.context_parallel_attention(
            *qkv, positions=v)

    yield "packing([2147483648, 2147483648])", "doc_lengths", lambda: posenc.packing([2**31, 2**31])  # its own limit
    x = torch.randn(2, 3, 5, 8)
    cos, sin = torch.randn(5, 4).cos(), torch.randn(5, 4).sin()
    for name, t in _tensors((2, 3, 5, 8)).items():
        yield f"apply_rotary(x={name})", "x", lambda t=t: posenc.apply_rotary(t, cos, sin)
        yield f"apply_rotary(out={name})", "out", lambda t=t: posenc.apply_rotary(x, cos, sin, out=t)
        yield f"attention(q={name})", "q", lambda t=t: posenc.attention(t, x, x)
        yield f"attention(v={name})", "v", lambda t=t: posenc.attention(x, x, t)
        yield f"context_parallel_attention(q={name})", "q", lambda t=t: posenc.context_parallel_attention(
            t, x, x, positions=torch.arange(5))
    for name, t in _tensors((5, 4)).items():
        yield f"apply_rotary(cos={name})", "cos", lambda t=t: posenc.apply_rotary(x, t, t)
    for name, t in {"length-7": torch.ones(7, 4), "batch-3": torch.ones(3, 1, 5, 4), "rank-5": torch.ones(1, 2, 3, 5, 4),
                    "half-dims-5": torch.ones(5, 5)}.items():
        yield f"apply_rotary(cos={name})", "cos", lambda t=t: posenc.apply_rotary(x, t, t)
    yield "attention(q with D=0)", "q", lambda: posenc.attention(x[..., :0], x[..., :0], x)
    ssm = DiagonalSSM(4)
    for name, t in _tensors((2, 6, 4)).items():
        yield f"DiagonalSSM()(x={name})", "x", lambda t=t: ssm(t)
    for name, t in {**_tensors((2, 4)), "float64": torch.zeros(2, 4, dtype=torch.float64)}.items():
        yield f"DiagonalSSM()(state={name})", "state", lambda t=t: ssm(torch.randn(2, 6, 4), t)
        yield f"diagonal_scan(state={name})", "state", lambda t=t: diagonal_scan(torch.randn(2, 6, 4), torch.ones(4), t)
    yield "DiagonalSSM()(x=length-0, return_state=True)", "x", lambda: ssm(torch.randn(2, 0, 4), return_state=True)
    for name, t in _tensors((2, 6, 4)).items():
        yield f"diagonal_scan(v={name})", "v", lambda t=t: diagonal_scan(t, torch.ones(4))
    steps = {"valid": torch.ones(4), "zero": torch.zeros(4), "inf": torch.full((4,), float("inf")),
             "float64": torch.ones(4, dtype=torch.float64), "float16": torch.ones(4, dtype=torch.float16),
             "negative": -torch.ones(4), "nan": torch.full((4,), float("nan")), "int64": torch.ones(4, dtype=torch.long),
             "rank-2": torch.ones(1, 4), "length-3": torch.ones(3), "list": [1.0] * 4}
    for name, t in steps.items():
        yield f"diagonal_scan(dt={name})", "dt", lambda t=t: diagonal_scan(torch.randn(2, 6, 4), t)
    alibi = posenc.build({"scheme": "alibi", "num_heads": 3})
    rope = posenc.build({"scheme": "rope", "head_dim": 8})
    for name, p in _positions(5).items():
        yield f"attention(alibi, q_positions={name})", "q_positions", lambda p=p: posenc.attention(
            x, x, x, alibi, q_positions=p)
        yield f"attention(rope, k_positions={name})", "k_positions", lambda p=p: posenc.attention(
            x, x, x, rope, k_positions=p)
        ids = p if name not in ("negative", "int64-max") else p
        yield f"attention(document_ids={name})", "document_ids", lambda ids=ids: posenc.attention(
            x, x, x, alibi, document_ids=ids)
        yield f"rope(positions={name})", "positions", lambda p=p: rope(x, p)
        yield f"digit_positions(tokens={name})", "tokens", lambda p=p: posenc.digit_positions(p, [1, 2])
        yield f"coupled_positions(tokens={name})", "tokens", lambda p=p: posenc.coupled_positions(p, [1, 2], plus=3,
                                                                                                  equals=4)
        yield f"segment_positions(tokens={name})", "tokens", lambda p=p: posenc.segment_positions(p, [[3], [b"\x01\x02"]])
        yield f"segment_positions(document_ids={name})", "document_ids", lambda p=p: posenc.segment_positions(
            torch.arange(5), [[3]], document_ids=p)
        yield f"context_parallel_attention(positions={name})", "positions", lambda p=p: \
            posenc.context_parallel_attention(x, x, x, positions=p)


def run_call(call, parameter: str) -> str:
    import torch

    try:
        out = call()
    except (ValueError, TypeError) as e:
        if parameter not in str(e):
            return f"FAIL: {type(e).__name__} without {parameter!r}: {str(e)[:300]}"
        return "error"
    results = out if isinstance(out, tuple) else (out,)
    for r in results:
        for t in (getattr(r, "positions", r), getattr(r, "document_ids", r)):
            if isinstance(t, torch.Tensor) and t.is_floating_point() and not bool(torch.isfinite(t).all()):
                return "ok (non-finite)"
            if isinstance(t, torch.Tensor) and not t.is_floating_point() and t.numel() and int(t.min()) < 0:
                return "FAIL: accepted, with negative positions (an int64 wrap?)"
    return "ok"


def main_calls() -> None:
    import tempfile

    import torch.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:  # one gloo rank: context_parallel_attention runs
        dist.init_process_group("gloo", init_method=f"file://{tmp}/store", rank=0, world_size=1)
        try:
            _run_calls()
        finally:
            dist.destroy_process_group()


def _report(case: str, run) -> None:
    """Runs one case under the alarm and prints its outcome as one JSON line."""
    signal.alarm(CASE_SECONDS)
    try:
        outcome = run()
    except Hang:
        outcome = f"FAIL: over {CASE_SECONDS} s"
    except BaseException as e:  # noqa: BLE001 - what escaped is the finding
        outcome = f"FAIL: {type(e).__name__}: {str(e)[:300]}"
    finally:
        signal.alarm(0)
    print(json.dumps({"case": case, "outcome": outcome}), flush=True)


def _run_calls() -> None:
    for case, parameter, call in calls():
        _report(case, lambda: run_call(call, parameter))


def main() -> None:
    cap = int(sys.argv[1]) if len(sys.argv) > 1 else 6 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(signal.SIGALRM, _alarm)
    import torch

    torch.set_num_threads(1)
    if sys.argv[2:] == ["calls"]:
        return main_calls()
    for scheme, key, extra in numeric_keys():
        for value in VALUES:
            for what in ("build", "show", "compare") if value in ("0", "1000000000") else ("build", "show"):
                _report(f"{what} {scheme}:{extra}{key}={value}",
                        lambda: run_build(scheme, key, extra, value) if what == "build"
                        else run_cli(what, scheme, key, extra, value))


if __name__ == "__main__":
    main()
