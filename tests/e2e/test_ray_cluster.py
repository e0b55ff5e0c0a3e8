"""A real multi-node Ray cluster on this machine, submitted to as KubeRay does.

`ray start --head` (no CPUs, like the RayJob's head) plus two worker nodes, separate process
trees each advertising two logical GPUs, their temp dirs in the test's tmp folder; the pipeline
is submitted with `ray job submit` using the entry point of the rendered RayJob
(`k8s/render.py`, the same as `make k8s-render`), against a real S3 server (SeaweedFS; moto
where it cannot start). Checked: shards run on both workers, one ShardRunner actor per GPU;
one worker node killed in the middle of `infer` leaves a job that finishes on the surviving
node or stops with failed shards, and `rerun-failed` (submitted the same way) completes the run
without running any completed shard again. Every process is stopped by its process group id.
The model is `silent` behind a gate (`HeldModel`, tests/fixtures/faulty_models.py): each actor's
first shard runs at once, its later ones wait in `open` while a hold file exists, so the second
wave is still running when worker-b is killed, however late the watch sees it; removing the
file then lets the surviving node's held shards finish.
The same commands for a laptop: docs/cluster.md, "A Ray cluster on one machine".
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml

from tests.fixtures.seaweed import free_port_range, free_ports

REPO = Path(__file__).resolve().parents[2]
RAY = str(Path(sys.executable).parent / "ray")
RUN = "ray-cluster"
N_SHARDS = 8  # 4 pairs x 2 conditions, one conversation per shard: two waves on four actors


def _group_pids(pgid: int) -> list[int]:
    """Processes whose process group is ``pgid`` (a node's process tree: `ray start --block`,
    its GCS or raylet, agents and workers)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(d.name))
    return pids


