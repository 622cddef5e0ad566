"""The train-short-test-long benchmark behind ``posenc extrapolate``, ``posenc report`` and
``posenc data`` (their command lines: ``posenc/commands/extrapolate.py`` and ``data.py``): a
small decoder-only transformer whose positional encoding is any posenc spec, offline tasks, the
extrapolation runner and the HTML report.

    posenc extrapolate --profile quick      # results appended to extrapolate-quick.jsonl
    posenc report --profile quick --out report

Modules, in dependency order: ``model`` (TinyGPT on ``posenc.attention``), ``data`` (corpus and
the held-out protocol), ``tasks`` (copy, reverse, sort, add, passkey), ``profiles`` (smoke /
quick / full), ``train``, ``evaluate``, ``distributed`` (torchrun), ``results`` (crash-safe
JSONL), ``plan`` (runs and their keys), ``runs`` (what one run does), ``driver`` (every run of
a profile: resume, worker processes), ``stats`` and ``findings`` (uncertainty; the papers'
claims checked), ``figures``, ``page``, ``demos``, ``report``. Nothing here is imported by
``import posenc``.
"""
