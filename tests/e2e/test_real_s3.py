"""The harness against a real S3-compatible server (SeaweedFS, tests/fixtures/seaweed.py), not a
mock: multipart transfers, the conditional-put probe, and one whole pipeline run from scenes to
report through the real entry point (`python -m jobs.pipeline store=s3 ...`, Ray workers and all).
The object-store contract tests run against it too (tests/unit/test_store.py). Every test skips,
saying why, where the `weed` binary cannot start; moto stays for fault injection."""

from __future__ import annotations

import os
import re
import time

from harness.products.infer import read_ledger
from harness.runtime.config import RunConfig
from harness.runtime.manifest import load_run_config
from harness.runtime.plan import RunPlan
from harness.store.base import PROBE_KEY, get_json
from harness.store.settings import StoreSettings, open_store
from tests.fixtures.jobs import job  # the dummy AWS_* credentials come along
from tests.fixtures.seaweed import SeaweedEndpoint


def test_probe_and_multipart_transfers_on_seaweedfs(seaweed_s3: SeaweedEndpoint):
    store = open_store(StoreSettings(**seaweed_s3.store_settings(prefix="mp", multipart_threshold_mb=5,
                                                                 multipart_chunk_mb=5)))
    store.probe()  # SeaweedFS honours If-None-Match: * (412 for an existing object)
    big = os.urandom(11 * 1024 * 1024 + 7)  # 3 parts
    assert store.put("big/blob.bin", big) is True
    assert store.get("big/blob.bin") == big  # parallel ranged GETs
    head = seaweed_s3.client().head_object(Bucket=seaweed_s3.bucket, Key="mp/big/blob.bin")
    assert head["ContentLength"] == len(big) and head["ETag"].strip('"').endswith("-3")  # really multipart
    assert store.put("big/blob.bin", b"other", if_absent=True) is False
    assert list(store.list("")) == [PROBE_KEY, "big/blob.bin"]


def test_pipeline_scenes_to_report_on_seaweedfs(seaweed_s3: SeaweedEndpoint, tmp_path):
    """`make demo`'s entry point on the tiny scenes, every object in a SeaweedFS bucket."""
    run_args = ["scenes=tiny", "model=[silent,oracle]", "infer.shard_size=6", "infer.actors_per_model=1"]
    where = [*seaweed_s3.overrides(prefix="team/runs"), f"store.root={tmp_path / 'logs'}", "run_id=real-s3"]
    t0 = time.monotonic()
    first = job("pipeline", *where, *run_args, f"cluster.ray_tmp=/tmp/dmpe-s3-{os.getpid()}")
    took = time.monotonic() - t0
    assert first.returncode == 0, first.stderr[-4000:]
    # "report: s3://<bucket>/team/runs (<endpoint>) real-s3/reduce/<hash>/report.md"
    report = re.search(r"\) (real-s3/reduce/[0-9a-f]+/report\.html)", first.stdout)
    assert report and f"s3://{seaweed_s3.bucket}/team/runs" in first.stdout, first.stdout[-2000:]

    store = open_store(StoreSettings(**seaweed_s3.store_settings(prefix="team/runs")))
    cfg = load_run_config(store, RunConfig.from_dict({"run_id": "real-s3", "model": {"x": {"target": "x"}}}))
    plan = RunPlan.from_config(cfg)
    html = store.get(report.group(1)).decode()
    assert "<table" in html and "oracle" in html
    metrics = get_json(store, plan.layout.file(plan.reduce, "metrics.json"))
    assert set(metrics) >= {"silent", "oracle"}
    for cond in ("explicit", "implicit"):
        assert metrics["oracle"][cond]["fresh_onset_response_rate"]["successes"] == 3
    assert get_json(store, plan.layout.file(plan.reduce, "errors.json"))["conversations"] == []
    for model in ("silent", "oracle"):
        led = read_ledger(store, plan.layout, plan.infer[model], model)
        assert led.markers and not led.missing and not led.failed
    # every object is in the bucket, under the prefix; the local root only holds Hydra's logs
    listed = seaweed_s3.client().get_paginator("list_objects_v2").paginate(Bucket=seaweed_s3.bucket)
    keys = [o["Key"] for page in listed for o in page.get("Contents", ())]
    assert keys and all(k.startswith("team/runs/") for k in keys)
    assert any(k.endswith("/report.html") for k in keys) and any(k.endswith(".flac") for k in keys)
    local = [p for p in (tmp_path / "logs").rglob("*") if p.is_file()]
    assert all("/logs/" in p.as_posix() for p in local)

    print(f"pipeline on SeaweedFS: {took:.1f} s")
