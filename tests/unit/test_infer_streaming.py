"""Infer memory bounded by the rows, not the shard (issue 24, items 6 and 7): the runner reads each
input only when a row frees up and hands each result over as it ends; a shard's conversations are
written under the attempt's prefix as they end (a failure later commits nothing), longest script
first; the runner counts idle row-steps; the clip cache is bounded by bytes. And the model's context
sized per shard (item 2, ``fit_streams``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from harness.audio.io import encode
from harness.models.base import DuplexModel, ModelInfo, RowPreempted, StreamContext
from harness.products.infer import InferIncomplete, read_entries, read_ledger
from harness.products.scenes import SceneSet
from harness.products.timeline import ClipReader, Timeline
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.infer_worker import InferWorker, longest_first, script_samples
from harness.runtime.projection import DECISION_LAG_S, longest_stream_seconds
from harness.runtime.runner import ConversationInput, InputUnavailable, ModelFailure, stream_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.store.base import LocalStore, get_json
from harness.vad.settings import VadSettings
from tests.fixtures.runs import planned, tiny_config

SR, FRAME = 24_000, 1_920


class Counting(DuplexModel):
    """Silent; counts the row-steps each step spends on open rows; ``fail_after``: raises (not a
    RowError: the attempt fails) at the first step after that many streams closed; ``give_up_at``:
    gives up the stream of its lowest open row at that step of the run (:class:`RowPreempted`), once."""

    def __init__(self, rows: int = 2, fail_after: int | None = None, give_up_at: int | None = None):
        self.info = ModelInfo("counting", SR, SR, FRAME, FRAME, rows, frozenset())
        self.fail_after, self.open_rows, self.closed, self.busy_row_steps = fail_after, set(), 0, 0
        self.give_up_at, self.steps = give_up_at, 0
        self.opened: list[str] = []

    def load(self, device: str) -> None:
        pass

    def open(self, row: int, stream: StreamContext) -> None:
        self.open_rows.add(row)
        self.opened.append(stream.conversation_id)

    def close(self, row: int) -> None:
        self.open_rows.discard(row)
        self.closed += 1

    def step(self, frames: np.ndarray) -> np.ndarray:
        if self.fail_after is not None and self.closed >= self.fail_after:
            raise RuntimeError("CUDA error: an illegal memory access was encountered")
        self.busy_row_steps += len(self.open_rows)
        out = np.zeros((frames.shape[0], FRAME), np.float32)
        k, self.steps = self.steps, self.steps + 1
        if k == self.give_up_at:
            raise RowPreempted({min(self.open_rows): "K/V pool exhausted"}, out)
        return out


def _scene(i: int) -> Scene:
    turns = (Turn("A", "x", Label.N1, Target.HUMAN), Turn("B", "x", Label.N2, Target.HUMAN))
    return Scene(f"p{i}-explicit", f"p{i}", "explicit", ("A", "B"), turns, "yes")


class LoggedQueue:
    """A lazy queue of ``n`` conversations of different lengths; ``reads`` logs each ``[i]``, and
    ``missing`` ones raise :class:`InputUnavailable`."""

    def __init__(self, n: int, missing: tuple[int, ...] = ()):
        self.n, self.missing, self.reads = n, missing, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> ConversationInput:
        self.reads.append(i)
        if i in self.missing:
            raise InputUnavailable(f"p{i}-explicit", "cannot load input: FileNotFoundError: gone")
        clips = [np.full(round((0.3 + 0.2 * i) * SR), 0.01, np.float32) for _ in range(2)]
        return ConversationInput(_scene(i), clips, np.zeros(0, np.float32), i)


PROTOCOL = ProtocolSettings(tail_s=0.5)


def test_inputs_are_read_as_rows_free_up_and_results_handed_over_as_each_ends():
    queue, model = LoggedQueue(7, missing=(3,)), Counting(rows=2)
    handed: list[tuple[int, str, int]] = []  # (index, status, inputs read by then)
    stats = stream_conversations(model, queue, PROTOCOL, VadSettings(), 60.0,
                                 lambda i, r: handed.append((i, r.status, len(queue.reads))), rows=2)
    assert sorted(i for i, _, _ in handed) == list(range(7))
    assert [s for i, s, _ in sorted(handed)] == ["ok"] * 3 + ["error"] + ["ok"] * 3
    assert queue.reads == list(range(7))  # each input read once, in queue order
    for k, (_, _, reads) in enumerate(handed):  # at the k-th result: k + 1 handed over, the other row in flight
        assert reads <= k + 2
    # the idle row-steps are the steps' rows without a stream: what the model counts as open, from the other side
    assert stats.rows == 2 and stats.row_steps == 2 * stats.steps
    assert stats.idle_row_steps == stats.row_steps - model.busy_row_steps > 0
    assert 0 < stats.model_s < stats.wall_s


def test_an_unavailable_input_is_that_conversations_error_with_its_reason():
    results = {}
    stream_conversations(Counting(rows=1), LoggedQueue(2, missing=(0,)), PROTOCOL, VadSettings(), 60.0,
                         results.__setitem__, rows=1)
    assert results[0].scene_id == "p0-explicit" and results[0].status == "error"
    assert results[0].reason == "cannot load input: FileNotFoundError: gone" and results[0].output is None
    assert results[1].status == "ok"


class StepRecorder(Counting):
    """:class:`Counting` that also records, at each open, how many conversations the worker has
    written, waiting (up to 20 s) for every stream closed so far to be written (the writers run on
    their own threads): a worker that wrote only at the shard's end would never get there."""

    worker: InferWorker | None = None

    def __init__(self, **kw):
        super().__init__(**kw)
        self.progress_at_open: list[int] = []

    def open(self, row: int, stream: StreamContext) -> None:
        super().open(row, stream)
        deadline = time.monotonic() + 20.0
        while self.worker.progress < self.closed and time.monotonic() < deadline:
            time.sleep(0.01)
        self.progress_at_open.append(self.worker.progress)


