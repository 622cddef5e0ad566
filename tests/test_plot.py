"""posenc.plot: every figure is drawn, labelled and written to a non-empty file."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from matplotlib.colors import to_hex  # noqa: E402

from posenc import plot  # noqa: E402

FIGURES = {
    "heatmap": lambda: plot.heatmap("sinusoidal", length=32, dim=16),
    "heatmap_rotary": lambda: plot.heatmap("rope", length=32, dim=16),
    "similarity": lambda: plot.similarity("sinusoidal", length=32, dim=16),
    "score_vs_distance": lambda: plot.score_vs_distance(["sinusoidal", "rope", "alibi", "nope"], length=32, dim=16),
    "rope_decay": lambda: plot.rope_decay(dim=32, max_distance=64),
    "fingerprints": lambda: plot.fingerprints("rope", length=32, dim=16),
    "spectrum": lambda: plot.spectrum("rope:scaling=linear,factor=4", dim=32, context=64),
    "bias_maps": lambda: plot.bias_maps("t5", length=12, num_heads=3),
    "show_rotary": lambda: plot.show("rope", length=32, dim=16),
}


def _check_labelled(fig) -> None:
    """Every visible plot has both axis labels; every image has a labelled colorbar."""
    axes = [ax for ax in fig.axes if ax.get_visible()]
    colorbars = [ax for ax in axes if ax.get_label() == "<colorbar>"]
    plots = [ax for ax in axes if ax not in colorbars]
    assert plots
    for ax in plots:
        shared_y = any(ax.get_ylabel() for ax in plots if ax.get_images())  # bias maps label the first column
        assert ax.get_xlabel() or ax.get_images(), f"no x label on {ax.get_title()!r}"
        assert ax.get_ylabel() or shared_y, f"no y label on {ax.get_title()!r}"
        for line in ax.get_lines():
            if line.get_label().startswith("_"):
                continue  # reference lines (y = 0)
            assert to_hex(line.get_color()) in {c.lower() for c in plot.OKABE_ITO} | {plot.MARK.lower()}
    if any(ax.get_images() for ax in plots):
        assert colorbars and all(cb.get_ylabel() for cb in colorbars)


@pytest.mark.parametrize("name", FIGURES)
def test_figure_is_labelled_and_written(name, tmp_path):
    fig = FIGURES[name]()
    _check_labelled(fig)
    path = plot.save(fig, tmp_path / f"{name}.png", dpi=50)
    data = open(path, "rb").read()
    assert data.startswith(b"\x89PNG") and len(data) > 2000


def test_svg_and_bad_paths(tmp_path):
    fig = plot.rope_decay(dim=16, max_distance=16)
    path = plot.save(fig, tmp_path / "decay.svg")
    assert b"<svg" in open(path, "rb").read()[:500]
    with pytest.raises(ValueError, match=r"\.png, \.svg, \.pdf"):
        plot.save(fig, tmp_path / "decay.jpg")
    with pytest.raises(ValueError, match="does not exist"):
        plot.save(fig, tmp_path / "missing" / "decay.png")


def test_show_refuses_nope():
    with pytest.raises(ValueError, match="no positional signal"):
        plot.show("nope")
