"""The human validation kit end to end: `python -m jobs.review` export and import as real processes
on the session's shared tiny run (tests/fixtures/runs.py), the kit written under its own prefix
only. The kit's pieces (sampling, forms, agreement, the page) are tested in tests/unit/test_review.py."""

from __future__ import annotations

import csv
import json
import subprocess

from harness.review.kit import ITEMS_FILE
from harness.review.results import load_results
from harness.runtime.manifest import write_run_manifest
from harness.store.base import PROBE_KEY, LocalStore, get_json
from tests.fixtures.jobs import job, jobs_at_once
from tests.fixtures.reviews import write_csv
from tests.fixtures.runs import BASELINES, TINY_SCENES, objects, tiny_config, written


def review(*overrides: str) -> subprocess.CompletedProcess:
    return job("review", *overrides, timeout=600)


def test_export_before_the_run_exists_or_has_a_report_is_one_message(tmp_path):
    empty, started = tmp_path / "empty", tmp_path / "started"
    write_run_manifest(tiny_config(started, "kit", BASELINES, scenes=TINY_SCENES), LocalStore(started))  # no stage ran
    out = jobs_at_once({root.name: ("review", "run_id=kit", f"store.root={root}", "review.action=export")
                        for root in (empty, started)}, timeout=600)
    assert out["empty"].returncode == 2 and "no run 'kit'" in out["empty"].stderr  # nothing stored yet: one message
    assert out["started"].returncode == 2 and "reduce has not completed" in out["started"].stderr


def test_export_and_import_on_a_real_tiny_run(completed_run, tmp_path):
    """The shared run (3 scene pairs, the three baselines and two faulty models), then the review
    jobs as real processes."""
    store, plan = completed_run.store, completed_run.plan
    where = [f"run_id={completed_run.cfg.run_id}", f"store.root={completed_run.root}"]
    before = objects(store)
    report = {n: store.get(plan.layout.file(plan.reduce, n)) for n in ("report.md", "report.html")}
    assert "## Human validation" in report["report.md"].decode() and f"{plan.review}/results.md" in \
        report["report.md"].decode()

    out = review(*where, "review.action=export")
    assert out.returncode == 0, out.stderr
    assert f"review page: {completed_run.root}/{plan.review}/review.html" in out.stdout
    manifest = get_json(store, plan.layout.file(plan.review, ITEMS_FILE))
    items = manifest["items"]
    assert manifest["sample"]["construction"] == {"wanted": 50, "available": 3, "taken": 3}
    kinds = [i["kind"] for i in items]
    assert kinds.count("construction") == 6
    # babble speaks everywhere: intrusions only; oracle answers: both answer strata are possible;
    # silent and the faulty models (errors, or silent) have nothing judged to review
    assert all(i["judge_label"] == "SUBSTANTIVE_INTRUSION" for i in items if i["kind"] == "window")
    assert {i["model"] for i in items if i["kind"] != "construction"} <= {"babble", "oracle"}
    page = store.get(plan.layout.file(plan.review, "review.html")).decode()
    for it in items:
        assert f'id="{it["item_id"]}"' in page
    n_players = page.count('<audio controls preload="none" src="data:audio/flac;base64,')
    scenes = {s["scene_id"]: s for s in map(json.loads, store.get(plan.layout.file(plan.scenes, "scenes.jsonl"))
                                            .decode().splitlines())}
    assert n_players == sum(len(scenes[i["scene_id"]]["turns"]) if i["kind"] == "construction" else 1
                            for i in items)
    again = review(*where, "review.action=export")
    assert again.returncode == 0 and get_json(store, plan.layout.file(plan.review, ITEMS_FILE)) == manifest

    # two reviewers fill copies of the exported CSV: both agree with the judge, one fails a scene
    template = list(csv.DictReader(store.get(plan.layout.file(plan.review, "review.csv")).decode().splitlines()))
    judge = {i["item_id"]: i["judge_label"] for i in items}
    to_verdict = {"CORRECT": "correct", "INCORRECT": "incorrect", "SUBSTANTIVE_INTRUSION": "intrusion",
                  "BACKCHANNEL": "backchannel", None: "pass"}
    paths = []
    for name, failed in (("ann", set()), ("bob", {items[0]["item_id"]})):
        rows = [(r["item_id"], r["kind"], "fail" if r["item_id"] in failed else to_verdict[judge[r["item_id"]]],
                 "" if r["kind"] == "construction" else "yes", "") for r in template]
        paths.append(write_csv(tmp_path / f"{name}.csv", rows))
    out = review(*where, "review.action=import", f"review.csv=[{paths[0]},{paths[1]}]")
    assert out.returncode == 0, out.stderr
    assert "1 disagreement(s), 1 open" in out.stdout
    res = load_results(store, plan.review)
    assert res["kinds"]["construction"]["pass_rate"] == {"n": 5, "hits": 5, "rate": 1.0}
    for kind in ("answer", "window"):
        if kind in res["kinds"]:
            assert res["kinds"][kind]["judge_agreement"]["percent"] == 100.0
    assert f"{completed_run.root}/{plan.review}/results.html" in out.stdout
    for name in ("results.md", "results.html"):
        assert "1 still open" in store.get(plan.layout.file(plan.review, name)).decode()
    # the run's report is never rewritten: reduce does not depend on the review that depends on it;
    # the kit wrote under its own prefix only (and the jobs their logs)
    assert {n: store.get(plan.layout.file(plan.reduce, n)) for n in report} == report
    mine = (f"{plan.review}/", f"{plan.layout.run_id}/logs/", PROBE_KEY)  # and the store's probe object
    assert not [k for k in written(before, objects(store)) if not k.startswith(mine)]

    broken = write_csv(tmp_path / "broken.csv", [(template[0]["item_id"], template[0]["kind"], "dunno", "", "")])
    out = review(*where, "review.action=import", f"review.csv=[{paths[0]},{broken}]")
    assert out.returncode != 0 and f"{broken}:2: verdict: 'dunno' is not allowed" in out.stderr
    assert load_results(store, plan.review) == res  # the earlier results stand
