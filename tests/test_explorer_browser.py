"""The explorer page in a real browser: Debian's chromium, driven by selenium and chromium-driver.

One headless session for the whole module, the network switched off, the page opened from
``file://``. The key numbers are compared with ``posenc show``'s for parameters drawn at random
(seeded) over every scheme the page draws and every RoPE scaling type.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import re
import shutil
from contextlib import redirect_stdout
from urllib.parse import quote

import pytest

from posenc import analysis, explorer, scaling
from posenc.cli import CLIError, main
from posenc.commands.inspect import _spec

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("explorer")]


def _executables() -> tuple[str, str]:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        selenium = None
    if exe is None or driver is None or selenium is None:
        if os.environ.get("CI"):
            pytest.fail("chromium, chromium-driver or selenium is missing in CI; `make chromium` installs the "
                        "Debian packages and the test extra selenium")
        pytest.skip("needs Debian's chromium and chromium-driver (`make chromium`) and selenium; CI does not skip")
    return exe, driver


def headless_chromium(window: str, flags: tuple[str, ...] = (), *, logs: tuple[str, ...] = ("browser",),
                      offline: bool = False):
    """A headless Chromium session (selenium) of the given window size, with ``flags`` added to the
    common ones and the ``logs`` kept; ``offline`` switches its network off (DevTools' emulation)."""
    exe, driver_path = _executables()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = exe
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", f"--window-size={window}",
                 "--disable-background-networking", "--disable-component-update", "--no-first-run", *flags):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {log: "ALL" for log in logs})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    if offline:
        driver.execute_cdp_cmd("Network.enable", {})
        driver.execute_cdp_cmd("Network.emulateNetworkConditions", {
            "offline": True, "latency": 0, "downloadThroughput": 0, "uploadThroughput": 0})
    return driver


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    path = explorer.write(tmp_path_factory.mktemp("explorer"))
    driver = headless_chromium("1500,1400", offline=True)
    try:
        driver.get(path.as_uri())
        driver.uri = path.as_uri()
        yield driver
    finally:
        driver.quit()


def _renders(d) -> int:
    return int(d.execute_script("return document.documentElement.dataset.renders || '0'"))


def _wait_render(d, before: int) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 20).until(lambda x: _renders(x) > before)


