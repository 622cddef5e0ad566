"""The pretrained part (``--part pretrained``): RoPE scalings on a pretrained LLM (``posenc extend``).

The other parts' scaling claims are measured on models this benchmark trains (a byte model of two
layers); this part puts the papers' claims about *pretrained* models on the page: SmolLM2-135M
(context 8192) extended to 16,384 tokens with every scaling, perplexity per 1k tokens and passkey
retrieval on the works of Shakespeare (``posenc.extend``; its verdicts: ``posenc.extend.verdicts``).

The full profile runs the grid (one run: ``posenc extend --to 16384`` into ``OUT/extend``; hours on a
2-core CPU, resumable). Any other profile runs nothing here: a 16k forward of the 135M model takes
minutes on the slowest machine, more than ``make report``'s budget. The section shows, in this order:
the verdicts of a ``posenc extend`` run in ``OUT/extend`` if there is one (measured now); else those of
the newest kept extend set (``posenc.extrapolate.kept_extend``, posenc/extrapolate/records/NAME/),
each marked *recorded* with its commit, date, machine and the command that measures it again, and
*stale* where a record's set-up hash is not the one today's code computes; else the claims as not
measured, with the command that measures them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posenc.stats.findings import Verdict
from posenc.stats.page_parts import Page, e
from posenc.extrapolate.part import Part, Section
from posenc.extrapolate.plan import Log, Run
from posenc.extrapolate.profiles import Profile
from posenc.extrapolate.runs import Context

TO = 16384  # twice SmolLM2's context
COMMAND = f"posenc extend --to {TO} --out report/extend"
CLAIMS = (
    ("Press et al. 2022; Chen et al. 2023", "plain RoPE degrades past its context"),
    ("bloc97 2023", "zero-shot NTK-aware beats zero-shot linear at 2×"),
    ("Peng et al. 2023", "YaRN beats ntk and linear zero-shot at 2×"),
    ("Peng et al. 2023", "dynamic scaling leaves perplexity within the original context unchanged"),
    ("Chen et al. 2023", "linear interpolation raises perplexity within the original context"),
    ("Mohtashami & Jaggi 2023; Peng et al. 2023", "scaling retrieves the passkey past the context more often than none"),
)


class Pretrained(Part):
    name = "pretrained"
    split_in_record = False
    lists_specs = False
    shows_kept_extend = True

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        if self.name not in profile.parts:
            return []
        return [Run(self.name, profile.all_seeds[0], "smollm2", {"scheme": "rope"}, "extend",
                    {"to": TO, "measure": profile.name == "full"}, profile.name)]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        """The full profile measures into ``OUT/extend``; another only names the folder (its section shows a
        ``posenc extend`` run there if one exists when the page is drawn)."""
        out = ctx.checkpoints.parent / "extend"
        if runs[0].variant.get("measure"):
            from posenc.extend import extend

            extend(to=TO, out=out, threads=ctx.threads, log=ctx.log, progress=ctx.progress)
        return [{"extend": str(out)}]

    def summary(self, record: dict[str, Any]) -> str:
        return f"posenc extend to {TO}: {record.get('extend')}"

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile, kept=None) -> Section:
        """``kept``: the kept extend sets and the reasons of those refused (``kept_extend.load_sets``; None:
        none), shown when no run is in ``OUT/extend``."""
        from posenc.extend.verdicts import from_folder

        folders = [Path(r["extend"]) for r in records if r.get("extend")]
        verdicts = from_folder(folders[0]) if folders else None
        page.add('<h2 id="pretrained">RoPE scalings on a pretrained LLM (SmolLM2-135M, 8k → 16k)</h2>')
        # the newest kept set (its objects: ``posenc.extrapolate.kept_extend.KeptExtend``)
        shown = max(kept[0], key=lambda k: k.provenance["date"], default=None) if kept and verdicts is None else None
        if shown is not None:
            r, p = shown.recorded(), shown.provenance
            stale = (' <span class="stale" title="a record\'s set-up hash differs from today\'s code">stale</span>: '
                     f"{len(shown.stale)} of its {len(shown.records)} records have a set-up hash today's code would "
                     "not write" if r.stale else "")
            wall = f", {p['wall_seconds']:.0f} s wall" if p.get("wall_seconds") is not None else ""
            page.add(f'<p id="pretrained-recorded">Not measured by this run: its verdicts are the kept run\'s '
                     f'(<span class="recorded">recorded</span>{stale}; kept records {e(r.name)}: commit '
                     f"{e(r.commit[:12])}, {e(r.date)}, {e(r.machine)}{wall}, {len(shown.records)} measurements). "
                     f"<code>{e(r.command)}</code> measures them again (hours, resumable); "
                     "docs/guide/extend.md.</p>")
            verdicts = shown.verdicts()
        elif verdicts is None:
            page.add("<p>Not measured by this profile: a 16k-token forward of the 135M model takes minutes on a "
                     f"2-core CPU. <code>{e(COMMAND)}</code> measures these claims (hours, resumable; "
                     "<code>posenc report --profile full</code> runs it); docs/guide/extend.md.</p>")
            verdicts = [Verdict(src, claim, f"not measured: {COMMAND}", "not measured") for src, claim in CLAIMS]
        else:
            page.add(f"<p>From <code>{e(str(folders[0]))}/index.html</code>: perplexity by position and passkey "
                     "retrieval, the passage as the unit.</p>")
        return Section(verdicts)


PART = Pretrained()
