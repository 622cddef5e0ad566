"""The ``posenc`` command line (also ``python -m posenc``).

Subcommands live in ``posenc/commands/*.py``; each module defines ``add_commands(subparsers)``
and gives every parser ``set_defaults(func=handler)`` where ``handler(args) -> int``. Bad input
(ValueError, TypeError, any OSError, or ``CLIError``) exits 2 with one line on stderr,
never a traceback. Integer flags are read by ``int_arg`` (int64's range at most, the flag named);
a command that needs an extra (``EXTRAS``: ``plot``, ``extrapolate``) says which, in one line,
before it does anything (``require_extra``). Every command takes ``--plugin FILE_OR_MODULE``
(repeatable): the user's module that registers schemes (``posenc.plugins``), imported before the
parser is built, so the command sees its schemes as it sees the built-in ones.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys
from collections.abc import Callable

from posenc.limits import INT64_MAX  # torch-free, as everything the parser needs


class CLIError(Exception):
    """A problem with the user's arguments: printed as one line, exit status 2."""


def check_output_file(flag: str, path: str) -> str:
    """An output file's path is new or a regular file: writing to a FIFO would wait for a reader,
    and to a device would write nowhere useful, so both are refused before any work."""
    import os
    import stat

    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a new file (its folder is checked where it is made)
        return path
    except OSError as e:
        raise CLIError(f"{flag} {path!r}: {e.strerror or e}") from None
    if not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        raise CLIError(f"{flag} {path!r} is not a regular file (a FIFO, a device or a socket); give a file path")
    return path


INT64_MIN = -INT64_MAX - 1


def parse_int(flag: str, text: str, *, low: int = INT64_MIN, high: int = INT64_MAX) -> int:
    """One integer of the command line, from ``low`` to ``high`` (by default int64's range: torch and
    NumPy take no larger seeds, counts or sizes, and would fail later with "Overflow when unpacking
    long long"); raises ValueError naming ``flag``. Every integer flag is read with this (``int_arg``)."""
    try:
        value = int(text.strip())
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        def shown(v: int) -> str:
            return {INT64_MAX: "2^63 - 1", INT64_MIN: "-2^63"}.get(v, str(v))

        got = repr(text) if value is None else str(value)
        raise ValueError(f"{flag} must be an integer from {shown(low)} to {shown(high)}, got {got}")
    return value


def int_arg(flag: str, low: int = INT64_MIN, high: int = INT64_MAX) -> Callable[[str], int]:
    """The argparse ``type`` of an integer flag: ``parse_int`` (the error is argparse's one line, exit 2)."""
    def parse(text: str) -> int:
        try:
            return parse_int(flag, text, low=low, high=high)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


EXTRAS: dict[str, dict[str, str]] = {
    "plot": {"matplotlib": "matplotlib"},
    "extrapolate": {"matplotlib": "matplotlib", "tqdm": "tqdm", "scikit-learn": "sklearn"},
    "pretrained": {"matplotlib": "matplotlib", "tqdm": "tqdm", "transformers": "transformers", "accelerate": "accelerate",
                   "gguf": "gguf"},
}
"""pyproject.toml's extras that commands need: extra -> {distribution: the module it installs}
(tests/test_cli_errors.py keeps it equal to pyproject.toml)."""


def require_extra(extra: str, who: str, *, only: tuple[str, ...] | None = None) -> None:
    """Refuses, in one line, a command whose extra is not installed, before it does anything.

    ``who``: what needs it (``posenc report``, ``--plot``); ``only``: the extra's distributions
    this run needs (default: all of them)."""
    import importlib.util

    missing = []
    for dist, module in EXTRAS[extra].items():
        if only is not None and dist not in only:
            continue
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or half-imported package: as good as missing
            found = False
        if not found:
            missing.append(dist)
    if missing:
        raise CLIError(missing_extra(extra, who, missing))


def missing_extra(extra: str, who: str, missing: list[str]) -> str:
    """The one line for a missing extra: what needs it, which packages, the command that installs them."""
    return (f"{who} needs {', '.join(missing)} (posenc's {extra!r} extra): pip install '.[{extra}]' from a "
            f"clone of posenc, or pip install {' '.join(missing)}")


def _extra_of(e: ModuleNotFoundError) -> tuple[str, str] | None:
    """``(extra, distribution)`` of a module an extra installs, for an import that failed late."""
    root = (e.name or "").split(".")[0]
    for extra, packages in EXTRAS.items():
        for dist, module in packages.items():
            if module == root:
                return extra, dist
    return None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # argparse's own errors: one line, exit 2
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    from posenc import __version__

    parser = _Parser(prog="posenc", description="Positional encodings for transformers: inspect, compare, benchmark.")
    parser.add_argument("--version", action="version", version=f"posenc {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    package = importlib.import_module("posenc.commands")
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if not info.name.startswith("_"):
            importlib.import_module(f"posenc.commands.{info.name}").add_commands(sub)
    for command in sub.choices.values():
        _add_plugin(command)
    return parser


PLUGIN_HELP = ("a Python file or module name whose import registers your schemes with posenc.registry.register "
               "(repeatable); imported before the command runs, and in every worker process of the benchmark")


def _add_plugin(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--plugin", action="append", metavar="FILE_OR_MODULE", dest="plugins", help=PLUGIN_HELP)


def plugins_in(argv: list[str]) -> list[str]:
    """The ``--plugin`` values of a command line (``--plugin X`` or ``--plugin=X``), before it is parsed:
    the parser itself must know the plugins' schemes."""
    out, words = [], iter(argv)
    for word in words:
        if word == "--":
            break
        if word == "--plugin":
            value = next(words, None)
            if value is not None:
                out.append(value)
        elif word.startswith("--plugin="):
            out.append(word.split("=", 1)[1])
    return out


def load_plugins(sources: list[str]) -> None:
    """Imports the ``--plugin`` modules (``posenc.plugins.load``); a failure is a ``CLIError``."""
    if not sources:
        return
    from posenc.plugins import PluginError, load

    try:
        load(sources)
    except PluginError as e:
        raise CLIError(str(e)) from None


def _message(e: BaseException) -> str:
    """One line for the user: an OSError as "what: path" (no errno), anything else its first line."""
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        return f"{e.strerror}: {str(e.filename)!r}"
    text = str(e)
    return text.splitlines()[0] if text.strip() else type(e).__name__


def main(argv: list[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    try:
        load_plugins(plugins_in(words))
    except CLIError as e:
        command = next((w for w in words if not w.startswith("-")), "")
        print(f"posenc{' ' + command if command else ''}: error: {e}", file=sys.stderr)
        return 2
    parser = build_parser()
    args = parser.parse_args(words)
    try:
        return int(args.func(args) or 0)
    except ModuleNotFoundError as e:  # a command's extra missing where no early check caught it
        extra = _extra_of(e)
        if extra is None:
            raise
        print(f"posenc {args.command}: error: {missing_extra(extra[0], 'this command', [extra[1]])}",
              file=sys.stderr)
        return 2
    except (CLIError, ValueError, TypeError, OSError) as e:
        print(f"posenc {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"posenc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