def _console_errors(d) -> list[str]:
    return [e["message"] for e in d.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def _key_numbers(d, table: str = "key-numbers") -> list[list[str]]:
    return d.execute_script(
        f"return Array.from(document.querySelectorAll('#{table} tbody tr'))"
        ".map(function (r) { return Array.from(r.cells).map(function (c) { return c.textContent; }); })")


def _canvas(d, fig: str) -> str:
    return d.execute_script(f"return document.querySelector('#{fig} canvas').toDataURL()")


def _show(spec: str, length: int, dim: int, heads: int) -> list[list[str]]:
    """What ``posenc show SPEC --length L --dim D --heads H`` prints, as rows."""
    full = _spec(spec, argparse.Namespace(dim=dim, heads=heads, length=length))
    return [list(r) for r in analysis.key_numbers(full, length=length, dim=dim, num_heads=heads)]


def _goto(d, spec: str, length: int, dim: int, heads: int, spec_b: str = "") -> None:
    before = _renders(d)
    b = f"&spec-b={quote(spec_b, safe='')}" if spec_b else ""
    d.execute_script("location.hash = arguments[0]",
                     f"spec={quote(spec, safe='')}{b}&length={length}&dim={dim}&heads={heads}")
    _wait_render(d, before)


def _draw(rng: random.Random, scheme: str, scaling_type: str | None) -> tuple[str, int, int, int]:
    """A SPEC and sizes drawn at random: odd lengths, partial rotary, every parameter of the scaling."""
    length = rng.choice([2, 3, 11, 64, 217, 500])
    dim = rng.choice([2, 6, 8, 16, 30, 64])
    heads = rng.randint(1, 12)
    num = lambda lo, hi: repr(round(rng.uniform(lo, hi), rng.randint(0, 4)))  # noqa: E731
    parts = []
    if scheme == "sinusoidal":
        parts.append(f"base={num(2, 1e5)}")
    if scheme == "rope":
        rd = dim
        if rng.random() < 0.5 and dim > 2:
            rd = 2 * rng.randint(1, dim // 2)
            parts.append(f"rotary_dim={rd}")
        parts += [f"base={rng.choice(['10000', '500000', num(2, 1e5)])}", rng.choice(["layout=half", "layout=interleaved"])]
        if scaling_type:
            parts.append(f"scaling={scaling_type}")
            extra = {"factor": num(1, 32), "original_max_positions": str(rng.choice([16, 50, 100, 4096])),
                     "beta_fast": num(16, 64), "beta_slow": num(0.5, 2), "mscale": num(0, 2), "truncate": "false",
                     "low_freq_factor": num(0.5, 1.5), "high_freq_factor": num(2, 8), "scale_base": num(64, 1024),
                     "gamma": num(0.1, 1), "short_factor": "[" + ",".join(num(1, 2) for _ in range(rd // 2)) + "]",
                     "long_factor": "[" + ",".join(num(1, 40) for _ in range(rd // 2)) + "]"}
            import inspect

            for key, p in inspect.signature(scaling.SCALINGS[scaling_type]).parameters.items():
                if key in extra and (p.default is inspect.Parameter.empty or rng.random() < 0.5):
                    parts.append(f"{key}={extra[key]}")
    if scheme == "kerple":
        parts += [rng.choice(["variant=log", "variant=power"]), f"eps={num(0.001, 0.9)}"]
    if scheme == "t5":
        bidi = rng.random() < 0.5
        nb = rng.randint(4, 40)
        half = nb // 2 if bidi else nb
        parts += [f"bidirectional={str(bidi).lower()}", f"num_buckets={nb}",
                  f"max_distance={rng.randint(half // 2 + 1, 200)}", f"init_std={num(0.1, 2)}"]
    if scheme == "cope":
        parts += [f"npos_max={rng.randint(1, 80)}", rng.choice(["convention=ram", "convention=scaled"])]
    if scheme == "dual_chunk":  # chunks short enough that the lengths drawn cross them
        chunk = rng.randint(2, 120)
        parts += [f"chunk_size={chunk}", f"local_size={rng.randint(0, chunk - 1)}",
                  f"base={rng.choice(['10000', '1000000.0', num(2, 1e5)])}", rng.choice(["layout=half", "layout=interleaved"])]
        if rng.random() < 0.7:
            parts.append(f"original_max_position_embeddings={rng.randint(1, 100)}")
    return scheme + (":" + ",".join(parts) if parts else ""), length, dim, heads


def test_opens_offline_from_file_and_draws_every_figure(page):
    d = page
    assert d.current_url.startswith("file://")
    assert _renders(d) >= 1 and d.find_element("id", "spec").get_attribute("value") == "sinusoidal"
    assert "#spec=sinusoidal&length=128&dim=64&heads=8" in d.current_url  # the state is written on load
    for fig in ("fig-table", "fig-similarity", "fig-wavelengths", "fig-order"):
        blank = d.execute_script(
            f"var c = document.querySelector('#{fig} canvas'), x = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "for (var i = 0; i < x.length; i += 4) if (x[i] < 200) return false; return true;")
        assert not blank, fig
    assert _key_numbers(d)[0] == ["scheme", "sinusoidal"]
    assert _console_errors(d) == []
    # the Content-Security-Policy refuses every fetch, and the console check sees it
    d.execute_script("fetch('https://example.invalid/x').catch(function () {})")
    from selenium.webdriver.support.ui import WebDriverWait

    errors = WebDriverWait(d, 10).until(lambda x: _console_errors(x) or None)
    assert any("Content Security Policy" in e for e in errors), errors


@pytest.mark.parametrize("seed", [0])
def test_key_numbers_equal_posenc_show_for_random_parameters(page, seed):
    rng = random.Random(seed)
    draws = [(s, None) for s in ("nope", "sinusoidal", "alibi", "kerple", "t5", "rope")]
    draws += [("rope", t) for t in scaling.SCALINGS]
    draws += [(rng.choice(["sinusoidal", "alibi", "kerple", "t5"]), None) for _ in range(4)]
    draws += [("dual_chunk", None), ("dual_chunk", None)]  # a relative term read with q = k = 1
    draws += [("cope", None)]  # last: its rows of contextual positions are printed below too
    previous = ""
    for scheme, scaling_type in draws:
        spec, length, dim, heads = _draw(rng, scheme, scaling_type)
        try:  # in overlay mode, B: the previous draw, where it fits these sizes (a rotary_dim may not)
            want_b = _show(previous, length, dim, heads) if previous else None
        except CLIError:
            previous = ""
        _goto(page, spec, length, dim, heads, spec_b=previous)
        assert page.find_element("id", "spec-error").text == "", spec
        assert page.find_element("id", "spec-b-error").text == "", previous
        assert _key_numbers(page) == _show(spec, length, dim, heads), (spec, length, dim, heads)
        if previous:  # the key numbers of B are `posenc show B`'s at the same sizes
            assert _key_numbers(page, "key-numbers-b") == want_b, (previous, length, dim, heads)
        previous = spec
    _goto(page, spec, length, dim, heads)
    # and the printed lines of `posenc show` itself, for the last draw
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["show", spec, "--length", str(length), "--dim", str(dim), "--heads", str(heads)]) == 0
    rows = _key_numbers(page)
    width = max(len(k) for k, _ in rows)
    assert buf.getvalue().splitlines() == [f"{k.ljust(width)}  {v}" for k, v in rows]
    assert _console_errors(page) == []


def test_controls_redraw_and_write_the_url(page):
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    d = page
    _goto(d, "rope", 128, 64, 8)
    table, qk = _canvas(d, "fig-table"), _canvas(d, "fig-qk")
    before = _renders(d)
    d.find_element("id", "length-slider").send_keys(Keys.ARROW_RIGHT)  # the slider, by keyboard
    _wait_render(d, before)
    assert d.find_element("id", "length").get_attribute("value") == "129"
    assert "length=129" in d.current_url and _canvas(d, "fig-table") != table and _canvas(d, "fig-qk") != qk
    assert _key_numbers(d) == _show("rope", 129, 64, 8)

    before = _renders(d)
    Select(d.find_element("id", "param-scaling")).select_by_value("yarn")
    _wait_render(d, before)
    spec = d.find_element("id", "spec").get_attribute("value")
    assert spec.startswith("rope:scaling=yarn,factor=4,original_max_positions=4096"), spec
    assert "spec=" + quote(spec, safe="") in d.current_url
    waves = _canvas(d, "fig-wavelengths")
    before = _renders(d)
    factor = d.find_element("id", "param-factor")
    factor.clear()
    factor.send_keys("8")
    _wait_render(d, before)
    assert "factor=8" in d.find_element("id", "spec").get_attribute("value") and _canvas(d, "fig-wavelengths") != waves
    assert _key_numbers(d) == _show(d.find_element("id", "spec").get_attribute("value"), 129, 64, 8)

    before = _renders(d)
    Select(d.find_element("id", "scheme")).select_by_value("alibi")
    _wait_render(d, before)
    bias = _canvas(d, "fig-bias")
    before = _renders(d)
    heads = d.find_element("id", "heads")
    heads.clear()
    heads.send_keys("4")
    _wait_render(d, before)
    assert _canvas(d, "fig-bias") != bias and "heads=4" in d.current_url
    # a reload of the written address shows the same view
    url = d.current_url
    d.get("about:blank")
    d.get(url)
    assert d.find_element("id", "spec").get_attribute("value") == "alibi"
    assert _key_numbers(d) == _show("alibi", 129, 64, 4)
    assert _console_errors(d) == []


def test_bad_values_show_a_message_next_to_the_control(page):
    d = page
    _goto(d, "rope", 64, 16, 2)
    good = _key_numbers(d)
    for text, message in (("rope:base=-1", "base must be > 0.0, got -1.0"),
                          ("rope:scaling=yarn,factor=4", "scaling 'yarn' needs 'original_max_positions'"),
                          ("rope:foo=1", "unknown key 'foo' for scheme 'rope'"),
                          ("rope:base=nan", "base=nan is not a finite number"),
                          ("rope:base=[1,", "unclosed bracket"),
                          ("learned", "use `posenc show learned`"),
                          ("roep", "unknown scheme 'roep'")):
        box = d.find_element("id", "spec")
        box.clear()
        box.send_keys(text)
        assert message in d.find_element("id", "spec-error").text, text
        assert box.get_attribute("aria-invalid") == "true"
        assert _key_numbers(d) == good  # the last valid view stays
    # a bad value typed into a parameter's own box: the message shows next to it too
    _goto(d, "rope", 65, 16, 2)
    base = d.find_element("id", "param-base")
    base.send_keys("-5")
    assert "base must be > 0.0, got -5.0" in d.find_element("id", "param-base-error").text
    assert base.get_attribute("aria-invalid") == "true" and d.find_element("id", "spec-error").text
    base.clear()
    base.send_keys("500")
    assert d.find_element("id", "param-base-error").text == "" and "base%3D500" in d.current_url
    length = d.find_element("id", "length")
    length.clear()
    length.send_keys("1")
    assert "--length must be an integer from 2 to 16384, got 1" in d.find_element("id", "length-error").text
    # a bad address on load: a message, not a blank page
    d.get(d.uri + "#spec=" + quote("rope:head_dim=7") + "&length=64&dim=16&heads=2")
    assert "head_dim must be even" in d.find_element("id", "spec-error").text
    assert d.find_element("id", "spec").get_attribute("value") == "rope:head_dim=7"
    d.get(d.uri + "#spec=rope&length=x&dim=16&heads=2")
    assert "--length must be an integer" in d.find_element("id", "length-error").text
    assert _console_errors(d) == []


def test_every_control_is_labelled_and_reachable_by_keyboard(page):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    d = page
    _goto(d, "rope:scaling=linear,factor=2", 64, 16, 2)
    controls = d.execute_script(
        "return Array.from(document.querySelectorAll('input, select, textarea, button')).filter(function (el) {"
        " return el.getClientRects().length > 0; }).map(function (el) {"
        " var label = el.labels && el.labels.length ? el.labels[0].textContent.trim() : (el.getAttribute('aria-label') || '');"
        " return [el.id, label]; })")
    assert len(controls) >= 12
    assert all(i and label for i, label in controls), [c for c in controls if not (c[0] and c[1])]
    d.execute_script("document.activeElement.blur(); window.scrollTo(0, 0)")
    d.find_element("tag name", "body").click()
    seen = []
    for _ in range(len(controls) + 5):
        ActionChains(d).send_keys(Keys.TAB).perform()
        seen.append(d.execute_script("return document.activeElement.id"))
    assert {i for i, _ in controls} <= set(seen), set(i for i, _ in controls) - set(seen)
    # keyboard only: choose another scheme with the arrow keys
    before = _renders(d)
    d.find_element("id", "scheme").send_keys(Keys.ARROW_DOWN)
    _wait_render(d, before)
    assert d.find_element("id", "spec").get_attribute("value") != "rope:scaling=linear,factor=2"
    assert _console_errors(d) == []


def test_dog_bites_man_with_sentences_the_reader_types(page):
    d = page
    _goto(d, "nope", 16, 16, 2)
    note = d.find_element("id", "order-note").text
    assert "only a permutation" in note
    a = d.find_element("id", "sentence-a")
    a.clear()
    a.send_keys("the cat sat on the mat")
    b = d.find_element("id", "sentence-b")
    b.clear()
    b.send_keys("the mat sat on the cat")
    assert "only a permutation" in d.find_element("id", "order-note").text  # NoPE: any reordering
    _goto(d, "sinusoidal", 16, 16, 2)
    assert "can tell the two orders apart" in d.find_element("id", "order-note").text
    # ALiBi's bias depends only on |i − j|: a sentence and its reversal give the same outputs
    # without a mask, until a start word breaks the symmetry (posenc demo order's caveat)
    for text, box in (("dog bites man", a), ("man bites dog", b)):
        box.clear()
        box.send_keys(text)
    _goto(d, "alibi", 16, 16, 2)
    assert "B is A reversed" in d.find_element("id", "order-note").text
    for text, box in (("<s> dog bites man", a), ("<s> man bites dog", b)):
        box.clear()
        box.send_keys(text)
    assert "can tell the two orders apart" in d.find_element("id", "order-note").text
    b.clear()
    b.send_keys("a cat")
    assert "share no word" in d.find_element("id", "order-error").text
    assert _console_errors(d) == []


def _show_printed(*argv: str) -> list[list[str]]:
    """The rows ``posenc show ARGV`` prints (label, two spaces, value)."""
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["show", *argv]) == 0
    return [re.split(r" {2,}", line, maxsplit=1) for line in buf.getvalue().splitlines()]


def test_grid_schemes_draw_each_patch_against_the_chosen_patch(page):
    import numpy as np
    from selenium.webdriver.common.keys import Keys

    d = page
    before = _renders(d)
    d.execute_script("location.hash = arguments[0]", "spec=rope%3Aaxes%3D2%2Caxes_dims%3D%5B8%2C16%5D&length=64"
                     "&dim=32&heads=2&grid=5x7&patch=1,2")
    _wait_render(d, before)
    assert d.find_element("id", "spec-error").text == ""
    assert not d.find_element("id", "fig-grid").get_attribute("hidden")
    spec = "rope:axes=2,axes_dims=[8,16]"
    # the key numbers are `posenc show SPEC --grid 5x7 --patch 1,2` (the rows it prints, as it prints them)
    assert _key_numbers(d) == _show_printed(spec, "--grid", "5x7", "--patch", "1,2", "--length", "64",
                                            "--dim", "32", "--heads", "2")
    # every drawn value is analysis.grid_map's float64 value
    full = _spec(spec, argparse.Namespace(dim=32, heads=2, length=64))
    page_values = d.execute_script(
        "var x = posencExplorer, s = x.fullSpec(x.parseSpec(arguments[0]), {length: 64, dim: 32, heads: 2});"
        "return x.gridValues(s, 5, 7, 1, 2)", spec)
    want = analysis.grid_map(full, grid=(5, 7), patch=(1, 2), dim=32, num_heads=2).values
    np.testing.assert_allclose(np.reshape(page_values, (5, 7)), want, rtol=1e-9, atol=1e-12)
    # the patch slider, by keyboard, moves the patch: the figure redraws, the address follows
    grid = _canvas(d, "fig-grid")
    before = _renders(d)
    d.find_element("id", "patch-col-slider").send_keys(Keys.ARROW_RIGHT)
    _wait_render(d, before)
    assert d.find_element("id", "patch").get_attribute("value") == "1,3" and "grid=5x7&patch=1,3" in d.current_url
    assert _canvas(d, "fig-grid") != grid
    shown = _key_numbers(d)
    url = d.current_url  # a reload of the written address shows the same grid view
    d.get("about:blank")
    d.get(url)
    assert d.find_element("id", "patch").get_attribute("value") == "1,3" and _key_numbers(d) == shown
    assert shown[3][1].startswith("5 × 7 patches, signal with patch (1, 3)")
    # sinusoidal with two axes, the default grid (14 × 14, the centre), as `posenc show` prints it
    _goto(d, "sinusoidal:axes=2", 128, 48, 8)
    assert _key_numbers(d) == _show_printed("sinusoidal:axes=2", "--dim", "48")
    assert d.find_element("id", "fig-table").get_attribute("hidden")  # the 1D figures give way to the grid map
    # a patch outside the grid: a message next to the control, the last valid view stays
    patch = d.find_element("id", "patch")
    patch.clear()
    patch.send_keys("14,0")
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 10).until(lambda x: x.find_element("id", "patch-error").text)
    assert d.find_element("id", "patch-error").text == "patch must lie inside the grid 14×14, got (14, 0)"
    patch.clear()
    assert _console_errors(d) == []


def test_dinov3_grid_is_posenc_shows_at_its_patch_coordinates(page):
    """DINOv3 on the grid map (issue 38): parameters drawn at random, the key numbers are ``posenc show
    SPEC --grid --patch``'s and every drawn value analysis.grid_map's, at its coordinates in [−1, 1]."""
    import numpy as np

    rng = random.Random(38)
    d = page
    for _ in range(3):
        dim, h, w = 4 * rng.randint(1, 16), rng.randint(1, 9), rng.randint(2, 9)
        pr, pc = rng.randrange(h), rng.randrange(w)
        spec = (f"dinov3:base={round(rng.uniform(2, 1e4), rng.randint(0, 3))},"
                f"normalize={rng.choice(['separate', 'max', 'min'])},rescale={round(rng.uniform(1, 4), 2)}")
        before = _renders(d)
        d.execute_script("location.hash = arguments[0]", f"spec={quote(spec, safe='')}&length=64&dim={dim}&heads=1"
                                                         f"&grid={h}x{w}&patch={pr},{pc}")
        _wait_render(d, before)
        assert d.find_element("id", "spec-error").text == "", spec
        assert not d.find_element("id", "fig-grid").get_attribute("hidden")
        assert _key_numbers(d) == _show_printed(spec, "--grid", f"{h}x{w}", "--patch", f"{pr},{pc}", "--length", "64",
                                                "--dim", str(dim), "--heads", "1"), spec
        full = _spec(spec, argparse.Namespace(dim=dim, heads=1, length=64))
        page_values = d.execute_script(
            "var x = posencExplorer, s = x.fullSpec(x.parseSpec(arguments[0]), {length: 64, dim: arguments[1], heads: 1});"
            "return x.gridValues(s, arguments[2], arguments[3], arguments[4], arguments[5])", spec, dim, h, w, pr, pc)
        want = analysis.grid_map(full, grid=(h, w), patch=(pr, pc), dim=dim, num_heads=1).values
        np.testing.assert_allclose(np.reshape(page_values, (h, w)), want, rtol=1e-9, atol=1e-12)
    from selenium.webdriver.support.ui import WebDriverWait

    d.execute_script("location.hash = arguments[0]", "spec=dinov3%3Ahead_dim%3D6&length=64&dim=8&heads=1")
    error = WebDriverWait(d, 10).until(lambda x: x.find_element("id", "spec-error").text)  # the module's check
    assert error.endswith("head_dim must be divisible by 4 (D/4 frequencies on each of 2 axes), got 6"), error
    assert _console_errors(d) == []


def _cope_sentence(d, text: str, marks: str) -> tuple[list[int], list[float], int]:
    """Types ``text`` into the CoPE panel (long ones set at once), chooses the marks; the page's positions."""
    import json

    from selenium.webdriver.support.ui import Select

    box = d.find_element("id", "cope-sentence")
    box.clear()
    if len(text) <= 60:
        box.send_keys(text)
    else:
        d.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", box, text)
    Select(d.find_element("id", "cope-marks")).select_by_value(marks)
    fig = d.find_element("id", "fig-cope")
    assert d.find_element("id", "cope-error").text == "" and box.get_attribute("aria-invalid") == "false"
    return (json.loads(fig.get_attribute("data-token-positions")), json.loads(fig.get_attribute("data-cope-positions")),
            int(fig.get_attribute("data-npos-max")))


def test_cope_positions_of_typed_sentences_are_sentence_positions(page):
    from posenc.encodings.cope import MAX_TEXT, SENTENCE, CoPE

    d = page
    _goto(d, "cope:npos_max=8", 64, 16, 2)
    assert not d.find_element("id", "fig-cope").get_attribute("hidden")
    assert d.find_element("id", "cope-sentence").get_attribute("value") == SENTENCE  # posenc show cope's
    assert _key_numbers(d) == _show("cope:npos_max=8", 64, 16, 2)  # its rows of contextual positions too
    marks = {"space": " ", "stop": ".", "both": " ."}
    many = " ".join(f"w{i}." if i % 7 == 6 else f"w{i}" for i in range(75))  # over 64 words: the clamp
    for spec, text, choice in (("cope:npos_max=8", SENTENCE, "space"),
                               ("cope:npos_max=8", "Dr. Who ran.  Then  he hid. ", "stop"),
                               ("cope:npos_max=8", many, "both"),  # over 8 positions: clamped at 7
                               ("cope", many, "space")):  # CoPE's default npos_max, 64 (as B, over rope)
        if spec == "cope":
            _goto(d, "rope", 64, 16, 2, spec_b="cope")
            assert d.find_element("id", "fig-cope").is_displayed()
        elif spec != d.find_element("id", "spec").get_attribute("value"):
            _goto(d, spec, 64, 16, 2)
        tokens, positions, npos_max = _cope_sentence(d, text, choice)
        want = CoPE(head_dim=4, npos_max=npos_max).sentence_positions(text, marks[choice]).tolist()
        assert npos_max == (8 if spec.startswith("cope:") else 64)
        assert positions == want, (spec, text, choice)  # every float64 digit
        assert tokens == list(range(len(text) - 1, -1, -1))
        assert max(want) == npos_max - 1 or len(text) < 60
    # bad input: a message next to the box, as the other inputs have
    box = d.find_element("id", "cope-sentence")
    for text, message in (("   ", "type a sentence"), ("a" * (MAX_TEXT + 1), f"at most {MAX_TEXT} characters")):
        d.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", box, text)
        assert message in d.find_element("id", "cope-error").text
        assert box.get_attribute("aria-invalid") == "true"
    assert _console_errors(d) == []


def _set_text(d, box, text: str) -> None:
    d.execute_script("arguments[0].value = arguments[1]; arguments[0].dispatchEvent(new Event('input'))", box, text)


def _segments(d, text: str, preset: str, typed: bool = False) -> tuple[list[list[int]], list[list[int]]]:
    """Chooses ``preset``, puts ``text`` into the panel (``typed``: key by key); the positions the page
    holds (``data-positions``) and those its cells show, column by column."""
    import json

    from selenium.webdriver.support.ui import Select

    Select(d.find_element("id", "segments-preset")).select_by_value(preset)
    box = d.find_element("id", "segments-text")
    _set_text(d, box, "")
    if typed:
        box.send_keys(text)
    else:
        _set_text(d, box, text)
    assert box.get_attribute("value") == text
    assert d.find_element("id", "segments-error").text == "" and box.get_attribute("aria-invalid") == "false"
    held = json.loads(d.find_element("id", "fig-segments").get_attribute("data-positions"))
    columns = d.execute_script(
        "var cols = []; document.querySelectorAll('#segments-grid tr[data-column]').forEach(function (tr) {"
        " var j = Number(tr.dataset.column); cols[j] = (cols[j] || []).concat(Array.from(tr.cells).slice(1)"
        ".map(function (c) { return Number(c.textContent); })); }); return cols")
    # the characters on top: one cell per character, spanning its bytes
    spans = d.execute_script(
        "return Array.from(document.querySelectorAll('#segments-grid tr[data-row=text] th[scope=col]'))"
        ".map(function (c) { return c.colSpan; })")
    assert spans == [len(c.encode()) for c in text], text
    return held, [list(p) for p in zip(*columns)]


SEGMENT_TEXTS = (  # (preset, text, typed): the edge cases of posenc.segment_positions on bytes
    ("paragraphs", "", False),  # empty: no positions
    ("paragraphs", "Typed. Two\n\nparagraphs.", True),  # key by key, Enter for each line break
    ("paragraphs", "No separator at the end", False),
    ("paragraphs", "A.. B\n\n\nC.\n", False),  # consecutive separators; \n\n\n holds two overlapping \n\n
    ("paragraphs", "\n\nStarts with a blank line.\n\n", False),
    ("paragraphs", "Ünïcödé. 日本語。\n\nAn emoji 🙂 and é.\nEnd", False),  # 2, 3 and 4 bytes per character
    ("sentences", "Segments end here.\nA line too. Then.", False),
    ("sentences", "...\n\n", False),
    ("code", "import os\n\n\n\ndef f(x):\n    return x  # é\n\nf(1)", False),
    ("code", "\n", False),
)


def test_positions_from_structure_of_typed_texts_are_segment_positions(page):
    import json

    from selenium.webdriver.support.ui import Select

    import posenc

    d = page
    _goto(d, "rope", 64, 16, 2)
    presets = explorer.schema()["segments"]["presets"]
    fig, box = d.find_element("id", "fig-segments"), d.find_element("id", "segments-text")

    def want(text: str, preset: str) -> list[list[int]]:
        seps = [[s.encode() for s in level] for level in presets[preset]["separators"]]
        return posenc.segment_positions(text.encode(), seps)[0].tolist()

    # the page opens on the first preset's example, already laid out, whatever the scheme
    assert fig.is_displayed() and box.get_attribute("value") == explorer.SEGMENT_TEXT
    assert d.find_element("id", "segments-preset").get_attribute("value") == next(iter(presets))
    assert json.loads(fig.get_attribute("data-positions")) == want(explorer.SEGMENT_TEXT, next(iter(presets)))
    for preset, text, typed in SEGMENT_TEXTS:
        held, shown = _segments(d, text, preset, typed=typed)
        assert held == want(text, preset), (preset, text)
        assert shown == held, (preset, text)  # what the cells show
        assert json.loads(fig.get_attribute("data-separators")) == presets[preset]["separators"]
        assert json.loads(fig.get_attribute("data-bytes")) == list(text.encode())
    _segments(d, "", "code")
    assert "empty" in d.find_element("id", "segments-note").text
    # the levels by name, as the preset names them, the call that computes them, the segments counted
    _segments(d, "A. B\n\nC.", "paragraphs")
    rows = d.execute_script("return Array.from(document.querySelectorAll("
                            "'#segments-grid table:first-child th[scope=row]')).map(function (c) { return c.textContent; })")
    assert rows == ["text", "paragraph", "sentence", "offset"]
    assert d.find_element("id", "segments-command").text == \
        "posenc.segment_positions(text.encode(), [[b'\\n\\n'], [b'.', b'\\n']])"
    pos = want("A. B\n\nC.", "paragraphs")  # the second \n of \n\n is a sentence of its own
    assert [len({tuple(p[:j + 1]) for p in pos}) for j in range(2)] == [2, 4]  # segments per level
    assert d.find_element("id", "segments-note").text == "8 bytes: 2 paragraphs, 4 sentences."
    # an example not yet edited gives way to the next preset's
    _set_text(d, box, presets["code"]["example"])
    Select(d.find_element("id", "segments-preset")).select_by_value("sentences")
    assert box.get_attribute("value") == presets["sentences"]["example"]
    assert json.loads(fig.get_attribute("data-positions")) == want(presets["sentences"]["example"], "sentences")
    # texts drawn at random (seeded) from separators, their parts and multi-byte characters
    rng = random.Random(0)
    alphabet = ["a", "b", " ", ".", "\n", "\n\n", "é", "語", "🙂", ".\n"]
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30))) for _ in range(60)]
    for preset in presets:
        got = d.execute_script("var seps = arguments[1]; return arguments[0].map(function (t) {"
                               " return posencExplorer.segmentPositions(t, seps); })",
                               texts, presets[preset]["separators"])
        assert got == [want(t, preset) for t in texts], preset
    # too long: a message next to the box, as the other inputs have
    _set_text(d, box, "é" * (explorer.SEGMENT_MAX_BYTES // 2 + 1))
    assert f"at most {explorer.SEGMENT_MAX_BYTES} bytes" in d.find_element("id", "segments-error").text
    assert box.get_attribute("aria-invalid") == "true" and fig.get_attribute("data-positions") is None
    _set_text(d, box, explorer.SEGMENT_TEXT)
    assert box.get_attribute("aria-invalid") == "false"
    assert _console_errors(d) == []


# -- the screen: a grid of figures, panels that apply, per-head scales, one normalisation, an overlay --

WIDE, NARROW = 1400, 600


@pytest.fixture
def widths(page):
    """Yields a function that resizes the window to a width (px) and waits for the layout; restores it after."""
    from selenium.webdriver.support.ui import WebDriverWait

    def at(width: int) -> None:
        page.set_window_size(width, 1000)
        WebDriverWait(page, 10).until(lambda x: x.execute_script("return innerWidth") == width)

    yield at
    page.set_window_size(1500, 1400)


def _boxes(d, selector: str) -> list[dict]:
    """The on-screen boxes of the elements shown (id, left, right, top, bottom), in page coordinates."""
    return d.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]))"
        ".filter(function (el) { return el.getClientRects().length; })"
        ".map(function (el) { var r = el.getBoundingClientRect();"
        " return {id: el.id, left: r.left + scrollX, right: r.right + scrollX,"
        " top: r.top + scrollY, bottom: r.bottom + scrollY, width: r.width}; })", selector)


