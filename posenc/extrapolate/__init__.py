"""The train-short-test-long benchmark behind ``posenc extrapolate``, ``posenc report`` and
``posenc data`` (their command lines: ``posenc/commands/extrapolate.py`` and ``data.py``): a
small decoder-only transformer whose positional encoding is any posenc spec, offline tasks, the
extrapolation runner and the HTML report.

    posenc extrapolate --profile quick      # results appended to extrapolate-quick.jsonl
    posenc report --profile quick --out report

Cut by part: ``parts/`` holds one module per part of the benchmark (``lm``, ``hybrid``,
``scaling``, ``tasks``, ``structure``, ``image``, ``time``, ``pretrained``), each owning its runs,
its evaluation, its claims and its section of the page behind one interface (``part.Part``);
``parts.PARTS`` holds the parts themselves, ``PART_NAMES`` (below) is the one list of their names.
The shared machinery knows no part by name, in dependency order: ``model`` (TinyGPT on
``posenc.attention``), ``data`` (corpus and the held-out protocol), ``task_generators`` (copy,
reverse, sort, add, passkey), ``structured_positions`` (positions made from the tokens: BiPE's
segments, HiRoPE's lines, Abacus, coupling), ``profiles`` (smoke / quick / full: every part's
settings), ``stack`` (a configuration's seeds as one model), ``train``, ``vision`` (the image and
time parts' classifier), ``evaluate`` (can a model run at a length), ``distributed`` (torchrun),
``plan`` (runs, their keys, their order), ``part``, ``runs`` (a run's record), ``driver`` (every
run of a profile: resume, worker processes), ``accuracy`` (accuracy compared example by example),
``figures``, ``glance`` (the verdicts at a glance: table and forest plot), ``demos``, ``report``
(the page). The statistics, the verdicts, the page's shared parts and the results file are
``posenc.stats``'s, shared with ``posenc extend``: ``procedure`` (the verdict procedure:
seed-level tests pooled per part, Holm per paper, the detectable effect), ``estimates``,
``findings``, ``page_parts``, ``results`` (crash-safe JSONL). Nothing here is imported by
``import posenc``.
"""

PART_NAMES = ("lm", "scaling", "tasks", "image", "time", "pretrained")
"""The parts a user picks (``--part``; a record's ``part``), in the order of the plan: ``lm``:
language modelling per scheme; ``scaling``: RoPE scalings on the trained RoPE model; ``tasks``:
algorithmic tasks and passkey retrieval per scheme; ``image``: digits classified at larger grids
than trained (``posenc.extrapolate.vision``); ``time``: event order and gaps at other frame rates;
``pretrained``: RoPE scalings on a pretrained LLM (``posenc extend``; runs in the full profile only).
The one list of their names (``posenc.extrapolate.parts.PARTS`` holds the parts themselves, in this
order, with those that add rows to others: hybrid, structure; ``profiles.DEFAULT_PARTS`` is derived
from it); here, so that the command line reads it without importing torch."""
