"""Run by tests/test_bounds.py in a fresh process with capped memory: every registered scheme,
every numeric key, extreme values, through ``posenc.build`` and the command line.

Prints one JSON line per case: ``{"case": ..., "outcome": ...}`` where outcome is ``module``,
``error`` (ValueError/TypeError), ``exit 0``/``exit 2``, or ``FAIL: ...`` (anything else: an
escaped exception, another exit status, a case over its time limit).
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


def main() -> None:
    cap = int(sys.argv[1]) if len(sys.argv) > 1 else 6 << 30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    signal.signal(signal.SIGALRM, _alarm)
    import torch

    torch.set_num_threads(1)
    for scheme, key, extra in numeric_keys():
        for value in VALUES:
            for what in ("build", "show", "compare") if value in ("0", "1000000000") else ("build", "show"):
                signal.alarm(CASE_SECONDS)
                try:
                    if what == "build":
                        outcome = run_build(scheme, key, extra, value)
                    else:
                        outcome = run_cli(what, scheme, key, extra, value)
                except Hang:
                    outcome = f"FAIL: over {CASE_SECONDS} s"
                except BaseException as e:  # noqa: BLE001 - what escaped is the finding
                    outcome = f"FAIL: {type(e).__name__}: {str(e)[:300]}"
                finally:
                    signal.alarm(0)
                print(json.dumps({"case": f"{what} {scheme}:{extra}{key}={value}", "outcome": outcome}), flush=True)


if __name__ == "__main__":
    main()
