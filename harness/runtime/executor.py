"""Ray execution of the ``infer`` stage: :class:`ShardRunner` actors pulling shards from a queue.

One actor per GPU (``model.num_gpus`` each; Ray sets the actor's ``CUDA_VISIBLE_DEVICES``),
or per CPU slot on a CPU machine; each actor loads its model once and runs one shard at a
time until none can start on it (its model's queue is empty, or the budget stopped the
stage), then is killed to free its slot for actors still waiting for one. Before any actor
starts, :func:`require_resources` checks that some node can hold each model's request.
Failures:

* Ray-level (actor died, node lost, preemption): Ray restarts the actor and re-runs the
  shard on it (``cluster.max_restarts`` / ``cluster.max_task_retries``); when Ray gives up,
  or the worker raised (e.g. the runner's step watchdog), the driver records the failed
  attempt (reason, measured spend) under the shard's ``failures/`` prefix, kills that actor
  (a stuck step may still run in it) and re-queues the shard on a fresh actor, up to
  ``cluster.shard_attempts`` attempts in all. A shard that still fails has no marker, so
  ``make rerun-failed`` picks it up.
* An error inside one conversation is recorded on that conversation by the worker and never
  fails the shard.

The budget (``budget.*``) is checked before each shard starts: spent (this and earlier
invocations) + the estimate of every running shard + the next shard's estimate must stay
within it, else no new shard starts, idle actors are killed, running shards finish, and the
report says why. Under a budget a model with no estimate yet runs one shard at a time until
its first shard calibrates it, so the overshoot is bounded by the in-flight shards' spend
beyond their estimates (docs/cluster.md). No actor outlives :func:`run_shards`, and
:func:`ray_session` (and :func:`ray_scope`) turn SIGTERM into :class:`DriverStopped` (a ``KeyboardInterrupt``, as
Ctrl-C is) so that Ray stops with the driver; the attempts in flight are recorded as
failed attempts with their spend.
Ray is imported only under ``harness/runtime/``: here and in :mod:`harness.runtime.pool`, which the
other stages that fan out use.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from statistics import fmean

from tqdm import tqdm

from harness.pricing import PriceTable
from harness.runtime.config import BudgetSettings, ModelSettings, RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.shard import ShardSummary, ShardWorker, device_hours, infer_worker, new_attempt_id
from harness.store.base import ObjectStore, get_json, put_json
from harness.store.settings import open_store

log = logging.getLogger("duplex_mpe.executor")

WorkerFactory = Callable[[RunConfig, ModelSettings, ObjectStore], ShardWorker]


_scopes: list[bool] = []  # one entry per open ray_scope: whether a ray_session inside it started Ray


@contextmanager
def ray_scope() -> Iterator[None]:
    """Several stages in one Ray session, started only when the first of them needs Ray: a
    :func:`ray_session` inside the scope leaves Ray running for the next, and the scope shuts it
    down at its end. A resumed run whose stages are complete, or that runs only in-process
    stages (reduce, ``score.actors=0``), never starts Ray (its start and stop cost seconds).
    SIGTERM raises :class:`DriverStopped` for the whole scope, Ray or not."""
    _scopes.append(False)
    try:
        with _exit_on_sigterm():
            yield
    finally:
        if _scopes.pop():
            import ray

            ray.shutdown()  # stops this driver's actors (a joined cluster kills the actors a driver owned)


@contextmanager
def ray_session(cfg: RunConfig) -> Iterator[None]:
    """Start (or join, with ``cluster.address``) Ray for the duration of a stage, or, inside a
    :func:`ray_scope`, until the scope ends."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    if ray.is_initialized():
        yield
        return
    c = cfg.cluster
    if c.address:
        ray.init(address=c.address, logging_level="WARNING")
    else:
        os.makedirs(c.ray_tmp, exist_ok=True)
        ray.init(num_cpus=c.num_cpus or os.cpu_count(), num_gpus=c.num_gpus, include_dashboard=False,
                 _temp_dir=c.ray_tmp, logging_level="WARNING", log_to_driver=True)
    if _scopes:
        _scopes[-1] = True
        yield
        return
    with _exit_on_sigterm():
        try:
            yield
        finally:  # stops this driver's actors (a joined cluster kills the actors a driver owned)
            ray.shutdown()


