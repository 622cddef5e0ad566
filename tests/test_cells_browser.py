"""The Python cells of "Why positions" (docs/cells/, docs/_hooks/cells.py), run in headless Chromium
on Pyodide, on the site ``make docs`` builds, with every host but this machine cut off.

The site is served from 127.0.0.1 (Chromium loads no WebAssembly from ``file://``); Chromium resolves
no host name but 127.0.0.1 (``--host-resolver-rules``) and sends everything else to a proxy that is
not there, so a request to any other host, by name or by address, fails (the first test checks it,
and the DevTools performance log shows every request went to 127.0.0.1). Pyodide loads once for the
module, on the first Run. Each cell prints its numbers as ``name = repr(value)``; the tests read them
back and compare them with ``posenc.reference`` (and ``posenc.scaling``) to 1e-12, the inputs taken
from the cell's own source run in CPython (``docs/cells/cellplot.py`` runs there too).
"""

from __future__ import annotations

import ast
import contextlib
import functools
import http.server
import io
import json
import re
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np
import pytest

from posenc import reference as ref
from posenc import scaling
from test_explorer_browser import headless_chromium

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("docs_site")]

ROOT = Path(__file__).resolve().parents[1]
CELLS = ROOT / "docs" / "cells"
PAGE = "guide/why-positions.html"
NUMBER = re.compile(r"^([\w\[\]=.]+) = (.+)$", re.M)
TOLERANCE = 1e-12


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


@pytest.fixture(scope="module")
def server(docs_site):
    """The built site over http on 127.0.0.1 (a free port), as ``python -m http.server -b 127.0.0.1``."""
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(docs_site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture(scope="module")
def browser(server):
    loopback_only = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",  # no name but 127.0.0.1 resolves
                     "--proxy-server=127.0.0.1:9")  # and every other address goes to a proxy that is not there
    driver = headless_chromium("1400,1000", loopback_only, logs=("browser", "performance"))
    try:
        driver.get(server + PAGE)
        yield driver
    finally:
        driver.quit()


def _requests(driver) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _run(driver, name: str, code: str | None = None, timeout: float = 120) -> dict:
    """Types ``code`` into the cell (unless None), clicks Run, waits: its state, output, status, figures."""
    from selenium.webdriver.support.ui import WebDriverWait

    cell = f"document.getElementById('cell-{name}')"
    runs = driver.execute_script(f"return Number({cell}.dataset.runs || 0)")
    if code is not None:
        driver.execute_script(f"{cell}.querySelector('textarea').value = arguments[0]", code)
    driver.execute_script(f"{cell}.querySelector('.pycell-run').click()")
    WebDriverWait(driver, timeout).until(lambda d: d.execute_script(
        f"const c = {cell}; return c.dataset.state === 'unavailable' || Number(c.dataset.runs || 0) > {runs}"))
    return driver.execute_script(f"""const c = {cell};
        return {{state: c.dataset.state, output: c.querySelector('.pycell-output').textContent,
                 stderr: [...c.querySelectorAll('.pycell-stderr')].map(s => s.textContent).join(''),
                 status: c.querySelector('.pycell-status').textContent,
                 figures: c.querySelectorAll('.pycell-figure svg').length}}""")


def _printed(output: str) -> dict:
    return {name: ast.literal_eval(value) for name, value in NUMBER.findall(output)}


def _namespace(source: str) -> dict:
    """The names the cell's source defines, run in CPython (its print and figures discarded)."""
    sys.path.insert(0, str(CELLS))
    try:
        namespace: dict = {"__name__": "__main__"}
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(source, "<cell>", "exec"), namespace)  # the page's own cell, as the browser runs it
        return namespace
    finally:
        sys.path.remove(str(CELLS))


def _row(table: np.ndarray) -> list[float]:
    return [float(v) for v in table]


