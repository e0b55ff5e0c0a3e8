"""Run every stage (scenes -> reference -> synth -> infer -> vad -> score -> reduce) and print
where the report is.

    python -m jobs.pipeline                      # the embedded demo
    python -m jobs.pipeline run_id=x scenes=tiny model=[oracle]

Exit status 3: stopped cleanly before the end (budget reached or shards failed); completed
work is kept and ``python -m jobs.rerun_failed run_id=x`` finishes the run.
"""

import hydra
from omegaconf import DictConfig

from harness.runtime.config import RunConfig
from harness.runtime.stages import run_pipeline
from harness.store.base import ObjectStore
from jobs._entry import CONF_DIR, run_until_stopped, setup


def report_location(run: RunConfig, store: ObjectStore, key: str) -> str:
    """Where the report is, for a person: a path for the local store, a URL-like name otherwise."""
    where = f"{run.store.root}/{key}" if run.store.kind == "local" else f"{store.describe()} {key}"
    return f"\nreport: {where}\n        {where.removesuffix('.md')}.html (figures, per-conversation pages)"


@hydra.main(version_base="1.3", config_path=CONF_DIR, config_name="config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    key = run_until_stopped(run_pipeline, run, store)
    print(report_location(run, store, key))


if __name__ == "__main__":
    main()
