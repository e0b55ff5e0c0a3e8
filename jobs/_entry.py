"""Shared glue of the Hydra entry points: config -> RunConfig -> store -> stage."""

from __future__ import annotations

import dataclasses
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn, TypeVar

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue

from harness.runtime.config import ConfigError, RunConfig
from harness.store.base import ObjectStore, StoreError
from harness.store.layout import check_id
from harness.store.settings import open_store

T = TypeVar("T")
INVALID_RUN_DIR = "_invalid_run_id"  # reserved (leading "_"): no run can be named so


def _run_dir_part(run_id: object) -> str:
    """Hydra creates ``<store.root>/<run_id>/logs`` before any job code runs: an unsafe run id
    logs under :data:`INVALID_RUN_DIR` instead of escaping the store, and ``setup`` then exits
    with the config error naming it."""
    try:
        return check_id(str(run_id), "run_id")
    except ValueError:
        return INVALID_RUN_DIR


OmegaConf.register_new_resolver("run_id_key", _run_dir_part, replace=True)
CONF_DIR = str(Path(__file__).resolve().parents[1] / "conf")


# Exit statuses of every job (docs/cluster.md, "Exit statuses"); 1 is an unexpected error (a
# traceback); 130 / 143 a driver interrupted by Ctrl-C / SIGTERM.
COMPLETE = 0  # finished: every stage ran and no conversation is `error`
CONFIG_ERROR = 2  # configuration, preflight or missing input: stopped before anything was spent
BUDGET_STOP = 3  # the budget stopped infer before every shard ran; completed shards are kept
# work failed (infer shards after every attempt, synthesis/vad/score batches after their retries); completed
# work is kept, later stages did not run: run again to finish
FAILED_SHARDS = 4
FAILED_CONVERSATIONS = 5  # finished and the report is written, but some conversations are `error`


def fail(message: str, status: int = CONFIG_ERROR) -> NoReturn:
    """Print ``message`` to stderr and exit with ``status``; in a Hydra multirun (``-m``), end this
    job only (:class:`JobFailed`): the sweep's other jobs still run (:func:`hydra_job`)."""
    print(message, file=sys.stderr)
    if _multirun_job() is not None:
        raise JobFailed(message, status)
    sys.exit(status)


class JobFailed(Exception):
    """A job of a multirun that ended with exit ``status`` (its message printed already)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


SWEEP_FAILURES: list[tuple[int, str, int, str]] = []  # (job number, run id, exit status, message) of this sweep


def hydra_job(config_name: str) -> Callable[[Callable[[DictConfig], None]], Callable[[], None]]:
    """``@hydra.main`` over ``conf/<config_name>.yaml`` for a job's ``main(cfg)``. In a multirun a
    job that fails (:func:`fail`) is recorded and the sweep goes on to the next job;
    :class:`SweepReport` lists the failed jobs at the end and exits with the highest status."""
    def wrap(main: Callable[[DictConfig], None]) -> Callable[[], None]:
        def job(cfg: DictConfig) -> None:
            try:
                main(cfg)
            except JobFailed as e:  # only raised in a multirun
                SWEEP_FAILURES.append((_multirun_job() or 0, str(cfg.get("run_id", "?")), e.status, str(e)))

        job.__name__, job.__doc__, job.__module__ = main.__name__, main.__doc__, main.__module__
        return hydra.main(version_base="1.3", config_path=CONF_DIR, config_name=config_name)(job)

    return wrap


class SweepReport(Callback):
    """Hydra callback (``hydra.callbacks`` in conf/): at the end of a multirun, every failed job with
    its run id, exit status and message on stderr, and the sweep's exit status: the highest of its
    failed jobs' (docs/configuration.md, "Sweeps"); 0 when every job completed."""

    def on_multirun_end(self, config: DictConfig, **kwargs: object) -> None:
        if not SWEEP_FAILURES:
            return
        lines = [f"  job {n} (run {run}): exit {status}: {msg.strip().splitlines()[0] if msg.strip() else ''}"
                 for n, run, status, msg in SWEEP_FAILURES]
        print(f"\nsweep: {len(SWEEP_FAILURES)} job(s) failed, the others completed:\n" + "\n".join(lines),
              file=sys.stderr)
        sys.exit(max(status for _, _, status, _ in SWEEP_FAILURES))


