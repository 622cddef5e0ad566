/* The Python cells of a page (docs/_hooks/cells.py): Run loads Pyodide once, from this site
   (assets/pyodide/, pinned and checksum-checked at build time), then runs the textarea's code with
   docs/cells/cellplot.py's runner: printed lines go to the cell's output (stderr, a traceback,
   marked), the figures it drew below it.

   What a test reads: the cell's data-state ("running", "done", "error": the code raised,
   "unavailable": Pyodide could not load), data-runs, and on the page's root element
   data-pyodide-load-ms, data-pyodide-bytes (the first Run's load: its time and the bytes of
   Pyodide's files) once Pyodide is up. */
(function () {
  "use strict";
  const settings = JSON.parse(document.getElementById("pycell-config").textContent);
  const base = new URL(settings.pyodide, document.baseURI).href;
  let loading = null;  // the one Pyodide of the page, a promise
  let sink = null;     // where the running cell's printed lines go

  function loadScript(src) {
    return new Promise((resolve, reject) => {
      const script = document.createElement("script");
      script.src = src;
      script.onload = resolve;
      script.onerror = () => reject(new Error("could not load " + src));
      document.head.appendChild(script);
    });
  }

  function pyodideBytes() {
    return performance.getEntriesByType("resource").filter((e) => e.name.startsWith(base))
      .reduce((n, e) => n + (e.encodedBodySize || e.transferSize || 0), 0);
  }

  function load() {
    if (!loading) {
      loading = (async () => {
        const started = performance.now();
        if (typeof loadPyodide === "undefined") await loadScript(base + "pyodide.js");
        const py = await loadPyodide({
          indexURL: base,
          stdout: (line) => sink && sink(line, false),
          stderr: (line) => sink && sink(line, true),
        });
        py.FS.mkdirTree("/cells");
        py.FS.writeFile("/cells/cellplot.py", settings.helper);
        py.runPython("import sys; sys.path.insert(0, '/cells')");
        const run = py.runPython("import cellplot; cellplot.run");
        const root = document.documentElement.dataset;
        root.pyodideLoadMs = String(Math.round(performance.now() - started));
        root.pyodideBytes = String(pyodideBytes());
        return run;
      })();
      loading.catch(() => { loading = null; });  // the next Run tries again
    }
    return loading;
  }

  function write(out, line, error) {
    const span = document.createElement("span");
    if (error) span.className = "pycell-stderr";
    span.textContent = line + "\n";
    out.appendChild(span);
  }

  async function runCell(cell) {
    const code = cell.querySelector(".pycell-code");
    const out = cell.querySelector(".pycell-output");
    const figure = cell.querySelector(".pycell-figure");
    const status = cell.querySelector(".pycell-status");
    const buttons = cell.querySelectorAll("button");
    buttons.forEach((b) => { b.disabled = true; });
    out.textContent = "";
    figure.textContent = "";
    cell.dataset.state = "running";
    const first = !document.documentElement.dataset.pyodideLoadMs;
    status.textContent = first ? "loading Python (Pyodide " + settings.version + ", about 13 MB, once)…" : "running…";
    let run;
    try {
      run = await load();
    } catch (e) {
      cell.dataset.state = "unavailable";
      status.textContent = "Python could not load here (" + location.protocol + " pages may not load WebAssembly): "
        + "serve the site with `" + settings.serve + "` and open http://127.0.0.1:8000/" + settings.page;
      write(out, String(e && e.message || e), true);
      buttons.forEach((b) => { b.disabled = false; });
      return;
    }
    const started = performance.now();
    sink = (line, error) => write(out, line, error);
    let ok = false;
    let svgs = [];
    try {
      const result = run(code.value, cell.dataset.cell);
      [ok, svgs] = result.toJs();
      result.destroy();
    } catch (e) {  // the runner itself failed (it catches the cell's errors)
      write(out, String(e && e.message || e), true);
    } finally {
      sink = null;
    }
    const ms = performance.now() - started;
    figure.innerHTML = svgs.join("");
    cell.dataset.runs = String(Number(cell.dataset.runs || 0) + 1);
    cell.dataset.state = ok ? "done" : "error";
    const root = document.documentElement.dataset;
    status.textContent = (ok ? "ran" : "raised an error") + " in " + Math.round(ms) + " ms"
      + (first ? "; Python loaded in " + (Number(root.pyodideLoadMs) / 1000).toFixed(1) + " s, "
        + (Number(root.pyodideBytes) / 1e6).toFixed(1) + " MB" : "");
    buttons.forEach((b) => { b.disabled = false; });
  }

  for (const cell of document.querySelectorAll(".pycell")) {
    const code = cell.querySelector(".pycell-code");
    cell.querySelector(".pycell-run").addEventListener("click", () => runCell(cell));
    cell.querySelector(".pycell-reset").addEventListener("click", () => {
      code.value = cell.querySelector(".pycell-original").content.textContent;
    });
    code.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.shiftKey || e.ctrlKey || e.metaKey)) {  // Shift+Enter runs, as in a notebook
        e.preventDefault();
        runCell(cell);
      } else if (e.key === "Tab" && !e.shiftKey) {  // Tab indents instead of leaving the cell
        e.preventDefault();
        code.setRangeText("    ", code.selectionStart, code.selectionEnd, "end");
      }
    });
  }
})();
