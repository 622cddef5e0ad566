"""``posenc list``, ``posenc show``, ``posenc compare`` and ``posenc demo``: look at encodings.

    posenc list
    posenc show rope:base=500000,scaling=linear,factor=4 --length 256 --plot rope.png
    posenc compare sinusoidal rope alibi --plot compare.png
    posenc show rope_mixed --grid 14x14 --plot map.png      # grid encodings: a 2D similarity map
    posenc demo order

A SPEC is a scheme name, ``name:key=value,...`` or a JSON file (see ``posenc.spec``); sizes
(``d_model``, ``head_dim``, ``num_heads``, ``max_positions``) come from ``--dim``, ``--heads``
and ``--length`` when the SPEC leaves them out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import textwrap
from collections.abc import Callable
from typing import Any

from posenc.cli import CLIError, check_output_file, int_arg, missing_extra, require_extra
from posenc.limits import MAX_DIM, MAX_GRID, MAX_HEADS, MAX_LENGTH

DEMOS = ("order",)
SPEC_HELP = ("a scheme name, name:key=value,... (e.g. rope:base=500000,scaling=linear,factor=4) "
             "or a JSON file")


def _bounded_int(name: str, low: int, high: int) -> Callable[[str], int]:
    return int_arg(name, low, high)


def _pair(name: str, sep: str, high: int, *, low: int = 1) -> Callable[[str], tuple[int, int]]:
    """``HxW`` / ``R,C``: two integers from ``low`` to ``high``."""
    def parse(text: str) -> tuple[int, int]:
        parts = text.lower().split(sep)
        try:
            a, b = (int(p) for p in parts)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{name} must be two integers as A{sep}B (e.g. 14{sep}14), "
                                             f"got {text!r}") from None
        if not (low <= a <= high and low <= b <= high):
            raise argparse.ArgumentTypeError(f"{name} sizes must be integers from {low} to {high}, got {text!r}")
        return a, b

    return parse


def _spec(text: str, args: argparse.Namespace) -> dict[str, Any]:
    """A SPEC from the command line, sizes filled from --dim/--heads/--length and bounded.

    Each size a scheme declares (``posenc.limits``) is bounded here, so a typo
    (``rope:head_dim=10000000``, ``fire:hidden=100000000``) is one line, not an out-of-memory kill.
    """
    from posenc.registry import build, check_limits
    from posenc.spec import fill_sizes, parse_spec

    try:
        spec = fill_sizes(parse_spec(text), dim=args.dim, num_heads=args.heads, length=args.length)
        check_limits(spec)
        build(spec)  # its values checked here, so that their errors name the SPEC (sizes are bounded above)
    except (ValueError, TypeError) as e:  # the SPEC argument named, as a flag is in its errors
        message = str(e)
        shown = text if len(text) < 60 else text[:57] + "..."
        raise CLIError(message if message.startswith("SPEC") else f"SPEC {shown!r}: {message}") from None
    return spec


def _text(text: str) -> str:
    if not text.strip() or len(text) > 2000:
        raise argparse.ArgumentTypeError(f"--text must be a non-empty sentence of at most 2000 characters, "
                                         f"got {len(text)} characters")
    return text


def _check_work(spec: dict[str, Any], args: argparse.Namespace, *, queries: int) -> None:
    """The work of ``show``/``compare`` on one encoding, as products of sizes, within the limits.

    ``queries``: how many query positions the command scores a bias or relative term at.
    """
    from posenc import registry

    for check in WORK.get(registry.get(spec["scheme"]).kind, ()):  # bias, none, content: nothing to bound
        check(spec, args, queries)


def _relative_work(spec: dict, args: argparse.Namespace, queries: int) -> None:
    """A query-dependent term: work grows with the module's parameters (W_R, tables)."""
    import posenc
    from posenc.limits import MAX_RELATIVE_WORK, check_work

    params = sum(p.numel() for p in posenc.build(spec).parameters())
    check_work("a relative term over every query", queries * params, MAX_RELATIVE_WORK,
               f"--length {args.length} × {params:,} parameters")


def _table_sizes(spec: dict, args: argparse.Namespace) -> tuple[int, int, str]:
    n = args.length
    width = max((v for k, v in spec.items() if k in ("d_model", "head_dim") and isinstance(v, int)), default=args.dim)
    return n, width, f"--length {n} × width {width}"


