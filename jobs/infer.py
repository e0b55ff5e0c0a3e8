"""Run the ``infer`` stage alone: ``python -m jobs.infer [overrides]`` (see ``--help``)."""

import hydra
from omegaconf import DictConfig

from harness.runtime.stages import run_stage
from jobs._entry import setup


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    run_stage("infer", run, store)


if __name__ == "__main__":
    main()
