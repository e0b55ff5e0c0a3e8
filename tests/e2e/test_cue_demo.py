"""The Duplex Cue job end to end on a tiny generated corpus: the known-outcome baselines get
their known distributions, a model without teacher forcing is reported not applicable, and a
second invocation reuses everything. Its help and the review kit's: tests/e2e/test_jobs_cli.py."""

from __future__ import annotations

import json
import subprocess

from tests.fixtures.jobs import job as run_job


def cue_job(*args: str, job: str = "cue") -> subprocess.CompletedProcess:
    return run_job(job, *args, env={"NO_TORCH_COMPILE": "1"}, timeout=600)


def test_cue_job_on_a_tiny_corpus(tmp_path):
    args = ("run_id=cue-e2e", f"store.root={tmp_path}", "cue.n_items=3",
            "model=[replay,yield_now,yield_on_cue,ignore,silent]", "cluster.num_cpus=2")
    out = cue_job(*args)
    assert out.returncode == 0, out.stderr[-3000:]
    [metrics_path] = tmp_path.glob("cue-e2e/cue-reduce/*/cue_metrics.json")
    m = json.loads(metrics_path.read_text())
    assert set(m["not_applicable"]) == {"silent"} and "teacher_forcing" in m["not_applicable"]["silent"]
    everything = {name: m["models"][name]["intents"]["all"] for name in ("replay", "yield_now", "yield_on_cue",
                                                                         "ignore")}
    replay = everything["replay"]
    assert replay["funnel"]["eligible"] == 3 and replay["model"]["counts"] == replay["reference"]["counts"]
    # silent from the switch point, before the cue: not active at the cue onset, excluded (issue 23.1)
    assert everything["yield_now"]["funnel"]["excluded"]["model_inactive_at_onset"] == 3
    for name, response in (("yield_on_cue", "yielded"), ("ignore", "continued")):
        model = everything[name]["model"]
        assert model["n"] == 3 and model["counts"][response] == 3, (name, model)
    assert list(tmp_path.glob("cue-e2e/cue-reduce/*/items/*/*.html"))  # timeline pages
    again = cue_job(*args)  # resumes: every stage complete, nothing recomputed, Ray not started
    assert again.returncode == 0, again.stderr[-3000:]
    log = again.stdout + again.stderr
    assert "cue-infer replay: complete at" in log and "infer shards" not in log

    # the cue review kit from the command line (make cue-review-export / cue-review-import)
    run = ("run_id=cue-e2e", f"store.root={tmp_path}", "review.kind=cue")
    out = cue_job(*run, "review.action=export", job="review")
    assert out.returncode == 0, out.stderr[-3000:]
    [items_path] = tmp_path.glob("cue-e2e/cue-review/*/items.json")
    assert f"review page: {items_path.parent / 'review.html'}" in out.stdout
    items = json.loads(items_path.read_text())["items"]
    assert items and all(it["kind"] == "cue" for it in items)
    other = {"continued": "yielded", "adapted": "continued", "yielded": "adapted"}  # bob differs on one item
    for name, flip in (("ann.csv", None), ("bob.csv", items[0]["item_id"])):
        rows = ["item_id,kind,verdict,transcript_ok,notes"] + [
            f"{it['item_id']},cue,{other[it['judge_label']] if it['item_id'] == flip else it['judge_label']},yes,"
            for it in items]
        (tmp_path / name).write_text("\n".join(rows) + "\n")
    out = cue_job(*run, "review.action=import", f"review.csv=[{tmp_path / 'ann.csv'},{tmp_path / 'bob.csv'}]",
                  job="review")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "1 disagreement(s), 1 open" in out.stdout
    results = json.loads(next(tmp_path.glob("cue-e2e/cue-review/*/results.json")).read_text())
    assert results["kinds"]["cue"]["reviewer_agreement"]["verdict"]["agree"] == len(items) - 1
    bad = cue_job(*run[:2], "review.kind=other", "review.action=export", job="review")
    assert bad.returncode == 2 and "review.kind must be mpe" in bad.stderr + bad.stdout
