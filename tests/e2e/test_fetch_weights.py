"""The fetch command (``make weights``, ``python -m jobs.weights``; jobs/weights.py, harness.weights.fetch)
against a stand-in Hub (tests/fixtures/hub.py ``FakeHub``: loopback HTTP with the endpoints
``snapshot_download`` calls; no network), run as a user runs it: a real process, huggingface_hub's
real client and cache writes. Checked: every repository a model reads is fetched at its pinned
commit and verified, and the job's preflight then finds it; an interrupted download resumes; a
gated repository needs HF_TOKEN and says so; a repository without a file the loader reads, an
unpinned revision (the commit to pin is printed), HF_HUB_OFFLINE, and the Qwen3 ASR/TTS weights."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.models.registry import model_config
from harness.runtime.preflight import problems
from harness.store.base import LocalStore
from tests.fixtures import hub
from tests.fixtures.runs import tiny_config
from tests.fixtures.tiny import flm_audio, freeze_omni, personaplex

REPO = Path(__file__).resolve().parents[2]
MOSHI = "kyutai/moshiko-pytorch-bf16"
MOSHI_COMMIT = "2bfc9ae6e89079a5cc7ed2a68436010d91a3d289"  # the one conf/model/moshi.yaml pins
MOSHI_FILES = {"model.safetensors": b"lm" * 5000, "tokenizer-e351c8d8-checkpoint125.safetensors": b"mimi" * 100,
               "tokenizer_spm_32k_3.model": b"spm", "README.md": "# moshiko"}
C1, C2 = "a1" * 20, "b2" * 20  # hex with letters: an all-digit one would reach Hydra as a number


def fetch(fake: hub.FakeHub, cache: Path, *overrides: str, token: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_ENDPOINT=fake.url, HF_HUB_CACHE=str(cache), HF_HUB_DISABLE_TELEMETRY="1")
    if token:
        env["HF_TOKEN"] = token
    return subprocess.run([sys.executable, "-m", "jobs.weights", f"store.root={cache.parent / 'runs'}", *overrides],
                          cwd=REPO, capture_output=True, text=True, timeout=300, env=env)


def snapshot(cache: Path, repo: str, commit: str) -> Path:
    return cache / f"models--{repo.replace('/', '--')}" / "snapshots" / commit


def test_moshi_is_fetched_at_its_pinned_commit_verified_and_then_found_by_the_preflight(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    with hub.FakeHub({MOSHI: (MOSHI_COMMIT, MOSHI_FILES)}) as fake:
        out = fetch(fake, cache, "model=[moshi]")
    assert out.returncode == 0, out.stderr
    where = snapshot(cache, MOSHI, MOSHI_COMMIT)
    assert f"weights: moshi: weights {MOSHI}@{MOSHI_COMMIT}: complete, 0.00 GB in {where}" in out.stdout
    assert "Fetching 4 files" in out.stderr  # huggingface_hub's own progress bar
    assert (snapshot(cache, MOSHI, MOSHI_COMMIT) / "model.safetensors").read_bytes() == MOSHI_FILES["model.safetensors"]
    assert {p for m, p, _ in fake.requests if m == "GET"} >= {f"/api/models/{MOSHI}/revision/{MOSHI_COMMIT}"}
    hub.use_cache(monkeypatch, cache)  # offline: the job's preflight on the same cache
    moshi = {**model_config("moshi"), "num_gpus": 0, "num_cpus": 1}  # the shipped config: its pinned commit
    run = tiny_config(tmp_path / "s", "r", {"moshi": moshi}, cluster={"num_cpus": 4})
    assert problems(run, LocalStore(run.store.root), ["infer"]) == []


def test_an_interrupted_download_resumes_where_it_stopped(tmp_path):
    cache = tmp_path / "hub"
    data = MOSHI_FILES["model.safetensors"]
    blobs = cache / f"models--{MOSHI.replace('/', '--')}" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / f"{hashlib.sha256(data).hexdigest()}.incomplete").write_bytes(data[:4000])  # what a killed fetch left
    with hub.FakeHub({MOSHI: (MOSHI_COMMIT, MOSHI_FILES)}) as fake:
        out = fetch(fake, cache, "model=[moshi]")
    assert out.returncode == 0, out.stderr
    assert ("GET", f"/{MOSHI}/resolve/{MOSHI_COMMIT}/model.safetensors", "bytes=4000-") in fake.requests
    assert (snapshot(cache, MOSHI, MOSHI_COMMIT) / "model.safetensors").read_bytes() == data


def test_a_gated_repository_needs_a_token_of_an_account_that_accepted_its_licence(tmp_path):
    repo = "nvidia/personaplex-7b-v1"
    files = personaplex.files(personaplex.tokenizer(tmp_path))
    cache = tmp_path / "hub"
    with hub.FakeHub({repo: (C1, files)}, gated=frozenset({repo})) as fake:
        refused = fetch(fake, cache, "model=[personaplex]", f"model.personaplex.params.revision={C1}")
        fetched = fetch(fake, cache, "model=[personaplex]", f"model.personaplex.params.revision={C1}", token="hf_x")
    assert refused.returncode == 2
    assert "(GatedRepoError: 401 Client Error" in refused.stderr and (
        f"{repo} is gated: accept its licence at https://huggingface.co/{repo} with the account whose token is in "
        "HF_TOKEN") in refused.stderr
    assert fetched.returncode == 0, fetched.stderr
    assert (snapshot(cache, repo, C1) / "voices.tgz").is_file()


def test_freeze_omni_fetches_both_repositories_and_a_file_the_loader_reads_must_be_there(tmp_path):
    llm = (freeze_omni.LLM_REPO, (C2, freeze_omni.llm_files()))
    incomplete = {k: v for k, v in freeze_omni.checkpoint_files().items() if k != "checkpoints/server.json"}
    pins = (f"model.freeze_omni.params.revision={C1}", f"model.freeze_omni.params.llm_revision={C2}")
    with hub.FakeHub(dict([(freeze_omni.REPO, (C1, freeze_omni.checkpoint_files())), llm])) as fake:
        ok = fetch(fake, tmp_path / "hub", "model=[freeze_omni]", *pins)
    with hub.FakeHub(dict([(freeze_omni.REPO, (C1, incomplete)), llm])) as fake:
        bad = fetch(fake, tmp_path / "hub2", "model=[freeze_omni]", *pins)
    assert ok.returncode == 0, ok.stderr
    assert (snapshot(tmp_path / "hub", freeze_omni.REPO, C1) / "checkpoints" / "server.json").is_file()
    assert (snapshot(tmp_path / "hub", freeze_omni.LLM_REPO, C2) / "model-00004-of-00004.safetensors").is_file()
    assert bad.returncode == 2
    where = snapshot(tmp_path / "hub2", freeze_omni.REPO, C1)
    assert (f"freeze_omni: weights {freeze_omni.REPO}@{C1}: the snapshot {where} lacks checkpoints/server.json after "
            "the download") in bad.stderr
    assert f"freeze_omni: LLM {freeze_omni.LLM_REPO}@{C2}: complete" in bad.stdout  # the other one is fetched


def test_an_unpinned_repository_is_fetched_at_main_and_the_commit_to_pin_is_printed(tmp_path):
    with hub.FakeHub({"CofeAI/FLM-Audio": (C1, flm_audio.files())}) as fake:
        out = fetch(fake, tmp_path / "hub", "model=[flm_audio]")  # conf/model/flm_audio.yaml: revision null
    assert out.returncode == 0, out.stderr
    assert (f"weights: pin: flm_audio: CofeAI/FLM-Audio is not pinned; the snapshot fetched is {C1}: set "
            f"model.flm_audio.params.revision={C1} (conf/model/flm_audio.yaml) to run it") in out.stderr


def test_the_qwen3_asr_and_tts_weights_and_what_needs_nothing(tmp_path):
    repos = {"Qwen/Qwen3-ASR-1.7B": (C1, {"config.json": "{}"}),
             "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice": (C2, {"config.json": "{}"})}
    with hub.FakeHub(repos) as fake:
        out = fetch(fake, tmp_path / "hub", "model=[silent,oracle]", "asr=qwen3", "tts=qwen3")
        none = fetch(fake, tmp_path / "hub", "model=[silent,moshi_tiny]")
    assert out.returncode == 0, out.stderr
    assert "weights: asr: Qwen3-ASR weights Qwen/Qwen3-ASR-1.7B@unpinned: complete" in out.stdout
    assert "weights: tts: Qwen3-TTS weights Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice@unpinned: complete" in out.stdout
    assert none.returncode == 0 and none.stdout.startswith("weights: nothing to fetch: silent, moshi_tiny read no")


def test_offline_mode_and_help(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-m", "jobs.weights", "model=[moshi]", f"store.root={tmp_path}"], cwd=REPO,
                         capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 2 and out.stderr.startswith("weights: HF_HUB_OFFLINE is set, so huggingface_hub will not "
                                                         "download: unset it for this command")
    helped = subprocess.run([sys.executable, "-m", "jobs.weights", "--help"], cwd=REPO, capture_output=True,
                            text=True, timeout=300)
    assert helped.returncode == 0 and "make weights MODEL=moshi" in helped.stdout


@pytest.mark.parametrize("model", ["moshi", "flm_audio"])
def test_make_weights_runs_the_fetch_command(model, tmp_path):
    """The Makefile target is the same command (its recipe, printed by make -n)."""
    out = subprocess.run(["make", "-s", "-n", "-C", str(REPO), "weights", f"MODEL={model}", "ARGS=asr=qwen3"],
                         capture_output=True, text=True, check=True)
    assert f".venv/bin/python -m jobs.weights 'model=[{model}]' asr=qwen3" in out.stdout
