"""The statistics both benchmarks use (``posenc extrapolate``/``posenc report`` and ``posenc extend``):
distributions, estimates, the verdict procedure, the verdicts themselves, the pages' shared parts
and the results store. NumPy only (no torch, no SciPy); neither benchmark is imported here.

- ``distributions``: the distributions written out, one definition each: the incomplete beta
  (``beta_inc``), Student's t (``t_sf``, ``t_quantile``, ``t_two_sided_p``, ``t_critical``), the
  normal's quantile, the F (``f_sf``), the noncentral t's tail, McNemar's exact test
  (``mcnemar_exact``) and Holm's step-down (``holm``);
- ``procedure``: the verdict procedure: a claim's seed-level evidence (``Evidence``), the seed
  spread pooled per part, the decision (``decide``, Holm per paper), the detectable effect
  (``detectable``) and the constants (``ALPHA``, ``MIN_SEEDS``, ``NEEDS_SEEDS``, ``UNCLEAR``);
- ``estimates``: uncertainty of the measured numbers: the Newey–West error of a series
  (``hac_se``), ``Estimate`` and ``combine`` over seeds and blocks, ``paired`` (block by block,
  seeds paired by id), and the tables of records they rest on (``LMTable``, ``TaskTable`` of ``Cell``);
- ``findings``: a paper's claim and its verdict (``Verdict``), decided per paper (``adjust``), from
  seed-level evidence (``seed_verdict``, ``tested``), the non-inferiority ``MARGIN``;
- ``page_parts``: the pages' shared parts: ``Page`` (one self-contained HTML document), ``table``,
  ``status`` (a verdict's badge), ``e`` (escaping);
- ``results``: the results store: crash-safe JSON Lines (``ResultStore``, ``load``).

The layers: ``distributions`` ← ``procedure`` ← ``estimates`` ← ``findings``; ``page_parts`` and
``results`` stand alone. ``tests/test_layers.py`` keeps this package below both benchmarks.
"""
