"""The grid of ``posenc extend``: what it measures, in which order, appended to ``results.jsonl``.

**Grid.** Lengths: ``L₀``, ``2L₀`` and ``4L₀`` up to ``N`` (``L₀`` the model's context, ``N`` = ``--to``),
and ``N`` itself. Perplexity: every method on every passage, passage by passage (so a stopped run
has every method on the same passages); a static method runs once at the largest length (its
first ``L`` tokens are the ``L``-token forward: ``posenc.extend.methods``), ``dynamic`` and
``longrope`` once per length. Then passkey: every length past 1k, depth and trial, every method.

**Resume.** A record's ``key`` names what it measured and the set-up (model, text, factor, bucket);
a rerun with the same set-up skips every key already in the file (``ResultStore`` cuts a
half-written last line of a killed run), so a killed run resumes where it stopped.

**Passages.** The text's documents cut into disjoint windows of the largest length, taken round
robin over the documents (the first window of every work, then the second ...); passage ``p`` at a
shorter length is the first tokens of the same window, the same tokens for every method.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posenc.extend import measure
from posenc.extend.methods import LENGTH_DEPENDENT, apply, unavailable

Log = Callable[[str], None]


@dataclass(frozen=True)
class Grid:
    """What one ``posenc extend`` run measures."""

    to: int  # N, the target length
    context: int  # L₀, the model's pre-training context
    factor: float  # every method's scaling factor, max(1, N / L₀)
    methods: tuple[str, ...]
    passages: int = 3  # disjoint passages (the verdicts' unit; they need 3)
    depths: tuple[float, ...] = (0.1, 0.5, 0.9)  # passkey depths (0: start of the filler, 1: its end)
    trials: int = 1  # passkey keys per length and depth
    bucket: int = 1024  # tokens per perplexity bucket

    @property
    def lengths(self) -> list[int]:
        """``L₀``, ``2L₀``, ``4L₀`` up to ``N``, and ``N``."""
        return sorted({self.context * k for k in (1, 2, 4) if self.context * k <= self.to} | {self.to})

    def ppl_lengths(self, method: str) -> list[int]:
        return self.lengths if method in LENGTH_DEPENDENT else [self.lengths[-1]]

    def passkey_lengths(self) -> list[int]:
        return [n for n in self.lengths if n >= min(1024, self.to)]


def vm_hwm() -> int | None:
    """This process's peak resident memory in bytes (``VmHWM``; None off Linux)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def cut_passages(documents: list[list[int]], length: int, count: int) -> list[tuple[int, int]]:
    """``[(document, start)]``: up to ``count`` disjoint windows of ``length`` tokens, round robin.

    Raises ValueError when no document holds ``length`` tokens (the text is shorter than ``--to``)."""
    windows = [[(d, s) for s in range(0, len(ids) - length + 1, length)] for d, ids in enumerate(documents)]
    if not any(windows):
        longest = max((len(ids) for ids in documents), default=0)
        raise ValueError(f"--to {length}: the text's longest document has {longest} tokens, fewer than {length}; "
                         "give a longer --text or a smaller --to")
    out: list[tuple[int, int]] = []
    for rank in range(max(len(w) for w in windows)):
        out += [w[rank] for w in windows if rank < len(w)]
    return out[:count]


def setup_id(folder: Path, text_names: list[str], grid: Grid) -> str:
    """The set-up a record belongs to: model folder, text, factor and bucket (a rerun with another
    ``--to`` or text measures anew)."""
    data = json.dumps([folder.name, text_names, grid.factor, grid.bucket], sort_keys=True)
    return hashlib.sha256(data.encode()).hexdigest()[:12]


def ppl_todo(grid: Grid, available: list[str], n_passages: int) -> list[dict[str, Any]]:
    return [{"kind": "ppl", "method": m, "length": n, "passage": p}
            for p in range(n_passages) for m in available for n in grid.ppl_lengths(m)]


def passkey_todo(grid: Grid, available: list[str]) -> list[dict[str, Any]]:
    return [{"kind": "passkey", "method": m, "length": n, "depth": d, "trial": t}
            for n in grid.passkey_lengths() for t in range(grid.trials) for d in grid.depths for m in available]


def key_of(item: dict[str, Any], setup: str) -> str:
    return setup + ":" + ":".join(str(item[k]) for k in sorted(item))


