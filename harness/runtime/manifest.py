"""The run manifest: everything needed to reproduce a run (docs/reproducibility.md).

``<run>/run.json`` is written by the first invocation of a run id (conditional put) and never
changed: the resolved config, git commit, package versions, image reference and digest,
model weights and revisions, every seed, and the duty preamble's measured spoken length
(:func:`preamble_facts`). Every invocation (the first, a resume, ``make
rerun-failed``) also writes its own manifest to ``<run>/invocations/<id>.json``, so a run that
was finished by a different image or commit says so.

Seeds: the scene generator (``scenes.seed``), the run (``seed``; each conversation's seed is
``sha256(f"{seed}:{scene_id}")[:4]`` little-endian, :meth:`RunConfig.conversation_seed`, so a
rerun of one shard reproduces its outputs), and the bootstrap (spec section 6).
"""

from __future__ import annotations

import logging
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from harness.audio.preamble import PAPER_PREAMBLE_S
from harness.audio.tts import SynthesisError, build_tts
from harness.audio.tts.settings import TtsSettings
from harness.metrics.stats import BOOTSTRAP_SEED
from harness.runtime.config import ConfigError, RunConfig
from harness.runtime.shard import new_attempt_id
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.layout import RunLayout

log = logging.getLogger("duplex_mpe.manifest")

#: distributions whose versions can change results; absent ones are recorded as null
PACKAGES = ("duplex-mpe-harness", "torch", "torchaudio", "numpy", "scipy", "silero-vad", "soundfile", "numba",
            "ray", "hydra-core", "omegaconf", "boto3", "pocketsphinx", "anthropic", "google-genai", "pyarrow",
            "moshi", "transformers", "qwen-asr")
#: environment variables the images set (images/base/Dockerfile): what the code cannot see itself
IMAGE_ENV = {"reference": "DUPLEX_MPE_IMAGE", "digest": "DUPLEX_MPE_IMAGE_DIGEST"}
WHERE_IT_RUNS = ("run_id", "store", "cluster", "budget")  # config that changes no output
GIT_ENV = "DUPLEX_MPE_GIT_COMMIT"  # baked into images, which carry no .git
REPO = Path(__file__).resolve().parents[2]



MEASURED_IN_DRIVER = ("espeak",)  # engines cheap enough to speak the preamble once when run.json is written


def preamble_facts(tts: TtsSettings, sample_rate: int) -> dict[str, Any]:
    """What ``run.json`` records of the duty preamble (``preamble``), for ``tts`` (the run's
    :class:`~harness.audio.tts.settings.TtsSettings`) at the timeline rate ``sample_rate`` (Hz).

    Returns ``{"words", "characters", "engine", "narrator", "samples", "seconds", "paper_s",
    "measured"}``: ``samples`` and ``seconds`` (at ``sample_rate``) are the spoken length, measured
    by speaking the text once with the run's engine and narrator here, the way the synth stage
    makes the clip (same call, same trim: the same samples), for an engine of
    :data:`MEASURED_IN_DRIVER`; for another engine (``qwen3``, a GPU model) or when the engine
    cannot run here they are None and ``measured`` says why (the synth stage's index then holds
    the clip's length, and the report states it). Raises nothing for an engine failure.
    """
    text = tts.preamble_text
    out: dict[str, Any] = {"words": len(text.split()), "characters": len(text), "engine": tts.engine,
                           "narrator": tts.narrator, "samples": None, "seconds": None, "paper_s": PAPER_PREAMBLE_S}
    if tts.engine not in MEASURED_IN_DRIVER:
        out["measured"] = (f"not here: {tts.engine} runs on the synth stage's actors; the clip's length is in "
                           "synth/<h>/index.json (preamble) and in the report")
        return out
    try:
        clip = build_tts(tts, sample_rate).synthesize(text, tts.narrator)
    except SynthesisError as e:
        out["measured"] = f"not measured: {e}"
        return out
    out.update(samples=len(clip), seconds=round(len(clip) / sample_rate, 3),
               measured=f"spoken once when run.json was written ({tts.engine}, at {sample_rate} Hz)")
    return out