def _multirun_job() -> int | None:
    """This job's number in a Hydra multirun (``-m``), else None (a single run, or no Hydra)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return None
    hc = HydraConfig.get()
    return int(hc.job.num) if hc.mode == RunMode.MULTIRUN else None


def _redact_hydra_outputs() -> None:
    """Hydra writes the job's config and overrides (``.hydra/*.yaml`` in its output folder) before
    the job starts: replace any URL's user and password there with ``***`` (the config is then
    refused, :meth:`RunConfig.from_dict`, but those files already hold what was typed)."""
    from hydra.core.hydra_config import HydraConfig

    from harness.checks import redact_url_credentials

    if not HydraConfig.initialized() or not HydraConfig.get().output_subdir:
        return
    folder = Path(HydraConfig.get().runtime.output_dir) / HydraConfig.get().output_subdir
    for path in folder.glob("*.yaml"):
        text = path.read_text()
        if (clean := redact_url_credentials(text)) != text:
            path.write_text(clean)


def setup(cfg: DictConfig) -> tuple[RunConfig, ObjectStore]:
    """Resolve and validate the config; exit with a clear message when it is wrong. In a Hydra
    multirun (``-m``) every job is its own run: ``run_id`` becomes ``<run_id>-<job number>``."""
    logging.getLogger("duplex_mpe").setLevel(logging.INFO)
    _redact_hydra_outputs()
    sweep_job = _multirun_job()
    if sweep_job is not None:
        cfg.run_id = f"{cfg.run_id}-{sweep_job}"
        logging.getLogger("duplex_mpe").info("multirun job %d: run_id=%s", sweep_job, cfg.run_id)
    try:  # throw_on_missing: a required value left at ``???`` (store.bucket of store=s3) is named
        run = RunConfig.from_dict(OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True))
    except (ConfigError, MissingMandatoryValue) as e:
        fail(f"config error: {e}")
    try:
        return run, open_store(run.store)
    except StoreError as e:
        fail(f"store error: {e}")


def check_ready(run: RunConfig, store: ObjectStore, stages: Sequence[str], *, project_cost: bool = True) -> RunConfig:
    """Exit with :data:`CONFIG_ERROR` and every problem the preflight finds for ``stages``
    (credentials, SDKs, the store, resources, model stacks, files the settings name:
    :mod:`harness.runtime.preflight`); else return ``run`` with those files' digests pinned
    (:attr:`RunConfig.inputs`, read now, once): the driver and every Ray worker then build the same
    plan from the config alone, and a worker never needs the files (a cluster's workers do not
    have the head's manifest) nor sees an edit made while the run goes on. A job that runs the
    reference, infer or score logs the run's projected cost first (:func:`log_projection`), unless
    ``project_cost`` is false (the Duplex Cue job: it preflights infer's models, but the projection is
    of the Duplex-MPE conversations, which it never runs)."""
    from harness.cue.plan import CuePlan
    from harness.runtime.plan import RunPlan
    from harness.runtime.preflight import PreflightError, preflight

    try:
        preflight(run, store, stages)
    except PreflightError as e:
        fail(str(e))
    unpinned = dataclasses.replace(run, inputs={})  # run.json's digests are the first invocation's
    pinned = dataclasses.replace(run, inputs={**RunPlan.from_config(unpinned).inputs,
                                              **CuePlan.from_config(unpinned).inputs})
    if project_cost and {"reference", "infer", "score"} & set(stages):
        log_projection(pinned, store)
    return pinned


def log_projection(run: RunConfig, store: ObjectStore) -> None:
    """Log what the run is projected to cost before anything is spent (:mod:`harness.runtime.projection`):
    a warning when the projection passes the budget, which is not refused (the budget stops infer at
    its limit, keeping completed shards)."""
    from harness.runtime.projection import project, projection_lines

    b = run.budget
    projection = project(run, store)
    over = projection.over_budget(b.gpu_hours, b.usd)
    logging.getLogger("duplex_mpe").log(
        logging.WARNING if over else logging.INFO, "run %s: projected cost, before its first shard (estimates: "
        "docs/models.md, \"Cost\"; `make status` shows it beside the measured rate):\n%s", run.run_id,
        "\n".join(projection_lines(projection, b.gpu_hours, b.usd)))


#: what an invocation on an existing run may change (docs/configuration.md, "Jobs on an existing
#: run"): where and how fast it runs. A stage job may also change any setting that makes a new
#: version of a stage (vad.*, judge.*, protocol.*, ...), except the run's scenes.
SPEED_ONLY = ("infer.actors_per_model", "infer.torch_threads", "infer.allow_cpu_for_gpu_actors",
              "infer.step_timeout_s", "infer.first_step_timeout_s",  # the watchdog: a rerun may need more time
              "infer.clip_cache_mib",
              "vad.batch", "protocol.detector.batch", "score.batch", "score.num_cpus", "score.num_gpus", "score.actors",
              "reference.workers")
SPEED_ONLY_PER_MODEL = ("batch_size", "num_gpus", "num_cpus", "image", "estimate")  # estimate: the cost projection's
FIXED_BY_THE_RUN = ("scenes.", "infer.shard_size")  # the scene set and the frozen shard plan


def where_or_speed(key: str) -> bool:
    """``key`` (dotted) changes only where or how fast the run runs, never its outputs."""
    from harness.runtime.manifest import WHERE_IT_RUNS  # the same list run.json's change warning uses

    parts = key.split(".")
    return (parts[0] in WHERE_IT_RUNS or key in SPEED_ONLY
            or (parts[0] == "model" and len(parts) >= 3 and parts[2] in SPEED_ONLY_PER_MODEL))


def new_stage_version(key: str) -> bool:
    return not key.startswith(FIXED_BY_THE_RUN)


def _leaves(d: dict, prefix: str = "") -> list[str]:
    """Dotted keys of every leaf of a nested dict."""
    return [k for key, v in d.items()
            for k in (_leaves(v, f"{prefix}{key}.") if isinstance(v, dict) and v else [f"{prefix}{key}"])]


def same_run(run: RunConfig, store: ObjectStore, job: str) -> None:
    """A job that starts or resumes a run (``jobs.pipeline``, ``jobs.scenes``) on an existing run
    id must not change what the run fixed at its first invocation (its scenes and shard plan):
    that would silently split the run in two while ``run.json``, status and reduce describe the
    first. Exits with :data:`CONFIG_ERROR` naming the keys; a new run id is a new run."""
    from harness.runtime.manifest import as_read, config_changes
    from harness.store.base import get_json
    from harness.store.layout import RunLayout

    try:
        stored = get_json(store, RunLayout(run.run_id).run_manifest())["config"]
    except FileNotFoundError:
        return  # a new run
    fixed = [k for k in config_changes(as_read(stored), run.to_dict()) if k.startswith(FIXED_BY_THE_RUN)]
    if fixed:
        fail(f"config error: {job}: run {run.run_id!r} exists and fixed {', '.join(fixed[:6])} at its first invocation "
             f"(run.json); this command changes them. Use a new run_id for other scenes, or repeat the run's own "
             f"values to resume it")


def _value(d: dict, key: str) -> object:
    """The value at dotted ``key`` of a nested dict (``None`` when absent)."""
    for part in key.split("."):
        d = d.get(part) if isinstance(d, dict) else None
    return d


def existing_run(run: RunConfig, store: ObjectStore, config_name: str = "config",
                 allowed: Callable[[str], bool] = where_or_speed, job: str = "this job") -> RunConfig:
    """The config of the stored run ``run.run_id`` (its ``run.json``) with what this invocation's
    command line changes from the composed defaults applied on top, when ``allowed`` admits
    every changed key; the store, cluster and run id are always this invocation's.

    Exits with :data:`CONFIG_ERROR` and one message when the run does not exist, its stored
    config is not valid, or the command line changes a key ``allowed`` refuses (naming it and why).
    """
    from hydra import compose
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    from harness.runtime.manifest import config_changes
    from harness.store.base import get_json
    from harness.store.layout import RunLayout

    try:
        stored = get_json(store, RunLayout(run.run_id).run_manifest())["config"]
    except FileNotFoundError:
        fail(f"no run {run.run_id!r} in {store.describe()} (no run.json): check run_id and the store "
             "overrides (e.g. ARGS=\"store=s3 store.bucket=...\"), or start the run with jobs.pipeline or jobs.scenes")
    here = run.to_dict()
    changed: list[str] = []
    if GlobalHydra.instance().is_initialized():  # what the command line changed: this config vs the defaults
        defaults = OmegaConf.to_container(compose(config_name=config_name), resolve=True)
        defaults.pop("review", None)
        defaults.update(run_id=run.run_id, store=here["store"], cluster=here["cluster"])
        base = RunConfig.from_dict(defaults).to_dict()
        changed = config_changes(base, here)
        named = [o.split("=", 1)[0].lstrip("+") for o in HydraConfig.get().overrides.task if "." in o.split("=", 1)[0]]
        changed += [k for k in _leaves(here) if k not in changed  # set to the default's value (budget.gpu_hours=null)
                    and any(k == n or k.startswith(n + ".") for n in named)]
        if set(here["model"]) != set(base["model"]):  # a new model selection: run.json's settings where it has them
            stored["model"] = {m: stored["model"].get(m, here["model"][m]) for m in here["model"]}
        # repeating one of the run's own overrides (ARGS="scenes=tiny") changes nothing: allowed
        refused = [k for k in changed if not allowed(k) and _value(here, k) != _value(stored, k)]
        if refused:
            fail(f"config error: {job} acts on the existing run {run.run_id!r} and takes its config from run.json; "
                 f"it cannot change {', '.join(refused[:6])}"
                 + (": the run's scenes and shard plan are fixed by its first invocation (a run with other "
                    "scenes is a new run: use a new run_id)" if any(k.startswith(FIXED_BY_THE_RUN) for k in refused)
                    else ": only where it runs (store, cluster, budget) and speed settings; to compute a variant "
                         "(e.g. vad.rules.*), run that stage's job (python -m jobs.vad run_id=... vad.rules...)"))
    for key in changed:
        *path, last = key.split(".")
        if path[:1] == ["model"] and path[1:] and path[1] not in stored["model"]:
            continue  # a model not selected any more
        src, dst = here, stored
        for part in path:
            src, dst = src.get(part, {}), dst.setdefault(part, {})
        if last in src:
            dst[last] = src[last]
        else:
            dst.pop(last, None)
    stored.update(run_id=run.run_id, store=here["store"], cluster=here["cluster"])
    try:
        return RunConfig.from_dict(stored)
    except ConfigError as e:
        fail(f"run {run.run_id!r}: its stored config is not valid for this harness version: {e}")


def run_until_stopped(fn: Callable[[RunConfig, ObjectStore], T], run: RunConfig, store: ObjectStore,
                      status: Callable[[RunConfig, ObjectStore], str] | None = None,
                      resume: str | None = None) -> T:
    """``fn(run, store)``; a clean stop prints why, the run's status and how to continue, then
    exits with :data:`BUDGET_STOP` (budget reached) or :data:`FAILED_SHARDS` (shards failed, or
    batches of a stage's pool failed: :class:`~harness.runtime.pool.BatchesFailed`, synthesis
    batches lost); a missing input or a resource request no node can hold exits with
    :data:`CONFIG_ERROR`; an interrupt (Ctrl-C, SIGTERM) exits with 128 + the signal (130, 143)
    and one message. Completed work is kept. ``status``: the run's status text (default: the
    Duplex-MPE pipeline's, :func:`~harness.runtime.status.run_status`); ``resume``: the command
    that continues the run (default: ``make rerun-failed``)."""
    from harness.products.infer import InferIncomplete
    from harness.runtime.driver import StageCannotRun
    from harness.runtime.executor import BudgetExceeded, UnmetResources
    from harness.runtime.pool import BatchesFailed
    from harness.runtime.status import run_status
    from harness.stages.synth import SynthIncomplete

    if resume is None:
        if run.store.kind == "local":  # the store overrides the rerun needs to find this run
            where = "" if run.store.root == "runs" else f' ARGS="store.root={run.store.root}"'
        else:
            where = f' ARGS="store=s3 store.bucket={run.store.bucket} ..."'
        resume = f"make rerun-failed RUN={run.run_id}{where}"

    try:
        return fn(run, store)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (DriverStopped): actors and Ray are stopped by now
        from harness.runtime.executor import stop_signal

        signum = stop_signal(e)
        fail(f"\ninterrupted ({signal.Signals(signum).name}): completed stages and shards are kept, the attempts "
             f"that were running are recorded as failed; run the same command again (or {resume}) to resume",
             128 + signum)
    except (BudgetExceeded, InferIncomplete, SynthIncomplete, BatchesFailed) as e:
        fail(f"\nstopped: {e}\n\n{(status or run_status)(run, store)}\n\nto continue: {resume}"
             + (" (with budget.gpu_hours=... / budget.usd=... in ARGS to raise the budget)"
                if isinstance(e, BudgetExceeded) else ""),
             BUDGET_STOP if isinstance(e, BudgetExceeded) else FAILED_SHARDS)
    except StageCannotRun as e:  # an input missing, or nothing to run (every scene invalid)
        fail(f"cannot run: {e}")
    except UnmetResources as e:
        fail(f"cannot schedule: {e}")


def report_location(run: RunConfig, store: ObjectStore, key: str) -> str:
    """Where the report is, for a person: a path for the local store, a URL-like name otherwise."""
    where = f"{run.store.root}/{key}" if run.store.kind == "local" else f"{store.describe()} {key}"
    return f"\nreport: {where}\n        {where.removesuffix('.md')}.html (figures, per-conversation pages)"


def finish(run: RunConfig, store: ObjectStore) -> None:
    """Print where the run's report is, and a warning for invalid scenes left out and for each
    model, condition and window kind with more unparseable judge verdicts than
    ``metrics.max_unparseable_share`` (neither changes the exit status); exit with
    :data:`FAILED_CONVERSATIONS` when some conversations are `error` (listed in the report and
    the reduce stage's ``errors.json``)."""
    from harness.products.windows import unparseable_warning
    from harness.runtime.plan import RunPlan
    from harness.store.base import get_json

    plan = RunPlan.from_config(run)
    print(report_location(run, store, plan.layout.file(plan.reduce, "report.md")))
    found = get_json(store, plan.layout.file(plan.reduce, "errors.json"))
    invalid = found["invalid_scenes"]
    if invalid:
        print(f"{len(invalid)} invalid scene(s) were left out (never run, never scored); each reason is in the "
              "report's errors and in errors.json")
    if over := found.get("unparseable_judge_verdicts", []):
        markers = [plan.layout.marker(p) for p in (*sorted({plan.score[c["model"]] for c in over}), plan.reduce)]
        print("warning: the judge named no single label for too many items; they count as failures (the report's "
              "'Unparseable judge verdicts'):\n" + "".join(f"  {unparseable_warning(c)}\n" for c in over)
              + "the judge cache never serves such verdicts: to ask the judge again for these items alone, remove "
              f"these markers from {store.describe()} and run the same command (docs/judge.md): " + ", ".join(markers))
    errors = found["conversations"]
    if errors:
        models = sorted({e["model"] for e in errors})
        fail(f"finished with {len(errors)} conversation error(s) ({', '.join(models)}); the first: "
             f"{errors[0]['model']} {errors[0]['scene_id']}: {errors[0]['reason']}. Every one is listed in the "
             "report and in errors.json.", FAILED_CONVERSATIONS)


def stage_main(stage: str):
    """The Hydra entry point that runs one stage (``python -m jobs.<stage> [overrides]``)."""
    from harness.runtime.manifest import write_run_manifest
    from harness.stages import run_stage

    @hydra_job("config")
    def main(cfg: DictConfig) -> None:
        run, store = setup(cfg)
        if stage == "scenes":  # a run starts here (or with the pipeline): its run.json
            same_run(run, store, "jobs.scenes")
            run = check_ready(run, store, [stage])
            write_run_manifest(run, store)
        else:  # every later stage acts on an existing run: its config comes from run.json
            run = existing_run(run, store, allowed=new_stage_version, job=f"jobs.{stage}")
            run = check_ready(run, store, [stage])
        run_until_stopped(lambda r, s: run_stage(stage, r, s), run, store)
        if stage == "reduce":
            finish(run, store)

    return main