class Node:
    """One Ray node: `ray start --block` in its own session, so its whole tree is one process group."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], logs: Path):
        self.name = name
        self.log = logs / f"{name}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats", *args], cwd=REPO, env=env,
                                         stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if _group_pids(self.proc.pid):
            os.killpg(self.proc.pid, sig)

    def stop(self) -> list[int]:
        """SIGTERM to the group, SIGKILL after 10 s; returns the pids still there after that."""
        self.kill(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while _group_pids(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        self.kill(signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        time.sleep(0.5)
        return _group_pids(self.proc.pid)


def _node_args(temp: Path, cpus: int, gpus: int, resources: dict[str, float] | None = None) -> list[str]:
    nm, om, agent, agent_grpc, metrics, renv = free_ports(6)
    mw = free_port_range(41)  # --min-worker-port to --max-worker-port, clear of every other port
    args = ["--node-ip-address=127.0.0.1", f"--temp-dir={temp}", f"--num-cpus={cpus}", f"--num-gpus={gpus}",
            f"--node-manager-port={nm}", f"--object-manager-port={om}", f"--min-worker-port={mw}",
            f"--max-worker-port={mw + 40}", f"--dashboard-agent-listen-port={agent}",
            f"--dashboard-agent-grpc-port={agent_grpc}", f"--metrics-export-port={metrics}",
            f"--runtime-env-agent-port={renv}", "--object-store-memory=100000000"]
    if resources:
        args.append(f"--resources={json.dumps(resources)}")
    return args


@pytest.fixture
def bucket(request):
    """A SeaweedFS bucket, else (weed cannot start here) a moto one; dummy credentials in the environment."""
    try:
        return request.getfixturevalue("seaweed_s3")
    except pytest.skip.Exception:
        return request.getfixturevalue("s3")


def _rendered_entrypoint(bucket, extra: list[str], tmp: Path) -> str:
    """The entry point of the RayJob `make k8s-render MODEL=silent WORKERS=2 ...` writes."""
    out = tmp / "rayjob.yaml"
    subprocess.run([sys.executable, "k8s/render.py", "--model", "silent", "--run-id", RUN, "--bucket", bucket.bucket,
                    "--prefix", "runs", "--endpoint-url", bucket.endpoint_url, "--region", "us-east-1",
                    "--workers", "2", "--args", " ".join(extra), "--out", str(out)], cwd=REPO, check=True,
                   capture_output=True, text=True, timeout=120)
    return yaml.safe_load(out.read_text())["spec"]["entrypoint"]


def _submit(dashboard: str, entrypoint: str, env: dict[str, str]) -> str:
    sid = f"dmpe-{time.monotonic_ns()}"
    subprocess.run([RAY, "job", "submit", "--address", dashboard, "--submission-id", sid, "--no-wait", "--",
                    *shlex.split(entrypoint)], cwd=REPO, env=env, check=True, capture_output=True, text=True,
                   timeout=120)
    return sid


def test_pipeline_on_a_three_node_cluster_survives_losing_a_worker(bucket, tmp_path_factory):
    from ray.job_submission import JobStatus
    from ray.util.state import list_actors, list_nodes, list_tasks

    tmp = tmp_path_factory.mktemp("rc")
    # Ray's socket paths must stay under 108 bytes: its temp dir is a short one under /tmp, not the
    # test's folder (under pytest-xdist one level deeper: popen-gw<n>/)
    temp, logs = Path(tempfile.mkdtemp(prefix="dmpe-rc-", dir="/tmp")), tmp / "logs"
    logs.mkdir()
    # `python` of the entry point is this environment's, as it is the image's on KubeRay
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "PATH": path, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(REPO),
           "RAY_USAGE_STATS_ENABLED": "0",
           "RAY_agent_register_timeout_ms": "120000"}  # a node's agents start slowly on a busy 2-core machine
    gcs, dash = free_ports(2)
    hold = tmp / "gate" / "hold"  # every node is on this machine: they all see this file
    hold.parent.mkdir()
    hold.touch()
    dashboard = f"http://127.0.0.1:{dash}"
    nodes: list[Node] = []
    t0 = time.monotonic()
    try:
        nodes.append(Node("head", ["--head", f"--port={gcs}", "--include-dashboard=true",
                                   "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}",
                                   *_node_args(temp, 0, 0)], env, logs))
        client = _wait_for_dashboard(dashboard, nodes[0])
        for name in ("worker-a", "worker-b"):  # one after the other: fewer processes starting at once
            nodes.append(Node(name, [f"--address=127.0.0.1:{gcs}", *_node_args(temp, 2, 2, {name: 1})], env, logs))
            node_ids = _wait_for_nodes(dashboard, list_nodes, nodes)
        started = time.monotonic() - t0

        # store.root: where the driver's Hydra logs go (the objects are in the bucket), not runs/ in the checkout
        extra = [f"store.root={tmp / 'driver'}", "scenes=tiny", "scenes.n_pairs=4", "store.addressing_style=path",
                 "infer.shard_size=1",
                 "model.silent.num_gpus=1", "model.silent.num_cpus=0.5", "infer.allow_cpu_for_gpu_actors=true",
                 "cluster.resource_wait_s=60", "cluster.shard_attempts=2",
                 # the gate: `silent`, whose shards after an actor's first wait in open while hold_dir/hold exists
                 "model.silent.target=tests.fixtures.faulty_models:HeldModel",
                 f"+model.silent.params.hold_dir={hold.parent}"]
        entrypoint = _rendered_entrypoint(bucket, extra, tmp)
        assert entrypoint.startswith("python -m jobs.pipeline cluster=kuberay store=s3 model=[silent] ")
        first = _submit(dashboard, entrypoint, env)

        # watch infer: both workers finish shards, two actors on each (one per logical GPU);
        # then worker-b is killed while it runs shards of the second wave (held at the gate until
        # then: only each actor's first shard, 4 of the 8, can have written its marker by then)
        infer_prefix = None
        alive_per_node: Counter[str] = Counter()
        runners: dict[str, set] = {}
        seen_classes: set = set()
        deadline = time.monotonic() + 300
        while True:
            assert time.monotonic() < deadline, _job_tail(client, first)
            status = client.get_job_status(first)
            assert status not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED), \
                f"the job ended before worker-b could be killed in infer: {status}\n{_job_tail(client, first)}"
            every = list_actors(address=dashboard, detail=True, limit=1000, raise_on_missing_output=False)
            actors = [a for a in every if "ShardRunner" in (a.get("class_name") or "")]
            seen_classes = {a.get("class_name") for a in every}
            for a in actors:
                assert a.get("required_resources", {}).get("GPU") == 1, a
            now = Counter(node_ids.get(a["node_id"], a["node_id"]) for a in actors if a["state"] == "ALIVE")
            for k, v in now.items():
                alive_per_node[k] = max(alive_per_node[k], v)
            tasks = list_tasks(address=dashboard, filters=[("func_or_class_name", "=", "ShardRunner.run")],
                               detail=True, limit=1000, raise_on_missing_output=False)
            finished = Counter(node_ids.get(t["node_id"], t["node_id"]) for t in tasks if t["state"] == "FINISHED")
            running = Counter(node_ids.get(t["node_id"], t["node_id"]) for t in tasks if t["state"] == "RUNNING")
            for t in tasks:  # the actors that run shards, per node (a task still waiting has no node)
                if t.get("node_id"):
                    runners.setdefault(node_ids.get(t["node_id"], t["node_id"]), set()).add(t.get("actor_id"))
            if finished["worker-a"] and finished["worker-b"] and running["worker-b"]:  # b is in its second wave
                infer_prefix = infer_prefix or _infer_prefix(bucket)
                markers = _shard_markers(bucket, infer_prefix)
                assert len(markers) < N_SHARDS, "infer ended before worker-b could be killed"
                break
            time.sleep(0.5)
        where = f"alive ShardRunners per node {dict(alive_per_node)}, actors running shards {runners}, " \
                f"actor classes {seen_classes}"
        assert set(alive_per_node) | set(runners) <= {"worker-a", "worker-b"}, where  # none on the head (no CPU/GPU)
        assert alive_per_node["worker-a"] == alive_per_node["worker-b"] == 2, where  # one actor per GPU on each
        assert all(len(runners[n]) >= 1 for n in ("worker-a", "worker-b")), where
        killed_at = time.monotonic()
        nodes[2].kill()  # worker-b's whole process tree, SIGKILL: a lost node, not a clean shutdown
        hold.unlink()  # open the gate: worker-a's held shards, the retries and the rerun below run at once
        status = _wait_job(client, first, 400)
        logs_first = client.get_job_logs(first)
        assert status in (JobStatus.SUCCEEDED, JobStatus.FAILED), logs_first[-3000:]
        if status == JobStatus.FAILED:  # stopped with failed shards (exit status 4), completed ones kept
            assert "shard(s) failed" in logs_first, logs_first[-3000:]
        before = _keys(bucket, infer_prefix)
        done_before = {k.rsplit("/", 1)[0]: _get(bucket, k) for k in before if k.endswith("/_SUCCESS.json")
                       and k.count("/") == infer_prefix.count("/") + 2}
        assert done_before, "no shard completed before the node was lost"
        failed_attempts = [k for k in before if "/failures/" in k]

        # rerun-failed, submitted the same way (docs/cluster.md: inside the cluster add cluster=kuberay)
        rerun = entrypoint.replace("python -m jobs.pipeline ", "python -m jobs.rerun_failed ", 1)
        second = _submit(dashboard, rerun, env)
        assert _wait_job(client, second, 400) == JobStatus.SUCCEEDED, client.get_job_logs(second)[-3000:]
        after = _keys(bucket, infer_prefix)
        shard_markers = {k.rsplit("/", 1)[0]: _get(bucket, k) for k in after if k.endswith("/_SUCCESS.json")
                         and k.count("/") == infer_prefix.count("/") + 2}
        assert len(shard_markers) == N_SHARDS
        for shard, marker in done_before.items():  # nothing completed was run again
            assert shard_markers[shard] == marker
            assert not [k for k in after - before if k.startswith(shard + "/")], f"{shard} ran again"
        assert any(k.endswith("/report.html") for k in _keys(bucket, f"runs/{RUN}/reduce/"))
        assert len(list((tmp / "driver").glob(f"{RUN}/logs/*/_entry.log"))) == 2  # each job's log, none in the checkout
        print(f"\nRay cluster: 3 nodes up in {started:.1f} s; worker-b killed {killed_at - t0:.0f} s in; the first job "
              f"{status.value.lower()} with {len(done_before)}/{N_SHARDS} shards "
              f"({len(failed_attempts)} failed attempts recorded); rerun-failed done; "
              f"{time.monotonic() - t0:.0f} s in all")
    finally:
        leftover = {n.name: n.stop() for n in reversed(nodes)}
        shutil.rmtree(temp, ignore_errors=True)
        assert not any(leftover.values()), f"processes left running: {leftover}"


def _wait_for_dashboard(dashboard: str, head: Node):
    from ray.job_submission import JobSubmissionClient

    deadline = time.monotonic() + 90
    while True:
        assert head.proc.poll() is None, f"ray start --head exited: {head.log.read_text()[-3000:]}"
        try:
            return JobSubmissionClient(dashboard)
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _wait_for_nodes(dashboard: str, list_nodes, nodes: list[Node]) -> dict[str, str]:
    """Node id -> our node name, once every node in ``nodes`` is alive."""
    deadline = time.monotonic() + 120
    while True:
        for n in nodes:
            assert n.proc.poll() is None, f"{n.name} exited: {n.log.read_text()[-3000:]}"
        alive = [x for x in list_nodes(address=dashboard, detail=True, raise_on_missing_output=False)
                 if x["state"] == "ALIVE"]
        names = {}
        for x in alive:
            res = x.get("resources_total", {})
            names[x["node_id"]] = ("worker-a" if "worker-a" in res else "worker-b" if "worker-b" in res
                                   else "head")
        if sorted(names.values()) == sorted(n.name for n in nodes):
            return names
        assert time.monotonic() < deadline, f"nodes alive: {alive}"
        time.sleep(0.5)


def _wait_job(client, sid: str, timeout_s: float):
    from ray.job_submission import JobStatus

    deadline = time.monotonic() + timeout_s
    while (status := client.get_job_status(sid)) not in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
        assert time.monotonic() < deadline, _job_tail(client, sid)
        time.sleep(1.0)
    return status


def _job_tail(client, sid: str) -> str:
    try:
        return client.get_job_logs(sid)[-3000:]
    except Exception as e:
        return f"(no logs: {e})"


def _keys(bucket, prefix: str) -> set[str]:
    pages = bucket.client().get_paginator("list_objects_v2").paginate(Bucket=bucket.bucket, Prefix=prefix)
    return {o["Key"] for p in pages for o in p.get("Contents", ())}


def _get(bucket, key: str) -> bytes:
    return bucket.client().get_object(Bucket=bucket.bucket, Key=key)["Body"].read()


def _infer_prefix(bucket) -> str:
    """``runs/<run>/infer/silent/<hash>`` (the one infer prefix of this run)."""
    plans = [k for k in _keys(bucket, f"runs/{RUN}/infer/silent/") if "/shard-" in k]
    assert plans, "no infer output yet"
    key = sorted(plans)[0]
    return key[:key.index("/", len(f"runs/{RUN}/infer/silent/"))]


def _shard_markers(bucket, infer_prefix: str) -> list[str]:
    return [k for k in _keys(bucket, infer_prefix + "/") if k.endswith("/_SUCCESS.json")
            and k.count("/") == infer_prefix.count("/") + 2]
