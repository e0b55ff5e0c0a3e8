"""One way to map batches of work over a pool of Ray actors (spec architecture.md, "Core
contracts", Execution): the ``synth``, ``vad`` (re-detection), ``score`` and ``cue-score`` stages
fan out through :func:`map_batches`; ``infer``'s shards add attempts and the budget on top
(:func:`harness.runtime.executor.run_shards`).

A pool is ``worker(*args)`` built once per actor (the engine, the ASR, a model load once), then
``worker.<method>(*batch)`` for each batch, one batch at a time per actor. Results come back in
completion order as ``(index, result)``, with a tqdm bar. Failures, each a :class:`BatchFailure`
yielded in place of that batch's result (the caller decides what it means: vad splits a batch to
find the conversation at fault, synth records the batch lost, score fails the model):

* **the actor died** (killed, Ray's out-of-memory monitor, its node lost: Ray's
  ``ActorDiedError`` / ``OutOfMemoryError`` / ``NodeDiedError`` ...): the batch runs again on a
  fresh actor, ``cluster.batch_attempts`` attempts in all, then it is a failure
  (``died=True``); an out-of-memory kill's cause keeps the memory figures Ray reported;
* **the worker raised**: not retried, that batch's failure (``died=False``); the actor is kept
  (it returned from the call);
* **the worker could not be built** (its constructor raised): that actor is not replaced and its
  batch goes back to the queue; when no actor is left, every batch not run fails with the
  constructor's error (``attempts=0``).

``actors=0`` runs the same calls in the calling process, no Ray: the worker is built once, the
batches run in order, a raising batch (or a worker that cannot be built) is a failure the same
way; there is no actor to die. A stage raises :class:`BatchesFailed` after every other batch
finished and its results were kept (``jobs``: exit status 4, docs/cluster.md). Every actor the
pool starts is stopped before it returns or raises, also on ``KeyboardInterrupt`` (and when the
caller stops iterating: the generator's ``finally``).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tqdm import tqdm

from harness.runtime.config import RunConfig
from harness.runtime.executor import _reason, actor_count, ray_session, require_resources

log = logging.getLogger("duplex_mpe.pool")


@dataclass(frozen=True)
class Resources:
    """What each actor of a pool asks Ray for, and how many actors.

    ``num_cpus`` / ``num_gpus``: per actor (Ray's logical units); ``actors``: that many, None: as
    many as the cluster holds at that request (:func:`~harness.runtime.executor.actor_count`),
    0: in the calling process, no Ray. ``who``: the request as the resource error names it, e.g.
    ``"the scoring actor (score.num_cpus / score.num_gpus)"``.
    """

    num_cpus: float = 1
    num_gpus: float = 0
    actors: int | None = None
    who: str = "the pool's actor"

    @classmethod
    def of(cls, settings: Any, who: str) -> Resources:
        """From a settings object with ``num_cpus``, ``num_gpus`` and ``actors`` (``tts``, ``score``)."""
        return cls(settings.num_cpus, settings.num_gpus, settings.actors, who)


@dataclass(frozen=True)
class BatchFailure:
    """A batch that did not give a result: ``stage``, ``batch`` (its label, e.g. ``"batch 3 of 8
    (model 'babble', 16 conversations from p001-explicit)"``), ``attempts`` made (0: never run),
    ``cause`` (one line; for an out-of-memory kill with the memory Ray reported) and ``died``
    (True: its actor died on every attempt; False: the worker raised, or could not be built)."""

    stage: str
    batch: str
    attempts: int
    cause: str
    died: bool

    def detail(self) -> str:
        """The failure without the stage's name: ``"<batch> failed after N attempt(s): <cause>"``."""
        if not self.attempts:
            return f"{self.batch} was not run: {self.cause}"
        return f"{self.batch} failed after {self.attempts} attempt(s): {self.cause}"

    def __str__(self) -> str:
        return f"{self.stage} {self.detail()}"


class BatchesFailed(RuntimeError):
    """Batches of a stage failed (after the retries of a dead actor's batch, or because the worker
    raised); every other batch finished and its results were kept, so running the stage again
    does only what is missing (jobs exit with status 4, ``FAILED_SHARDS``; docs/cluster.md).

    ``stage``: its name; ``failures``: the :class:`BatchFailure` of each failed batch; ``total``:
    the stage's batches. The message names the stage, the failed batches and their causes."""

    SHOWN = 3  # failures spelled out in the message; the rest are counted

    def __init__(self, stage: str, failures: Sequence[BatchFailure], total: int):
        self.stage, self.failures, self.total = stage, list(failures), total
        shown = "; ".join(f.detail() for f in self.failures[:self.SHOWN])
        more = len(self.failures) - self.SHOWN
        super().__init__(f"{stage}: {len(self.failures)} of {total} batch(es) failed, the others' results are kept: "
                         f"{shown}" + (f"; and {more} more" if more > 0 else ""))


def scoring_resources(cfg: RunConfig) -> Resources:
    """The scoring pool of ``score`` and ``cue-score``: ``score.num_cpus`` / ``score.num_gpus`` per
    actor, ``score.actors`` of them (None: as many as the cluster holds; 0: in this process)."""
    return Resources.of(cfg.score, "the scoring actor (score.num_cpus / score.num_gpus)")


Batch = tuple[str, list[tuple[str, Any]]]  # (model, [(item id, what the worker needs of it), ...])


def heaviest_first(todo: Mapping[str, Sequence[tuple[str, Any]]], weight: Mapping[tuple[str, str], float],
                   size: int) -> list[Batch]:
    """``todo`` (per model, ``(item id, payload)`` pairs) cut into batches of at most ``size``
    items: each model's items by ``weight[(model, id)]`` descending (then id), the batches by
    their total weight descending, so that the longest start first (a pool's tail stays short)."""
    out = []
    for name, items in todo.items():
        ordered = sorted(items, key=lambda item, m=name: (-weight[(m, item[0])], item[0]))
        out += [(name, ordered[i:i + size]) for i in range(0, len(ordered), size)]
    return sorted(out, key=lambda b: -sum(weight[(b[0], iid)] for iid, _ in b[1]))


def on_scoring_pool(cfg: RunConfig, stage: str, worker: type, work: Mapping[str, Sequence[tuple[str, Any]]],
                    weight: Mapping[tuple[str, str], float]) -> tuple[dict[str, list[Any]], list[BatchFailure], int]:
    """``worker(cfg).score(model, items)`` over ``work`` (per model, ``(item id, payload)`` pairs) cut
    into batches of ``score.batch`` items, heaviest first (:func:`heaviest_first`), on the scoring
    pool (:func:`scoring_resources`). Returns per model its batches' results (a model with a failed
    batch is left out: its results would be partial), the failures in batch order, and the number
    of batches."""
    batches = heaviest_first(work, weight, cfg.score.batch)
    results: dict[str, list[Any]] = {m: [] for m in work}
    failed: dict[int, BatchFailure] = {}
    for i, part in map_batches(cfg, stage, worker, "score", batches, scoring_resources(cfg), args=(cfg,),
                               describe=lambda i: f"model {batches[i][0]!r}, {len(batches[i][1])} item(s) from "
                                                  f"{batches[i][1][0][0]}"):
        if isinstance(part, BatchFailure):
            failed[i] = part
        else:
            results[batches[i][0]].append(part)
    for i in failed:
        results.pop(batches[i][0], None)
    return results, [failed[i] for i in sorted(failed)], len(batches)


def map_batches(cfg: RunConfig, stage: str, worker: type, method: str, batches: Sequence[tuple],
                resources: Resources, *, args: tuple = (), describe: Callable[[int], str] | None = None,
                progress: bool = True) -> Iterator[tuple[int, Any]]:
    """``worker(*args).<method>(*batches[i])`` for every ``i``, yielded as ``(i, result)`` in
    completion order, or ``(i, BatchFailure)`` (module docstring: what is retried, what is not).

    Args:
        cfg: the run's settings: ``cluster`` starts or joins Ray (:func:`~harness.runtime.executor.ray_session`),
            ``cluster.batch_attempts`` bounds the attempts of a dead actor's batch and
            ``cluster.resource_wait_s`` how long to wait for a node that can hold an actor.
        stage: the stage's name, on the bar (``"<stage> batches"``) and in every failure.
        worker: a class, built once per actor with ``args`` (picklable for Ray, e.g. ``(cfg,)``:
            the worker opens its store itself).
        batches: each batch's positional arguments of ``method``.
        resources: per actor request and the number of actors (``actors=0``: in this process).
        describe: a few words on batch ``i`` for its label (``"batch i+1 of n (<describe(i)>)"``).
        progress: show the bar (False when the caller shows its own).

    Raises :class:`~harness.runtime.executor.UnmetResources` before any actor starts when no node
    of the cluster can hold ``resources``' request.
    """
    n = len(batches)

    def label(i: int) -> str:
        return f"batch {i + 1} of {n}" + (f" ({describe(i)})" if describe else "")

    if not n:
        return
    bar = tqdm(total=n, desc=f"{stage} batches", unit="batch", disable=not progress)
    try:
        run = _in_process if resources.actors == 0 else _on_ray
        for i, out in run(cfg, stage, worker, method, batches, resources, args, label, bar):
            bar.update(1)
            yield i, out
    finally:
        bar.close()


def _in_process(cfg: RunConfig, stage: str, worker: type, method: str, batches: Sequence[tuple],
                resources: Resources, args: tuple, label: Callable[[int], str],
                bar: tqdm) -> Iterator[tuple[int, Any]]:
    """``actors=0``: one worker in this process, the batches in order."""
    try:
        w = worker(*args)
    except Exception as e:
        cause = f"the worker could not be built: {_reason(e)}"
        yield from ((i, BatchFailure(stage, label(i), 0, cause, died=False)) for i in range(len(batches)))
        return
    failed = 0
    for i, batch in enumerate(batches):
        try:
            out = getattr(w, method)(*batch)
        except Exception as e:  # the worker's own failure: that batch's, never retried
            out = BatchFailure(stage, label(i), 1, _reason(e), died=False)
            failed += 1
            bar.set_postfix(failed=failed)
        yield i, out


def _actor_id(actor: Any) -> str | None:
    """The actor's id (hex), to find it among the workers an out-of-memory report lists."""
    aid = getattr(actor, "_actor_id", None)
    return aid.hex() if aid is not None else None


def _on_ray(cfg: RunConfig, stage: str, worker: type, method: str, batches: Sequence[tuple],
            resources: Resources, args: tuple, label: Callable[[int], str], bar: tqdm) -> Iterator[tuple[int, Any]]:
    """The pool on Ray actors (module docstring)."""
    import ray
    from ray.exceptions import NodeDiedError, ObjectLostError, OutOfMemoryError, RayActorError, WorkerCrashedError

    died_errors = (RayActorError, OutOfMemoryError, NodeDiedError, ObjectLostError, WorkerCrashedError)
    cpus, gpus, limit = resources.num_cpus, resources.num_gpus, cfg.cluster.batch_attempts
    with ray_session(cfg):
        require_resources({resources.who: (cpus, gpus)}, cfg.cluster.resource_wait_s)
        # Ray restarts nothing itself: a dead actor's batch is retried here, on a fresh actor
        cls = ray.remote(worker).options(num_cpus=cpus, num_gpus=gpus, max_restarts=0, max_task_retries=0)
        queue = deque(range(len(batches)))
        tries = [0] * len(batches)
        idle: list[Any] = []
        running: dict[Any, tuple[Any, int]] = {}  # object ref -> (actor, batch index)
        unbuildable = ""  # the last constructor error
        failed = retried = 0
        try:
            idle += [cls.remote(*args) for _ in range(actor_count(resources.actors, cpus, gpus, len(batches)))]
            while queue or running:
                while idle and queue:
                    actor, i = idle.pop(), queue.popleft()
                    tries[i] += 1
                    running[getattr(actor, method).remote(*batches[i])] = (actor, i)
                if not running:  # every actor's constructor raised: nothing can run the rest
                    while queue:
                        i = queue.popleft()
                        yield i, BatchFailure(stage, label(i), tries[i], f"the worker could not be built: "
                                              f"{unbuildable}", died=False)
                    return
                [ref], _ = ray.wait(list(running), num_returns=1)
                actor, i = running.pop(ref)
                try:
                    out = ray.get(ref)
                except died_errors as e:
                    ray.kill(actor, no_restart=True)
                    if isinstance(e, RayActorError) and e.actor_init_failed:  # the batch never ran on it
                        tries[i] -= 1
                        queue.appendleft(i)
                        unbuildable = _reason(e)
                        log.warning("%s: an actor could not be built (%s); %d left", stage, unbuildable,
                                    len(idle) + len(running))
                        continue
                    cause = _reason(e, _actor_id(actor))
                    if queue or tries[i] < limit:  # a fresh actor keeps the pool's size
                        idle.append(cls.remote(*args))
                    if tries[i] < limit:
                        log.warning("%s %s: its actor died on attempt %d of %d (%s); retrying on a fresh actor",
                                    stage, label(i), tries[i], limit, cause)
                        queue.appendleft(i)
                        retried += 1
                        bar.set_postfix(failed=failed, retried=retried)
                        continue
                    out = BatchFailure(stage, label(i), tries[i], cause, died=True)
                except Exception as e:  # the worker raised (or its result could not come back): not retried
                    idle.append(actor)
                    out = BatchFailure(stage, label(i), tries[i], _reason(e), died=False)
                else:
                    idle.append(actor)
                if isinstance(out, BatchFailure):
                    failed += 1
                    bar.set_postfix(failed=failed, retried=retried)
                yield i, out
        finally:  # no actor outlives the pool
            for actor in idle + [a for a, _ in running.values()]:
                ray.kill(actor, no_restart=True)
