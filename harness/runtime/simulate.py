"""A null workload for the executor: the worker of ``bench/cluster_sim.py`` and of the executor tests.

:class:`NullWorker` runs the real attempt/marker protocol of :class:`ShardWorker` but, instead
of streaming audio through a model, sleeps ``seconds_per_conversation`` (the null model's
``params``) per conversation and writes a small JSON record for each. It needs no synthesised
inputs, so a full-size run (4,000 conversations) can be simulated in seconds.
"""

from __future__ import annotations

import time

from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.shard import ShardAttempt, ShardWorker
from harness.store.base import ObjectStore, json_bytes


class NullWorker(ShardWorker):
    """Sleeps ``model.params["seconds_per_conversation"]`` (default 0) per conversation."""

    def __init__(self, cfg: RunConfig, model: ModelSettings, store: ObjectStore):
        super().__init__(cfg, model, store)
        self.seconds = float(model.params.get("seconds_per_conversation", 0.0))

    def process(self, scene_ids: list[str], attempt: ShardAttempt) -> tuple[dict[str, tuple[str, str]], float]:
        for sid in scene_ids:
            time.sleep(self.seconds)
            attempt.put(sid, "json", json_bytes({"scene_id": sid, "status": "ok"}))
        return {sid: ("ok", "") for sid in scene_ids}, 0.0
