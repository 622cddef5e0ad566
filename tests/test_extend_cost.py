"""``python -m posenc.extend.cost``: one forward's time and peak memory, on the tiny Llama of
tests/test_extend.py, and a length that would not fit refused before it is allocated."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from test_extend import CONTEXT, tiny  # noqa: E402,F401  (the module-scoped tiny model)


def test_one_forward_reports_its_time_and_peak_memory(tiny):  # noqa: F811
    from posenc.extend.cost import one_forward

    row = one_forward(tiny, 2 * CONTEXT, method="yarn", threads=1)
    assert row["length"] == 2 * CONTEXT and row["factor"] == 2.0 and row["threads"] == 1
    assert row["seconds"] >= 0 and row["estimate"] > 0
    assert row["vm_hwm"] >= row["vm_hwm_loaded"] > 0


def test_a_length_that_does_not_fit_is_refused_in_one_line(tiny, capsys):  # noqa: F811
    from posenc.extend.cost import main

    assert main(["--one", "--length", str(1 << 31), str(tiny)]) == 2
    err = capsys.readouterr().err
    assert "GiB are available" in err and len(err.strip().splitlines()) == 1, err