def git_commit() -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the harness checkout (or the image's build arg)."""
    try:
        sha = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip() != ""
        return {"commit": sha, "dirty": dirty}
    except (OSError, subprocess.SubprocessError):
        return {"commit": os.environ.get(GIT_ENV), "dirty": None}


def package_versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def provenance() -> dict[str, Any]:
    """Where and with what this invocation runs (no config, no secrets)."""
    return {"created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": git_commit(),
            "python": platform.python_version(), "platform": platform.platform(), "packages": package_versions(),
            "image": {k: os.environ.get(v) for k, v in IMAGE_ENV.items()}}


def build_manifest(cfg: RunConfig) -> dict[str, Any]:
    """The manifest of a run started now with ``cfg``."""
    return {
        "run_id": cfg.run_id,
        **provenance(),
        "config": cfg.to_dict(),
        # every adapter parameter: weights (path or repo), revision, decoding settings (temperature, top-k), seed
        "models": {m.name: {"target": m.target, "image": m.image, "params": dict(m.params)} for m in cfg.models},
        "seeds": {"run": cfg.seed, "scenes": cfg.scenes.seed, "bootstrap": BOOTSTRAP_SEED,
                  "conversation": "int.from_bytes(sha256(f'{run}:{scene_id}')[:4], 'little')"},
        # the spoken duty preamble every Duplex-MPE model hears: its measured length (Duplex Cue plays none)
        "preamble": preamble_facts(cfg.tts, cfg.protocol.sample_rate),
    }


def write_run_manifest(cfg: RunConfig, store: ObjectStore) -> dict[str, Any]:
    """Write ``run.json`` if this is the run's first invocation, and this invocation's record.

    Returns the stored manifest (the first invocation's). Logs a warning when this
    invocation's config differs from it (stage prefixes keep the outputs apart either way).
    """
    lay = RunLayout(cfg.run_id)
    mine = build_manifest(cfg)
    put_json(store, lay.run_manifest(), mine, if_absent=True)
    stored = get_json(store, lay.run_manifest())
    put_json(store, lay.invocation(new_attempt_id()), mine)  # this invocation's own manifest
    changed = [k for k in config_changes(as_read(stored.get("config", {})), mine["config"])
               if k.split(".")[0] not in WHERE_IT_RUNS]
    if changed:
        log.warning("run %s: this invocation changes %s from run.json (which keeps the first invocation's "
                    "config); stages whose settings changed write new prefixes, nothing is overwritten. "
                    "This invocation's config is in %s", cfg.run_id, ", ".join(changed[:8]), lay.invocation("*"))
    return stored


def load_run_config(store: ObjectStore, current: RunConfig, keep_budget: bool = False) -> RunConfig:
    """The config of run ``current.run_id`` from its manifest, with this invocation's run id,
    ``store`` and ``cluster`` (where it runs, not what it computes) and budget (the manifest's
    when ``keep_budget``: the command line set none).

    The run id is this invocation's, so a manifest copied under a new run id reproduces the run
    there (docs/reproducibility.md). Raises FileNotFoundError when the run has no manifest.
    """
    manifest = get_json(store, RunLayout(current.run_id).run_manifest())
    d = manifest["config"]
    here = current.to_dict()
    d.update(run_id=current.run_id, store=here["store"], cluster=here["cluster"])
    if not keep_budget:
        d["budget"] = here["budget"]
    return RunConfig.from_dict(d)


def as_read(config: dict[str, Any]) -> dict[str, Any]:
    """A stored ``run.json`` config as this code reads it (``RunConfig.from_dict(...).to_dict()``): a
    setting added since it was written has its default (e.g. ``scenes.source: template``), so it is
    not taken for a change. One this code does not know (a :class:`ConfigError`): as stored."""
    try:
        return RunConfig.from_dict(config).to_dict()
    except ConfigError:
        return config


def config_changes(stored: dict[str, Any], current: dict[str, Any], prefix: str = "") -> list[str]:
    """Dotted keys whose values differ between two ``RunConfig.to_dict()`` forms."""
    out = []
    for k in sorted(set(stored) | set(current)):
        a, b = stored.get(k), current.get(k)
        if isinstance(a, dict) and isinstance(b, dict):
            out += config_changes(a, b, f"{prefix}{k}.")
        elif a != b:
            out.append(f"{prefix}{k}")
    return out