def _drawn(d, fig: str) -> dict:
    return d.execute_script("return posencExplorer.drawn(arguments[0])", fig)


def test_figures_fill_two_columns_on_a_wide_window_and_one_on_a_narrow_one(page, widths):
    d = page
    _goto(d, "rope", 128, 64, 8)
    for width in (WIDE, NARROW):
        widths(width)
        figs = _boxes(d, "#figures > figure")
        inner = d.execute_script("return document.documentElement.clientWidth")
        assert {f["id"] for f in figs} >= {"fig-table", "fig-similarity", "fig-qk", "fig-wavelengths", "fig-order"}
        assert d.execute_script("return document.documentElement.scrollWidth") <= d.execute_script("return innerWidth")
        assert all(f["right"] <= inner + 0.5 for f in figs), (width, figs)  # nothing cut off on the right
        lefts = sorted({round(f["left"]) for f in figs})
        if width == WIDE:
            assert len(lefts) >= 2, figs  # two or more columns of figures
            assert max(f["right"] for f in figs) >= inner - 40, (inner, figs)  # no blank third on the right
            controls = _boxes(d, "#controls")[0]
            assert controls["right"] <= min(f["left"] for f in figs)  # the controls beside the figures
            seg = _boxes(d, "#fig-segments")[0]  # positions from structure: the figures' whole width
            assert abs(seg["left"] - min(f["left"] for f in figs)) < 1
            assert abs(seg["right"] - max(f["right"] for f in figs)) < 1
        else:
            assert len(lefts) == 1, figs  # one column
            assert min(f["width"] for f in figs) >= inner - 40, (inner, figs)  # each figure the page's width
            controls = _boxes(d, "#controls")[0]
            assert controls["bottom"] <= min(f["top"] for f in figs)  # the controls above the figures
            canvases = _boxes(d, "#figures > figure canvas")
            assert all(c["right"] <= inner for c in canvases)
    assert _console_errors(d) == []