def _worker(tmp_path, rows: int = 1, fail_after: int | None = None, n_pairs: int = 2):
    cfg = tiny_config(tmp_path, "stream", {"rec": {"target": "tests.unit.test_infer_streaming:StepRecorder",
                                                   "batch_size": rows,
                                                   "params": {"rows": rows, "fail_after": fail_after}}},
                      n_pairs=n_pairs)
    store, plan, ids = planned(cfg)
    worker = InferWorker(cfg, cfg.models[0], store)
    worker.model.worker = worker
    return worker, store, plan, ids


def test_a_shard_runs_longest_script_first_and_writes_each_conversation_as_it_ends(tmp_path):
    worker, store, plan, ids = _worker(tmp_path, rows=1)
    timeline = Timeline.read(store, plan.layout, plan.synth)
    lengths = {sid: script_samples(sid, timeline) for sid in ids}
    assert len(set(lengths.values())) > 1  # the order means something
    summary = worker.run("shard-00000", ids)
    assert worker.model.opened == longest_first(ids, timeline) == sorted(ids, key=lambda s: -lengths[s])
    # one row: by the k-th open the k conversations before it are written (the marker comes only at the end)
    assert worker.model.progress_at_open == list(range(len(ids)))
    assert worker.progress == 0  # between attempts
    marker = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer["rec"], "shard-00000")))
    assert (summary.ok, marker["ok"]) == (len(ids), len(ids))
    assert list(marker["conversations"]) == ids  # the shard's order, whatever order they ran and ended in
    assert marker["runner"]["rows"] == 1 and marker["runner"]["idle_row_steps"] >= 0
    assert marker["runner"]["row_steps"] == marker["runner"]["steps"] and marker["peak_rss_mib"] > 0
    assert set(read_entries(store, plan.layout, plan.infer["rec"], "rec")) == set(ids)


def test_a_stream_the_model_gives_up_is_loaded_again_rerun_and_written_once_as_if_never_given_up(tmp_path):
    """The infer path of a RowPreempted: the conversation's input is loaded again (ShardInputs), its rerun
    alone written (the same audio as a model that never gives up), and the marker counts it (``runner``)."""
    models = {name: {"target": "tests.unit.test_infer_streaming:Counting", "batch_size": 2,
                     "params": {"rows": 2, "give_up_at": at}} for name, at in (("clean", None), ("giving", 5))}
    cfg = tiny_config(tmp_path, "requeue", models, n_pairs=2)
    store, plan, ids = planned(cfg)
    workers = {m.name: InferWorker(cfg, m, store) for m in cfg.models}
    entries, markers = {}, {}
    for name, worker in workers.items():
        worker.run("shard-00000", ids)
        markers[name] = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer[name], "shard-00000")))
        entries[name] = read_entries(store, plan.layout, plan.infer[name], name)
    opened = workers["giving"].model.opened
    assert sorted(opened) == sorted([*ids, opened[0]])  # the first stream, given up at step 5, opened again
    assert (markers["clean"]["runner"]["requeued"], markers["giving"]["runner"]["requeued"]) == (0, 1)
    assert markers["giving"]["ok"] == len(ids) and list(markers["giving"]["conversations"]) == ids
    assert markers["giving"]["audio_s"] == markers["clean"]["audio_s"]  # each conversation's audio once, complete
    for sid in ids:
        clean, given = (entries[name][sid] for name in ("clean", "giving"))
        assert clean.objects["flac"]["sha256"] == given.objects["flac"]["sha256"]
        assert clean.json(store)["placements"] == given.json(store)["placements"]


