"""Input checks shared by the reference functions (NumPy only): the positions model lives in
``posenc.reference.positions``; these names stay for the reference files that import them."""

from posenc.reference.positions import distance, positions_array

__all__ = ["distance", "positions_array"]
