"""``--plugin FILE_OR_MODULE``: the user's schemes on every command and in the benchmark's workers.

The example scheme of the docs (``docs/plugin_example.py``, ``my_alibi``) is the plugin: ``posenc
list`` shows it; the smoke profile runs it on two worker processes beside the built-in schemes;
an edited copy runs its runs again (and not the built-in ones); ``report --no-run`` without the
plugin keeps its results and says so; the page compares it with every baseline (``#plugins``).
Every command that loads a plugin runs in its own process, so no test leaves a plugin registered in
the test session; those that register none (no ``--plugin``, or one that fails to import) run in it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import in_fork

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = REPO / "docs" / "plugin_example.py"
SMOKE = ["--profile", "smoke", "--part", "lm", "--threads", "1", "--no-progress"]


def posenc(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``posenc ARGS`` (``posenc.cli.main``) in a process of its own forked from this one
    (``conftest.in_fork``), in the repository, with ``env`` added to its environment and its
    ``PYTHONPATH`` put on ``sys.path``: a plugin it loads is registered there only. The benchmark
    workers it starts are new interpreters still (spawned), which load the plugin themselves."""
    def command():
        from posenc.cli import main

        os.chdir(REPO)
        os.environ.update(env or {})
        sys.path[:0] = [p for p in (env or {}).get("PYTHONPATH", "").split(os.pathsep) if p]
        return main(list(args))

    status, code, out, err = in_fork(command)
    return subprocess.CompletedProcess(["posenc", *args], code if status == 0 else status, out, err)


def in_process(*args: str, capsys) -> subprocess.CompletedProcess:
    """``posenc ARGS`` in this process (``posenc.cli.main``), for a command that registers no scheme:
    a plugin that fails to import registers nothing, and a command without ``--plugin`` loads none."""
    from posenc.cli import main

    capsys.readouterr()
    code = main(list(args))
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["posenc", *args], code, out, err)


def test_list_shows_a_plugin_file_scheme(capsys):
    plain = in_process("list", capsys=capsys)
    assert plain.returncode == 0 and "my_alibi" not in plain.stdout
    done = posenc("list", "--plugin", str(EXAMPLE), "--kind", "bias")
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("my_alibi"))
    assert "bias" in row and "scale=1.0" in done.stdout


def test_a_plugin_module_name_and_show(tmp_path):
    (tmp_path / "lab_schemes.py").write_text(EXAMPLE.read_text())
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    done = posenc("show", "my_alibi:scale=0.5", "--heads", "2", "--plugin", "lab_schemes", env=env)
    assert done.returncode == 0, done.stderr
    assert "scale=0.5" in done.stdout


@pytest.mark.parametrize("plugin, says", [("no/such/plugin.py", "FileNotFoundError"),
                                          ("broken", "RuntimeError: a broken plugin"),
                                          ("no_such_module_xyz", "ModuleNotFoundError")])
def test_a_plugin_that_fails_to_import_exits_2_with_one_line(tmp_path, plugin, says, capsys):
    if plugin == "broken":
        plugin = str(tmp_path / "broken.py")
        Path(plugin).write_text("raise RuntimeError('a broken plugin')\n")
    for command in (["list"], ["extrapolate", *SMOKE, "--out", str(tmp_path / "r.jsonl")]):
        done = in_process(*command, "--plugin", plugin, capsys=capsys)
        assert done.returncode == 2
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
        assert plugin in lines[0] and says in lines[0] and lines[0].startswith(f"posenc {command[0]}: error:")
    assert not (tmp_path / "r.jsonl").exists()


