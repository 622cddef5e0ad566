"""The former name of ``posenc.extrapolate.parts.scaling`` (the ``scaling`` part): importing
``posenc.extrapolate.parts.scalings`` gives that module itself, so old imports keep working and see
the same objects."""

import sys

from posenc.extrapolate.parts import scaling

sys.modules[__name__] = scaling
