"""Shared glue of the Hydra entry points: config -> RunConfig -> store -> stage."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import hydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from harness.runtime.config import ConfigError, RunConfig
from harness.store.base import ObjectStore, open_store

T = TypeVar("T")
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def setup(cfg: DictConfig) -> tuple[RunConfig, ObjectStore]:
    """Resolve and validate the config; exit with a clear message when it is wrong."""
    logging.getLogger("duplex_mpe").setLevel(logging.INFO)
    try:  # throw_on_missing: a required value left at ``???`` (store.bucket of store=s3) is named
        run = RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))
    except (ConfigError, MissingMandatoryValue) as e:
        sys.exit(f"config error: {e}")
    return run, open_store(run.store)


STOPPED = 3  # exit status: the run stopped cleanly before finishing (budget, failed shards)


def existing_run(run: RunConfig, store: ObjectStore) -> RunConfig:
    """The config of the stored run ``run.run_id`` (its manifest) with this invocation's store,
    cluster and budget; exits with a clear message when the run does not exist."""
    from harness.runtime.manifest import load_run_config

    try:
        return load_run_config(store, run)
    except FileNotFoundError:
        sys.exit(f"run {run.run_id!r} has no manifest in {store.describe()}: nothing to resume "
                 "(check run_id and the store=... overrides)")
    except ConfigError as e:
        sys.exit(f"run {run.run_id!r}: its stored config is not valid for this harness version: {e}")


def run_until_stopped(fn: Callable[[RunConfig, ObjectStore], T], run: RunConfig, store: ObjectStore) -> T:
    """``fn(run, store)``; a clean stop (budget reached, shards failed) prints why and the run's
    status, then exits with :data:`STOPPED`. Completed work is kept either way."""
    from harness.runtime.executor import BudgetExceeded
    from harness.runtime.stages import InferIncomplete
    from harness.runtime.status import run_status

    try:
        return fn(run, store)
    except (BudgetExceeded, InferIncomplete) as e:
        print(f"\nstopped: {e}\n\n{run_status(run, store)}", file=sys.stderr)
        sys.exit(STOPPED)


def stage_main(stage: str):
    """The Hydra entry point that runs one stage (``python -m jobs.<stage> [overrides]``)."""
    from harness.runtime.stages import run_stage

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def main(cfg: DictConfig) -> None:
        run, store = setup(cfg)
        run_until_stopped(lambda r, s: run_stage(stage, r, s), run, store)

    return main
