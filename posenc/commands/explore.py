"""``posenc explore``: writes the interactive explorer page (``OUT/index.html``), offline.

    posenc explore --out explorer --open
"""

from __future__ import annotations

import argparse

from posenc.cli import CLIError


def cmd_explore(args: argparse.Namespace) -> int:
    from posenc import explorer

    try:
        path = explorer.write(args.out)
    except (ValueError, OSError) as e:
        raise CLIError(f"--out: {getattr(e, 'strerror', None) or e}") from None
    print(f"wrote {path}")
    if args.open:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):
            print(f"no browser found; open {path} yourself")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explore", help="an interactive, offline HTML page: move sliders, watch encodings change",
                       description="Writes OUT/index.html: one self-contained offline page with controls for every "
                                   "deterministic scheme and RoPE scaling, live figures and the numbers of "
                                   "`posenc show`; the view is kept in the URL fragment.")
    p.add_argument("--out", default="explorer", metavar="DIR", help="folder for index.html (default: explorer)")
    p.add_argument("--open", action="store_true", help="open the page in the default browser")
    p.set_defaults(func=cmd_explore)
