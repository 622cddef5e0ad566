"""Algorithmic tasks, passkey retrieval and the content tasks of contextual positions, generated
on the fly (Kazemnejad et al. 2023, "The Impact of Positional Encoding on Length Generalization in
Transformers", arXiv:2305.19466; Golovneva et al. 2024, "Contextual Position Encoding: Learning to
Count What's Important", arXiv:2405.18719; Liu et al. 2023, "Exposing Attention Glitches with
Flip-Flop Language Modeling", arXiv:2306.00946).

Every example is one sequence ``[TASK] prompt [SEP] answer [EOS]``; the loss and the score cover
the answer and EOS only. Size ``n`` is the number of items (digits) of the prompt:

- ``copy``:    ``a1..an``            -> ``a1..an``
- ``reverse``: ``a1..an``            -> ``an..a1``
- ``sort``:    ``a1..an``            -> the digits in ascending order
- ``add``:     ``a1..an + b1..bn``   -> ``c1..c(n+1)``, every number least-significant digit first
- ``passkey``: ``4n`` filler tokens with ``[KEY] k1..k5`` hidden at a random place -> ``k1..k5``

and the tasks where what must be counted or found is decided by the tokens, not by their index
(``CONTENT``; the formats are in ``count_example``, ``selective_copy_example`` and ``flip_flop_example``):

- ``count1``, ``count3``, ``count5``: ``2n`` statements on 1, 3 or 5 variables, then
  ``print v`` -> how many times ``v`` was incremented since it was last set to 0 (Golovneva et al.);
- ``selective_copy``: ``n`` digits among ``2n`` blanks -> the ``n`` digits in order (Gu & Dao 2023,
  as used by Golovneva et al.);
- ``flip_flop``: ``n`` instructions ``w b`` / ``i b`` / ``r b`` then ``r`` -> the last written bit
  (Liu et al.), ignore instructions with probability ``FLIP_FLOP_IGNORE["flip_flop"]``;
  ``flip_flop_sparse`` is the same task evaluated sparser (``FLIP_FLOP_IGNORE["flip_flop_sparse"]``):
  it is never trained (``TRAINED_AS``), it is flip_flop's test at higher ignore probability.

Token ids: the first 25 (digits, markers, the first five task tokens) are those the tasks had
before the content tasks; the content tasks' tokens come after them, so old results keep their
meaning and a model that learns only the first five tasks keeps its vocabulary (``vocab_size``).

Exact match: an example is right when every answer token is the model's argmax given the true
prefix (teacher forcing), which is the same as greedy decoding producing the whole answer.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

SEP, EOS, PAD, PLUS, KEY = 10, 11, 12, 13, 14
FILLERS = (15, 16, 17, 18, 19)
ALGORITHMIC = ("copy", "reverse", "sort", "add", "passkey")
CONTENT = ("count1", "count3", "count5", "selective_copy", "flip_flop", "flip_flop_sparse")
TASKS = ALGORITHMIC + CONTENT
TRAINED_AS = {"flip_flop_sparse": "flip_flop"}
"""An evaluation-only task -> the task a model learns for it (same format, same task token)."""
PASSKEY_DIGITS = 5

# Token ids. 0..24 are those of the five algorithmic tasks; everything else is appended after them.
_BASE = 20 + len(ALGORITHMIC)  # 25
TASK_TOKEN = {name: 20 + i for i, name in enumerate(ALGORITHMIC)}
TASK_TOKEN.update({name: _BASE + i for i, name in enumerate(t for t in CONTENT if t not in TRAINED_AS)})
TASK_TOKEN.update({name: TASK_TOKEN[to] for name, to in TRAINED_AS.items()})
_NEXT = _BASE + len(CONTENT) - len(TRAINED_AS)  # 30
VARIABLES = tuple(range(_NEXT, _NEXT + 5))  # a, b, c, d, e
SET0, INC, PASS, SEMI, PRINT = range(_NEXT + 5, _NEXT + 10)  # "= 0", "++", "pass", ";", "print"
BLANK = _NEXT + 10  # selective copy's noise token
WRITE, IGNORE, READ = range(_NEXT + 11, _NEXT + 14)  # flip-flop's instructions w, i, r
VOCAB_SIZE = _NEXT + 14
"""Tokens of every task (44); a model that learns only ``ALGORITHMIC`` needs 25 (``vocab_size``)."""

COUNT_VARIABLES = {"count1": 1, "count3": 3, "count5": 5}
COUNT_WEIGHTS = (1, 4, 5)
"""Relative weights of the statements ``v = 0``, ``v ++`` and ``pass``. The official generator
(facebookresearch/RAM, projects/cope/scripts/count_data_gen.py) uses 1 : 7 : 50 over up to 512
statements; at our 2…80 statements the rarer increments of those weights would leave almost every
answer 0 or 1, so the same three statements are drawn denser."""
COUNT_MAX = 9
"""Largest value (the official generator: 10); an increment past it is drawn again, as there, so
the answer is one digit token."""
FLIP_FLOP_IGNORE = {"flip_flop": 0.8, "flip_flop_sparse": 0.98}
"""Probability of an ignore instruction (Liu et al.'s FFL(0.8) training distribution and their
sparse test, p_i = 0.98); write and read share the rest equally."""
GENERATORS = {"count_weights": COUNT_WEIGHTS, "count_max": COUNT_MAX, "flip_flop_ignore": FLIP_FLOP_IGNORE,
              "selective_copy_blanks_per_digit": 2}
"""The content tasks' generator settings: a part's settings hash takes them in when it runs one."""


def vocab_size(tasks: tuple[str, ...] | list[str]) -> int:
    """Tokens a model needs for ``tasks``: 25 for the algorithmic ones alone (their old vocabulary)."""
    return VOCAB_SIZE if any(t in CONTENT for t in tasks) else _BASE


def trained(tasks: tuple[str, ...] | list[str]) -> list[str]:
    """The tasks a model learns to be evaluated on ``tasks`` (an evaluation-only task: the one it tests)."""
    return list(dict.fromkeys(TRAINED_AS.get(t, t) for t in tasks))


def check_task(task: str) -> str:
    if task not in TASKS:
        raise ValueError(f"task must be one of {', '.join(TASKS)}; got {task!r}")
    return task


def seq_len(task: str, n: int) -> int:
    """Tokens in one example of ``task`` at size ``n`` (all examples of a size have this length)."""
    check_task(task)
    if task in COUNT_VARIABLES:
        return 4 * n + 6  # [TASK] 2n statements of two tokens, print v [SEP] answer [EOS]
    if task in FLIP_FLOP_IGNORE:
        return 2 * n + 5  # [TASK] n instruction-bit pairs, r [SEP] bit [EOS]
    return {"copy": 2 * n + 3, "reverse": 2 * n + 3, "sort": 2 * n + 3, "add": 3 * n + 5,
            "selective_copy": 4 * n + 3,
            "passkey": 4 * n + PASSKEY_DIGITS + 1 + PASSKEY_DIGITS + 3}[task]


def _digits(n: int, g: torch.Generator) -> list[int]:
    return torch.randint(0, 10, (n,), generator=g).tolist()


def _pick(weights: tuple[float, ...], g: torch.Generator) -> int:
    return int(torch.multinomial(torch.tensor(weights, dtype=torch.float64), 1, generator=g))


def count_example(n: int, variables: int, g: torch.Generator) -> tuple[list[int], list[int]]:
    """Golovneva et al. 2024's counting task (§4, "Counting"; the official generator, see
    ``COUNT_WEIGHTS``): ``2n`` statements, each two tokens,

        ``v =0`` (``v`` set to 0; any of the ``variables``), ``v ++`` (``v`` incremented; a variable
        already set), ``pass ;`` (nothing),

    then ``print v`` for a variable already set; the answer is ``v``'s value: the increments of
    ``v`` since it was last set to 0. As in the official generator, a statement that cannot be
    made (an increment before any variable is set, or past ``COUNT_MAX``) is drawn again, and an
    example in which no variable is ever set is drawn again. Prompt and answer."""
    for _ in range(1000):
        values: dict[int, int] = {}
        prompt: list[int] = []
        while len(prompt) < 4 * n:
            op = _pick(COUNT_WEIGHTS, g)
            if op == 0:
                v = VARIABLES[int(torch.randint(0, variables, (1,), generator=g))]
                values[v] = 0
                prompt += [v, SET0]
            elif op == 1:
                if not values:
                    continue
                v = sorted(values)[int(torch.randint(0, len(values), (1,), generator=g))]
                if values[v] == COUNT_MAX:
                    continue
                values[v] += 1
                prompt += [v, INC]
            else:
                prompt += [PASS, SEMI]
        if values:
            v = sorted(values)[int(torch.randint(0, len(values), (1,), generator=g))]
            return [*prompt, PRINT, v], [values[v]]
    raise RuntimeError(f"no variable set in 1000 draws of {2 * n} statements")  # pragma: no cover


def selective_copy_example(n: int, g: torch.Generator) -> tuple[list[int], list[int]]:
    """Selective copying (Gu & Dao 2023, "Mamba", §3.1; Golovneva et al. 2024's selective copy):
    ``n`` digits at random places among ``2n`` ``BLANK`` tokens -> the ``n`` digits in their order."""
    digits = _digits(n, g)
    at = sorted(torch.randperm(3 * n, generator=g)[:n].tolist())
    prompt = [BLANK] * (3 * n)
    for i, d in zip(at, digits):
        prompt[i] = d
    return prompt, digits


def flip_flop_example(n: int, ignore: float, g: torch.Generator) -> tuple[list[int], list[int]]:
    """Flip-flop language (Liu et al. 2023, §3): ``n`` instructions, each an instruction token and a
    bit (digit 0 or 1): the first is ``w`` (write), the others ``i`` (ignore) with probability
    ``ignore``, else ``w`` or ``r`` (read) with equal probability; every bit is drawn at random
    except a read's, which is the last written bit. Then ``r``; the answer is the last written bit."""
    write = (1.0 - ignore) / 2
    prompt: list[int] = []
    memory = 0
    for k in range(n):
        op = 0 if k == 0 else _pick((write, ignore, write), g)
        bit = int(torch.randint(0, 2, (1,), generator=g))
        if op == 0:
            memory = bit
        elif op == 2:
            bit = memory
        prompt += [(WRITE, IGNORE, READ)[op], bit]
    return [*prompt, READ], [memory]


def example(task: str, n: int, g: torch.Generator) -> tuple[list[int], int]:
    """One example: its tokens and the index of the first answer token."""
    check_task(task)
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
    elif task in COUNT_VARIABLES:
        prompt, answer = count_example(n, COUNT_VARIABLES[task], g)
    elif task == "selective_copy":
        prompt, answer = selective_copy_example(n, g)
    else:
        prompt, answer = flip_flop_example(n, FLIP_FLOP_IGNORE[task], g)
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
