"""Fetch the weights a run reads, once, before the run: the one command of the harness that downloads.

    make weights MODEL=moshi                          # = python -m jobs.weights 'model=[moshi]'
    make weights MODEL=freeze_omni                    # its two repositories (Freeze-Omni, Qwen2-7B-Instruct)
    HF_TOKEN=hf_... make weights MODEL=personaplex    # a gated repository: accept its licence on the Hub first
    make weights MODEL=moshi ARGS="asr=qwen3 tts=qwen3"   # with the Qwen3-ASR / Qwen3-TTS weights
    python -m jobs.weights 'model=[voila]' model.voila.params.revision=<commit>   # any config override

For every model of ``model=[...]`` it fetches each repository the model's adapter reads (its
``requirements()``: the statement the job's preflight checks and the adapter's ``load`` reads, so
the three agree), at the revision its config pins, into the local Hugging Face cache (``HF_HOME``,
or ``HF_HUB_CACHE`` for the cache folder), with huggingface_hub's ``snapshot_download``: resumable
(run it again after an interruption), with its own progress bars, ``HF_TOKEN`` for a gated
repository. Then it verifies that each snapshot holds the files the loader opens. With
``asr=qwen3`` / ``tts=qwen3`` it also fetches the Qwen3-ASR (and its forced aligner, when one is
configured) / Qwen3-TTS weights those backends read. A repository given as a local folder is only
verified. A repository whose config has no pinned commit is fetched at its ``main`` and the commit
to pin is printed: the job's preflight refuses an unpinned model repository.

It never runs a stage and writes nothing but the cache (and Hydra's log folder). On a cluster the
weights Job runs the same command onto the model volume (docs/cluster.md, "Weights"). Exit status:
0 every repository complete; 2 a configuration error, ``HF_HUB_OFFLINE`` set, or a repository that
could not be fetched or is incomplete (one line each, naming it, its revision and why).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness.runtime.config import ConfigError, RunConfig
from harness.weights import Repo, WeightsNotFoundError, fetch, pin_problem
from jobs._entry import fail, hydra_job

# the Qwen3 backends' weights (harness/scoring/asr/qwen3.py, harness/audio/tts/qwen3.py): their config
# params, their defaults and the file every transformers checkpoint has; the backends resolve them
# through harness.weights.local_weights (the cache's snapshot at the revision, main without one)
ASR_REPOS = (("model", "Qwen/Qwen3-ASR-1.7B"), ("forced_aligner", None))
TTS_MODEL = "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice"
CHECKPOINT_FILES = ("config.json",)


def wanted(run: RunConfig) -> list[tuple[str, Repo]]:
    """``(who, repo)`` for every repository ``run`` reads: each model's (``who`` its config name)
    and, with ``asr=qwen3`` / ``tts=qwen3``, the backends' (``who`` ``asr`` / ``tts``)."""
    from harness.models.registry import build_model

    out = []
    for m in run.models:
        try:
            needs = build_model(m.target, m.params).requirements()
        except (ValueError, TypeError, ImportError) as e:
            fail(f"config error: model {m.name!r} ({m.target}): {type(e).__name__}: {e}")
        out += [(m.name, repo) for repo in needs.repos]
    if run.asr.kind == "qwen3":
        out += [("asr", Repo(source, None, CHECKPOINT_FILES, role="Qwen3-ASR weights", source_key=key))
                for key, default in ASR_REPOS if (source := run.asr.params.get(key, default))]
    if run.tts.engine == "qwen3" and not run.tts.params.get("weights"):
        out.append(("tts", Repo(run.tts.params.get("model") or TTS_MODEL, run.tts.params.get("revision"),
                                CHECKPOINT_FILES, role="Qwen3-TTS weights", source_key="model")))
    return out


def size(root: Path) -> int:
    """Bytes of the files under ``root`` (a snapshot's links followed to their blobs)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run_fetch(run: RunConfig) -> int:
    """Fetch and verify every repository of ``run`` (:func:`wanted`), printing one line each; the
    exit status (0 complete, 2 a repository failed)."""
    repos = wanted(run)
    if not repos:
        print(f"weights: nothing to fetch: {', '.join(m.name for m in run.models) or 'no model'} read no released "
              "weights (baselines, hosted or tiny models)")
        return 0
    failed, unpinned = [], []
    for who, repo in repos:
        print(f"weights: {who}: {repo.role} {repo} ...", flush=True)
        try:
            root = fetch(repo, who)
        except (WeightsNotFoundError, ImportError) as e:
            failed.append(f"{who}: {e}")
            continue
        print(f"weights: {who}: {repo.role} {repo}: complete, {size(root) / 1e9:.2f} GB in {root}", flush=True)
        if who not in ("asr", "tts") and pin_problem(repo, who):
            unpinned.append(f"{who}: {repo.source} is not pinned; the snapshot fetched is {root.name}: set "
                            f"model.{who}.params.{repo.revision_key}={root.name} (conf/model/{who}.yaml) to run it")
    for line in unpinned:
        print(f"weights: pin: {line}", file=sys.stderr)
    if failed:
        print("weights: not complete:\n" + "\n".join(f"  - {f}" for f in failed), file=sys.stderr)
        return 2
    return 0


@hydra_job("config")
def main(cfg: DictConfig) -> None:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "on", "yes", "true"):
        fail("weights: HF_HUB_OFFLINE is set, so huggingface_hub will not download: unset it for this command "
             "(the benchmark's pods set it so that nothing downloads while a run is going)")
    try:
        run = RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))
    except ConfigError as e:
        fail(f"config error: {e}")
    sys.exit(run_fetch(run))


if __name__ == "__main__":
    if {"-h", "--help"} & set(sys.argv[1:]):
        print(__doc__)
        sys.exit(0)
    main()
