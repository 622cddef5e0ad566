"""What a part of the benchmark is: the one interface the shared machinery knows.

A part (lm, hybrid, scaling, tasks, structure, image, time, pretrained: ``posenc.extrapolate.parts``)
owns its runs, what one run does, its evaluation, its claims and its section of the page. The driver,
the results file, the statistics and the page call a part only through ``Part``;
``posenc.extrapolate.parts.PARTS`` is the one table of the parts, in the order of the plan (per seed)
and of the page, and ``posenc.extrapolate.PART_NAMES`` the one list of the names a user picks.

    plan(profile, schemes, custom=, corpus_sha=, log=)  the part's runs, every seed (Run.part = name)
    extend(profile, runs, custom=, corpus_sha=)         rows it adds beside another part's runs
    execute(ctx, run)                                   one run's record body (a dict)
    execute_seeds(ctx, runs)                            the bodies of one configuration's seeds (trained as one)
    section(page, records, profile)                     its HTML; its verdicts, summary, sources

Adding a part: a module under ``parts/`` with one ``Part`` subclass, one line in ``PARTS``, its name
in ``posenc.extrapolate.PART_NAMES`` (the ``--part`` choices) when a user picks it, and its
settings on ``Profile``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from posenc.extrapolate.distributed import Dist
    from posenc.stats.findings import Verdict
    from posenc.extrapolate.model import GPTConfig
    from posenc.stats.page_parts import Page
    from posenc.extrapolate.plan import Run
    from posenc.extrapolate.profiles import Profile

Log = Callable[[str], None]


@dataclass
class Context:
    """What a part's ``execute`` gets: the profile, the process group, the shared data (``load``)."""

    profile: Profile
    dist: Dist
    checkpoints: Path  # where the trained RoPE models wait for the scaling runs
    data: Any  # what the parts' ``load`` gave (the language-modelling corpus split), or None
    corpus_source: str
    corpus_sha: str
    threads: int
    log: Log
    progress: bool
    jobs: int = 1  # runs going on at once (worker processes)


@dataclass
class Section:
    """What a part's section gives the page's summary: its verdicts (they join the Holm family),
    HTML for the summary block (above the verdict table), and the settings of its papers by source."""

    verdicts: list[Verdict] = field(default_factory=list)
    summary: str = ""
    sources: dict[str, str] = field(default_factory=dict)


class Part:
    """One part of the benchmark; the defaults are those of a part that runs nothing."""

    name: str = ""  # the records' ``part`` (a ``--part`` choice); a part whose rows are other parts' (hybrid, structure): a name no record has
    split_in_record: bool = True  # a record carries the corpus split (when the corpus was loaded)
    lists_specs: bool = True  # its records' specs are listed under "scheme specs" on the page
    shows_kept_extend: bool = False  # its section is given the kept ``posenc extend`` sets (``kept=``: pretrained)

    def model(self, profile: Profile) -> GPTConfig | None:
        """The decoder config its runs train (None: not the benchmark's decoder)."""
        return None

    def load(self, profile: Profile, corpus: str | None) -> tuple[Any, str, str] | None:
        """Data shared by the runs of a profile, loaded once per process: ``(data, source, sha)``."""
        return None

    def plan(self, profile: Profile, schemes: list[Any], *, custom: bool, corpus_sha: str, log: Log) -> list[Run]:
        return []

    def extend(self, profile: Profile, runs: list[Run], *, custom: bool, corpus_sha: str) -> list[Run]:
        """Runs to add right after ``runs`` (one part's runs of one seed; ``custom`` and ``corpus_sha``
        as for ``plan``): the hybrid rows, the structured positions' rows. They are records of the
        part whose runs they join, which runs them."""
        return []

    def note_own_model(self, profile: Profile, log: Log) -> None:
        """For a part that trains its own bidirectional transformer (image, time): ``--arch`` does not apply."""
        if profile.arch != "transformer":
            log(f"note: --arch {profile.arch} applies to lm, scaling and tasks; the {self.name} part uses its own "
                "bidirectional transformer")

    def depends_on(self, run: Run, profile: Profile, corpus_sha: str) -> str | None:
        """The key of the run whose checkpoint ``run`` needs (None: it needs none)."""
        return None

    def execute(self, ctx: Context, run: Run) -> dict[str, Any]:
        return self.execute_seeds(ctx, [run])[0]

    def execute_seeds(self, ctx: Context, runs: list[Run]) -> list[dict[str, Any]]:
        """The record bodies of ``runs``, the seeds of one configuration (``plan.seed_groups``)."""
        raise NotImplementedError(f"part {self.name!r} runs nothing")

    def summary(self, record: dict[str, Any]) -> str:
        """One line on a finished run (the driver's progress log)."""
        return ""

    def records(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records its section reads."""
        return [r for r in records if r["part"] == self.name]

    def section(self, page: Page, records: list[dict[str, Any]], profile: Profile) -> Section:
        return Section()
