"""What every hosted realtime speech model shares: one session per conversation on an asyncio event
loop in a thread of the actor, paced by the runner (docs/adding-a-model.md, "Remote services").

:class:`HostedRealtimeModel` owns the rows: ``open`` starts a session's coroutine on the loop
without waiting (audio handed over before its socket is up waits in order), ``step`` hands every
row's encoded frame to the loop and returns what each session has sent back so far
(:class:`~harness.models.base.OutputQueue`), ``close`` cancels the session's coroutine (which closes
its socket). A provider subclass implements :meth:`HostedRealtimeModel._session` (connect,
configure, send the queued input, handle the service's events) and :meth:`_encode`.

Failures are the conversation's error (:class:`~harness.models.base.RowError`), never silence:
whatever ends a session's coroutine early (a closed socket, a refused connection, an error the
provider's handler raises) and the **stall detector**: while the session owes an event
(:meth:`HostedSession.expect`) and none arrives for ``stall_timeout_s``. Admission
(:meth:`admit`) closes while :meth:`block_admission` says so: a provider's rate-limit signal, or
a handshake refused with HTTP 429 (for its ``Retry-After``, else :attr:`rate_limit_backoff_s`);
that conversation fails (its timeline has started: connecting seconds late would shift its
input against the service's clock), the ones after it wait.
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import json
import math
import os
import threading
import time
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.models.base import REALTIME, TEXT_PROMPT, DuplexModel, ModelInfo, OutputQueue, RowError, StreamContext

# disjoint token kinds of a usage record (harness/pricing): cached input is not counted as input too; the
# *unattributed kinds hold what a service's totals count beyond its modality breakdown (count_unattributed)
TOKEN_KINDS = ("input_text", "input_text_cached", "input_audio", "input_audio_cached", "output_text", "output_audio",
               "input_unattributed", "output_unattributed", "unattributed")


def count_unattributed(tokens: dict[str, int], input_total: int | None, input_known: int,
                       output_total: int | None, output_known: int, total: int | None) -> None:
    """Add to ``tokens`` what a service's usage totals count beyond its breakdown by modality, so a
    total without a breakdown is never counted as 0 (issue 19.6): ``input_total - input_known`` as
    ``input_unattributed``, ``output_total - output_known`` as ``output_unattributed``, and what
    ``total`` counts beyond both directions as ``unattributed``. A total the service left out
    (None) counts as its breakdown; a breakdown larger than its total adds nothing. The price
    table charges these kinds at the dearest rate of their direction, an upper bound
    (:data:`harness.pricing.UNATTRIBUTED`)."""
    inp = input_known if input_total is None else max(input_total, input_known)
    out = output_known if output_total is None else max(output_total, output_known)
    tokens["input_unattributed"] += inp - input_known
    tokens["output_unattributed"] += out - output_known
    tokens["unattributed"] += max(0, (total or 0) - inp - out)


def settings_mismatch(asked: Any, acknowledged: Any, key: str = "") -> list[str]:
    """Where the settings a service acknowledged differ from those asked: one ``"key: asked X,
    acknowledged Y"`` per difference. Only the asked keys of a mapping are compared (a service
    fills in defaults for the rest); numbers compare within a relative 1e-6."""
    if isinstance(asked, Mapping) and isinstance(acknowledged, Mapping):
        return [d for k, v in asked.items()
                for d in settings_mismatch(v, acknowledged.get(k), f"{key}.{k}" if key else str(k))]
    numbers = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (asked, acknowledged))
    if asked == acknowledged or (numbers and math.isclose(asked, acknowledged, rel_tol=1e-6)):
        return []
    return [f"{key or 'settings'}: asked {json.dumps(asked)}, acknowledged {json.dumps(acknowledged)}"]


@dataclass
class HostedSession:
    """One conversation's session; fields are written on the event loop and read by ``step``."""

    row: int
    conversation_id: str
    opened: float  # time.monotonic() at open
    awaiting: str | None  # the event the service owes, if any (the setup's acknowledgement at first)
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)  # encoded input to send (used on the loop only)
    inbox: collections.deque = field(default_factory=collections.deque)  # ("audio", item, pcm) | ("interrupt",)
    failure: str | None = None
    awaiting_since: float = 0.0
    last_event: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    responses: dict[str, int] = field(default_factory=dict)  # final status of each response -> count
    audio_in: int = 0  # samples sent, at the model's input rate
    audio_out: int = 0  # samples received, at its output rate
    acknowledged: dict[str, Any] | None = None  # the settings as the service acknowledged them (None: it did not)
    mismatch: list[str] = field(default_factory=list)  # where they differ from those asked (settings_mismatch)
    ignored_errors: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)  # provider counters for the usage record
    future: Any = None  # the session's coroutine on the loop (concurrent.futures.Future)
    closing: bool = False
    # playback (model thread only): the item being played and how many of its samples were queued
    item: str | None = None
    item_queued: int = 0

    def __post_init__(self) -> None:
        self.awaiting_since = self.last_event = self.opened

    def fail(self, why: str) -> None:
        """Fail the conversation (the first reason wins; nothing after close)."""
        if self.failure is None and not self.closing:
            self.failure = why

    def heard(self) -> None:
        """An event arrived from the service."""
        self.last_event = time.monotonic()

    def expect(self, event: str | None) -> None:
        """The service now owes ``event`` (None: nothing)."""
        self.awaiting, self.awaiting_since = event, time.monotonic()

    def at(self) -> str:
        return f"at {time.monotonic() - self.opened:.1f} s of the session"

    def stalled(self, now: float, timeout_s: float) -> str | None:
        """Why the session counts as stalled at ``now`` (``time.monotonic()``), or None."""
        if self.awaiting is None:
            return None
        quiet = now - max(self.awaiting_since, self.last_event)
        if quiet <= timeout_s:
            return None
        return (f"stalled: no event from the service for {quiet:.1f} s while awaiting {self.awaiting} "
                f"(stall_timeout_s {timeout_s:g}) at {now - self.opened:.1f} s of the session")


