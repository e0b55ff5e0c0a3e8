"""Print a run's progress: ``python -m jobs.status run_id=demo [store=... overrides]``.

The run's own config comes from its manifest (``run.json``), so only ``run_id``, the store
and (for the cost columns) ``budget.usd_per_gpu_hour`` need to be given.
"""

from omegaconf import DictConfig

from harness.runtime.status import run_status
from jobs._entry import existing_run, hydra_job, setup


@hydra_job("config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    print(run_status(existing_run(run, store, job="jobs.status"), store))


if __name__ == "__main__":
    main()