def expected(name: str, source: str, printed: dict) -> dict:
    """What ``posenc.reference`` gives for every name the cell ``name`` printed, from its inputs."""
    ns = _namespace(source)
    out = {}
    if name == "order":
        d = ns["d"]
        for label, sentence in (("first", ns["first"]), ("second", ns["second"])):
            x = np.array([ns["words"][w] for w in sentence.split()], dtype=np.float64)  # (L, d)
            for prefix, table in (("plain", x), ("pe", x + ref.sinusoidal(np.arange(len(x)), d_model=d))):
                t = table[None, None]  # (1, 1, L, d)
                out[f"{prefix}_{label}"] = ref.attention(t, t, t)[0, 0].tolist()
    elif name == "sinusoidal":
        for key in printed:
            pos = int(re.fullmatch(r"PE\[(\d+)\]", key).group(1))
            out[key] = _row(ref.sinusoidal(np.array([pos]), d_model=ns["d"], base=ns["base"])[0])
    elif name == "relative":
        d, base, table, inv = ns["d"], ns["base"], np.array(ns["learned"]), ref.rope_inv_freq(ns["d"], ns["base"])
        q, k = np.array(ns["q"])[None], np.array(ns["k"])[None]  # (1, d)
        pe = lambda p: ref.sinusoidal(np.array([p]), d_model=d, base=base)[0]  # noqa: E731
        for p in ns["starts"]:
            out[f"sinusoidal_dot[p={p}]"] = [float(pe(p) @ pe(p + r)) for r in ns["offsets"]]
            learned = []
            for r in ns["offsets"]:
                if p + r < len(table):
                    learned.append(float(ref.learned(np.array([p]), table)[0] @ ref.learned(np.array([p + r]), table)[0]))
                else:  # the reference has no row there either
                    with pytest.raises(ValueError, match="cannot extrapolate"):
                        ref.learned(np.array([p + r]), table)
                    learned.append(None)
            out[f"learned_dot[p={p}]"] = learned
            out[f"rope_score[p={p}]"] = [
                float(ref.rope(q, [p + r], inv, layout="interleaved")[0] @ ref.rope(k, [p], inv, layout="interleaved")[0])
                for r in ns["offsets"]]
    elif name == "rotation":
        for pos in (0, 7, 1000):
            out[f"rotated[pos={pos}]"] = _row(ref.sinusoidal(np.array([pos + ns["k"]]), d_model=ns["d"], base=ns["base"])[0])
    elif name == "scaling":
        d, base = ns["d"], ns["base"]
        theta = ref.rope_inv_freq(d, base)
        specs = {"linear": {"type": "linear", "factor": ns["factor"]}, "ntk": {"type": "ntk", "factor": ns["factor"]},
                 "yarn": {"type": "yarn", "factor": ns["factor"], "original_max_positions": ns["trained"],
                          "beta_fast": ns["beta_fast"], "beta_slow": ns["beta_slow"]}}
        for kind, spec in specs.items():
            out[f"theta_{kind}"] = _row(scaling.resolve(spec, theta, head_dim=d, base=base).inv_freq)
        out["yarn_attention_factor"] = scaling.resolve(specs["yarn"], theta, head_dim=d, base=base).attention_factor
    else:
        raise KeyError(f"no reference for the cell {name!r}: add one here")
    return out


def _assert_equal(printed: dict, wanted: dict) -> None:
    assert printed and set(printed) == set(wanted), (sorted(printed), sorted(wanted))
    for key, value in wanted.items():
        got = printed[key]
        if value is None or (isinstance(value, list) and None in value):
            assert [g is None for g in got] == [w is None for w in value], key
            got, value = [g for g in got if g is not None], [w for w in value if w is not None]
        np.testing.assert_allclose(np.array(got, dtype=np.float64), np.array(value, dtype=np.float64),
                                   rtol=0, atol=TOLERANCE, err_msg=key)


def _cells() -> list[str]:
    import importlib.util

    spec = importlib.util.spec_from_file_location("cells_hook", ROOT / "docs" / "_hooks" / "cells.py")
    sys.path.insert(0, str(ROOT / "docs" / "_hooks"))
    try:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(ROOT / "docs" / "_hooks"))
    return module.cell_names()


@pytest.fixture(scope="module")
def first_runs(browser) -> dict:
    """Every cell of the page run once, as it stands, in page order (the first Run loads Pyodide)."""
    names = browser.execute_script("return [...document.querySelectorAll('.pycell')].map(c => c.dataset.cell)")
    assert sorted(names) == _cells() and len(names) >= 5, names
    return {name: _run(browser, name) for name in names}


def test_no_host_but_this_machine_is_reachable(browser, server):
    """The harness's own check: a fetch to another host, by name or by address, fails (``no-cors``: a
    host that answers would resolve, CORS or not), among them npm's registry, which the machine that
    installs Pyodide reaches; this server answers."""
    fetch = """return fetch(arguments[0], {mode: arguments[1], cache: 'no-store'})
        .then(r => 'status ' + r.status, e => 'failed: ' + e.message)"""
    for url in ("https://registry.npmjs.org/pyodide", "https://cdn.jsdelivr.net/pyodide/", "http://151.101.1.229/"):
        assert browser.execute_script(fetch, url, "no-cors").startswith("failed"), url
    assert browser.execute_script(fetch, server + PAGE, "same-origin") == "status 200"
    _requests(browser)  # these three are the check's own: the page's requests are checked below