class DriverStopped(KeyboardInterrupt):
    """The driver was told to stop by a signal (SIGTERM: ``kubectl delete``, ``kill``); a
    ``KeyboardInterrupt`` like Ctrl-C's, so both take the same path. ``signum``: the signal."""

    def __init__(self, signum: int):
        super().__init__(f"stopped by signal {signal.Signals(signum).name}")
        self.signum = signum


_last_stop: list[int] = []  # the signal the SIGTERM handler saw (Ray may re-raise a plain KeyboardInterrupt)


def stop_signal(e: BaseException) -> int:
    """The signal behind an interrupt: ``e.signum`` for :class:`DriverStopped`, the signal the
    handler saw when Ray re-raised it as a plain ``KeyboardInterrupt``, else SIGINT (Ctrl-C)."""
    return getattr(e, "signum", None) or (_last_stop[-1] if _last_stop else signal.SIGINT)


@contextmanager
def _exit_on_sigterm() -> Iterator[None]:
    """SIGTERM raises :class:`DriverStopped` so that ``finally`` blocks run (the executor records
    and kills its running attempts, then Ray shuts down); without it Ray's own handler aborts the
    process (status 134) in the middle of that clean-up. The jobs exit with 128 + the signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: object) -> None:
        _last_stop.append(signum)
        raise DriverStopped(signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _actor_class():
    import ray

    @ray.remote
    class ShardRunner:
        """Ray actor holding one loaded model; ``run`` processes one shard."""

        def __init__(self, cfg: RunConfig, model: ModelSettings, factory: WorkerFactory):
            self.worker = factory(cfg, model, open_store(cfg.store))
            self.actor_id = ray.get_runtime_context().get_actor_id()

        def run(self, shard_id: str, scene_ids: list[str]) -> ShardSummary:
            return replace(self.worker.run(shard_id, scene_ids), actor=self.actor_id)

        def progress(self) -> int:
            """Conversations the shard in flight has written (answered while ``run`` runs: the
            actor has two threads, :data:`ACTOR_THREADS`)."""
            return self.worker.progress

    return ShardRunner


ACTOR_THREADS = 2  # a ShardRunner answers progress() while run() runs (the model has its own thread)
PROGRESS_POLL_S = 2.0  # the driver asks the actors in flight for their progress this often


def shard_plan(store: ObjectStore, key: str, scene_ids: list[str], shard_size: int) -> dict[str, list[str]]:
    """The shard plan at ``key``; written once (conditional put), then read as frozen.

    Later invocations read the stored plan whatever their ``shard_size`` or actor count, so
    changing the number of GPUs or actors never invalidates completed shards.
    """
    plan = {f"shard-{i // shard_size:05d}": scene_ids[i:i + shard_size] for i in range(0, len(scene_ids), shard_size)}
    put_json(store, key, plan, if_absent=True)
    return get_json(store, key)


class BudgetExceeded(RuntimeError):
    """The budget stopped the stage before every shard ran (completed shards are intact)."""


@dataclass
class Budget:
    """Spend so far against ``settings``; :meth:`refusal` says why a shard may not start.

    Device spend is in device-hours; API spend is hosted models' raw usage (shard markers and
    failure records, :mod:`harness.pricing`) priced with ``prices``. ``unpriced``: models whose API
    usage the table cannot price, and why (refused under ``budget.usd`` unless
    ``budget.allow_unpriced``; never counted as $0).
    """

    settings: BudgetSettings
    spent_hours: float = 0.0
    prices: PriceTable | None = None  # None: no metered model in this run
    spent_api_usd: float = 0.0  # priced API usage of every attempt so far
    shard_api_usd: dict[str, list[float]] = field(default_factory=dict)  # model -> priced API cost of each shard
    unpriced: dict[str, str] = field(default_factory=dict)

    @classmethod
    def for_run(cls, cfg: RunConfig, store: ObjectStore, roots: dict[str, str], spent_hours: float) -> Budget:
        """The budget of a stage over ``roots`` (``{model: shard prefix}``): ``spent_hours`` from the
        caller, and the API usage of the metered models' earlier attempts read from their markers and
        failure records; a model whose price table key (:func:`~harness.pricing.metered_key`) has no
        entry is unpriced from the start."""
        from harness.pricing import load_prices, metered_key
        from harness.products.infer import read_ledger

        budget = cls(cfg.budget, spent_hours)
        plan = RunPlan.from_config(cfg)
        for m in cfg.models:
            key = metered_key(m.target, m.params) if m.name in roots else None
            if key is None:
                continue
            budget.prices = budget.prices or load_prices(cfg.budget.price_table)
            if key not in budget.prices.models:
                budget.unpriced[m.name] = f"{key} is not in {budget.prices.label}"
            led = read_ledger(store, plan.layout, roots[m.name], m.name)
            for marker in led.markers.values():
                budget.book_api(m.name, marker.get("usage") or {}, shard=True)
            budget.book_api(m.name, led.failed_usage)
        return budget

    @property
    def limited(self) -> bool:
        return self.settings.gpu_hours is not None or self.settings.usd is not None

    def book_api(self, model: str, usage: dict[str, dict], shard: bool = False) -> None:
        """Count one attempt's raw usage (``{provider/model: sum}``; ``shard``: a completed shard's,
        which calibrates :meth:`api_estimate`)."""
        if self.prices is None or not usage:
            return
        from harness.pricing import ledger_cost

        cost = ledger_cost(usage.values(), self.prices)
        self.spent_api_usd += cost.usd
        if not cost.complete:
            self.unpriced.setdefault(model, "; ".join(cost.unpriced))
        elif shard:
            self.shard_api_usd.setdefault(model, []).append(cost.usd)

    def api_estimate(self, model: str) -> float:
        """The next shard's API cost: the mean priced cost of ``model``'s completed shards (0 before
        the first, which a budget runs alone to calibrate it)."""
        costs = self.shard_api_usd.get(model)
        return fmean(costs) if costs else 0.0

    def refusal(self, projected_extra_hours: float, projected_extra_usd: float = 0.0,
                model: str | None = None) -> str | None:
        """Why a shard of ``model`` may not start when the shards in flight and it are estimated at
        ``projected_extra_hours`` device-hours and ``projected_extra_usd`` of API cost; None: it may."""
        total = self.spent_hours + projected_extra_hours
        s = self.settings
        if s.gpu_hours is not None and total > s.gpu_hours:
            return (f"budget.gpu_hours {s.gpu_hours:g}: {self.spent_hours:.4f} device-hours spent, "
                    f"{total:.4f} projected with the next shard")
        if s.usd is None:
            return None
        if model in self.unpriced and not s.allow_unpriced:
            return (f"budget.usd {s.usd:g}: the API usage of {model} is unpriced ({self.unpriced[model]}), so the "
                    "budget cannot bound it; add its prices to a table (harness/pricing/tables) or set "
                    "budget.allow_unpriced=true to run it with its API cost left out of the budget")
        spent = self.spent_hours * s.usd_per_gpu_hour + self.spent_api_usd
        projected = total * s.usd_per_gpu_hour + self.spent_api_usd + projected_extra_usd
        if projected > s.usd:
            api = f" (API ${self.spent_api_usd:.2f})" if self.prices is not None else ""
            return f"budget.usd {s.usd:g}: ${spent:.2f} spent{api}, ${projected:.2f} projected with the next shard"
        return None


@dataclass(frozen=True)
class _Running:
    """A shard attempt in flight: where it runs, the estimate it was admitted with, its start."""

    model: str
    shard: str
    scene_ids: list[str]
    actor: object
    estimate: float
    t0: float
    api_estimate: float = 0.0  # USD of API usage (hosted models)


@dataclass
class InferReport:
    done: list[ShardSummary] = field(default_factory=list)
    failed: dict[tuple[str, str], str] = field(default_factory=dict)  # (model, shard) -> last reason
    not_started: list[tuple[str, str]] = field(default_factory=list)  # left by the budget
    budget_stop: str | None = None
    spent_hours: float = 0.0  # by this invocation


class UnmetResources(RuntimeError):
    """No node of the Ray cluster can hold an actor's CPU/GPU request (it would wait forever)."""


