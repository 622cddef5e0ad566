"""Section 2 of the report: the seed texts' claims, demonstrated with ``posenc.demo``,
``posenc.plot`` and ``posenc.analysis`` (order blindness without position, the sinusoidal
fingerprint and its linear shift, similarity against distance, RoPE's decay, ALiBi and T5 biases,
RoPE scaling as a change of frequencies, a learned table refusing an unseen position)."""

from __future__ import annotations

import posenc
from posenc.stats.page_parts import Page, e, table

_DRAWN: list[Page] = []  # the section as drawn the first time in this process, once it drew without an error


def demonstrations(page: Page) -> None:
    """The seed texts' claims, demonstrated with the analysis helpers, added to ``page``.

    They depend on posenc alone (every table is seeded, ``posenc.analysis.build``), never on the
    results, so a process that renders several reports (the tests, a notebook) draws them once: the
    section is kept after its first rendering without an error and added again as it was (eight
    figures, about 2 s of matplotlib on the 2-core machine)."""
    if _DRAWN:
        drawn = _DRAWN[0]
    else:
        drawn = Page()
        _draw(drawn)
        if not drawn.errors:  # a failure is shown, and tried again by the next report
            _DRAWN.append(drawn)
    page.parts += drawn.parts
    page.figures.update(drawn.figures)
    page.errors += drawn.errors


def _draw(page: Page) -> None:
    page.add("<h2>What positional encodings do (the claims, demonstrated)</h2>")
    try:
        from posenc import demo

        rows = demo.order_demo(["nope", "sinusoidal", "learned", "rope", "alibi", "t5", *demo.RECURRENT])
        page.add("<h3>Without position, “dog bites man” = “man bites dog”</h3><p>"
                 + e(getattr(demo, "SUMMARY", "")) + "</p><pre>" + e(demo.format_order_table(rows)) + "</pre>")
    except Exception as exc:  # the analysis helper is optional for the benchmark
        page.errors.append(f"order demo: {exc}")
        page.add(f'<p class="figure-error">order demo unavailable: {e(str(exc))}</p>')
    from posenc import plot

    page.add("<h3>Sinusoidal: a unique multi-frequency fingerprint per position</h3>")
    page.figure("sinusoidal_heatmap", lambda: plot.heatmap("sinusoidal", length=128, dim=64),
                "PE(pos, 2i) = sin(pos/10000<sup>2i/d</sup>), PE(pos, 2i+1) = cos(…): low dimensions oscillate "
                "fast, high ones slowly, like the bits of a binary counter.")
    page.figure("sinusoidal_fingerprints", lambda: plot.fingerprints("sinusoidal", length=128, dim=64),
                "Each position's vector differs from every other's.")
    page.add(_linear_map_note())
    page.figure("similarity", lambda: plot.similarity("sinusoidal", length=128, dim=64),
                "Cosine similarity of PE(p) and PE(q) depends on |p − q| only.")
    page.figure("score_vs_distance", lambda: plot.score_vs_distance(
        ["sinusoidal", "rope", "alibi", "t5", "nope"], length=256, dim=64),
        "The positional signal of each kind against relative distance.")
    page.add("<h3>RoPE rotates q and k; ALiBi and T5 bias the scores</h3>")
    page.figure("rope_decay", lambda: plot.rope_decay(dim=128, base=10000, max_distance=256),
                "RoPE: q·k with q = k depends only on the distance and decays with it (RoFormer's bound).")
    page.figure("alibi_bias", lambda: plot.bias_maps("alibi", length=64),
                "ALiBi: −m<sub>h</sub>·|i − j|, a linear distance penalty per head.")
    page.figure("t5_bias", lambda: plot.bias_maps("t5", length=64),
                "T5: a learned scalar per head and log-spaced distance bucket (random init here).")
    page.figure("rope_scaling_spectrum", lambda: plot.spectrum(
        {"scheme": "rope", "head_dim": 64, "scaling": {"type": "yarn", "factor": 4, "original_max_positions": 64}}),
        "RoPE scaling (YaRN ×4) changes only the frequencies: low frequencies are interpolated, high ones kept.")


def _linear_map_note() -> str:
    try:
        from posenc import analysis

        rows = []
        for spec in ("sinusoidal", "learned"):
            tab = analysis.table(spec, length=160, dim=64) if spec == "sinusoidal" else \
                analysis.table({"scheme": "learned", "d_model": 64, "max_positions": 160}, length=160, dim=64)
            res = [analysis.linear_map(tab, k)[1] for k in (1, 7, 30)]
            rows.append([spec] + [f"{r:.1e}" for r in res])
        import torch

        learned = posenc.build({"scheme": "learned", "d_model": 64, "max_positions": 128})
        try:
            learned(torch.arange(200))
            msg = "(it ran)"
        except ValueError as exc:
            msg = str(exc)
        return ("<p>PE(pos + k) is a linear function of PE(pos) for the sinusoidal table (a rotation per "
                "frequency), not for a learned one: the least-squares residual max|PE[k:] − PE[:−k]·M<sub>k</sub>ᵀ| / "
                "max|PE| over 160 positions:</p>" + table(["table", "k = 1", "k = 7", "k = 30"], rows)
                + f"<p>Being a fixed function, the sinusoidal table exists at any position; a learned table "
                  f"with 128 rows asked for position 199 answers: <code>{e(msg)}</code></p>")
    except Exception as exc:  # the analysis helper is optional for the benchmark
        return f'<p class="figure-error">linear-map check unavailable: {e(str(exc))}</p>'
