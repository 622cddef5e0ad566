"""Algorithmic tasks and passkey retrieval, generated on the fly (Kazemnejad et al. 2023,
"The Impact of Positional Encoding on Length Generalization in Transformers", arXiv:2305.19466).

Every example is one sequence ``[TASK] prompt [SEP] answer [EOS]``; the loss and the score cover
the answer and EOS only. Size ``n`` is the number of items (digits) of the prompt:

- ``copy``:    ``a1..an``            -> ``a1..an``
- ``reverse``: ``a1..an``            -> ``an..a1``
- ``sort``:    ``a1..an``            -> the digits in ascending order
- ``add``:     ``a1..an + b1..bn``   -> ``c1..c(n+1)``, every number least-significant digit first
- ``passkey``: ``4n`` filler tokens with ``[KEY] k1..k5`` hidden at a random place -> ``k1..k5``

Exact match: an example is right when every answer token is the model's argmax given the true
prefix (teacher forcing), which is the same as greedy decoding producing the whole answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SEP, EOS, PAD, PLUS, KEY = 10, 11, 12, 13, 14
FILLERS = (15, 16, 17, 18, 19)
TASKS = ("copy", "reverse", "sort", "add", "passkey")
TASK_TOKEN = {name: 20 + i for i, name in enumerate(TASKS)}
VOCAB_SIZE = 20 + len(TASKS)
PASSKEY_DIGITS = 5


def seq_len(task: str, n: int) -> int:
    """Tokens in one example of ``task`` at size ``n`` (all examples of a size have this length)."""
    return {"copy": 2 * n + 3, "reverse": 2 * n + 3, "sort": 2 * n + 3, "add": 3 * n + 5,
            "passkey": 4 * n + PASSKEY_DIGITS + 1 + PASSKEY_DIGITS + 3}[task]


def _digits(n: int, g: torch.Generator) -> list[int]:
    return torch.randint(0, 10, (n,), generator=g).tolist()


def example(task: str, n: int, g: torch.Generator) -> tuple[list[int], int]:
    """One example: its tokens and the index of the first answer token."""
    if task in ("copy", "reverse", "sort"):
        a = _digits(n, g)
        answer = {"copy": a, "reverse": a[::-1], "sort": sorted(a)}[task]
        prompt = a
    elif task == "add":
        a, b = _digits(n, g), _digits(n, g)
        value = sum(d * 10**i for i, d in enumerate(a)) + sum(d * 10**i for i, d in enumerate(b))
        answer = [(value // 10**i) % 10 for i in range(n + 1)]  # least-significant first
        prompt = [*a, PLUS, *b]
    elif task == "passkey":
        key = _digits(PASSKEY_DIGITS, g)
        filler = [FILLERS[i] for i in torch.randint(0, len(FILLERS), (4 * n,), generator=g).tolist()]
        at = int(torch.randint(0, 4 * n + 1, (1,), generator=g))
        prompt = [*filler[:at], KEY, *key, *filler[at:]]
        answer = key
    else:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    tokens = [TASK_TOKEN[task], *prompt, SEP, *answer, EOS]
    return tokens, len(prompt) + 2


@dataclass
class Batch:
    tokens: torch.Tensor  # (B, T) long, right-padded with PAD
    mask: torch.Tensor  # (B, T - 1) bool: the targets tokens[:, 1:] that are scored


def collate(examples: list[tuple[list[int], int]]) -> Batch:
    width = max(len(t) for t, _ in examples)
    tokens = torch.full((len(examples), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(examples), width - 1, dtype=torch.bool)
    for i, (t, first) in enumerate(examples):
        tokens[i, : len(t)] = torch.tensor(t)
        mask[i, first - 1: len(t) - 1] = True  # target j is tokens[j + 1]
    return Batch(tokens, mask)


def train_batch(task: str, *, batch: int, max_size: int, g: torch.Generator) -> Batch:
    """``batch`` examples of ``task``, each of a size ``n`` drawn uniformly from ``1..max_size``.

    Training cycles through the tasks one batch each (one task per batch keeps the padding small).
    """
    sizes = torch.randint(1, max_size + 1, (batch,), generator=g).tolist()
    return collate([example(task, n, g) for n in sizes])


def eval_batch(task: str, n: int, *, count: int, seed: int) -> Batch:
    """``count`` examples of ``task`` at size ``n``; the same for every scheme and training seed."""
    g = torch.Generator().manual_seed(1_000_003 * (TASKS.index(task) + 1) + 7919 * n + seed)
    return collate([example(task, n, g) for _ in range(count)])
