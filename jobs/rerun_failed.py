"""Finish a run: re-run only what is incomplete (failed or never-started shards, then the
stages after them). ``python -m jobs.rerun_failed run_id=ID [store=...] [budget.gpu_hours=...]``

The run's config comes from its manifest, so the rerun computes exactly what the first
invocation would have; only where and how it runs (``store``, ``cluster``, ``budget``) is
taken from this command line. Completed shards are skipped and cost nothing.
"""

from omegaconf import DictConfig

from harness.stages import STAGES, run_pipeline
from jobs._entry import check_ready, existing_run, finish, hydra_job, run_until_stopped, setup


@hydra_job("config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    run = existing_run(run, store, job="jobs.rerun_failed")
    run = check_ready(run, store, STAGES)
    run_until_stopped(run_pipeline, run, store)
    finish(run, store)


if __name__ == "__main__":
    main()
