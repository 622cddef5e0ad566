"""The documentation site, built as ``make docs`` builds it (``mkdocs build --strict``) and opened in
headless Chromium from ``file://`` with the network switched off: every page renders without a
console error, every internal link and anchor resolves, search finds pages offline, and no page
asks for anything over http(s) (every request the browser makes is logged through the DevTools
protocol and checked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from test_explorer_browser import headless_chromium

pytestmark = [pytest.mark.browser, pytest.mark.xdist_group("docs_site")]

ROOT = Path(__file__).resolve().parents[1]


def _build(out: Path) -> Path:
    try:
        import mkdocs  # noqa: F401
        import mkdocstrings  # noqa: F401
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("mkdocs is missing in CI; the test extra includes the docs extra")
        pytest.skip("needs the docs extra (mkdocs, mkdocs-material, mkdocstrings); CI does not skip")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--config-file",
                           str(ROOT / "mkdocs.yml"), "--site-dir", str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stdout}\n{proc.stderr}"
    return out


@pytest.fixture(scope="module")
def site(docs_site):
    return docs_site  # built once for this module and tests/test_cells_browser.py (conftest.py)


@pytest.fixture(scope="module")
def browser(site):
    driver = headless_chromium("1400,1000", logs=("browser", "performance"), offline=True)
    try:
        yield driver
    finally:
        driver.quit()


def _pages(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def _requests(driver) -> list[str]:
    """The URLs of every request the browser sent since the last call (DevTools performance log)."""
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _errors(driver) -> list[str]:
    return [e["message"] for e in driver.get_log("browser") if e["level"] in ("SEVERE", "ERROR")]


def test_the_site_has_every_page(site):
    names = {p.relative_to(site).as_posix() for p in _pages(site)}
    guides = {f"guide/{n}.html" for n in ("why-positions", "kinds", "rope", "axes", "attention", "content",
                                          "benchmark", "explorer", "errors", "cli", "structure", "transformers")}
    api = {f"api/{n}.html" for n in ("posenc", "reference", "interop", "scaling", "analysis")}
    assert {"index.html", "numbers.html", "recorded.html"} | guides | api <= names, sorted(names)
    recorded = (site / "recorded.html").read_text(encoding="utf-8")  # the report page from the kept records
    assert 'id="recorded-banner"' in recorded and 'id="verdicts"' in recorded and "<figure><img" in recorded
    assert 'href="recorded.html"' in (site / "index.html").read_text(encoding="utf-8")  # in the nav
    cli = (site / "guide" / "cli.html").read_text(encoding="utf-8")
    assert "posenc extrapolate --help" in cli and "--profile" in cli  # generated from the parser
    api_page = (site / "api" / "posenc.html").read_text(encoding="utf-8")
    assert 'id="posenc.registry.build"' in api_page
    for name in ("positions.segment_positions", "positions.randomized_positions", "digits.digit_positions",
                 "digits.coupled_positions"):
        assert f'id="posenc.{name}"' in api_page, name


@pytest.fixture(scope="module")
def seen(site, browser) -> dict[str, dict]:
    """Every page loaded once from file:// with the network off, and what the tests below read of it:
    ``{name: {"title", "text", "errors", "requests", and on the guide's pages "scrolling" (the first
    line of each code block wider than its box) and "images" ([src, natural width, shown width, the
    href of the link around it])}}``. One pass for three tests, which loaded the pages each for itself
    (the guide's three times): 10.2 s of loading, 5.5 s in one pass (measured on the 2-core machine)."""
    _requests(browser), _errors(browser)
    guide = set(_guide_pages(site))
    found = {}
    for page in _pages(site):
        browser.get(page.as_uri())
        heading = "const h = document.querySelector('article h1'); return h && h.textContent"
        one = {"title": browser.execute_script(heading),
               "text": browser.execute_script("return document.querySelector('article').innerText.length")}
        if page in guide:
            one["scrolling"] = browser.execute_script("""return [...document.querySelectorAll('article pre > code')]
                .filter(c => c.scrollWidth > c.clientWidth).map(c => c.textContent.split('\\n')[0].slice(0, 60))""")
            one["images"] = browser.execute_script("""return [...document.querySelectorAll('article img')].map(i =>
                [i.getAttribute('src'), i.naturalWidth, i.clientWidth, i.closest('a')?.getAttribute('href')])""")
        one["errors"], one["requests"] = _errors(browser), _requests(browser)
        found[page.relative_to(site).as_posix()] = one
    return found


def test_every_page_renders_offline_without_errors_or_requests(seen):
    """Each page loads from file:// with the network off: no console error, no http(s) request, and
    its article has a heading and text."""
    problems = []
    for name, page in seen.items():
        title, text = page["title"], page["text"]
        if not title or text < 200:
            problems.append(f"{name}: no heading or almost no text ({text} characters)")
        problems += [f"{name}: console: {m}" for m in page["errors"]]
        problems += [f"{name}: request {u}" for u in page["requests"]
                     if urlsplit(u).scheme not in ("file", "data", "blob")]
    assert not problems, "\n".join(problems)


def test_every_internal_link_resolves(site):
    """Every href and src between pages points to a file of the site, and every #anchor to an id there."""
    ids: dict[Path, set[str]] = {}

    def ids_of(path: Path) -> set[str]:
        if path not in ids:
            ids[path] = set(re.findall(r'\sid="([^"]+)"', path.read_text(encoding="utf-8")))
        return ids[path]

    broken, checked = [], 0
    for page in _pages(site):
        html = page.read_text(encoding="utf-8")
        for ref in re.findall(r'\s(?:href|src)="([^"]*)"', html):
            parts = urlsplit(ref)
            if parts.scheme in ("http", "https", "mailto", "data") or parts.netloc:
                continue  # external: a link a reader may follow; the page never loads it (tested above)
            target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
            checked += 1
            if not target.is_file():
                broken.append(f"{page.relative_to(site)}: {ref} (no file)")
            elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in ids_of(target):
                broken.append(f"{page.relative_to(site)}: {ref} (no id {parts.fragment!r})")
    assert checked > 500 and not broken, "\n".join(broken)


def test_search_works_offline(site, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get((site / "index.html").as_uri())
    browser.execute_script("document.querySelector('label[for=__search]').click()")
    box = WebDriverWait(browser, 10).until(lambda d: (lambda e: e if e.is_displayed() else None)(
        d.find_element(By.CSS_SELECTOR, "input.md-search__input")))
    box.send_keys("mrope_positions")
    WebDriverWait(browser, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".md-search-result__item"))
    links = [a.get_attribute("href") for a in browser.find_elements(By.CSS_SELECTOR, ".md-search-result__item a")]
    assert any("guide/axes.html" in h for h in links), links
    assert not _errors(browser)
    assert [u for u in _requests(browser) if urlsplit(u).scheme not in ("file", "data", "blob")] == []


def _guide_pages(site: Path) -> list[Path]:
    return [site / "index.html", *sorted((site / "guide").glob("*.html"))]


def test_why_positions_is_first_in_the_guide_with_its_figures(site, browser):
    """The concepts page opens the guide in the navigation, and its figures (drawn at build time
    from its examples, docs/_hooks/concepts.py) are there and load."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("concepts", ROOT / "docs" / "_hooks" / "concepts.py")
    concepts = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(concepts)
    browser.get((site / "index.html").as_uri())
    guide = browser.execute_script("""
        const section = [...document.querySelectorAll('.md-nav--primary > .md-nav__list > .md-nav__item')]
            .find(li => li.querySelector(':scope > label, :scope > a')?.textContent.trim().startsWith('Guide'));
        return [...section.querySelectorAll('.md-nav__item > a.md-nav__link')].map(a => [a.textContent.trim(),
            a.getAttribute('href')]);""")
    assert guide[0] == ["Why positions", "guide/why-positions.html"], guide
    browser.get((site / "guide" / "why-positions.html").as_uri())
    images = browser.execute_script("""return [...document.querySelectorAll('article img')]
        .map(i => [i.getAttribute('src'), i.complete && i.naturalWidth > 0])""")
    assert images == [[f"figures/{name}.png", True] for name in concepts.FIGURES], images


def test_no_code_block_scrolls_sideways_at_1400_px(site, browser, seen):
    """At the window of a laptop (1400 px) a code block never hides its end behind a horizontal
    scrollbar: a line longer than the column wraps (docs/assets/stylesheets/extra.css), indented."""
    assert browser.execute_script("return window.innerWidth") == 1400
    scrolling = []
    for page in _guide_pages(site):
        name = page.relative_to(site).as_posix()
        scrolling += [f"{name}: {first!r}" for first in seen[name]["scrolling"]]
    assert not scrolling, "\n".join(scrolling)


@pytest.mark.parametrize("name", ["index.html", "guide/why-positions.html", "guide/kinds.html"])
def test_the_examples_lines_fit_the_column_at_1400_px(site, browser, name):
    """On the pages a reader starts from, no line of code wraps at 1400 px: a comment sits on its
    line, beside the code it explains."""
    browser.get((site / name).as_uri())
    lines, wrapped = browser.execute_script("""
        const out = [];
        let lines = 0;
        for (const code of document.querySelectorAll('article pre > code')) {
            const line = parseFloat(getComputedStyle(code).lineHeight), right = code.getBoundingClientRect().right;
            for (const span of code.querySelectorAll(':scope > span[id^="__span"]')) {
                const range = document.createRange();
                range.selectNodeContents(span);
                const box = range.getBoundingClientRect();
                lines += 1;
                if (box.height > 1.5 * line || box.right > right + 0.5) out.push(span.textContent.trim());
            }
        }
        return [lines, out];""")
    assert lines >= 10 and wrapped == [], "\n".join(wrapped) or f"{lines} lines of code"


def test_an_image_wider_than_the_column_links_to_its_full_size(site, seen):
    """A screenshot shrunk to the page's width (the explorer's is 1635 px wide) opens full size in
    one click: every such image is a link to its own file."""
    shrunk, checked = [], 0
    for page in _guide_pages(site):
        name = page.relative_to(site).as_posix()
        for src, natural, shown, link in seen[name]["images"]:
            if natural > shown:
                checked += 1
                if link != src:
                    shrunk.append(f"{name}: {src} ({natural} px shown at {shown}) links to {link}")
    assert checked >= 3 and not shrunk, "\n".join(shrunk) or checked
