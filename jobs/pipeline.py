"""Run every stage (scenes -> reference -> synth -> infer -> vad -> score -> reduce) and print
where the report is.

    python -m jobs.pipeline                      # the embedded demo
    python -m jobs.pipeline run_id=x scenes=tiny model=[oracle]

Exit status (docs/cluster.md): 0 complete; 2 configuration error; 3 stopped by the budget;
4 shards failed; 5 finished with conversation errors. Completed work is always kept and
``python -m jobs.rerun_failed run_id=x`` finishes a stopped run.
"""

from omegaconf import DictConfig

from harness.stages import STAGES, run_pipeline
from jobs._entry import check_ready, finish, hydra_job, run_until_stopped, same_run, setup


@hydra_job("config")
def main(cfg: DictConfig) -> None:
    run, store = setup(cfg)
    same_run(run, store, "jobs.pipeline")
    run = check_ready(run, store, STAGES)
    run_until_stopped(run_pipeline, run, store)
    finish(run, store)


if __name__ == "__main__":
    main()
