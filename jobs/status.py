"""Print a run's progress: ``python -m jobs.status run_id=demo`` (same overrides as the run)."""

import hydra
from omegaconf import DictConfig

from harness.runtime.status import run_status
from jobs._entry import CONF_DIR, setup


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    print(run_status(run, store))


if __name__ == "__main__":
    main()