def test_panels_that_do_not_apply_to_the_scheme_are_hidden(page, widths):
    d = page
    shown = lambda i: d.find_element("id", i).is_displayed()  # noqa: E731
    for width in (WIDE, NARROW):
        widths(width)
        for spec, on, off in (
                ("rope", ["fig-table", "fig-qk", "fig-order", "fig-segments"], ["fig-cope", "grid-controls", "fig-bias", "fig-grid"]),
                ("alibi", ["fig-bias", "fig-order", "fig-segments"], ["fig-cope", "grid-controls", "fig-table", "fig-qk"]),
                ("cope", ["fig-cope", "fig-order", "fig-segments"], ["grid-controls", "fig-table", "fig-bias"]),
                ("rope:axes=2", ["fig-grid", "grid-controls", "patch", "grid", "fig-segments"], ["fig-cope", "fig-table", "fig-bias"])):
            _goto(d, spec, 64, 16, 4)
            assert [i for i in on if not shown(i)] == [], (width, spec)
            assert [i for i in off if shown(i)] == [], (width, spec)
        # with an overlay, a panel shows when it applies to either scheme
        _goto(d, "rope", 64, 16, 4, spec_b="cope")
        assert shown("fig-cope") and shown("fig-qk") and not shown("grid-controls")
        _goto(d, "alibi", 64, 16, 4, spec_b="sinusoidal:axes=2")
        assert shown("grid-controls") and shown("fig-grid") and shown("fig-bias") and not shown("fig-cope")
    assert "contextual positions" in d.find_element("id", "not-shown").text
    assert _console_errors(d) == []


