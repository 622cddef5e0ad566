"""Kept records (``posenc.extrapolate.kept``): the sets in posenc/extrapolate/records load with their
provenance and are fresh for today's code; one record chosen at random among the cheap ones, run
again, gives its numbers exactly; an altered record is refused, a changed set-up marked stale; the
page shows a kept verdict marked recorded (and stale), never as fresh."""

from __future__ import annotations

import dataclasses
import json
import random
import shutil

import pytest
import torch

from posenc.extrapolate import kept
from posenc.extrapolate.glance import recorded_mark

SETS, REFUSED = kept.load_sets()
CHEAP_CPU_SECONDS = 1.0  # a record re-run by the test costs at most this (as it was measured)


def test_the_kept_sets_load_with_their_provenance_and_are_fresh():
    assert SETS and not REFUSED, REFUSED
    for k in SETS:
        assert set(kept.FIELDS) <= set(k.provenance), k.name
        assert k.provenance["commit"] and k.provenance["machine"]["processor"] and k.records
        assert k.provenance["command"].startswith("posenc extrapolate ")
        assert not k.stale, f"{k.name}: {len(k.stale)} records whose set-up today's code changed: keep them again"
        assert all("key" in r and "cpu_seconds" in r for r in k.records)


def _cheap() -> list[tuple[kept.KeptSet, dict]]:
    """Every kept record that cost at most ``CHEAP_CPU_SECONDS``, but the scaling runs (they read their
    RoPE model's checkpoint, which is not kept)."""
    return [(k, r) for k in SETS for r in k.records
            if r["cpu_seconds"] <= CHEAP_CPU_SECONDS and r["part"] != "scaling"]


def test_a_kept_record_chosen_at_random_among_the_cheap_ones_reruns_exactly(tmp_path):
    from posenc.extrapolate.distributed import Dist
    from posenc.extrapolate.part import Context
    from posenc.extrapolate.parts import owner, plan
    from posenc.extrapolate.plan import available_schemes
    from posenc.extrapolate.runs import execute_seeds
    from posenc.extrapolate.worker import lm_data

    cheap = _cheap()
    assert len(cheap) >= 10, "too few cheap kept records to choose from"
    k, record = random.Random().choice(cheap)
    where = f"kept set {k.name}, record {record['key']} ({record['part']} {record['label']} seed {record['seed']})"
    profile = k.profile()
    names = k.provenance["schemes"] or list(available_schemes(profile.schemes, lambda msg: None))
    data, source, sha = lm_data(profile, k.provenance["corpus"])
    runs = {r.key: r for r in plan(profile, names, corpus_sha=sha, log=lambda msg: None)}
    assert record["key"] in runs, f"{where}: not in today's plan"
    threads = torch.get_num_threads()
    torch.set_num_threads(record["env"]["threads"])
    try:
        ctx = Context(profile, Dist(), tmp_path, data, source, sha, record["env"]["threads"], lambda msg: None, False)
        [again] = execute_seeds(ctx, [runs[record["key"]]], owner(record["part"]))
    finally:
        torch.set_num_threads(threads)
    for field in ("eval", "train_loss", "params", "spec", "settings"):
        assert again.get(field) == record.get(field), f"{where}: {field} differs"


def _copy(tmp_path, name: str):
    src = kept.RECORDS_DIR / name
    shutil.copyfile(src.with_suffix(".json"), tmp_path / f"{name}.json")
    shutil.copyfile(src.with_suffix(".jsonl"), tmp_path / f"{name}.jsonl")
    return tmp_path / f"{name}.json", tmp_path / f"{name}.jsonl"


def _smoke_set() -> kept.KeptSet:
    return next(k for k in SETS if k.provenance["profile"] == "smoke")


def test_an_altered_record_is_refused(tmp_path):
    meta, jsonl = _copy(tmp_path, _smoke_set().name)
    lines = jsonl.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["eval"][0]["nll"] = record["eval"][0]["nll"] - 0.5  # a better number, by hand
    jsonl.write_bytes(b"".join([json.dumps(record).encode() + b"\n", *lines[1:]]))
    with pytest.raises(kept.Refused, match="changed since it was kept"):
        kept.load_set(meta)
    sets, refused = kept.load_sets(tmp_path)
    assert not sets and len(refused) == 1
    from posenc.extrapolate.report import _recorded_note

    assert "Refused kept records" in _recorded_note([], (sets, refused))


def test_a_changed_set_up_is_stale_and_marked_so(tmp_path):
    """A record whose set-up hash today's plan lacks (here: its key changed, and its sha256 with it, as a run
    of an older protocol would have written it): its set is stale, and so is every verdict the page shows from it."""
    meta, jsonl = _copy(tmp_path, _smoke_set().name)
    lines = jsonl.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[0])
    record["key"] = "0" * 20
    jsonl.write_bytes(b"".join([json.dumps(record).encode() + b"\n", *lines[1:]]))
    provenance = json.loads(meta.read_text())
    provenance["records_sha256"] = kept.sha256(jsonl)
    meta.write_text(json.dumps(provenance))
    [k] = kept.load_sets(tmp_path)[0]
    assert k.stale == ["0" * 20] and k.recorded().stale
    shown = _shown(k)
    assert shown and all(v.recorded.stale for v in shown)
    assert all('class="stale"' in recorded_mark(v) for v in shown)