def _measure(model: Any, tokenizer: Any, item: dict[str, Any], tokens: list[int], grid: Grid,
             step: Callable[[float], None] | None = None) -> dict[str, Any]:
    """One record body: the NLL of every token of a passage, or one passkey answer (a length-dependent
    method starts from its own length: ``reset_length``, as for an unrelated sequence). ``step``: progress
    within the forward (``measure.token_nll``)."""
    import torch

    for module in model.modules():
        if hasattr(module, "reset_length"):
            module.reset_length()
    if item["kind"] == "ppl":
        nll = measure.token_nll(model, torch.tensor(tokens[:item["length"]]), step=step)
        return {"nll": [round(float(x), 4) for x in nll], "ppl": measure.ppl(nll),
                "buckets": measure.bucket_means(nll, grid.bucket)}
    key = measure.passkey_key(item["trial"], item["depth"])
    ids = measure.passkey_ids(tokenizer, item["length"], item["depth"], key)
    with measure.layer_progress(model.get_decoder(), step):
        text, found = measure.passkey_answer(model, tokenizer, ids)
    return {"passkey": key, "answer": text, "correct": found == key}


class Progress:
    """The bar of a run: tokens, advanced within each forward (its layers' passes and the loss's chunks)
    and made whole when the measurement ends; ``say`` writes a log line above the bar, never onto it
    (tqdm's ``external_write_mode`` clears the bar, the line is written, the bar redrawn)."""

    def __init__(self, total: int, enabled: bool):
        self.bar = None
        if enabled and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="tok", unit_scale=True, desc="extend", dynamic_ncols=True)
        self.item_done, self.item_length = 0.0, 0

    def start(self, item: dict[str, Any]) -> None:
        self.item_done, self.item_length = 0.0, item["length"]
        self.base = self.bar.n if self.bar is not None else 0  # whole tokens before this measurement
        if self.bar is not None:
            where = f"passage {item['passage']}" if item["kind"] == "ppl" else f"passkey depth {item['depth']:g}"
            self.bar.set_postfix_str(f"{item['method']} L={item['length']} {where}", refresh=False)

    def step(self, tokens: float) -> None:
        if self.bar is not None and self.item_done + tokens <= self.item_length:
            self.item_done += tokens
            self.bar.update(tokens)

    def finish(self, length: int) -> None:
        if self.bar is not None:  # to the whole count: the steps' float sum never overshoots the total
            self.bar.update(self.base + length - self.bar.n)
        self.item_done = float(length)

    def say(self, log: Log, line: str) -> None:
        if self.bar is None:
            log(line)
            return
        with self.bar.external_write_mode():
            log(line)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def run_grid(model: Any, tokenizer: Any, grid: Grid, store: Any, *, passages: list[list[int]], setup: str,
             params: dict[str, Any], log: Log, progress: bool) -> None:
    """Measures every item of the grid not yet in ``store`` (appending one record per item)."""
    available = [m for m in grid.methods if unavailable(model.config, m) is None]
    todo = ppl_todo(grid, available, len(passages)) + passkey_todo(grid, available)
    left = [it for it in todo if key_of(it, setup) not in store]
    log(f"{len(todo) - len(left)} of {len(todo)} measurements found in {store.path}; {len(left)} to run")
    bar = Progress(sum(it["length"] for it in left), progress)
    current = None
    try:
        for item in left:
            if item["method"] != current:
                params[item["method"]] = apply(model, item["method"], grid.factor)
                current = item["method"]
            tokens = passages[item["passage"]] if item["kind"] == "ppl" else []
            start = time.perf_counter()
            bar.start(item)
            body = _measure(model, tokenizer, item, tokens, grid, step=bar.step)
            record = {"key": key_of(item, setup), "setup": setup, **item, **body,
                      "seconds": round(time.perf_counter() - start, 2), "vm_hwm": vm_hwm(),
                      "threads": _threads(), "params": params[item["method"]]}
            store.append(record)
            bar.finish(item["length"])
            bar.say(log, _line(record))
    finally:
        bar.close()


def _threads() -> int:
    import torch

    return torch.get_num_threads()


def _line(record: dict[str, Any]) -> str:
    what = (f"ppl {record['ppl']:.2f}" if record["kind"] == "ppl"
            else f"passkey {'right' if record['correct'] else 'wrong'} ({record['answer']!r})")
    where = (f"passage {record['passage']}" if record["kind"] == "ppl"
             else f"depth {record['depth']} trial {record['trial']}")
    return (f"{record['method']:>8} L={record['length']:<6} {where}: {what} in {record['seconds']:.0f} s, "
            f"VmHWM {(record['vm_hwm'] or 0) / 2**30:.2f} GiB")


def grid_dict(grid: Grid) -> dict[str, Any]:
    return {**asdict(grid), "lengths": grid.lengths}


def write_json(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True), encoding="utf-8")
    os.replace(tmp, path)