def test_bias_maps_have_a_colour_scale_per_head_and_every_position(page, widths):
    import numpy as np
    from selenium.webdriver.support.ui import Select

    d = page
    rng = random.Random(3)
    length, heads = 256, 8
    maps = analysis.bias_maps("alibi", length=length, num_heads=heads)  # (H, L, L)
    full = ("posencExplorer.fullSpec(posencExplorer.parseSpec('alibi'), {length: %d, dim: 64, heads: %d})"
            % (length, heads))
    _goto(d, "alibi", length, 64, heads)
    assert d.find_element("id", "bias-scale").get_attribute("value") == "head"  # the default
    for width in (WIDE, NARROW):
        widths(width)
        drawn = _drawn(d, "fig-bias")
        assert drawn["positions"] == length and drawn["scale"] == "head"  # all 256 positions, not 64
        assert [h["head"] for h in drawn["heads"]] == list(range(heads))
        for h in drawn["heads"]:  # each head on its own scale: its own extremes, as posenc's maps have them
            want = [maps[h["head"]].min(), maps[h["head"]].max()]
            np.testing.assert_allclose([h["lo"], h["hi"]], want, rtol=1e-12, atol=0)
        for h in range(heads):  # the values drawn are posenc's: the last row and a row drawn at random
            for i in (length - 1, rng.randrange(length)):
                row = d.execute_script(f"return posencExplorer.biasRow({full}, {h}, {i}, {length})")
                np.testing.assert_allclose(row, maps[h, i], rtol=1e-12, atol=1e-15)
        # head 7 (slope 1/256) is not flat: across its first row, from j = 0 to L − 1, the colours run
        # through the palette (on one scale shared with head 0 they would barely move)
        last = drawn["heads"][-1]
        pixels = d.execute_script(
            "var c = document.querySelector('#fig-bias canvas'), a = arguments[0];"
            "return Array.from(c.getContext('2d').getImageData(a.x + 2, a.y + 2, a.size - 4, 1).data)", last)
        colours = {tuple(pixels[k:k + 3]) for k in range(0, len(pixels), 4)}
        assert len(colours) >= 40, len(colours)
        fig = _boxes(d, "#fig-bias canvas")[0]
        assert fig["right"] <= d.execute_script("return document.documentElement.clientWidth")
    # one scale for all heads, when chosen: every head on head 0's range
    before = _renders(d)
    Select(d.find_element("id", "bias-scale")).select_by_value("shared")
    _wait_render(d, before)
    drawn = _drawn(d, "fig-bias")
    assert drawn["scale"] == "shared" and {(h["lo"], h["hi"]) for h in drawn["heads"]} == {(maps.min(), maps.max())}
    Select(d.find_element("id", "bias-scale")).select_by_value("head")
    assert _console_errors(d) == []


