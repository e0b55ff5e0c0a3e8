"""Shared glue of the Hydra entry points: config -> RunConfig -> store -> stage."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from harness.runtime.config import ConfigError, RunConfig
from harness.store.base import ObjectStore, open_store

CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


def setup(cfg: DictConfig) -> tuple[RunConfig, ObjectStore]:
    """Resolve and validate the config; exit with a clear message when it is wrong."""
    logging.getLogger("duplex_mpe").setLevel(logging.INFO)
    try:
        run = RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))
    except ConfigError as e:
        sys.exit(f"config error: {e}")
    return run, open_store(run.store.kind, run.store.root)


def stage_main(stage: str):
    """The Hydra entry point that runs one stage (``python -m jobs.<stage> [overrides]``)."""
    from harness.runtime.stages import run_stage

    @hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
    def main(cfg: DictConfig) -> None:
        run, store = setup(cfg)
        run_stage(stage, run, store)

    return main
