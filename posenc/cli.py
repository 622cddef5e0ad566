"""The ``posenc`` command line (also ``python -m posenc``).

Subcommands live in ``posenc/commands/*.py``; each module defines ``add_commands(subparsers)``
and gives every parser ``set_defaults(func=handler)`` where ``handler(args) -> int``. Bad input
(ValueError, TypeError, any OSError, or ``CLIError``) exits 2 with one line on stderr,
never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys


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
    return parser


def _message(e: BaseException) -> str:
    """One line for the user: an OSError as "what: path" (no errno), anything else its first line."""
    if isinstance(e, OSError) and e.strerror and e.filename is not None:
        return f"{e.strerror}: {str(e.filename)!r}"
    text = str(e)
    return text.splitlines()[0] if text.strip() else type(e).__name__


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (CLIError, ValueError, TypeError, OSError) as e:
        print(f"posenc {args.command}: error: {_message(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"posenc {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
