"""The specification: every scheme as a short NumPy float64 function.

Nothing here imports torch. The torch modules in ``posenc.encodings`` are tested against these
functions at several dtypes, odd lengths and offsets; when the two disagree, this is right.

Positions follow ``posenc.reference.positions``: ``[L]``/``[B, L]`` for one axis, ``[L, A]``/
``[B, L, A]`` for several; integers, or reals for the schemes that are functions of position.
Relative distances are ``k - q``.
"""

from posenc.reference.attention import attention, softmax
from posenc.reference.sinusoidal import sinusoidal, sinusoidal_inv_freq
from posenc.reference.learned import learned
from posenc.reference.positions import angles, grid_positions, positions_array, segment_positions
from posenc.reference.rope import (
    proportional_rope_inv_freq, proportional_rope_inv_freq_exact, rope, rope_angles, rope_axial, rope_inv_freq,
    rope_inv_freq_exact, rotate_pairs_index,
)
from posenc.reference.alibi import alibi, alibi_slopes
from posenc.reference.t5 import t5, t5_bucket

__all__ = [
    "attention", "softmax",
    "sinusoidal", "sinusoidal_inv_freq",
    "learned",
    "angles", "grid_positions", "positions_array", "segment_positions",
    "proportional_rope_inv_freq", "proportional_rope_inv_freq_exact",
    "rope", "rope_angles", "rope_axial", "rope_inv_freq", "rope_inv_freq_exact", "rotate_pairs_index",
    "alibi", "alibi_slopes",
    "t5", "t5_bucket",
]
from posenc.reference.shaw import shaw, shaw_attention, shaw_index, shaw_value
from posenc.reference.transformer_xl import relative_sinusoid, transformer_xl
from posenc.reference.kerple import kerple
from posenc.reference.fire import fire, fire_input
from posenc.reference.rope_mixed import rope_mixed, rope_mixed_angles
from posenc.reference.mrope import default_sections, mrope, mrope_angles, mrope_axis_of_pair, mrope_positions

__all__ += [
    "shaw", "shaw_attention", "shaw_index", "shaw_value",
    "relative_sinusoid", "transformer_xl",
    "kerple",
    "fire", "fire_input",
    "rope_mixed", "rope_mixed_angles",
    "default_sections", "mrope", "mrope_angles", "mrope_axis_of_pair", "mrope_positions",
]
from posenc.reference.ssm import ssm, ssm_decay, ssm_scan

__all__ += ["ssm", "ssm_decay", "ssm_scan"]
from posenc.reference.deberta import (deberta, deberta_attention, deberta_bucket, deberta_index, deberta_project,
                                      deberta_span)

__all__ += ["deberta", "deberta_attention", "deberta_bucket", "deberta_index", "deberta_project", "deberta_span"]
from posenc.reference.nope_temperature import nope_temperature, nope_temperature_scale, query_temperature_scale

__all__ += ["nope_temperature", "nope_temperature_scale", "query_temperature_scale"]
from posenc.reference.attention import causal_mask, log_sigmoid, masked_attention, visibility_mask
from posenc.reference.fox import fox, fox_log_gates
from posenc.reference.cope import cope, cope_positions
from posenc.reference.dape import dape, token_positions
from posenc.reference.stick_breaking import stick_breaking, stick_breaking_weights
from posenc.reference.path import path, path_gates

__all__ += [
    "causal_mask", "log_sigmoid", "masked_attention", "visibility_mask",
    "fox", "fox_log_gates", "cope", "cope_positions", "dape", "token_positions",
    "stick_breaking", "stick_breaking_weights", "path", "path_gates",
]
from posenc.reference.digits import coupled_positions, digit_positions

__all__ += ["coupled_positions", "digit_positions"]
from posenc.reference.pope import pope, pope_inv_freq, pope_scores
from posenc.reference.fope import fope, fope_cos_sin, fope_inv_freq

__all__ += ["pope", "pope_inv_freq", "pope_scores", "fope", "fope_cos_sin", "fope_inv_freq"]
from posenc.reference.dinov3 import dinov3, dinov3_angles, dinov3_augment, dinov3_coordinates, dinov3_inv_freq
from posenc.reference.videorope import videorope, videorope_axis_of_pair, videorope_positions
from posenc.reference.liere import expm_skew, liere, liere_generators, liere_rotations

__all__ += [
    "dinov3", "dinov3_angles", "dinov3_augment", "dinov3_coordinates", "dinov3_inv_freq",
    "videorope", "videorope_axis_of_pair", "videorope_positions",
    "expm_skew", "liere", "liere_generators", "liere_rotations",
]
from posenc.reference.dual_chunk import (dual_chunk, dual_chunk_key_positions, dual_chunk_query_positions,
                                         dual_chunk_scores, dual_chunk_temperature)

__all__ += ["dual_chunk", "dual_chunk_key_positions", "dual_chunk_query_positions", "dual_chunk_scores",
            "dual_chunk_temperature"]