def unmet_requests(requests: dict[str, tuple[float, float]], nodes: list[dict[str, float]]) -> list[str]:
    """One message per request no single node can hold.

    Args:
        requests: ``{who: (num_cpus, num_gpus)}`` per actor, e.g. ``{"model 'silent'": (1, 0)}``.
        nodes: each node's total resources (Ray's names: ``{"CPU": 16.0, "GPU": 2.0, ...}``).
    """
    out = []
    for who, (cpus, gpus) in requests.items():
        if any(n.get("CPU", 0.0) >= cpus and n.get("GPU", 0.0) >= gpus for n in nodes):
            continue
        have = "; ".join(f"{n.get('CPU', 0.0):g} CPU, {n.get('GPU', 0.0):g} GPU" for n in nodes) or "no node"
        out.append(f"{who} asks for num_cpus={cpus:g}, num_gpus={gpus:g} per actor, but no node of the Ray "
                   f"cluster has that (nodes: {have})")
    return out


RESOURCE_HINT = (". Lower the request (e.g. model.<name>.num_gpus=0 on a machine without GPUs) or give Ray "
                 "the devices (cluster.num_gpus=N: on a GPU machine N is its GPU count, `nvidia-smi -L | wc -l`; "
                 "conf/cluster/local.yaml declares 0, so the Ray a job starts sees no GPU until told).")