def _table_work(spec: dict, args: argparse.Namespace, queries: int) -> None:
    """A table and its fingerprint comparison."""
    from posenc.limits import MAX_CELLS, MAX_PAIR_WORK, check_work

    n, width, sizes = _table_sizes(spec, args)
    check_work("a table", n * width, MAX_CELLS, sizes)
    check_work("a fingerprint comparison", n * n * width, MAX_PAIR_WORK, sizes)


def _fit_work(spec: dict, args: argparse.Namespace, queries: int) -> None:
    """The linear-map fit of an additive table."""
    from posenc.limits import MAX_FIT_WORK, check_work

    n, width, sizes = _table_sizes(spec, args)
    check_work("a linear-map fit", n * width * width, MAX_FIT_WORK, sizes)


WORK = {"relative": (_relative_work,), "additive": (_table_work, _fit_work), "rotary": (_table_work,)}
"""The work ``show`` and ``compare`` bound before they start, by kind (what ``analysis.key_numbers``
computes for it; a bias kind's ``[H, L]`` column and ``[H, 64, 64]`` maps are bounded by --heads and --length)."""


def _plot_path(path: str | None) -> str | None:
    """Checks ``--plot`` before any work: matplotlib installed (the ``plot`` extra), a .png/.svg/.pdf
    file in a folder that exists."""
    if path is None:
        return None
    require_extra("plot", "--plot")
    from posenc.plot import FORMATS

    if os.path.splitext(path)[1].lower() not in FORMATS:
        raise CLIError(f"--plot must name a {', '.join(FORMATS)} file, got {path!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise CLIError(f"--plot: folder {folder!r} does not exist")
    if os.path.isdir(path):
        raise CLIError(f"--plot {path!r} is a directory; give a file path")
    return check_output_file("--plot", path)


def _save(make: Callable[[], Any], path: str) -> None:
    try:
        from posenc import plot
    except ImportError:  # pragma: no cover - matplotlib is a test dependency
        raise CLIError(missing_extra("plot", "--plot", ["matplotlib"])) from None
    try:
        fig = make()
    except ImportError as e:
        raise CLIError(str(e)) from None
    plot.save(fig, path)
    print(f"wrote {path}")


# -- handlers ---------------------------------------------------------------------------------

def cmd_list(args: argparse.Namespace) -> int:
    from posenc import analysis, registry, scaling

    rows = [("scheme", "kind", "parameters (default)", "what it is")]
    for name in registry.schemes(args.kind):
        s = registry.get(name)
        rows.append((name, s.kind, analysis.describe_params(name), s.summary.replace("``", "")))
    width = shutil.get_terminal_size().columns  # $COLUMNS, else the terminal's, else 80
    print(analysis.text_table(rows, width=width, wrap=(2, 3)))
    for line in (f"scaling types (rotary scaling=TYPE): {', '.join(scaling.SCALINGS)}",
                 "sizes left out of a SPEC come from --dim (d_model, head_dim), --heads (num_heads) and "
                 "--length (max_positions)"):
        print("\n" + textwrap.fill(line, width) if line.startswith("scaling") else textwrap.fill(line, width))
    return 0


def _grid_mode(specs: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """True when ``--grid`` is given or a SPEC's module has several axes (``axes``, a learned ``grid``)."""
    from posenc import analysis

    def grid(m) -> bool:  # several axes that are a grid, not positions from structure (bipe, hirope)
        return getattr(m, "axes", 1) > 1 and not getattr(m, "structured", False)

    return args.grid is not None or any(
        grid(analysis.build(s, dim=args.dim, num_heads=args.heads, length=args.length)) for s in specs)


def _grid_spec(text: str, args: argparse.Namespace) -> dict[str, Any]:
    """A SPEC for the grid views: a one-axis learned table gets a row per patch."""
    spec = _spec(text, args)
    if spec.get("scheme") == "learned" and not spec.get("grid") and args.grid is not None:
        spec["max_positions"] = max(int(spec.get("max_positions") or 0), args.grid[0] * args.grid[1])
    return spec


def _grid_numbers(spec: dict[str, Any], args: argparse.Namespace) -> list[tuple[str, str]]:
    from posenc import analysis

    try:
        gm = analysis.grid_map(spec, grid=args.grid, patch=args.patch, dim=args.dim, num_heads=args.heads)
    except ValueError as e:
        raise CLIError(str(e)) from None
    return analysis.grid_numbers(gm)


def cmd_show(args: argparse.Namespace) -> int:
    from posenc import analysis

    plot_path = _plot_path(args.plot)
    spec = _grid_spec(args.spec, args)
    if not _grid_mode([spec], args):
        _check_work(spec, args, queries=64)  # key_numbers: 3 query positions and [H, 64, 64] maps
    if plot_path:
        from posenc import plot, registry

        plot.check_showable(registry.get(spec["scheme"]).kind, spec["scheme"])
    if _grid_mode([spec], args):
        m = analysis.build(spec, dim=args.dim, num_heads=args.heads, length=args.length)
        numbers = [("scheme", m.name), ("kind", m.kind),
                   ("spec", ", ".join(f"{k}={v}" for k, v in m.spec.items() if k != "scheme") or "(no parameters)"),
                   *_grid_numbers(spec, args)]
        for key, value in numbers:
            print(f"{key.ljust(max(len(k) for k, _ in numbers))}  {value}")
        if plot_path:
            from posenc import plot

            _save(lambda: plot.show(spec, length=args.length, dim=args.dim, grid=args.grid, patch=args.patch),
                  plot_path)
        return 0
    numbers = analysis.key_numbers(spec, length=args.length, dim=args.dim, num_heads=args.heads, text=args.text)
    width = max(len(k) for k, _ in numbers)
    for key, value in numbers:
        print(f"{key.ljust(width)}  {value}")
    if plot_path:
        from posenc import plot

        _save(lambda: plot.show(spec, length=args.length, dim=args.dim), plot_path)
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from posenc import analysis
    from posenc.spec import label

    plot_path = _plot_path(args.plot)
    specs = [_spec(s, args) for s in args.specs]
    if _grid_mode(specs, args):  # one grid for all: --grid, else the first learned grid, else 14×14
        grids = [tuple(s["grid"][-2:]) for s in specs if s.get("grid")]
        args = argparse.Namespace(**{**vars(args), "grid": args.grid or (grids[0] if grids else (14, 14))})
        return _compare_grids([_grid_spec(s, args) for s in args.specs], args, plot_path)
    for spec in specs:
        _check_work(spec, args, queries=args.length)
    n = args.length
    picks = sorted({1, min(10, n - 1), n - 1})
    rows = [("scheme", "kind", *[f"signal at r={r}" for r in picks], "closest positions", "wavelengths")]
    modules = []
    for spec in analysis.progress(specs, "compare"):
        curve = analysis.score_vs_distance(spec, length=n, dim=args.dim, num_heads=args.heads)
        m = analysis.build(spec, dim=args.dim, num_heads=args.heads, length=n)
        closest = waves = "n/a"
        if analysis.KIND_ANALYSIS[m.kind].table is not None:  # a table per position: its fingerprints
            closest = f"{analysis.min_fingerprint_distance(analysis.table(m, length=n))[0]:.3g}"
        if hasattr(m, "inv_freq"):
            lam = analysis.wavelengths(m.inv_freq.double().numpy())
            waves = f"{lam.min():.3g} .. {lam.max():.3g}"
        rows.append((analysis.shown_label(m), m.kind, *[f"{curve.score[r]:.3g}" for r in picks], closest, waves))
        modules.append(m)
    print(analysis.text_table(rows))
    print("\nsignal: " + "; ".join(f"{k}: {v}".replace("\n", " ") for k, v in analysis.QUANTITY.items()
                                   if any(r[1] == k for r in rows[1:])))
    _notes(rows[1:], modules)
    if plot_path:
        from posenc import plot

        _save(lambda: plot.score_vs_distance(specs, length=n, dim=args.dim), plot_path)
    return 0


def _notes(rows: list[tuple[Any, ...]], modules: list[Any]) -> None:
    """Under ``compare``'s table: the rows that coincide and why, and what an untrained row shows."""
    from posenc import analysis

    for note in analysis.coinciding(rows, modules):
        print(note)
    seen = set()
    for m in modules:
        note = analysis.untrained(m)
        if note and note not in seen:
            seen.add(note)
            names = [analysis.label(n) for n in modules if analysis.untrained(n) == note]
            print(f"{', '.join(names)} {'is' if len(names) == 1 else 'are'} {note}.")


def _compare_grids(specs: list[dict[str, Any]], args: argparse.Namespace, plot_path: str | None) -> int:
    """``compare`` for grid encodings: each scheme's signal with one patch, at its neighbours and far."""
    from posenc import analysis

    rows = None
    for spec in analysis.progress(specs, "compare"):
        numbers = _grid_numbers(spec, args)
        m = analysis.build(spec, dim=args.dim, num_heads=args.heads, length=args.length)
        if rows is None:
            rows = [("scheme", "kind", *numbers[1][0].removeprefix("signal at ").split(", "))]
            print(numbers[0][1].split(":")[0])
        rows.append((analysis.shown_label(m), m.kind, *numbers[1][1].split(", ")))
    print(analysis.text_table(rows))
    print("\nsignal: " + "; ".join(f"{k}: {v}" for k, v in analysis.GRID_QUANTITY.items()
                                   if any(r[1] == k for r in rows[1:])))
    if plot_path:
        from posenc import plot

        _save(lambda: plot.grid_maps(specs, grid=args.grid, patch=args.patch, dim=args.dim), plot_path)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from posenc import demo

    print(demo.SUMMARY)
    print()
    print(demo.format_order_table(demo.order_demo(seed=args.seed)))
    return 0


# -- parsers ----------------------------------------------------------------------------------

def _sizes(p: argparse.ArgumentParser, length: int) -> None:
    p.add_argument("--length", type=_bounded_int("--length", 2, MAX_LENGTH), default=length, metavar="L",
                   help=f"positions 0..L-1 (default {length}, at most {MAX_LENGTH})")
    p.add_argument("--dim", type=_bounded_int("--dim", 2, MAX_DIM), default=64, metavar="D",
                   help="d_model of additive schemes, head_dim of rotary ones, when the SPEC leaves it out (default 64)")
    p.add_argument("--heads", type=_bounded_int("--heads", 1, MAX_HEADS), default=8, metavar="H",
                   help="num_heads of bias schemes, when the SPEC leaves it out (default 8)")
    p.add_argument("--plot", metavar="FILE", help="also draw the figure to FILE (.png, .svg or .pdf)")
    p.add_argument("--grid", type=_pair("--grid", "x", MAX_GRID), metavar="HxW",
                   help="an image grid of H×W patches: show each patch's signal with one patch (default for "
                        f"schemes with several axes: the learned grid, else 14x14; at most {MAX_GRID} a side)")
    p.add_argument("--patch", type=_pair("--patch", ",", MAX_GRID, low=0), metavar="R,C",
                   help="the patch of the grid map (default: the centre)")


def add_commands(sub: argparse._SubParsersAction) -> None:
    from posenc.registry import KINDS

    p = sub.add_parser("list", help="the schemes, their kind and parameters with defaults",
                       description="Lists every registered scheme: kind, parameters with defaults, summary.")
    p.add_argument("--kind", choices=KINDS, help="only schemes of this kind")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("show", help="key numbers of one encoding, and its figure",
                       description="Key numbers of one encoding (fingerprints, similarity, wavelengths, biases) "
                                   "and, with --plot, its figure.")
    p.add_argument("spec", metavar="SPEC", help=SPEC_HELP)
    _sizes(p, 128)
    p.add_argument("--text", metavar="SENTENCE", type=_text,
                   help="content schemes: a sentence to show positions of (cope: the words and sentences its gates "
                        "count beside the token positions)")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("compare", help="schemes side by side",
                       description="Schemes side by side: positional signal vs distance, fingerprints, wavelengths.")
    p.add_argument("specs", metavar="SPEC", nargs="+", help=SPEC_HELP)
    _sizes(p, 256)
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("demo", help="demonstrations: order ('dog bites man' vs 'man bites dog')",
                       description="order: one attention layer reads 'dog bites man' and 'man bites dog' with "
                                   "every scheme; without position the outputs are only permuted. A GRU and the ssm layer, "
                                   "without any position, tell them apart: their state follows the order.")
    p.add_argument("name", choices=DEMOS, metavar="NAME", help=f"one of: {', '.join(DEMOS)}")
    p.add_argument("--seed", type=_bounded_int("--seed", 0, 2**31 - 1), default=0, help="random weights (default 0)")
    p.set_defaults(func=cmd_demo)