def test_dual_chunk_map_is_posencs_term_over_every_pair(page):
    """Dual Chunk Attention (a relative scheme) is drawn as its term with q = k = 1, the map
    ``posenc show`` reads: every row equals posenc's over positions that cross many chunks (the intra,
    successive and inter positions, each clamp of them, the temperature), and the colour scale spans it."""
    import numpy as np

    d = page
    for spec, length, dim in (("dual_chunk:chunk_size=7,local_size=5", 40, 8),
                              ("dual_chunk:chunk_size=9,local_size=2,original_max_position_embeddings=4,"
                               "layout=interleaved,base=100.0", 57, 6)):
        maps = analysis.bias_maps(spec, length=length, num_heads=1, dim=dim)  # (1, L, L)
        full = (f"posencExplorer.fullSpec(posencExplorer.parseSpec('{spec}'), "
                f"{{length: {length}, dim: {dim}, heads: 1}})")
        rows = d.execute_script(f"var f = {full}; return Array.from({{length: {length}}}, function (_, i) "
                                f"{{ return posencExplorer.biasRow(f, 0, i, {length}); }})")
        np.testing.assert_allclose(rows, maps[0], rtol=1e-12, atol=1e-12)
        _goto(d, spec, length, dim, 1)
        drawn = _drawn(d, "fig-bias")
        assert drawn["positions"] == length and len(drawn["heads"]) == 1, spec
        np.testing.assert_allclose([drawn["heads"][0]["min"], drawn["heads"][0]["max"]], [maps.min(), maps.max()],
                                   rtol=1e-12, atol=1e-12)
        assert _key_numbers(d) == _show(spec, length, dim, 1)
    assert _console_errors(d) == []