def test_every_cell_runs_and_prints_posencs_numbers(browser, first_runs):
    """Every cell runs without a traceback, draws its figures, and prints the numbers ``posenc.reference``
    computes from its inputs (to 1e-12); every request of the page went to 127.0.0.1."""
    for name, result in first_runs.items():
        assert result["state"] == "done" and not result["stderr"], f"{name}: {result}"
        assert result["figures"] >= 1, name
        source = (CELLS / f"{name}.py").read_text(encoding="utf-8")
        printed = _printed(result["output"])
        _assert_equal(printed, expected(name, source, printed))
    hosts = {urlsplit(u).hostname for u in _requests(browser) if urlsplit(u).scheme in ("http", "https")}
    assert hosts == {"127.0.0.1"}, hosts


def test_the_first_run_loads_pyodide_from_the_site(browser, first_runs):
    """The first Run loads Pyodide's five files from this site (13.5 MB uncompressed); its time and
    bytes are measured by the page (printed here for docs/numbers.md)."""
    load_ms, size = (int(browser.execute_script(f"return document.documentElement.dataset.{k}"))
                     for k in ("pyodideLoadMs", "pyodideBytes"))
    loaded = browser.execute_script("""return performance.getEntriesByType('resource')
        .filter(e => e.name.includes('/assets/pyodide/')).map(e => e.name.split('/').pop())""")
    assert sorted(set(loaded)) == sorted(["pyodide.js", "pyodide.asm.mjs", "pyodide.asm.wasm", "python_stdlib.zip",
                                          "pyodide-lock.json"]), loaded
    assert 13_000_000 < size < 14_000_000, size
    first = next(iter(first_runs.values()))["status"]
    assert "Python loaded in" in first, first
    print(f"\nfirst Run: Pyodide loaded in {load_ms / 1000:.1f} s, {size:,} bytes; status: {first}")


@pytest.mark.parametrize("name, line, edit", [
    ("sinusoidal", "L, d, base = 64, 32, 10000", "L, d, base = 12, 6, 50"),
    ("scaling", "trained, factor = 2048, 4", "trained, factor = 1000, 8"),
    ("order", '"man": [0.5, -0.5, 1.0, 0.0]}', '"man": [2.0, 0.25, -1.0, 3.0]}'),
])
def test_an_edited_cell_prints_what_the_new_code_computes(browser, first_runs, name, line, edit):
    """The code in the box runs, not the page's: its numbers are the reference's for the new inputs,
    and differ from the first Run's."""
    source = (CELLS / f"{name}.py").read_text(encoding="utf-8")
    assert source.count(line) == 1
    edited = source.replace(line, edit)
    result = _run(browser, name, edited)
    assert result["state"] == "done" and not result["stderr"], result
    printed, before = _printed(result["output"]), _printed(first_runs[name]["output"])
    _assert_equal(printed, expected(name, edited, printed))
    changed = [key for key in printed if key not in before or printed[key] != before[key]]
    assert changed, "the edit changed no printed number"
    if name == "sinusoidal":
        assert set(printed) == {"PE[1]", "PE[11]"} and len(printed["PE[11]"]) == 6, printed


def test_a_cell_with_an_error_shows_pythons_traceback(browser, first_runs):
    from selenium.webdriver.support.ui import WebDriverWait

    result = _run(browser, "rotation", "import math\n\nprint('before')\nmath.pi / 0\n")
    assert result["state"] == "error", result
    assert result["output"].startswith("before\n"), result["output"]
    assert "Traceback (most recent call last)" in result["stderr"], result
    assert 'File "<cell rotation>", line 4, in <module>' in result["stderr"], result["stderr"]
    assert "math.pi / 0" in result["stderr"] and "ZeroDivisionError" in result["stderr"], result["stderr"]
    assert "cellplot" not in result["stderr"], result["stderr"]  # the runner's frame is left out
    result = _run(browser, "rotation", "for i in range(3)\n    print(i)\n")  # a syntax error
    assert result["state"] == "error" and "SyntaxError" in result["stderr"], result
    browser.execute_script("document.querySelector('#cell-rotation .pycell-reset').click()")
    WebDriverWait(browser, 5).until(lambda d: "M_k" in d.execute_script(
        "return document.getElementById('cell-rotation-code').value"))
    assert _run(browser, "rotation")["state"] == "done"


def test_from_a_file_url_the_cell_says_how_to_serve_the_site(browser, docs_site):
    """Chromium refuses WebAssembly from file://: the cell says so in one line, with the command."""
    browser.get((docs_site / PAGE).as_uri())
    result = _run(browser, "order")
    assert result["state"] == "unavailable", result
    assert "python -m http.server -b 127.0.0.1 -d site" in result["status"], result["status"]
    assert "http://127.0.0.1:8000/guide/why-positions.html" in result["status"], result["status"]