def require_resources(requests: dict[str, tuple[float, float]], wait_s: float = 0.0) -> None:
    """Raise :class:`UnmetResources` unless some alive node of the connected Ray cluster can hold
    each request, waiting up to ``wait_s`` seconds for nodes to join (a KubeRay worker pod
    starting); a request no node meets would otherwise queue forever with no message."""
    import ray

    deadline = time.monotonic() + wait_s
    while True:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        problems = unmet_requests(requests, nodes)
        if not problems or time.monotonic() >= deadline:
            break
        time.sleep(min(5.0, max(0.0, deadline - time.monotonic())))
    if problems:
        raise UnmetResources("; ".join(problems) + RESOURCE_HINT)


def actor_count(wanted: int | None, num_cpus: float, num_gpus: float, work_items: int) -> int:
    """``wanted`` actors, or (None) as many as the Ray cluster's GPUs (when ``num_gpus``) or CPUs
    hold at ``num_gpus`` / ``num_cpus`` each; at least 1 and at most ``work_items``."""
    import ray

    if wanted is None:
        res = ray.cluster_resources()
        wanted = int(res.get("GPU", 0) // num_gpus) if num_gpus else int(res.get("CPU", 1) // max(num_cpus, 1e-9))
    return max(1, min(wanted, work_items))


_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_EXCEPTION_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt)\b.*")
# Ray's out-of-memory report: the node's use and limit ("was 22.2GB used / 23.5GB limit (0.945)"; before
# Ray 2.56 "was 22.2GB / 23.5GB (0.945)"), and per killed worker its pid and "(actual) memory used"
_OOM_NODE = re.compile(r"Memory on the node \([^)]*\)(?: where .*? was running)? was "
                       r"([\d.]+ ?GB(?: used)? / [\d.]+ ?GB(?: limit)?(?: \([\d.]+\))?)", re.S)
_OOM_KILLED = re.compile(r"pid=(\d+), (?:actual )?memory used=([\d.]+ ?GB)")
_WORKER_EXIT = re.compile(r"Worker exit type: (\w+) Worker exit detail: ([^.]*)")


REASON_CHARS = 800  # the longest failure reason kept in a shard's failure record


def _oom_figures(text: str, actor_id: str | None) -> str | None:
    """The memory figures of Ray's out-of-memory report in ``text`` (None: it is not one): the
    node's use and limit, and what the killed worker held (``actor_id``'s entry when the report
    names several workers; else each)."""
    node = _OOM_NODE.search(text)
    if node is None:
        return None
    kills, start = [], 0
    for m in _OOM_KILLED.finditer(text):  # an entry's actor id comes before its pid
        kills.append((actor_id is not None and actor_id in text[start:m.start()], m[1], m[2]))
        start = m.end()
    mine = [k for k in kills if k[0]] or (kills if len(kills) == 1 else [])
    if mine:
        held = f"; the killed worker (pid {mine[0][1]}) held {mine[0][2]}"
    elif kills:
        held = "; the killed workers held " + ", ".join(f"{mem} (pid {pid})" for _, pid, mem in kills)
    else:
        held = ""
    return f"node memory {node[1]}{held}"


def _reason(e: Exception, actor_id: str | None = None) -> str:
    """One line naming what went wrong: the worker's exception, not Ray's wrapper around it
    (a ``RayTaskError``'s cause; for an actor that died in its constructor, the exception line
    at the end of Ray's message). A kill by Ray's out-of-memory monitor keeps the memory it
    reported (:func:`_oom_figures`; ``actor_id``: the dead actor's, to find its entry); an actor
    that died otherwise keeps how its worker exited."""
    cause = getattr(e, "cause", None)  # RayTaskError carries the worker's exception
    err = cause if isinstance(cause, BaseException) else e
    text = _ANSI.sub("", str(err))
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    name = type(err).__name__
    if not lines:
        return f"{name}: (no message)"
    oom = _oom_figures(text, actor_id)
    if oom:
        return f"{name}: killed by Ray's out-of-memory monitor ({oom})"
    died = _WORKER_EXIT.search(text)
    if died:
        return f"{name}: {lines[0][:200]} (worker exit {died[1]}: {died[2]})"
    last = next((ln for ln in reversed(lines[1:]) if _EXCEPTION_LINE.match(ln)), None)
    head = f"{name}: {lines[0].split(',')[0][:200]}"
    # a store error puts the server's own message after the key: keep room for both
    return f"{head}: {last[:REASON_CHARS]}" if last else f"{name}: {lines[0][:REASON_CHARS]}"