def _shown(k: kept.KeptSet) -> list:
    """The verdicts a page that measured none of ``k``'s claims shows from ``k``."""
    decided = [v for v in kept.verdicts(k) if v.status != "not measured"]
    now = [dataclasses.replace(v, status="not measured", recorded=None, test=None, p=None, p_holm=None)
           for v in decided]
    filled = kept.fill(now, [k], include_smoke=True)
    assert [(v.source, v.claim) for v in filled] == [(v.source, v.claim) for v in now]
    return [v for v in filled if v.recorded is not None]


def test_a_page_shows_a_kept_verdict_marked_recorded_never_as_fresh():
    k = _smoke_set()
    shown = _shown(k)
    assert shown and not any(v.recorded.stale for v in shown)
    for v in shown:
        mark = recorded_mark(v)
        assert 'class="recorded"' in mark and k.provenance["command"].split()[0] in mark
        assert k.provenance["date"] in mark and str(k.provenance["commit"])[:12] in mark
    # a smoke set fills only a smoke page; a verdict measured now is never replaced
    now = [dataclasses.replace(v, status="not measured", recorded=None) for v in kept.verdicts(k)]
    assert kept.fill(now, [k]) == now
    measured = [dataclasses.replace(v, recorded=None) for v in kept.verdicts(k) if v.status != "not measured"]
    assert kept.fill(measured, [k], include_smoke=True) == measured


def test_the_quick_page_shows_pope_and_fope_recorded_from_the_kept_set():
    """The quick profile's own page (``make report``) without PoPE's and FoPE's runs, as it is: its lm
    section leaves their claims not measured, and the kept quick set fills them, marked recorded."""
    from posenc.stats import findings
    from posenc.stats.page_parts import Page
    from posenc.extrapolate.parts import PARTS
    from posenc.extrapolate.profiles import get_profile

    k = next(k for k in SETS if k.name == "quick-pope-fope")
    now_records = [r for r in k.records if r["label"] not in ("pope", "fope")]
    profile = get_profile("quick")
    lm = next(part for part in PARTS if part.name == "lm")
    now = findings.adjust(lm.section(Page(), lm.records(now_records), profile).verdicts)
    missing = {v.claim for v in now if v.status == "not measured"}
    assert {"at 16L, PoPE beats RoPE", "at 16L, FoPE beats RoPE"} <= missing
    filled = {v.claim: v for v in kept.fill(now, SETS)}
    deciding = sorted((s for s in SETS if s.provenance["profile"] != "smoke"), key=lambda s: s.provenance["date"],
                      reverse=True)  # the newest set that decides a claim fills it
    for claim in ("at 16L, PoPE beats RoPE", "at 16L, FoPE beats RoPE"):
        v = filled[claim]
        assert v.status != "not measured" and v.recorded is not None and not v.recorded.stale, claim
        newest = next(s for s in deciding if any(w.claim == claim and w.status != "not measured"
                                                 for w in kept.verdicts(s)))
        assert v.recorded.command == newest.provenance["command"] and 'class="recorded"' in recorded_mark(v)


def test_the_quick_page_with_the_kept_sets_leaves_only_the_pretrained_claims_not_measured():
    """``make report``'s page as it is: the quick profile's rows measured now (here: the kept decide
    set's records of the rows the quick profile runs), every other claim filled from the kept sets,
    marked recorded. Only the pretrained model's claims (``posenc extend``, its own section) stay
    not measured."""
    from posenc.extrapolate.costs import run_row
    from posenc.extrapolate.parts import PARTS, plan
    from posenc.extrapolate.plan import available_schemes
    from posenc.extrapolate.parts.pretrained import CLAIMS as PRETRAINED
    from posenc.stats import findings
    from posenc.stats.page_parts import Page
    from posenc.extrapolate.profiles import get_profile

    decide = next(k for k in SETS if k.name == "decide")
    quick = get_profile("quick")
    names = list(available_schemes(quick.schemes, lambda msg: None))
    quick_rows = {run_row(r) for r in plan(quick, names, corpus_sha="", log=lambda msg: None)}
    decide_rows = {r.key: run_row(r) for r in plan(decide.profile(), list(available_schemes(
        decide.profile().schemes, lambda msg: None)), corpus_sha=next(
        r["corpus"]["sha256"] for r in decide.records if r.get("corpus")),
        log=lambda msg: None)}
    now_records = [r for r in decide.records if decide_rows.get(r["key"]) in quick_rows]
    assert 60 <= len(now_records) < len(decide.records)
    page = Page(draw=False)
    now = findings.adjust([dataclasses.replace(v, pool=v.pool or part.name or "lm") for part in PARTS
                           for v in part.section(page, part.records(now_records), quick).verdicts])
    assert sum(v.status == "not measured" for v in now) > len(PRETRAINED)  # the quick rows alone leave some
    left = [f"{v.source}: {v.claim}" for v in kept.fill(now, SETS) if v.status == "not measured"]
    assert sorted(left) == sorted(f"{src}: {claim}" for src, claim in PRETRAINED)