def test_the_example_module_equals_its_reference():
    code = ("import numpy as np, torch; from posenc import plugins, build\n"
            f"plugins.load([{str(EXAMPLE)!r}])\n"
            "rng = np.random.default_rng()\n"
            "h, scale = int(rng.integers(1, 9)), float(rng.uniform(0.1, 3))\n"
            "m = build({'scheme': 'my_alibi', 'num_heads': h, 'scale': scale})\n"
            "q, k = torch.arange(7) + int(rng.integers(0, 100)), torch.arange(11)\n"
            "got = m(q, k).double().numpy(); want = m.reference(q.numpy(), k.numpy())\n"
            "assert got.shape == (h, 7, 11) and np.allclose(got, want, atol=1e-6, rtol=1e-6), abs(got - want).max()\n"
            "print(plugins.origin('my_alibi').sha256)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    import hashlib

    assert done.stdout.strip() == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()


def test_the_page_compares_a_plugin_scheme_with_each_baseline_by_the_claims_procedure():
    """``yours.comparisons`` decides with ``verdicts.decide`` (pool and Holm over one scheme's
    comparisons): a clear gain on three seeds is "agrees", with a detectable effect."""
    from posenc.extrapolate import yours
    from posenc.stats import findings, procedure as verdicts
    from posenc.stats.estimates import LMTable, combine, paired

    rng = np.random.default_rng()
    lengths, seeds, blocks = [16, 32, 64], (0, 1, 2), 40
    base = {t: {s: 5 + rng.normal(0, 0.05, blocks) for s in seeds} for t in lengths}
    gain = {16: 0.0, 32: -0.3, 64: -0.6}
    mine = {t: {s: base[t][s] + gain[t] + rng.normal(0, 0.05, blocks) for s in seeds} for t in lengths}
    table = LMTable({"mine": {"nonoverlap": mine}, "alibi": {"nonoverlap": base}}, {}, lengths, 16)
    out = yours.comparisons(table, "mine", ["alibi"])
    assert [(b, t) for b, t, _ in out] == [("alibi", t) for t in lengths]
    by_length = {t: v for _, t, v in out}
    assert by_length[64].status == by_length[32].status == "agrees" and by_length[64].mde > 0
    evidence = []
    for t in lengths:
        d = combine(paired(mine[t], base[t]))
        evidence.append((verdicts.Evidence(d.per_seed, d.within, sign=-1), "your scheme mine", "your scheme mine"))
    for (_, t, v), decision in zip(out, verdicts.decide(evidence)):
        assert v.status == decision.status and v.p_holm == pytest.approx(decision.p_holm)
        assert v.mde == pytest.approx(decision.mde)
    assert isinstance(out[0][2], findings.Verdict)


@pytest.mark.slow
@pytest.mark.xdist_group("heavy")
def test_smoke_runs_a_plugin_on_two_workers_reruns_it_when_edited_and_keeps_it_without(tmp_path, capsys):
    plugin = tmp_path / "my_scheme.py"
    shutil.copy(EXAMPLE, plugin)
    out = tmp_path / "report"
    results = out / "results.jsonl"
    run = ["extrapolate", *SMOKE, "--jobs", "2", "--plugin", str(plugin), "--out", str(results)]
    first = posenc(*run)
    assert first.returncode == 0, first.stderr
    assert "2 worker processes" in first.stderr
    records = [json.loads(line) for line in results.read_text().splitlines()]
    mine = [r for r in records if r["scheme"] == "my_alibi"]
    assert len(mine) == 1 and mine[0]["eval"] and all(np.isfinite(row["nll"]) for row in mine[0]["eval"] if "nll" in row)
    import hashlib

    assert mine[0]["plugin"] == {"my_alibi": {"source": str(plugin),
                                              "sha256": hashlib.sha256(plugin.read_bytes()).hexdigest()}}
    builtin = {r["key"] for r in records if r["scheme"] != "my_alibi"}
    assert {"nope", "rope", "alibi"} <= {r["scheme"] for r in records} and not any("plugin" in r for r in records
                                                                                 if r["key"] in builtin)
    again = posenc(*run)  # nothing changed: nothing runs
    assert again.returncode == 0 and "0 to run" in again.stderr, again.stderr

    plugin.write_text(plugin.read_text().replace("np.log1p(np.abs(q - k))", "np.log1p(np.abs(q - k))  # edited"))
    edited = posenc(*run)
    assert edited.returncode == 0 and "1 to run" in edited.stderr, edited.stderr
    after = [json.loads(line) for line in results.read_text().splitlines()]
    new = after[len(records):]
    assert [r["scheme"] for r in new] == ["my_alibi"] and new[0]["key"] != mine[0]["key"]
    assert {r["key"] for r in after if r["scheme"] != "my_alibi"} == builtin

    kept = in_process("report", *SMOKE, "--no-run", "--out", str(out), capsys=capsys)  # without --plugin
    assert kept.returncode == 0, kept.stderr
    assert "kept 1 result(s)" in kept.stderr and "my_alibi" in kept.stderr
    assert f"{len(builtin)} runs, {len(builtin)} already in" in kept.stderr  # the same keys without the plugin
    page = (out / "index.html").read_text()
    assert 'id="kept"' in page and 'id="plugins"' in page
    section = page[page.index('id="plugins"'):]
    assert new[0]["plugin"]["my_alibi"]["sha256"][:12] in section  # the edited version's, not the first
    for baseline in ("nope", "sinusoidal", "rope", "alibi", "t5"):
        for length in (16, 32, 64):
            assert f"<tr><td>{baseline}</td><td>{length}</td>" in section, (baseline, length)
    assert "<tr><td>hybrid" not in section.split("</table>")[0]

    given = posenc("report", *SMOKE, "--no-run", "--plugin", str(plugin), "--out", str(out))
    assert given.returncode == 0 and "kept" not in given.stderr, given.stderr
    page = (out / "index.html").read_text()
    assert 'id="kept"' not in page and 'id="plugins"' in page and "--plugin" in page.split('id="command"')[1][:400]


def test_the_benchmark_guide_shows_the_example_file_whole():
    """Whole, in a ``py`` block (tests/test_readme.py runs the ``python`` blocks in the test session,
    where this one would register ``my_alibi`` for every test after it)."""
    guide = (REPO / "docs" / "guide" / "benchmark.md").read_text()
    assert "```py\n" + EXAMPLE.read_text().rstrip("\n") + "\n```" in guide
    assert 'id="plugins"' not in guide and "`#plugins`" in guide and "--plugin FILE_OR_MODULE" in guide
