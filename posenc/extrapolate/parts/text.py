"""The former name of ``posenc.extrapolate.parts.lm`` (the ``lm`` part): importing
``posenc.extrapolate.parts.text`` gives that module itself, so old imports keep working and see
the same objects."""

import sys

from posenc.extrapolate.parts import lm

sys.modules[__name__] = lm