def test_a_failure_after_some_conversations_ended_keeps_them_only_under_its_attempt_and_commits_nothing(tmp_path):
    worker, store, plan, ids = _worker(tmp_path, rows=1, fail_after=2)
    with pytest.raises(ModelFailure, match="illegal memory access"):
        worker.run("shard-00000", ids)
    shard = plan.layout.shard(plan.infer["rec"], "shard-00000")
    written = [k for k in store.list(shard) if k.endswith(".json")]
    assert len(written) == 2 and all("/attempts/" in k for k in written)  # the two that ended, as they ended
    assert not store.exists(plan.layout.marker(shard))
    assert read_ledger(store, plan.layout, plan.infer["rec"], "rec").missing == ["shard-00000"]
    with pytest.raises(InferIncomplete):  # a partial attempt is never read as outputs
        read_entries(store, plan.layout, plan.infer["rec"], "rec")


def test_the_clip_cache_keeps_the_most_recently_used_clips_within_its_bytes(tmp_path):
    cfg = tiny_config(tmp_path, "clips")
    store = LocalStore(tmp_path)
    lay, prefix = cfg_layout(cfg)
    clips = {f"c{i}": np.full(1000 * (i + 1), 0.1, np.float32) for i in range(4)}  # 4, 8, 12, 16 kB decoded
    for cid, x in clips.items():
        store.put(lay.clip(prefix, cid), encode(x, SR))
    reader = ClipReader(store, lay, prefix, SR, max_bytes=24_000)
    for cid in ("c0", "c1", "c2"):  # 24 kB: all kept
        reader(cid)
    assert list(reader._cache) == ["c0", "c1", "c2"] and reader.nbytes == 24_000
    reader("c0")  # used again: now the most recent
    reader("c3")  # 16 kB more: the least recently used go until it fits
    assert list(reader._cache) == ["c0", "c3"] and reader.nbytes == 20_000
    store.put(lay.clip(prefix, "c0"), encode(np.zeros(10, np.float32), SR))
    assert len(reader("c0")) == 1000  # served from the cache, not read again
    big = ClipReader(store, lay, prefix, SR, max_bytes=10_000)
    assert len(big("c3")) == 4000 and reader.nbytes and not big._cache  # larger than the bound: not cached
    with pytest.raises(ValueError, match="clip_cache_mib"):
        tiny_config(tmp_path, "bad", infer={"clip_cache_mib": -1})


def cfg_layout(cfg):
    from harness.runtime.plan import RunPlan

    plan = RunPlan.from_config(cfg)
    return plan.layout, plan.synth


class Fitted(Counting):
    """:class:`Counting` whose context is sized per shard: :meth:`fit_streams` logs the longest stream
    it is told of (``asked``) and returns ``held`` (None: its full context)."""

    def __init__(self, held: float | None = None, **kw):
        super().__init__(**kw)
        self.held, self.asked = held, []

    def fit_streams(self, longest_s: float) -> float | None:
        self.asked.append(longest_s)
        return self.held


def _fitted(tmp_path, held: float | None):
    cfg = tiny_config(tmp_path, "fit", {"fit": {"target": "tests.unit.test_infer_streaming:Fitted", "batch_size": 2,
                                                "params": {"rows": 2, "held": held}}}, n_pairs=2)
    store, plan, ids = planned(cfg)
    worker = InferWorker(cfg, cfg.models[0], store)
    worker.run("shard-00000", ids)
    marker = get_json(store, plan.layout.marker(plan.layout.shard(plan.infer["fit"], "shard-00000")))
    return cfg, store, plan, ids, worker.model, marker


def test_the_model_is_fitted_to_the_shards_longest_possible_stream_before_it_streams(tmp_path):
    cfg, store, plan, ids, model, marker = _fitted(tmp_path, None)
    scenes = SceneSet.read(store, plan.layout, plan.scenes).by_id
    timeline = Timeline.read(store, plan.layout, plan.synth)
    longest = max(longest_stream_seconds([t.n for t in timeline.conversations[sid]],
                                         [t.label for t in scenes[sid].turns], timeline.preamble.n, cfg.protocol,
                                         cfg.detector.rules) for sid in ids)
    assert model.asked == [pytest.approx(longest + 2 * FRAME / SR + DECISION_LAG_S)]  # two 80 ms steps of lag
    assert marker["ok"] == len(ids) and "context_s" not in marker  # its full context: nothing held short


def test_a_stream_outlasting_the_context_it_was_fitted_to_is_an_error_never_scored(tmp_path):
    _, _, _, ids, _, marker = _fitted(tmp_path, 1.0)  # a wrong bound: every stream is longer than 1 s
    assert marker["ok"] == 0 and marker["error"] == len(ids) and marker["context_s"] == 1.0
    for entry in marker["conversations"].values():
        assert entry["status"] == "error"
        assert "past the 1.00 s the model's context was sized to for this shard" in entry["reason"]
        assert set(entry["objects"]) == {"json"}  # no audio, no probabilities: nothing to score
