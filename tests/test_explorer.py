"""``posenc explore`` writes one self-contained offline page; its schema comes from the registry.

The page's behaviour is tested in a real browser in ``test_explorer_browser.py``.
"""

from __future__ import annotations

import json
import re

from posenc import explorer, registry, scaling
from posenc.cli import main


def test_explore_writes_one_small_self_contained_page(tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["explore", "--out", str(out)]) == 0
    assert f"wrote {out / 'index.html'}" in capsys.readouterr().out
    page = (out / "index.html").read_bytes()
    assert len(page) < 1_000_000
    text = page.decode()
    assert f'http-equiv="Content-Security-Policy" content="{explorer.CSP}"' in text.replace("&#x27;", "'")
    assert "default-src 'none'" in explorer.CSP and "connect-src" not in explorer.CSP  # every fetch refused
    assert "http://" not in text and "https://" not in text
    assert not re.search(r"""(src|href)=["']""", text), "nothing to load: scripts and styles are inline"
    assert 'id="key-numbers"' in text and [p.name for p in out.iterdir()] == ["index.html"]


def test_schema_is_the_registry(tmp_path):
    data = explorer.schema()
    assert list(data["schemes"]) == list(explorer.PAGE_SCHEMES)
    for name in explorer.PAGE_SCHEMES:
        assert [k for k, _ in data["schemes"][name]["params"]] == list(registry.get(name).params)
    assert list(data["scalings"]) == list(scaling.SCALINGS)
    assert data["all_schemes"] == registry.schemes()
    # typed values survive JSON: int vs float, dict order, required
    assert explorer._typed(4) == {"$int": "4"} and explorer._typed(4.0) == {"$float": 4.0}
    assert explorer._typed({"b": 1, "a": None}) == {"$dict": [["b", {"$int": "1"}], ["a", None]]}
    rope = dict(data["schemes"]["rope"]["params"])
    assert rope["head_dim"] == {"$required": True} and rope["base"] == {"$float": 10000.0}
    json.dumps(data)


def test_out_must_be_a_folder(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["explore", "--out", str(f)]) == 2
    err = capsys.readouterr().err
    assert "exists and is not a folder" in err and len(err.strip().splitlines()) == 1


def test_open_opens_the_page_in_the_default_browser(tmp_path, monkeypatch, capsys):
    import webbrowser

    opened = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    assert main(["explore", "--out", str(tmp_path), "--open"]) == 0
    assert opened == [(tmp_path / "index.html").resolve().as_uri()]


def test_every_script_file_is_in_the_page():
    from importlib import resources

    files = sorted(p.name for p in resources.files("posenc.explorer").joinpath("js").iterdir() if p.name.endswith(".js"))
    assert sorted(explorer.JS_FILES) == files
    script = explorer.script()
    assert all(f"// ---- {name}\n" in script for name in files)


def test_cope_panel_has_its_ids_and_posenc_show_copes_sentence():
    from posenc.encodings import cope
    from posenc.reference.cope import CONVENTIONS

    text = explorer.page()
    for name in ("fig-cope", "cope-sentence", "cope-marks", "cope-error", "cope-table", "cope-note"):  # contracts
        assert f'id="{name}"' in text, name
    assert explorer.schema()["cope"] == {"sentence": cope.SENTENCE, "max_text": cope.MAX_TEXT,
                                         "conventions": list(CONVENTIONS),
                                         "npos_max": registry.get("cope").params["npos_max"]}


def test_overlay_and_screen_ids_are_in_the_page():
    text = explorer.page()
    for name in ("spec-b", "spec-b-error", "key-numbers-b", "show-command-b", "overlay-numbers", "overlay-note",
                 "bias-scale"):  # contracts (spec-b: the issue's), documented in docs/guide/explorer.md
        assert f'id="{name}"' in text, name
    for name in ("spec", "scheme", "length", "dim", "heads", "grid", "patch", "grid-controls", "key-numbers",
                 "show-command", "not-shown", "fig-table", "fig-similarity", "fig-qk", "fig-wavelengths", "fig-grid",
                 "fig-bias", "fig-order", "fig-cope"):  # the ids in use before keep working
        assert f'id="{name}"' in text, name
    assert "spec-b" in explorer.script() and "eval(" not in explorer.script()  # the address is parsed, never run


SEGMENT_IDS = ("fig-segments", "segments-text", "segments-preset", "segments-command", "segments-grid",
               "segments-note", "segments-error")


def test_structure_panel_ids_are_in_the_page_and_documented():
    from pathlib import Path

    text = explorer.page()
    doc = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "explorer.md").read_text(encoding="utf-8")
    for name in SEGMENT_IDS:  # contracts, documented in docs/guide/explorer.md
        assert f'id="{name}"' in text, name
        assert f'`id="{name}"`' in doc, name
    assert "### Positions from structure" in doc
    for attribute in ("data-positions", "data-bytes", "data-separators"):
        assert f"`{attribute}`" in doc, attribute


def test_structure_presets_are_the_guides_separators():
    from pathlib import Path

    import posenc
    from posenc.encodings import bipe

    presets = explorer.schema()["segments"]["presets"]
    seps = {name: [[s.encode() for s in level] for level in p["separators"]] for name, p in presets.items()}
    assert seps == {"paragraphs": [[b"\n\n"], [b".", b"\n"]], "sentences": bipe.DEFAULT_SEPARATORS,
                    "code": [[b"\n\n"], [b"\n"]]}
    assert list(presets)[0] == "paragraphs" and presets["paragraphs"]["example"] == explorer.SEGMENT_TEXT
    assert presets["sentences"]["example"] == bipe.SENTENCE
    assert all(len(p["levels"]) == len(p["separators"]) for p in presets.values())
    # docs/guide/structure.md writes code's separators one byte string per level: the same positions
    guide = (Path(__file__).resolve().parents[1] / "docs" / "guide" / "structure.md").read_text(encoding="utf-8")
    assert 'separators=[b"\\n\\n", b"\\n"]' in guide
    code = explorer.SEGMENT_CODE.encode()
    assert posenc.segment_positions(code, [b"\n\n", b"\n"])[0].tolist() == \
        posenc.segment_positions(code, seps["code"])[0].tolist()
    # the defaults are laid out in full: two paragraphs of two sentences, under the panel's limit
    pos = posenc.segment_positions(explorer.SEGMENT_TEXT.encode(), seps["paragraphs"])[0].tolist()
    assert pos[-1][0] == 1 and len(explorer.SEGMENT_TEXT.encode()) <= explorer.SEGMENT_MAX_BYTES
    assert explorer.schema()["segments"]["max_bytes"] == explorer.SEGMENT_MAX_BYTES
