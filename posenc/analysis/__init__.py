"""What an encoding looks like, as numbers: the quantities courses draw and practitioners check.

Every function works from the registry and the module kinds, never from a scheme's name, so a
newly registered scheme is analysed without edits here:

- ``additive`` (``module(positions)``): the table, cosine similarity vs distance, the linear map
  ``PE(pos + k) = M_k · PE(pos)``, fingerprint distinctness;
- ``rotary`` (``module(x, positions)``, ``cos_sin``, ``inv_freq``): ``q·k`` vs relative distance,
  RoFormer's long-term decay bound, the frequency spectrum before and after scaling;
- ``bias`` (``module(q_positions, k_positions)``): the per-head bias maps;
- ``relative`` (``module(q, k, q_positions, k_positions)``): the term with ``q = k = 1``;
- ``none``: no positional signal (a flat zero where a curve is asked for).

Analyses that do not fit a kind raise ``NotApplicable`` (a ValueError) saying so. Results are
float64 NumPy arrays; modules run in float64.

Modules, by what they analyse: ``tables`` (one vector per position), ``frequencies``, ``curves``
(scores against distance), ``grids`` (2D maps), ``numbers`` (the key numbers), ``kinds`` (the table
from kind to quantity, ``KIND_ANALYSIS``) and ``base`` (building the modules, shared helpers).
"""

from __future__ import annotations

from posenc import registry
from posenc.analysis.base import (build, coinciding, DEFAULT_HEADS, KIND_ANALYSIS, KindAnalysis,  # noqa: F401
                                  NotApplicable, progress, SAME_KERNEL, SAME_SIGNAL, shown_label, text_table,
                                  untrained, WHY_SAME)
from posenc.analysis.tables import (cosine_similarity_matrix, FINGERPRINT_RTOL, linear_map,  # noqa: F401
                                    min_fingerprint_distance, nearest_neighbour_distances, ROTATION_ULPS,
                                    similarity_vs_distance, table)
from posenc.analysis.frequencies import inv_freq, Spectrum, spectrum, turns, wavelengths  # noqa: F401
from posenc.analysis.curves import (QUANTITY, bias_maps, content_weights, Curve, rope_decay_bound,  # noqa: F401
                                    rotary_scores, score_term, score_vs_distance)
from posenc.analysis.grids import (GRID_QUANTITY, default_grid, grid_map, grid_numbers, grid_positions_for,  # noqa: F401
                                   GridMap)
from posenc.analysis.numbers import key_numbers  # noqa: F401
from posenc.spec import label  # noqa: F401 - the label analyses print
import posenc.analysis.kinds  # noqa: F401,E402 - fills KIND_ANALYSIS


def describe_params(name: str) -> str:
    """``key=default, ...`` of a registered scheme, required keys marked ``key=<required>``."""
    return ", ".join(f"{k}={v!r}" for k, v in registry.get(name).params.items()) or "(no parameters)"


__all__ = [
    "NotApplicable", "build", "table", "cosine_similarity_matrix", "similarity_vs_distance", "linear_map",
    "nearest_neighbour_distances", "min_fingerprint_distance", "FINGERPRINT_RTOL", "wavelengths", "turns", "inv_freq",
    "Spectrum", "spectrum", "rotary_scores", "rope_decay_bound", "score_term", "bias_maps", "Curve", "score_vs_distance",
    "key_numbers", "describe_params", "content_weights", "GridMap", "KIND_ANALYSIS", "KindAnalysis", "grid_map", "grid_numbers", "grid_positions_for", "default_grid",
]
