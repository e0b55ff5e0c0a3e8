"""How small Moshi's K/V pool can be on the paper corpus (issue 24, item 3): the real streaming runner
(:func:`harness.runtime.runner.stream_conversations`, Silero and all) over a model that keeps a real
:class:`harness.models.moshi_attention.KVPages` exactly as the adapter does (``attention="paged"``,
``kv_pool``: :meth:`harness.models.moshi.MoshiModel.open` / ``close`` / ``admit`` / ``_step_rows``), but
computes nothing, at each ``--rows`` x ``--kv-pool``.

Each row holds a page (128 steps of 80 ms) for each block of the ring (3,000 steps, 24 pages) its stream has
written into, and gives them back when its stream ends; the pool holds ``kv_pool`` full rings a row. Below 1
admission waits while less than a ring is free beside what the streams just opened take, and when the pool runs
out the youngest streams give their pages back and are run again from their start (``RowPreempted``), a rerun
taking its whole ring at its first step and giving way last (at most ``RowBatch.MAX_REQUEUES`` reruns, then
that conversation's error).

Conversations: a seeded sample of ``--conversations`` scenes of the paper corpus (``conf/scenes/paper.yaml``,
made in-process by :func:`harness.scenes.settings.make_scenes`), no speech synthesised: every turn and the
duty preamble is silence (the runner's room tone under it) as long as its text takes at
:data:`harness.scenes.stats.CHARS_PER_S`, as the cost projection counts them. What the model says
(``--speech``): ``silent`` says nothing (every T times out after the fresh-onset window); ``answers`` reads
the schedule (``reads_schedule``, as the oracle baseline does) and says espeak-ng speech (the babble
baseline's text in the oracle's voice, synthesised once and looped; noise is not speech to Silero) for
``--answer-s`` seconds from ``--answer-delay-s`` after each T turn ends, so its streams last as long as a
model's that answers (the online detector hears it: the T turns with an ``onset`` event are counted).

Per combination: conversations ok / error, streams requeued, row-steps thrown away (the steps the given-back
streams had run), idle row-steps (all, and those while conversations were waiting in the queue), steps (the
run's length; against kv_pool 1.0 at the same rows: the throughput cost), peak and mean pages held (of the
full-ring pool, rows x 24 pages), and what a row of full-size Moshi takes at that pool in bfloat16: the pool's
pages over the rows at 0.5 MiB a slot (32 layers x K and V x 4,096 x 2 bytes; 1.4648 GiB for a ring of 3,000
steps, docs/models.md "Memory accounting on the meta device") plus 0.031 GiB of its other streaming state. A
table per row count; the last line is one JSON object.

    .venv/bin/python bench/kv_pool.py                      # 64,128,256 rows x kv_pool 1.0,0.5,0.47,0.45,0.4
    .venv/bin/python bench/kv_pool.py --rows 128 --kv-pool 1.0,0.45 --conversations 1024 --speech silent
    .venv/bin/python bench/kv_pool.py --smoke              # about 20 s: the test's run
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runner_cpu import warm
from harness.audio.tts.espeak import EspeakTTS
from harness.models.base import READS_SCHEDULE, DuplexModel, ModelInfo, RowPreempted, StreamContext
from harness.models.baselines import BABBLE_TEXT
from harness.models.moshi import FRAME, LM_CONTEXT_STEPS, RATE
from harness.models.moshi_attention import BLOCK as PAGE  # the adapter's page: 128 slots
from harness.models.moshi_attention import KVPages
from harness.protocol.scheduler import Placement, ProtocolSettings
from harness.runtime.config import RunConfig
from harness.runtime.runner import ConversationInput, RowBatch, stream_conversations
from harness.scenes.schema import Label, Scene
from harness.scenes.settings import ScenesSettings, make_scenes
from harness.scenes.stats import CHARS_PER_S
from harness.vad.settings import VadSettings

REPO = Path(__file__).resolve().parents[1]
SLOT_GIB = 32 * 2 * 4096 * 2 / 2**30  # full-size Moshi's K and V of one step in bfloat16 (32 layers, 4,096 wide)
OTHER_GIB = 0.031  # a row's other streaming state (Mimi, its twin, LMGen): docs/models.md, 1.4955 - 1.4648 GiB
MAX_DURATION_S = 3600.0
VOICE = "en-us+f3"  # the oracle baseline's (conf/model/oracle.yaml)


def paper_scenes(n: int, seed: int) -> list[Scene]:
    """A seeded sample of ``n`` scenes of the paper corpus (conf/scenes/paper.yaml), in random order."""
    settings = ScenesSettings(**yaml.safe_load((REPO / "conf/scenes/paper.yaml").read_text()))
    scenes = make_scenes(settings).scenes
    if n > len(scenes):
        raise SystemExit(f"--conversations {n}: the paper corpus has {len(scenes)} scenes")
    return [scenes[i] for i in np.random.default_rng(seed).choice(len(scenes), n, replace=False)]


def spoken(text: str, rate: int) -> int:
    """Samples ``text`` takes at :data:`CHARS_PER_S` (as the cost projection counts a clip without audio)."""
    return max(1, round(len(text) / CHARS_PER_S * rate))


class SilentInputs(Sequence):
    """The runner's queue: each conversation's clips silence of their texts' lengths (views of one buffer of
    zeros, so a conversation costs no memory), built when a row frees up for it."""

    def __init__(self, scenes: list[Scene], cfg: RunConfig, rate: int):
        self.scenes, self.cfg, self.rate = scenes, cfg, rate
        self.preamble_text = cfg.tts.preamble_text
        longest = max([spoken(self.preamble_text, rate)] + [spoken(t.text, rate) for s in scenes for t in s.turns])
        self.zeros = np.zeros(longest, np.float32)

    def __len__(self) -> int:
        return len(self.scenes)

    def __getitem__(self, i: int) -> ConversationInput:  # type: ignore[override]
        scene = self.scenes[i]
        clips = [self.zeros[:spoken(t.text, self.rate)] for t in scene.turns]
        preamble = self.zeros[:spoken(self.preamble_text, self.rate)] if self.preamble_text.strip() else self.zeros[:0]
        return ConversationInput(scene, clips, preamble, self.cfg.conversation_seed(scene.scene_id), self.preamble_text)


class PagedPool(DuplexModel):
    """A 24 kHz model of 80 ms frames (Moshi's) that computes nothing but keeps the LM's K/V pages in a real
    :class:`~harness.models.moshi_attention.KVPages` (``capacity`` 3,000 steps, pages of 128) exactly as
    :class:`~harness.models.moshi.MoshiModel` does with ``attention="paged"`` (``open``, ``close``,
    ``admit``, ``_step_rows``): ``open`` marks the row fresh and holding a stream, and a rerun
    (``StreamContext.given_back``) whole; ``close`` forgets it and gives its pages back; ``admit`` (below
    kv_pool 1) asks ``admits`` with what the fresh rows take at their first step (a page, a whole ring for a
    rerun), and before the pool exists admits one stream at a time; a step runs ``begin_step(fresh, open,
    whole)``, then ``after_step()`` (every row writes a step), and raises :class:`RowPreempted` with the
    step's output for the rows ``begin_step`` gave back. One pool a run (the adapter: one a streaming state),
    made at its first step.

    With ``answer_s`` it declares ``reads_schedule`` and says espeak-ng speech from ``delay_s`` after each T
    turn ends for ``answer_s`` seconds; else silence. ``waiting()``: conversations in the queue now
    (for the row-steps spent free while some wait)."""

    def __init__(self, rows: int, kv_pool: float, answer_s: float = 0.0, delay_s: float = 0.6,
                 waiting: Callable[[int], int] | None = None):
        caps = frozenset({READS_SCHEDULE}) if answer_s > 0 else frozenset()
        self.info = ModelInfo("kv-pool", RATE, RATE, FRAME, FRAME, rows, caps)
        self.kv_pool, self.answer, self.delay = kv_pool, round(answer_s * RATE), round(delay_s * RATE)
        self.waiting = waiting or (lambda open_rows: 0)
        self.voice = EspeakTTS(RATE).synthesize(BABBLE_TEXT, VOICE) if answer_s > 0 else None  # looped
        self.pages = None
        self._fresh: set[int] = set()
        self._open: set[int] = set()
        self._whole: set[int] = set()  # of the open rows, reruns (they take their whole ring at their first step)
        self._scenes: dict[int, Scene] = {}
        self._says: dict[int, list[tuple[int, int]]] = {}  # row -> [(start, end)) samples of its stream it speaks
        self._t = np.zeros(rows, np.int64)  # samples each row's stream has run
        self.thrown_row_steps = self.admit_refusals = self.waiting_row_steps = 0
        self.held_peak = self.held_sum = self.steps = 0
        self.given_at: list[int] = []  # steps the given-back streams had run, one entry per given-back stream
        self.given_whole = 0  # given-back streams that were reruns (whole rows)
        self.given_per_conversation: dict[str, int] = {}  # conversation -> times its stream was given back
        self._ids: dict[int, str] = {}  # row -> its conversation

    def load(self, device: str) -> None:
        pass

    def open(self, row: int, stream: StreamContext) -> None:
        self._fresh.add(row)
        self._open.add(row)
        if stream.given_back:
            self._whole.add(row)
        else:
            self._whole.discard(row)
        self._t[row] = 0
        self._ids[row] = stream.conversation_id
        self._says[row] = []
        if stream.scene is not None:
            self._scenes[row] = stream.scene

    def close(self, row: int) -> None:
        self._fresh.discard(row)
        self._open.discard(row)
        self._whole.discard(row)
        self._says.pop(row, None)
        self._scenes.pop(row, None)
        if self.pages is not None and row < self.pages.rows:
            self.pages.release(row)

    def admit(self) -> bool:
        if self.kv_pool >= 1.0:
            return True
        ok = not self._fresh if self.pages is None else self.pages.admits(self._fresh, self._whole)
        self.admit_refusals += not ok
        return ok

    def observe(self, row: int, placement: Placement) -> None:
        if placement.turn is not None and self._scenes[row].turns[placement.turn].label is Label.T:
            start = placement.end + self.delay
            self._says[row].append((start, start + self.answer))

    def step(self, frames: np.ndarray) -> np.ndarray:
        rows = frames.shape[0]
        fresh = set(self._fresh)
        if self.pages is None:  # the adapter's first step: a fresh streaming state, every row fresh
            self.pages = KVPages(rows, capacity=LM_CONTEXT_STEPS, pool=self.kv_pool, page=PAGE, device="cpu")
            fresh = set(range(rows))
        self._fresh.clear()
        given = self.pages.begin_step(fresh, self._open, self._whole)
        self.given_whole += len(self._whole & set(given))
        self._open -= set(given)
        self._whole -= set(given)
        self.waiting_row_steps += min(rows - len(self._open) - len(given), self.waiting(len(self._open)))
        out = np.zeros((rows, FRAME), np.float32)
        for b in self._open:
            t = int(self._t[b])
            for start, end in self._says.get(b, ()):
                lo, hi = max(start, t), min(end, t + FRAME)
                if lo < hi:
                    out[b, lo - t:hi - t] = self.voice[np.arange(lo - start, hi - start) % len(self.voice)]
        self.pages.after_step()
        self._t[:rows] += FRAME
        held = self.pages.pages - len(self.pages.free)
        self.held_peak, self.held_sum, self.steps = max(self.held_peak, held), self.held_sum + held, self.steps + 1
        if given:
            self.given_at += list(given.values())
            for b in given:
                self.given_per_conversation[self._ids[b]] = self.given_per_conversation.get(self._ids[b], 0) + 1
            self.thrown_row_steps += sum(given.values())
            raise RowPreempted({b: f"the K/V pool was full ({self.pages.pages} pages): this stream, among the "
                                   f"youngest ({n} steps in), gave its pages to older ones" for b, n in given.items()},
                               output=out)
        return out


def run(scenes: list[Scene], cfg: RunConfig, rows: int, kv_pool: float, speech: str, answer_s: float,
        delay_s: float, progress: bool) -> dict:
    """One run of ``scenes`` at ``rows`` x ``kv_pool``: its figures."""
    from tqdm import tqdm

    protocol = ProtocolSettings()
    convs = SilentInputs(scenes, cfg, protocol.sample_rate)
    status: dict[str, int] = {"ok": 0, "error": 0}
    reasons: list[str] = []
    onsets = [0]
    bar = tqdm(total=len(convs), desc=f"{rows} rows, kv_pool {kv_pool:g}", unit="conv", leave=False,
               disable=not progress, mininterval=5.0, file=sys.stderr)

    def done(i: int, r) -> None:
        status[r.status] += 1
        if r.status == "error":
            reasons.append(r.reason)
        onsets[0] += any(e.kind == "onset" for e in r.events)
        bar.update()

    model = PagedPool(rows, kv_pool, answer_s if speech == "answers" else 0.0, delay_s,
                      waiting=lambda open_rows: len(convs) - status["ok"] - status["error"] - open_rows)
    t0 = time.perf_counter()
    stats = stream_conversations(model, convs, protocol, VadSettings(), MAX_DURATION_S, done, rows=rows)
    bar.close()
    pages = model.pages
    full = stats.rows * pages.blocks  # the pool of a full ring a row
    given = np.asarray(model.given_at or [0])
    return {
        "rows": stats.rows, "kv_pool": kv_pool, "conversations": len(convs), "ok": status["ok"],
        "error": status["error"], "error_reasons": reasons[:3], "t_answered": onsets[0],
        "requeued": stats.requeued, "requeued_share": round(stats.requeued / len(convs), 4),
        "thrown_row_steps": model.thrown_row_steps,
        "thrown_share": round(model.thrown_row_steps / stats.row_steps, 4),
        "given_back_median_steps": int(np.median(given)), "given_back_max_steps": int(given.max()),
        "given_back_at_step_0": int((given == 0).sum()) if model.given_at else 0,
        "conversations_given_back": len(model.given_per_conversation), "reruns_given_back": model.given_whole,
        "most_given_back": max(model.given_per_conversation.values(), default=0),
        "steps": stats.steps, "row_steps": stats.row_steps,
        "idle_share": round(stats.idle_row_steps / stats.row_steps, 4),
        "waiting_share": round(model.waiting_row_steps / stats.row_steps, 4),
        "admit_refusals": model.admit_refusals, "pool_pages": pages.pages,
        "peak_held": round(model.held_peak / full, 4), "mean_held": round(model.held_sum / model.steps / full, 4),
        "gib_row_formula": round(kv_pool * LM_CONTEXT_STEPS * SLOT_GIB + OTHER_GIB, 4),
        "gib_row": round((pages.pages + 1) * PAGE * SLOT_GIB / stats.rows + OTHER_GIB, 4),
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def table(runs: list[dict]) -> str:
    head = (f"{'kv_pool':>7} {'GiB/row':>7} {'ok':>5} {'err':>4} {'requeued':>8} {'thrown':>7} {'idle':>6} "
            f"{'waiting':>7} {'steps':>6} {'x 1.0':>6} {'peak held':>9} {'mean held':>9} {'wall s':>6}")
    lines = [head]
    for r in runs:
        ratio = "" if r["steps_vs_full"] is None else f"{r['steps_vs_full']:.3f}"
        lines.append(f"{r['kv_pool']:7.2f} {r['gib_row']:7.3f} {r['ok']:5d} {r['error']:4d} {r['requeued']:8d} "
                     f"{100 * r['thrown_share']:6.2f}% {100 * r['idle_share']:5.1f}% {100 * r['waiting_share']:6.2f}% "
                     f"{r['steps']:6d} {ratio:>6} {100 * r['peak_held']:8.1f}% {100 * r['mean_held']:8.1f}% "
                     f"{r['wall_s']:6.0f}")
    return "\n".join(lines)


COLUMNS = """Columns:
  GiB/row    a row of full-size Moshi in bfloat16 at that pool: its pages over the rows, plus 0.031 GiB of other state
  requeued   streams given back (the pool ran out) and run again from their start
  thrown     row-steps those streams had run, of all row-steps
  idle       row-steps without a stream
  waiting    of them, those while conversations waited in the queue (admission, the refill grid); the rest: the drain
  x 1.0      steps against kv_pool 1.0 at the same rows (the throughput cost)
  held       pages held, of rows x 24 (a full ring a row): the peak, and the mean over the steps"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=COLUMNS)
    ap.add_argument("--rows", default="64,128,256", help="row counts, comma-separated (default 64,128,256)")
    ap.add_argument("--kv-pool", default="1.0,0.5,0.47,0.45,0.4",
                    help="pool sizes in full rings a row, comma-separated (default 1.0,0.5,0.47,0.45,0.4; a pool "
                         "above kv_pool 1.0's peak held runs as 1.0 does, below 0.4 the runs take twice as many steps)")
    ap.add_argument("--conversations", type=int, default=512,
                    help="paper-corpus scenes streamed in each run (default 512: two waves of 256 rows, eight of 64; "
                         "the default run takes about 20 minutes on 2 cores; an infer shard is 8 waves)")
    ap.add_argument("--seed", type=int, default=0, help="the scenes' sample and order, the run's seed (default 0)")
    ap.add_argument("--speech", choices=("silent", "answers"), default="answers",
                    help="silent: the model says nothing; answers (default): espeak-ng speech after each T")
    ap.add_argument("--answer-s", type=float, default=8.0, help="seconds of each answer (default 8)")
    ap.add_argument("--answer-delay-s", type=float, default=0.6, help="answer onset after T's end (default 0.6)")
    ap.add_argument("--smoke", action="store_true",
                    help="a tiny run (16 conversations, 8 rows, kv_pool 1.0 and 0.25) for the test")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    args = ap.parse_args(argv)
    if args.smoke:
        args.rows, args.kv_pool, args.conversations = "8", "1.0,0.25", 16
    sizes = [int(r) for r in args.rows.split(",")]
    pools = [float(p) for p in args.kv_pool.split(",")]
    import torch

    torch.set_num_threads(1)  # an infer actor's default (infer.torch_threads)
    t0 = time.perf_counter()
    cfg = RunConfig(seed=args.seed)
    scenes = paper_scenes(args.conversations, args.seed)
    warm()
    print(f"{len(scenes)} paper-corpus conversations (seed {args.seed}), model speech {args.speech}"
          + (f" ({args.answer_s:g} s from {args.answer_delay_s:g} s after each T)" if args.speech == "answers" else "")
          + f"; ring {LM_CONTEXT_STEPS} steps in pages of {PAGE}; requeued at most {RowBatch.MAX_REQUEUES} times",
          flush=True)
    runs = []
    for rows, kv_pool in itertools.product(sizes, pools):
        runs.append(run(scenes, cfg, rows, kv_pool, args.speech, args.answer_s, args.answer_delay_s,
                        not args.no_progress))
        r = runs[-1]
        print(f"  {r['rows']} rows, kv_pool {kv_pool:g}: {r['ok']} ok, {r['error']} errors, {r['requeued']} requeued, "
              f"{r['steps']} steps [{r['wall_s']:.0f} s]", flush=True)
    for r in runs:
        base = next((b for b in runs if b["rows"] == r["rows"] and b["kv_pool"] == 1.0), None)
        r["steps_vs_full"] = None if base is None else round(r["steps"] / base["steps"], 4)
    for rows in dict.fromkeys(r["rows"] for r in runs):
        print(f"\n{rows} rows ({len(scenes)} conversations):")
        print(table([r for r in runs if r["rows"] == rows]))
    wall = time.perf_counter() - t0
    print(f"\n{wall:.0f} s in all", flush=True)
    print(json.dumps({"conversations": len(scenes), "seed": args.seed, "speech": args.speech,
                      "answer_s": args.answer_s, "answer_delay_s": args.answer_delay_s, "smoke": args.smoke,
                      "capacity": LM_CONTEXT_STEPS, "page": PAGE, "max_requeues": RowBatch.MAX_REQUEUES,
                      "wall_s": round(wall, 1), "runs": runs}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
