"""Run every stage (scenes -> synth -> infer -> vad -> reduce) and print where the report is.

    python -m jobs.pipeline                      # the embedded demo
    python -m jobs.pipeline run_id=x scenes=tiny model=[oracle]
"""

import hydra
from omegaconf import DictConfig

from harness.runtime.stages import run_pipeline
from jobs._entry import CONF_DIR, setup


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    key = run_pipeline(run, store)
    print(f"\nreport: {run.store.root}/{key}" if run.store.kind == "local" else f"\nreport: {key}")


if __name__ == "__main__":
    main()