def run_shards(cfg: RunConfig, store: ObjectStore, work: dict[str, dict[str, list[str]]],
               spent_hours: float = 0.0, shard_estimates: dict[str, float] | None = None,
               factory: WorkerFactory = infer_worker, roots: dict[str, str] | None = None,
               stage: str = "infer") -> InferReport:
    """Run ``{model: {shard_id: scene_ids}}`` on Ray actors until done, failed or out of budget.

    Args:
        store: where failed attempts are recorded.
        spent_hours: device-hours earlier invocations of this run spent (counts against the budget).
        shard_estimates: device-hours of one shard per model, from earlier completed shards;
            replaced by the running mean as shards complete. A model with no estimate yet
            borrows the mean of the others, else 0; under a budget it runs one shard at a time
            until its first shard completes and calibrates it.
        factory: builds the worker inside each actor (tests and ``bench/cluster_sim.py`` pass
            a worker that does not stream).
        roots: ``{model: prefix}`` the shards live under, as the factory's workers'
            :meth:`~harness.runtime.shard.ShardWorker.shard_root` (default: each model's
            ``infer`` prefix); failed attempts are recorded there.
        stage: the stage's name on the progress bar (``cue-infer`` for Duplex Cue).

    Every actor this call starts is stopped before it returns or raises: an idle actor as soon
    as no shard can start on it (its model's queue is empty or the budget stopped the stage),
    and the actor of a failed attempt at once (a stuck step may still run inside it; the retry
    gets a fresh actor). Raises :class:`UnmetResources` when no node can hold a model's actor.
    """
    import ray

    runner = _actor_class()
    models = {m.name: m for m in cfg.models}
    plan = RunPlan.from_config(cfg)
    lay = plan.layout
    roots = roots or plan.infer
    require_resources({f"model {n!r}": (models[n].num_cpus, models[n].num_gpus) for n in work},
                      cfg.cluster.resource_wait_s)
    queue = [(m, s, ids) for m, shards in work.items() for s, ids in shards.items()]
    report = InferReport()
    budget = Budget.for_run(cfg, store, {m: roots[m] for m in work}, spent_hours)
    done_hours: dict[str, list[float]] = {m: [] for m in work}
    estimates = dict(shard_estimates or {})
    attempts: dict[tuple[str, str], int] = {}
    idle: list[tuple[str, object]] = []
    inflight: dict[object, _Running] = {}

    def estimate(model: str) -> float:
        if done_hours[model]:
            return fmean(done_hours[model])
        if model in estimates:
            return estimates[model]
        known = [fmean(v) for v in done_hours.values() if v] or list(estimates.values())
        return fmean(known) if known else 0.0

    def calibrating(model: str) -> bool:
        """Under a budget, a model with no estimate of its own runs one shard until it has one."""
        return (budget.limited and not done_hours[model] and model not in estimates
                and any(r.model == model for r in inflight.values()))

    def dispatch(name: str, actor: object) -> bool:
        job = next((q for q in queue if q[0] == name), None)
        if job is None or calibrating(name):
            return False
        est, api = estimate(name), budget.api_estimate(name)
        why = budget.refusal(sum(r.estimate for r in inflight.values()) + est,
                             sum(r.api_estimate for r in inflight.values()) + api, name)
        if why:
            report.budget_stop = why
            return False
        queue.remove(job)
        attempts[job[:2]] = attempts.get(job[:2], 0) + 1
        inflight[actor.run.remote(job[1], job[2])] = _Running(name, job[1], job[2], actor, est, time.perf_counter(),
                                                              api)
        return True

    def new_actor(name: str) -> object:
        m = models[name]
        return runner.options(num_gpus=m.num_gpus, num_cpus=m.num_cpus, max_restarts=cfg.cluster.max_restarts,
                              max_task_retries=cfg.cluster.max_task_retries,
                              max_concurrency=ACTOR_THREADS).remote(cfg, m, factory)

    def has_work(name: str) -> bool:
        return report.budget_stop is None and any(q[0] == name for q in queue)

    def record_failure(run: _Running, reason: str, usage: dict | None = None) -> None:
        """Book a failed attempt's spend and write its failure record (the worker's own attempt id
        died with it), so status, the ledger and the budget count it. ``usage``: the raw API usage
        the worker said it spent (:meth:`~harness.runtime.shard.ShardWorker.run`); None: unknown
        (the actor died, or the driver stopped), and the record has no ``usage``."""
        wall = time.perf_counter() - run.t0
        spend = device_hours(wall, models[run.model].num_gpus)
        budget.spent_hours += spend
        budget.book_api(run.model, usage or {})
        record = new_attempt_id()
        put_json(store, lay.failure(lay.shard(roots[run.model], run.shard), record),
                 {"attempt": record, "reason": reason, "wall_s": round(wall, 3), "device_hours": spend,
                  **({} if usage is None else {"usage": usage})})

    bar = tqdm(total=sum(len(ids) for _, _, ids in queue), desc=f"{stage} conversations", unit="conv")
    n_ok = n_err = 0
    finished = 0  # conversations of the shards that ended (committed, skipped or failed for good)

    def show_progress() -> None:
        """The bar at the finished shards' conversations plus what each attempt in flight has written."""
        refs = {r.actor.progress.remote(): r for r in inflight.values()}
        ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=PROGRESS_POLL_S)
        written = 0
        for ref in ready:
            with contextlib.suppress(Exception):  # an actor that died answers through its run's ref
                written += ray.get(ref)
        bar.n = finished + written
        bar.refresh()
    try:
        for name, shards in work.items():
            m = models[name]
            for _ in range(actor_count(cfg.infer.actors_per_model, m.num_cpus, m.num_gpus, len(shards))):
                idle.append((name, new_actor(name)))
        while True:
            for name, actor in list(idle):
                if report.budget_stop is not None:
                    break
                if dispatch(name, actor):
                    idle.remove((name, actor))
            # an idle actor that can get no shard holds its CPU/GPU from actors still waiting for one
            for name, actor in [a for a in idle if not has_work(a[0])]:
                idle.remove((name, actor))
                ray.kill(actor)
            if not inflight:
                break
            ended, _ = ray.wait(list(inflight), num_returns=1, timeout=PROGRESS_POLL_S)
            if not ended:
                show_progress()
                continue
            [ref] = ended
            run = inflight.pop(ref)
            name, shard = run.model, run.shard
            try:
                s = ray.get(ref)
            except Exception as e:  # Ray gave up on this attempt (actor died, node lost) or the worker raised
                reason = _reason(e)
                record_failure(run, reason, getattr(getattr(e, "cause", None) or e, "usage", None))
                ray.kill(run.actor, no_restart=True)  # never reused: a stuck step may still run in it
                if attempts[(name, shard)] < cfg.cluster.shard_attempts:
                    log.warning("infer %s %s attempt %d failed (%s); retrying on a fresh actor", name, shard,
                                attempts[(name, shard)], reason)
                    queue.append((name, shard, run.scene_ids))
                else:
                    report.failed[(name, shard)] = reason
                    finished += len(run.scene_ids)
                if has_work(name):
                    idle.append((name, new_actor(name)))
            else:
                report.done.append(s)
                budget.spent_hours += s.device_hours
                if not s.skipped:
                    budget.book_api(name, s.usage, shard=True)
                if not s.skipped:
                    done_hours[name].append(s.device_hours)
                n_ok, n_err = n_ok + s.ok, n_err + s.error
                finished += len(run.scene_ids)
                idle.append((name, run.actor))  # stopped above when no shard can start on it
            bar.n = finished
            bar.set_postfix(shards=len(report.done), committed=f"{n_ok} ok/{n_err} error", failed=len(report.failed),
                            spent=f"{budget.spent_hours:.3f} dev-h")
    except KeyboardInterrupt as e:  # Ctrl-C or SIGTERM (DriverStopped): the running attempts end here
        for run in inflight.values():
            record_failure(run, f"interrupted: the driver was stopped by {signal.Signals(stop_signal(e)).name}")
        raise
    finally:  # no actor outlives this call
        bar.close()
        for actor in [a for _, a in idle] + [r.actor for r in inflight.values()]:
            ray.kill(actor, no_restart=True)
    report.not_started = [(m, s) for m, s, _ in queue]
    report.spent_hours = budget.spent_hours - spent_hours
    return report
