"""Shared glue of the Hydra entry points: config -> RunConfig -> store -> stage."""

from __future__ import annotations

import logging
import sys

from omegaconf import DictConfig, OmegaConf

from harness.runtime.config import ConfigError, RunConfig
from harness.store.base import ObjectStore, open_store


def setup(cfg: DictConfig) -> tuple[RunConfig, ObjectStore]:
    """Resolve and validate the config; exit with a clear message when it is wrong."""
    logging.getLogger("duplex_mpe").setLevel(logging.INFO)
    try:
        run = RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True))
    except ConfigError as e:
        sys.exit(f"config error: {e}")
    return run, open_store(run.store.kind, run.store.root)
