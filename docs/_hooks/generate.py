"""mkdocs hook: the pages that are generated at build time, so they cannot drift from the code.

- ``<!-- generated: cli -->`` becomes every command's ``--help``, from the argparse parser itself;
- ``<!-- generated: api MODULE -->`` becomes one mkdocstrings block per public name of a package
  whose names resolve lazily (``posenc``, ``posenc.interop``: their ``_LAZY`` table), at the module
  that defines it;
- ``<!-- generated: modules PACKAGE -->`` becomes one mkdocstrings block per public module of a
  package (``posenc.reference``: one file per scheme);
- ``<!-- generated: figure NAME -->`` on "Why positions" becomes the image ``figures/NAME.png``
  and its caption, drawn from the page's own examples when the site is built (``concepts.py``);
- ``<!-- generated: kept -->`` on "The benchmark page, recorded" becomes ``posenc report``'s page rendered
  from the kept records (``kept_page.py``);
- ``<!-- generated: cell NAME -->`` becomes the Python cell ``docs/cells/NAME.py``, which the reader
  edits and runs in the browser on Pyodide, copied into the site from its pinned install (``cells.py``).

Every image of the site links to its full-size file, so a screenshot shrunk to the page's column
opens legibly in one click.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
from pathlib import Path

import cells  # docs/_hooks/cells.py
import concepts  # docs/_hooks/concepts.py: mkdocs puts this folder on sys.path while it loads a hook
import kept_page  # docs/_hooks/kept_page.py

MARKER = re.compile(r"<!-- generated: (cli|api [\w.]+|modules [\w.]+|figure \w+|kept) -->")
FIGURE_DIR = "figures"  # beside the page: guide/figures/NAME.png
IMAGE = re.compile(r"<p>(<img [^>]*src=\"([^\"]+)\"[^>]*>)</p>")


def cli_markdown() -> str:
    """``posenc --help`` and each subcommand's ``--help``, as an 80-column terminal prints them."""
    from posenc.cli import build_parser

    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "80"  # argparse reads the width when it formats
    try:
        parser = build_parser()
        out = ["```text", "$ posenc --help", parser.format_help().rstrip(), "```"]
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for name, command in sub.choices.items():
            out += ["", f"## posenc {name}", "", "```text", f"$ posenc {name} --help",
                    command.format_help().rstrip(), "```"]
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(out)


def api_markdown(package: str) -> str:
    """A ``::: module.name`` block for every name of ``package._LAZY``, in its order."""
    lazy = importlib.import_module(package)._LAZY
    return "\n\n".join(f"::: {module}.{name}" for name, module in lazy.items())


def modules_markdown(package: str) -> str:
    """A ``::: package.module`` block for every public module of ``package``, by name."""
    import pkgutil

    path = importlib.import_module(package).__path__
    names = sorted(i.name for i in pkgutil.iter_modules(path) if not i.name.startswith("_"))
    return "\n\n".join(f"::: {package}.{name}" for name in names)


def figure_markdown(name: str) -> str:
    """The image of a figure of "Why positions" and its caption."""
    if name not in concepts.FIGURES:
        raise KeyError(f"no figure {name!r}; the figures are {', '.join(concepts.FIGURES)}")
    caption = concepts.FIGURES[name][0]
    return f"![{caption}]({FIGURE_DIR}/{name}.png)\n\n*{caption}*"


def _expand(match: re.Match) -> str:
    what, _, arg = match.group(1).partition(" ")
    expand = {"cli": cli_markdown, "api": api_markdown, "modules": modules_markdown, "figure": figure_markdown,
              "kept": kept_page.markdown}
    return expand[what](*([arg] if arg else []))


def on_files(files, config, **kwargs):
    """Adds the figures of "Why positions" to the site, drawn from its examples now, and Pyodide's
    files for its cells (checked against their pinned SHA-256 first: a mismatch fails the build)."""
    from mkdocs.structure.files import File

    for dest, src in cells.site_files().items():
        files.append(File.generated(config, dest, abs_src_path=str(src)))

    page = Path(config.docs_dir) / concepts.PAGE
    folder = os.path.dirname(concepts.PAGE)
    for name, png in concepts.render(page.read_text(encoding="utf-8")).items():
        files.append(File.generated(config, f"{folder}/{FIGURE_DIR}/{name}.png", content=png))
    return files


def on_page_markdown(markdown: str, **kwargs) -> str:
    return MARKER.sub(_expand, markdown)


def on_page_content(html: str, page, **kwargs) -> str:
    """Every image alone in its paragraph becomes a link to its full-size file; cells are expanded."""
    html = cells.page_html(html, page.file.url)
    return IMAGE.sub(lambda m: f'<p><a class="full-size" href="{m.group(2)}" title="full size">{m.group(1)}</a></p>', html)
