"""Pyodide's core, pinned: what the site's Python cells run on ("Why positions", docs/_hooks/cells.py).

``make pyodide`` (a step of ``make docs`` and ``make test``) runs ``python3 docs/_hooks/pyodide_core.py
install``: ``npm pack pyodide@VERSION`` fetches the package from the npm registry, its tarball must
have the registry's integrity ``TARBALL_SHA512`` (written here, not read from the registry), and the
five files the page loads are unpacked into ``.venv/share/posenc/pyodide-VERSION/`` and must have the
SHA-256 of ``FILES``. A mismatch fails the step, and the docs build checks the files again before
it copies them into the site (``site/assets/pyodide/``): the page never fetches Pyodide from a CDN.

The files, 13.5 MB unpacked (6.5 MB as the npm tarball): ``pyodide.js`` (the loader, a classic
script), ``pyodide.asm.mjs`` and ``pyodide.asm.wasm`` (CPython compiled to WebAssembly),
``python_stdlib.zip`` (the standard library) and ``pyodide-lock.json`` (the index of Pyodide's
packages, read at start; the cells load none: no numpy, only the standard library's ``math``).

To move to another version: change ``VERSION``, ``TARBALL_SHA512`` (``npm view pyodide@V
dist.integrity``) and ``FILES`` (``sha256sum`` of the unpacked files), then ``make pyodide``.
"""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "314.0.8"
TARBALL_SHA512 = "74Wq1kXOC+CCEzAfxuRAO701nAcCMLjf8NrwvWpu8S41dVMXwXmLQ05dYB+F4e46AdnGo0oq7YHSVUpHsoarLQ=="
FILES = {
    "pyodide.js": "d4e1e0f06c29162eadf0c3f323c746884242b257d1faa94760442a4ac929e9a1",
    "pyodide.asm.mjs": "22514b8be6980e28a02c8b1d6387ce8dfe666fc4edf8d547cff5dce29ff4d972",
    "pyodide.asm.wasm": "e14d49ceca9b4a0e274ea918f3a898de2d3880b6e5573a6cfe1a2267ecc70329",
    "python_stdlib.zip": "2bd3394a145bfbbe5bbc9d9d6ab9136abbb986c6fef6c142b3a2962227aa5c28",
    "pyodide-lock.json": "5dc2fc119108bc148c7457dc86e7675b5c87e1cafd420b9c34c1eaef7b36c010",
}
"""The files the site ships, with their SHA-256 (those of pyodide 314.0.8's npm tarball)."""

ROOT = Path(__file__).resolve().parents[2]
INSTALL = "make pyodide (python3 docs/_hooks/pyodide_core.py install)"


def folder() -> Path:
    """Where ``install`` puts the files: ``$POSENC_PYODIDE_DIR``, else ``.venv/share/posenc/pyodide-VERSION``."""
    given = os.environ.get("POSENC_PYODIDE_DIR")
    return Path(given) if given else ROOT / ".venv" / "share" / "posenc" / f"pyodide-{VERSION}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def problems(where: Path | None = None) -> list[str]:
    """What is wrong with the installed files: missing ones and checksum mismatches (empty: all good)."""
    where = folder() if where is None else where
    found = []
    for name, expected in FILES.items():
        path = where / name
        if not path.is_file():
            found.append(f"{path} is missing")
        elif (actual := _sha256(path)) != expected:
            found.append(f"{path} has SHA-256 {actual}, expected {expected} (pyodide {VERSION})")
    return found


def check(where: Path | None = None) -> Path:
    """The folder of the checked files; raises ``RuntimeError`` naming what is missing or differs."""
    where = folder() if where is None else where
    found = problems(where)
    if found:
        raise RuntimeError(f"Pyodide {VERSION} for the site's Python cells is not installed as pinned: "
                           f"{'; '.join(found)}. Run `{INSTALL}`.")
    return where


def install(where: Path | None = None) -> Path:
    """``npm pack pyodide@VERSION``, its integrity checked, ``FILES`` unpacked into ``where`` and checked."""
    where = folder() if where is None else where
    if not problems(where):
        return where
    if shutil.which("npm") is None:
        raise RuntimeError("npm is needed to fetch Pyodide from the npm registry (Debian: apt-get install npm)")
    where.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=where) as tmp:
        subprocess.run(["npm", "pack", "--silent", f"pyodide@{VERSION}", "--pack-destination", tmp],
                       check=True, stdout=subprocess.DEVNULL)
        tarball = Path(tmp) / f"pyodide-{VERSION}.tgz"
        integrity = base64.b64encode(hashlib.sha512(tarball.read_bytes()).digest()).decode()
        if integrity != TARBALL_SHA512:
            raise RuntimeError(f"npm's pyodide-{VERSION}.tgz has sha512 {integrity}, expected {TARBALL_SHA512}")
        with tarfile.open(tarball) as tar:
            for name in FILES:
                member = tar.getmember(f"package/{name}")
                if not member.isfile():
                    raise RuntimeError(f"package/{name} in pyodide-{VERSION}.tgz is not a file")
                with tar.extractfile(member) as src, open(Path(tmp) / name, "wb") as dst:
                    shutil.copyfileobj(src, dst)
        found = problems(Path(tmp))
        if found:
            raise RuntimeError("; ".join(found))
        for name in FILES:
            os.replace(Path(tmp) / name, where / name)
    return check(where)


if __name__ == "__main__":
    commands = {"install": install, "check": check}
    if len(sys.argv) != 2 or sys.argv[1] not in commands:
        print(f"usage: python3 {sys.argv[0]} install|check", file=sys.stderr)
        sys.exit(2)
    try:
        print(commands[sys.argv[1]]())
    except (RuntimeError, subprocess.CalledProcessError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