def _random_yarn(rng: random.Random, dim: int) -> str:
    rd = 2 * rng.randint(dim // 4, dim // 2)
    return (f"rope:rotary_dim={rd},base={rng.choice([10000, 500000])},scaling=yarn,"
            f"factor={round(rng.uniform(2, 16), 2)},original_max_positions={rng.choice([32, 64, 100])}")


def _qk_curves(spec: str, length: int, dim: int) -> tuple:
    """q·k / D and RoFormer's bound from posenc, each divided by its value at r = 0."""
    score = analysis.rotary_scores(spec, max_distance=length - 1, dim=dim)
    bound = analysis.rope_decay_bound(inv_freq=analysis.inv_freq(spec, dim=dim), max_distance=length - 1)
    return score / score[0], bound / bound[0], score[0]


def test_qk_curve_and_its_bound_share_one_normalisation(page, widths):
    import numpy as np

    d = page
    rng = random.Random(5)
    for width in (WIDE, NARROW):
        widths(width)
        length, dim = rng.choice([100, 217, 300]), 64
        spec = _random_yarn(rng, dim)
        _goto(d, spec, length, dim, 2)
        curve, bound = _drawn(d, "fig-qk")["series"]
        want_curve, want_bound, s0 = _qk_curves(spec, length, dim)
        assert s0 > 1.05  # YaRN's attention factor: q·k / D starts above 1 ...
        assert curve["y"][0] == 1 and bound["y"][0] == 1  # ... and the figure divides both by their value at 0
        np.testing.assert_allclose(curve["y"], want_curve, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(bound["y"], want_bound, rtol=1e-9, atol=1e-12)
        assert f"÷ {s0:.4g}" in curve["label"]  # the legend gives the divisor
        caption = d.find_element("css selector", "#fig-qk figcaption").text
        assert "divided by its own value at r = 0" in caption
        assert d.find_element("id", "fig-qk").is_displayed()
    assert _console_errors(d) == []


def test_overlay_draws_a_second_spec_on_the_same_figures_and_keeps_it_in_the_url(page, widths):
    import math

    import numpy as np

    d = page
    rng = random.Random(7)
    for width in (WIDE, NARROW):
        widths(width)
        length, dim, heads = rng.choice([64, 129, 200]), 64, 4
        spec_b = _random_yarn(rng, dim)
        _goto(d, "rope", length, dim, heads, spec_b=spec_b)
        assert d.find_element("id", "spec-b").is_displayed() and d.find_element("id", "key-numbers-b").is_displayed()
        assert d.find_element("id", "spec-b").get_attribute("value") == spec_b
        assert f"spec=rope&spec-b={quote(spec_b, safe='')}&length={length}" in d.current_url
        assert _key_numbers(d) == _show("rope", length, dim, heads)
        assert _key_numbers(d, "key-numbers-b") == _show(spec_b, length, dim, heads)
        # q·k: A's and B's curves and bounds on one chart, each as posenc computes it
        series = _drawn(d, "fig-qk")["series"]
        assert [s["scheme"] for s in series] == ["A", "A", "B", "B"]
        assert len({s["colour"] for s in series}) == 4 and len({tuple(s["dash"]) for s in series}) == 4
        assert [s["label"][:3] for s in series] == ["A: ", "A: ", "B: ", "B: "]  # the legend names each
        for spec, (curve, bound) in (("rope", series[:2]), (spec_b, series[2:])):
            want_curve, want_bound, _ = _qk_curves(spec, length, dim)
            np.testing.assert_allclose(curve["y"], want_curve, rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(bound["y"], want_bound, rtol=1e-9, atol=1e-12)
        # B's colour is on the canvas: its legend swatch, drawn in exactly that colour
        green = d.execute_script(
            "var c = document.querySelector('#fig-qk canvas'), n = 0,"
            " x = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "for (var i = 0; i < x.length; i += 4) if (x[i] === 0 && x[i + 1] === 158 && x[i + 2] === 115) n++;"
            "return n")
        assert series[2]["colour"].lower() == "#009e73" and green >= 10
        # wavelengths: B's before and after its scaling, posenc.analysis.spectrum's
        sp = analysis.spectrum(spec_b, dim=dim)
        waves = [s for s in _drawn(d, "fig-wavelengths")["series"] if s["scheme"] == "B"]
        np.testing.assert_allclose(waves[0]["y"], 2 * math.pi / sp.before, rtol=1e-12)
        np.testing.assert_allclose(waves[1]["y"], 2 * math.pi / sp.after, rtol=1e-12)
        assert "B = " + spec_b in d.find_element("id", "overlay-note").text
    # two kinds: A's similarity as posenc's, B's bias maps where A has none
    _goto(d, "sinusoidal", 96, 32, 4, spec_b="alibi")
    sim = _drawn(d, "fig-similarity")["series"]
    assert [s["scheme"] for s in sim] == ["A"]
    want = analysis.similarity_vs_distance(analysis.table("sinusoidal", length=96, dim=32))
    np.testing.assert_allclose(sim[0]["y"], want, atol=1e-9)
    bias = _drawn(d, "fig-bias")
    assert bias["scheme"] == "B" and bias["positions"] == 96
    maps = analysis.bias_maps("alibi", length=96, num_heads=4)
    assert [(h["lo"], h["hi"]) for h in bias["heads"]] == [(m.min(), m.max()) for m in maps]
    # two schemes of one kind: a block each, B's below A's, each head on its own scale (posenc's extremes)
    _goto(d, "alibi", 96, 32, 4, spec_b="kerple:variant=power")
    bias = _drawn(d, "fig-bias")
    assert [s["scheme"] for s in bias["schemes"]] == ["A", "B"]
    for spec, block in zip(("alibi", "kerple:variant=power"), bias["schemes"]):
        maps = analysis.bias_maps(spec, length=96, num_heads=4)
        np.testing.assert_allclose([(h["min"], h["max"]) for h in block["heads"]], [(m.min(), m.max()) for m in maps],
                                   rtol=1e-12)
    assert bias["schemes"][1]["heads"][0]["y"] > bias["schemes"][0]["heads"][-1]["y"]
    _goto(d, "rope", 96, 32, 4, spec_b="sinusoidal")
    assert _drawn(d, "fig-table")["schemes"] == ["A", "B"]
    # typed: the address follows; a reload keeps B; cleared: B leaves the address and the page
    box = d.find_element("id", "spec-b")
    before = _renders(d)
    box.clear()
    box.send_keys("t5")
    _wait_render(d, before)
    assert "spec=rope&spec-b=t5&length=96" in d.current_url
    url = d.current_url
    d.get("about:blank")
    d.get(url)
    assert d.find_element("id", "spec-b").get_attribute("value") == "t5"
    assert _key_numbers(d, "key-numbers-b") == _show("t5", 96, 32, 4)
    box = d.find_element("id", "spec-b")
    before = _renders(d)
    box.clear()
    box.send_keys(" ")
    _wait_render(d, before)
    assert "spec-b" not in d.current_url and not d.find_element("id", "key-numbers-b").is_displayed()
    assert [s["scheme"] for s in _drawn(d, "fig-similarity")["series"]] == ["A"]
    # the address is read strictly, never run: a bad B is a message next to its box, the last view stays
    for fragment, where, message in (
            ("spec=rope&spec-b=rope%3Afoo%3D1", "spec-b-error", "SPEC B: unknown key 'foo' for scheme 'rope'"),
            ("spec=rope&spec-b=alert(1)", "spec-b-error", "SPEC B: SPEC must start with a scheme name"),
            ("spec=rope&spec-b=alibi&spec-b=t5", "status", "the address gives the field spec-b twice"),
            ("spec=rope&spec-b", "status", "the address field spec-b has no value"),
            ("spec=rope&spec_b=alibi", "status", "unknown field 'spec_b'")):
        d.get(d.uri + "#" + fragment + "&length=64&dim=16&heads=2")
        assert message in d.find_element("id", where).text, fragment
        assert d.find_element("id", "length").get_attribute("value") == "64"  # the other fields are read
    assert d.find_element("id", "spec-b").get_attribute("aria-invalid") in ("false", None)
    assert _console_errors(d) == []