def _retry_after(value: str | None, default: float) -> float:
    """Seconds of an HTTP ``Retry-After`` header given in seconds (a date or nothing: ``default``)."""
    try:
        return max(0.0, float(value)) if value is not None else default
    except ValueError:
        return default


class HostedRealtimeModel(DuplexModel):
    """Base of the hosted realtime adapters (see the module docstring).

    Subclasses set :attr:`provider`, :attr:`credentials_env` (any one must be set; the SDK reads
    it), :attr:`sdk_module`, :attr:`sdk_package` and :attr:`first_event`, and implement
    :meth:`_make_client`, :meth:`_encode`, :meth:`_session` and :meth:`settings`.

    Args:
        info: the model's facts (``REALTIME`` and ``TEXT_PROMPT`` are added).
        model: the provider's model id (recorded in every usage record).
        stall_timeout_s: seconds without any event while one is owed before the conversation fails.
    """

    provider = ""
    sdk_module = ""  # for a job's preflight (as on the LLM judges)
    sdk_package = ""
    credentials_env: tuple[str, ...] = ()
    first_event = "setup"  # what a fresh session owes first (named in a stall's reason)
    turn_taking_params: tuple[str, ...] = ()  # constructor parameters that decide when the service speaks
    on_settings_mismatch = "error"  # acknowledged settings other than asked: "error" (fail) | "record" (run on)
    rate_limit_backoff_s = 10.0  # admission pause after a handshake refused with 429 and no Retry-After

    def __init__(self, info: ModelInfo, model: str, stall_timeout_s: float):
        if info.max_batch < 1:
            raise ValueError(f"max_sessions must be >= 1, got {info.max_batch}")
        if stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s must be > 0 seconds, got {stall_timeout_s}")
        self.info = ModelInfo(info.name, info.input_rate, info.output_rate, info.frame_in, info.frame_out,
                              info.max_batch, info.capabilities | {REALTIME, TEXT_PROMPT}, info.weights)
        self.model, self.stall_timeout_s = model, float(stall_timeout_s)
        self._rows: list[HostedSession | None] = [None] * info.max_batch
        self._fresh: set[int] = set()
        self._queue: OutputQueue | None = None
        self._queue_rows = 0
        self._blocked_until = 0.0  # time.monotonic() before which admit() says no
        self._loop: asyncio.AbstractEventLoop | None = None
        self._spent: list[dict] = []  # usage of the sessions closed since the last drain_usage()

    @classmethod
    def turn_taking(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        """The turn-taking settings a model config's ``params`` give (defaults filled in): part of
        the protocol (issue 14), recorded in the run manifest with the params and shown by the
        report, which never compares two models of one provider whose settings differ."""
        sig = inspect.signature(cls.__init__).parameters
        return {p: params[p] if p in params else sig[p].default for p in cls.turn_taking_params}

    # -- provider hooks --------------------------------------------------------------------------
    @abstractmethod
    def _make_client(self) -> Any:
        """The SDK client (imported here: only a selected model imports its SDK)."""

    @abstractmethod
    def _encode(self, frame: np.ndarray) -> Any:
        """One row's input frame ``float32[frame_in]`` -> what :meth:`_session` sends (model thread)."""

    @abstractmethod
    async def _session(self, s: HostedSession, stream: StreamContext) -> None:
        """Run session ``s`` until cancelled: connect, configure, send ``s.outbox``, handle events
        (``s.heard()`` on each, audio into ``s.inbox``). Raising ends it as the conversation's error."""

    @abstractmethod
    def settings(self, s: HostedSession) -> dict[str, Any]:
        """The session's settings as asked, for its usage record (:meth:`usage` adds what the
        service acknowledged and where that differs)."""

    def acknowledge(self, s: HostedSession, acknowledged: Mapping[str, Any]) -> None:
        """The service acknowledged ``acknowledged`` (setting name -> value, as :meth:`settings`
        names them) for session ``s`` (on the loop): recorded, and where it differs from what was
        asked (:func:`settings_mismatch`) the conversation fails unless :attr:`on_settings_mismatch`
        is ``"record"`` (issue 19.7: the report shows what ran)."""
        asked = self.settings(s)
        s.acknowledged = dict(acknowledged)
        s.mismatch = [d for k, v in acknowledged.items() for d in settings_mismatch(asked.get(k), v, k)]
        if s.mismatch and self.on_settings_mismatch == "error":
            s.fail(f"the service acknowledged other settings than asked {s.at()}: {'; '.join(s.mismatch)} "
                   "(on_settings_mismatch=record runs on and records them)")

    def _on_step(self, frames: np.ndarray, live: list[tuple[int, HostedSession]], fresh: set[int]) -> None:
        """Called by ``step`` with every row's frame (e.g. client-side endpointing); default: nothing."""

    def _truncate(self, s: HostedSession, item: str, played_ms: int) -> None:
        """Playback of ``item`` was cut after ``played_ms``: tell the service if it needs to know."""

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self, device: str) -> None:
        """Build the SDK client and start the sessions' event loop (``device`` is ignored: remote).

        Raises:
            RuntimeError: none of :attr:`credentials_env` is set, or the SDK is missing.
        """
        if self.credentials_env and not any(os.environ.get(n) for n in self.credentials_env):
            raise RuntimeError(f"{self.info.name}: {' or '.join(self.credentials_env)} is not set "
                               "(keys are read from the environment only)")
        try:
            self._client = self._make_client()
        except ImportError as e:
            raise RuntimeError(f"{self.info.name} needs the `{self.sdk_package}` package (requirements.txt): "
                               f"{e}") from e
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name=f"{self.info.name}-sessions", daemon=True).start()

    def open(self, row: int, stream: StreamContext) -> None:
        s = HostedSession(row, stream.conversation_id, time.monotonic(), self.first_event)
        self._rows[row] = s
        self._fresh.add(row)
        s.future = asyncio.run_coroutine_threadsafe(self._guarded(s, stream), self._loop)

    def close(self, row: int) -> None:
        s = self._rows[row]
        if s is not None:
            self._spent.append(self.usage(row))
        self._rows[row] = None
        if s is not None:
            s.closing = True
            s.future.cancel()  # cancels the session's task on the loop, which closes its socket

    def admit(self) -> bool:
        return time.monotonic() >= self._blocked_until

    def block_admission(self, seconds: float) -> None:
        """Admit no new conversation for ``seconds`` from now (a rate-limit signal; called on the loop)."""
        self._blocked_until = max(self._blocked_until, time.monotonic() + seconds)

    def usage(self, row: int) -> dict | None:
        s = self._rows[row]
        if s is None:
            return None
        return {"provider": self.provider, "model": self.model, "tokens": dict(s.tokens),
                "responses": dict(s.responses),
                "seconds": {"session": round(time.monotonic() - s.opened, 3),
                            "audio_in": round(s.audio_in / self.info.input_rate, 3),
                            "audio_out": round(s.audio_out / self.info.output_rate, 3)},
                # acknowledged None: the service did not acknowledge them (or not yet)
                "settings": {**self.settings(s), "acknowledged": s.acknowledged, "mismatch": list(s.mismatch)},
                "ignored_errors": list(s.ignored_errors),
                # the event the service still owed when the conversation ended (e.g. a reply's response.done):
                # its tokens may be billed but are not counted here (an unacknowledged setup bills nothing)
                "owed_at_close": None if s.awaiting == self.first_event else s.awaiting, **s.extra}

    def drain_usage(self) -> list[dict]:
        """The usage records of every session closed since the last call, and of those still open
        (only after a stall, when the actor is discarded), so an attempt that fails as a whole still
        books what its sessions were billed (:meth:`harness.runtime.shard.ShardWorker.usage_so_far`)."""
        spent, self._spent = self._spent, []
        return spent + [self.usage(b) for b, s in enumerate(self._rows) if s is not None]

    # -- streaming -------------------------------------------------------------------------------
    def step(self, frames: np.ndarray) -> np.ndarray:
        rows = frames.shape[0]
        if self._queue is None or self._queue_rows != rows:
            self._queue, self._queue_rows = OutputQueue(rows, self.info.frame_out), rows
        for b in self._fresh:
            self._queue.clear(b)
        fresh, self._fresh = self._fresh, set()
        live = [(b, s) for b, s in enumerate(self._rows[:rows]) if s is not None]
        sends = [(s, self._encode(frames[b])) for b, s in live]
        for s, _ in sends:
            s.audio_in += self.info.frame_in
        self._loop.call_soon_threadsafe(self._enqueue, sends)
        self._on_step(frames, live, fresh)
        now, bad = time.monotonic(), {}
        for b, s in live:
            self._play(b, s)
            why = s.failure or s.stalled(now, self.stall_timeout_s)
            if why:
                bad[b] = why
        out = self._queue.take()
        if bad:
            raise RowError(bad, out)
        return out

    def _play(self, b: int, s: HostedSession) -> None:
        """Move what session ``s`` received into row ``b``'s output queue (model thread)."""
        while s.inbox:
            msg = s.inbox.popleft()
            if msg[0] == "audio":
                if msg[1] != s.item:
                    s.item, s.item_queued = msg[1], 0
                self._queue.put(b, msg[2])
                s.item_queued += len(msg[2])
            elif s.item is not None and self._queue.pending(b):  # "interrupt": stop playback
                played = max(0, s.item_queued - self._queue.pending(b))
                self._queue.clear(b)
                self._truncate(s, s.item, round(1000 * played / self.info.output_rate))
                s.item = None

    def call_on_loop(self, fn: Any, *args: Any) -> None:
        """Run ``fn(*args)`` on the sessions' event loop (from the model thread)."""
        self._loop.call_soon_threadsafe(fn, *args)

    # -- on the event loop -----------------------------------------------------------------------
    @staticmethod
    def spawn(s: HostedSession, coro: Any) -> asyncio.Task:
        """Run ``coro`` beside session ``s``'s receiving (e.g. its sender); if it raises, the
        conversation fails with that error."""

        def done(task: asyncio.Task) -> None:
            if not task.cancelled() and task.exception() is not None:
                e = task.exception()
                s.fail(f"sending failed {s.at()}: {type(e).__name__}: {e}")

        task = asyncio.ensure_future(coro)
        task.add_done_callback(done)
        return task

    def _enqueue(self, sends: list[tuple[HostedSession, Any]]) -> None:
        for s, data in sends:
            if not s.closing:
                s.outbox.put_nowait(data)

    async def _guarded(self, s: HostedSession, stream: StreamContext) -> None:
        from websockets.exceptions import ConnectionClosed, InvalidStatus

        try:
            await self._session(s, stream)
            s.fail(f"the service ended the session {s.at()}")  # before the conversation did
        except asyncio.CancelledError:
            pass
        except InvalidStatus as e:  # the handshake was refused
            status = e.response.status_code
            if status == 429:  # rate limited: no new conversation until the service says it may retry
                wait = _retry_after(e.response.headers.get("Retry-After"), self.rate_limit_backoff_s)
                self.block_admission(wait)
                s.fail(f"the service refused the session: HTTP 429 (rate limited) {s.at()}; "
                       f"admission paused {wait:g} s")
            else:
                s.fail(f"the service refused the session: HTTP {status} {s.at()}")
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else None
            reason = e.rcvd.reason if e.rcvd is not None else ""
            s.fail(f"the service closed the session (code {code}{': ' + reason if reason else ''}) {s.at()}")
        except Exception as e:  # whatever broke this session is its conversation's error
            s.fail(f"session failed {s.at()}: {type(e).__name__}: {e}")
