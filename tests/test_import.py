"""Import hygiene, checked in fresh interpreters: the reference needs no torch, and ``import posenc``
imports neither torch nor the optional peers until they are used."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import posenc

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "matplotlib", "transformers", "x_transformers", "rotary_embedding_torch")


def _run(code: str) -> dict:
    """Runs ``code`` in a fresh interpreter at the repository root; it prints one JSON line."""
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_reference_imports_and_runs_without_torch():
    out = _run("""
        import json, sys
        sys.modules["torch"] = None  # any `import torch` now raises ImportError
        import numpy as np
        import posenc.reference as ref
        p = np.arange(5)
        x = np.ones((1, 2, 5, 8))
        checks = [
            ref.sinusoidal(p, 8).shape,
            ref.rope(x, p, ref.rope_inv_freq(8)).shape,
            ref.alibi(p, p, ref.alibi_slopes(2)).shape,
            ref.t5(p, p, np.ones((32, 2))).shape,
            ref.attention(x, x, x, causal=True).shape,
        ]
        loaded = sorted(m for m in sys.modules if m.split(".")[0] == "torch" and sys.modules[m] is not None)
        print(json.dumps({"shapes": [list(s) for s in checks], "torch": loaded}))
    """)
    assert out["torch"] == []
    assert out["shapes"] == [[5, 8], [1, 2, 5, 8], [2, 5, 5], [2, 5, 5], [1, 2, 5, 8]]


def test_import_posenc_is_light_until_used():
    out = _run(f"""
        import json, sys
        import posenc
        posenc.__version__
        dir(posenc)
        after_import = sorted(m for m in {HEAVY!r} if m in sys.modules)
        import torch
        m = posenc.build({{"scheme": "alibi", "num_heads": 2}})
        q = torch.randn(1, 2, 3, 4)
        posenc.attention(q, q, q, m)
        posenc.build({{"scheme": "rope", "head_dim": 4}})(q, torch.arange(3))
        after_use = sorted(m for m in {HEAVY!r} if m in sys.modules)
        print(json.dumps({{"after_import": after_import, "after_use": after_use}}))
    """)
    assert out["after_import"] == []
    assert out["after_use"] == ["torch"]  # the core never pulls in plots or peers


@pytest.mark.parametrize("name", posenc.__all__)
def test_every_public_name_resolves(name):
    assert getattr(posenc, name) is not None
    assert name in dir(posenc)


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'rope'"):
        posenc.rope  # noqa: B018


def test_a_documented_submodule_runs_with_python_m_without_a_warning():
    """``python -m posenc.extend.cost`` (docs/guide/extend.md): the package imports its documented
    submodules on first access, so runpy finds none of them imported before it runs one."""
    out = _run("""
        import json, sys
        import posenc.extend
        before = "posenc.extend.cost" in sys.modules
        cost = posenc.extend.cost
        print(json.dumps({"before": before, "after": "posenc.extend.cost" in sys.modules,
                          "same": cost is sys.modules["posenc.extend.cost"]}))
    """)
    assert out == {"before": False, "after": True, "same": True}
