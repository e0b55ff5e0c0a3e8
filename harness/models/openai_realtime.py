"""``openai_realtime``: a hosted speech-to-speech model behind the OpenAI Realtime API (GA event protocol).

Through the official SDK's websocket client (``AsyncOpenAI().realtime.connect``); nothing here
speaks the wire format itself. Each conversation is **one** Realtime session for its whole
length (a new session per turn would lose the context):

* **Audio**: pcm16 at 24 kHz in and out (the timeline rate, so no resampling), little-endian,
  base64 in ``input_audio_buffer.append`` (one event per 80 ms step) and
  ``response.output_audio.delta``. Replies arrive faster than real time and play out through
  :class:`~harness.models.base.OutputQueue`, one frame per step.
* **Prompt**: the duty instruction is the session's ``instructions`` (``session.update``); the
  spoken preamble reaches it as audio, as for every model.
* **Turn-taking** is part of the protocol and recorded with each conversation
  (``usage.settings``: what was asked and what the service acknowledged in
  ``session.updated``): ``turn_detection`` from config goes verbatim to
  ``audio.input.turn_detection`` (``server_vad`` with ``threshold``, ``prefix_padding_ms``,
  ``silence_duration_ms``, ``create_response``, ``interrupt_response``; or ``semantic_vad``).
  With ``server_vad`` + ``create_response`` the service answers every speaker's end of speech,
  so runs with different settings must never be compared as one model (docs/models.md). With
  ``interrupt_response`` the client stops playback when the service hears speech start and
  tells it what was heard (``conversation.item.truncate``), as the API's guide prescribes.
  ``turn_detection: null`` is manual turn-taking: the adapter commits the input and asks for a
  response (``input_audio_buffer.commit`` + ``response.create``) at each end of speech the
  harness's own causal Silero finds on its input (``manual_silence_s`` of silence closes a turn).
* **Execution** (docs/adding-a-model.md, "Remote services"): ``realtime`` capability, so the
  runner paces steps to the wall clock; rows are concurrent sessions, ``max_sessions`` (the
  per-provider concurrency cap) is ``max_batch``. The sessions run on one asyncio event loop
  in a thread of the actor: ``step`` hands every row's frame to the loop without waiting and
  returns what each session has sent back so far.
* **Admission**: a ``rate_limits.updated`` event whose ``remaining`` falls below
  ``admit_min_remaining`` (per limit name) stops admitting new conversations until that
  limit's ``reset_seconds`` have passed (:meth:`admit`); running sessions go on.
* **Failures** are the conversation's error (:class:`~harness.models.base.RowError`), never
  silence: the socket closed by the service, an ``error`` event (except the benign races in
  ``benign_error_codes``), a refused connection, and the **stall detector**: while the session
  owes an event (``session.updated`` after the configuration, ``response.created`` after an end
  of speech with ``create_response``, the rest of a response until ``response.done``) and
  none arrives for ``stall_timeout_s``. The SDK's reconnection stays off: a new socket would
  be a new session without the conversation so far.
* **Usage** (:meth:`usage`, stored in each conversation's record): the sum of every
  ``response.done`` usage, as disjoint token counts (``input_text``, ``input_text_cached``,
  ``input_audio``, ``input_audio_cached``, ``output_text``, ``output_audio``; cached tokens are
  a subset of the API's input counts and are split out here), seconds of session and of audio
  each way, responses by status, and the settings. Cost is computed later from the price
  table (:mod:`harness.pricing`), so an old run can be re-priced without rerunning it.
* **Key**: ``OPENAI_API_KEY`` from the environment only (read by the SDK), never from config.
  ``base_url`` (default: the SDK's) points the client elsewhere, e.g. at the tests' fake
  server (``tests/fixtures/fake_realtime.py``).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harness.models.base import REALTIME, TEXT_PROMPT, DuplexModel, ModelInfo, OutputQueue, RowError, StreamContext

RATE = 24_000  # Hz: the API's pcm16 rate, the timeline's too
FRAME = 1_920  # samples per step (80 ms)
TOKEN_KINDS = ("input_text", "input_text_cached", "input_audio", "input_audio_cached", "output_text", "output_audio")
DEFAULT_TURN_DETECTION = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                          "silence_duration_ms": 500, "create_response": True, "interrupt_response": True}


def pcm16_b64(x: np.ndarray) -> str:
    """float32[n] in [-1, 1] -> base64 of little-endian int16 (values beyond full scale are clipped)."""
    return base64.b64encode((np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()).decode()


def b64_pcm16(data: str) -> np.ndarray:
    """base64 of little-endian int16 -> float32[n] in [-1, 1)."""
    return np.frombuffer(base64.b64decode(data), "<i2").astype(np.float32) / 32768.0


@dataclass
class _Session:
    """One conversation's Realtime session; its fields are written on the event loop and read by ``step``."""

    row: int
    conversation_id: str
    opened: float  # time.monotonic() at open
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)  # JSON client events to send (used on the loop only)
    inbox: collections.deque = field(default_factory=collections.deque)  # ("audio", item, pcm) | ("interrupt",)
    failure: str | None = None
    awaiting: str | None = "session.updated"  # the event the service owes, if any
    awaiting_since: float = 0.0
    last_event: float = 0.0
    tokens: dict[str, int] = field(default_factory=lambda: dict.fromkeys(TOKEN_KINDS, 0))
    responses: dict[str, int] = field(default_factory=dict)  # response.done status -> count
    audio_in: int = 0  # samples sent
    audio_out: int = 0  # samples received
    acknowledged: dict | None = None  # turn_detection as session.updated reported it
    ignored_errors: list[str] = field(default_factory=list)
    future: Any = None  # the session's coroutine on the loop (concurrent.futures.Future)
    conn: Any = None
    closing: bool = False
    # playback state (model thread only): the item being played and how many of its samples were queued
    item: str | None = None
    item_queued: int = 0

    def __post_init__(self) -> None:
        self.awaiting_since = self.last_event = self.opened

    def fail(self, why: str) -> None:
        if self.failure is None and not self.closing:
            self.failure = why

    def expect(self, event: str | None) -> None:
        self.awaiting, self.awaiting_since = event, time.monotonic()

    def stalled(self, now: float, timeout_s: float) -> str | None:
        """Why the session counts as stalled at ``now``, or None."""
        if self.awaiting is None:
            return None
        quiet = now - max(self.awaiting_since, self.last_event)
        if quiet <= timeout_s:
            return None
        return (f"stalled: no event from the service for {quiet:.1f} s while awaiting {self.awaiting} "
                f"(stall_timeout_s {timeout_s:g}) at {now - self.opened:.1f} s of the session")


class OpenAIRealtimeModel(DuplexModel):
    """An OpenAI Realtime model, one session per conversation (see the module docstring).

    Args:
        model: the Realtime model id (``gpt-realtime``, ``gpt-realtime-mini``, ...).
        voice: the output voice.
        turn_detection: the session's ``audio.input.turn_detection`` (dict, sent verbatim), or
            None for manual turn-taking (the adapter commits at each end of speech it detects).
        max_sessions: concurrent sessions of one actor: the per-provider concurrency cap
            (``max_batch``).
        stall_timeout_s: seconds without any event while the service owes one before the
            conversation fails.
        admit_min_remaining: ``{limit name: n}``: admission stops while a ``rate_limits.updated``
            reports fewer than ``n`` remaining of that limit, until its ``reset_seconds`` pass.
        benign_error_codes: ``error`` event codes that are races, not faults (kept in the
            usage record, the conversation goes on); any other ``error`` fails it.
        manual_silence_s: manual turn-taking only: silence (seconds) that closes a turn.
        base_url: the API's base URL (``None``: the SDK's default, ``OPENAI_BASE_URL`` if set).
    """

    sdk_module = "openai"  # for a job's preflight (as on the LLM judges)
    sdk_package = "openai"
    credentials_env = ("OPENAI_API_KEY",)

    def __init__(self, model: str = "gpt-realtime", voice: str = "marin",
                 turn_detection: Mapping[str, Any] | None = DEFAULT_TURN_DETECTION, max_sessions: int = 16,
                 stall_timeout_s: float = 15.0, admit_min_remaining: Mapping[str, int] | None = None,
                 benign_error_codes: Sequence[str] = ("response_cancel_not_active",),
                 manual_silence_s: float = 0.5, base_url: str | None = None):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be >= 1, got {max_sessions}")
        if stall_timeout_s <= 0:
            raise ValueError(f"stall_timeout_s must be > 0 seconds, got {stall_timeout_s}")
        if turn_detection is not None and turn_detection.get("type") not in ("server_vad", "semantic_vad"):
            raise ValueError(f"turn_detection.type must be server_vad or semantic_vad (or turn_detection null for "
                             f"manual turn-taking), got {turn_detection.get('type')!r}")
        self.model, self.voice = model, voice
        self.turn_detection = None if turn_detection is None else dict(turn_detection)
        self.stall_timeout_s = float(stall_timeout_s)
        self.admit_min_remaining = dict(admit_min_remaining or {"requests": 1})
        self.benign_error_codes = frozenset(benign_error_codes)
        self.manual_silence_s = manual_silence_s
        self.base_url = base_url
        self.info = ModelInfo("openai_realtime", RATE, RATE, FRAME, FRAME, max_sessions,
                              frozenset({REALTIME, TEXT_PROMPT}), weights=f"openai:{model}")
        self._rows: list[_Session | None] = [None] * max_sessions
        self._fresh: set[int] = set()
        self._queue: OutputQueue | None = None
        self._queue_rows = 0
        self._blocked_until = 0.0  # time.monotonic() before which admit() says no
        self._loop: asyncio.AbstractEventLoop | None = None
        self._det = None  # manual turn-taking: the harness's causal Silero on every row's input
        self._segments: list[int] = [0] * max_sessions

    @property
    def interrupts(self) -> bool:
        """Does the service cancel its reply when it hears speech start (so playback stops too)?"""
        return self.turn_detection is not None and bool(self.turn_detection.get("interrupt_response", True))

    @property
    def creates_response(self) -> bool:
        return self.turn_detection is not None and bool(self.turn_detection.get("create_response", True))

    # -- lifecycle -------------------------------------------------------------------------------
    def load(self, device: str) -> None:
        """Build the SDK client and start the sessions' event loop (``device`` is ignored: remote).

        Raises:
            RuntimeError: ``OPENAI_API_KEY`` is not set, or the ``openai`` package is missing.
        """
        if not os.environ.get("OPENAI_API_KEY"):
            raise RuntimeError("openai_realtime: OPENAI_API_KEY is not set (keys are read from the environment only)")
        try:
            from openai import AsyncOpenAI
        except ImportError as e:
            raise RuntimeError(f"openai_realtime needs the `openai` package (requirements.txt): {e}") from e
        self._client = AsyncOpenAI(**({"base_url": self.base_url} if self.base_url else {}))
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._loop.run_forever, name="openai-realtime", daemon=True).start()
        if self.turn_detection is None:
            from harness.vad.segments import SegmentRules
            from harness.vad.silero import VadSettings

            self._vad = VadSettings(rules=SegmentRules(min_speech_s=0.2, min_silence_s=self.manual_silence_s))

    def session_config(self, instructions: str) -> dict[str, Any]:
        """The ``session.update`` payload for a conversation whose duty instruction is ``instructions``."""
        fmt = {"type": "audio/pcm", "rate": RATE}
        cfg: dict[str, Any] = {"type": "realtime", "output_modalities": ["audio"],
                               "audio": {"input": {"format": fmt, "turn_detection": self.turn_detection},
                                         "output": {"format": fmt, "voice": self.voice}}}
        if instructions:  # else the service's default instructions
            cfg["instructions"] = instructions
        return cfg

    def open(self, row: int, stream: StreamContext) -> None:
        s = _Session(row, stream.conversation_id, time.monotonic())
        self._rows[row] = s
        self._fresh.add(row)
        s.future = asyncio.run_coroutine_threadsafe(self._start(s, self.session_config(stream.duty_text)), self._loop)

    def close(self, row: int) -> None:
        s = self._rows[row]
        self._rows[row] = None
        if s is not None:
            s.closing = True
            s.future.cancel()  # cancels the session's task on the loop, which closes its socket

    def admit(self) -> bool:
        return time.monotonic() >= self._blocked_until

    def usage(self, row: int) -> dict | None:
        s = self._rows[row]
        if s is None:
            return None
        return {"provider": "openai", "model": self.model, "tokens": dict(s.tokens), "responses": dict(s.responses),
                "seconds": {"session": round(time.monotonic() - s.opened, 3), "audio_in": round(s.audio_in / RATE, 3),
                            "audio_out": round(s.audio_out / RATE, 3)},
                "settings": {"turn_detection": self.turn_detection, "acknowledged_turn_detection": s.acknowledged,
                             "voice": self.voice},
                "ignored_errors": list(s.ignored_errors)}

    # -- streaming -------------------------------------------------------------------------------
    def step(self, frames: np.ndarray) -> np.ndarray:
        rows = frames.shape[0]
        if self._queue is None or self._queue_rows != rows:
            self._queue, self._queue_rows = OutputQueue(rows, FRAME), rows
        for b in self._fresh:
            self._queue.clear(b)
        fresh, self._fresh = self._fresh, set()
        live = [(b, s) for b, s in enumerate(self._rows[:rows]) if s is not None]
        sends = [(s, pcm16_b64(frames[b])) for b, s in live]
        for s, _ in sends:
            s.audio_in += FRAME
        self._loop.call_soon_threadsafe(self._append, sends)
        if self.turn_detection is None:
            self._endpoint(frames, live, fresh)
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

    def _play(self, b: int, s: _Session) -> None:
        """Move what session ``s`` received into row ``b``'s output queue (model thread)."""
        while s.inbox:
            msg = s.inbox.popleft()
            if msg[0] == "audio":
                if msg[1] != s.item:
                    s.item, s.item_queued = msg[1], 0
                self._queue.put(b, msg[2])
                s.item_queued += len(msg[2])
            elif s.item is not None and self._queue.pending(b):  # "interrupt": stop playback, say what was heard
                played = max(0, s.item_queued - self._queue.pending(b))
                self._queue.clear(b)
                event = {"type": "conversation.item.truncate", "item_id": s.item, "content_index": 0,
                         "audio_end_ms": round(1000 * played / RATE)}
                self._loop.call_soon_threadsafe(self._send, s, event)
                s.item = None

    def _endpoint(self, frames: np.ndarray, live: list[tuple[int, _Session]], fresh: set[int]) -> None:
        """Manual turn-taking: commit and ask for a response at each end of speech on a row's input."""
        from harness.vad.silero import StreamingDetector

        rows = frames.shape[0]
        if self._det is None or self._det.probs.n_streams != rows or fresh >= {b for b, _ in live}:
            self._det, self._segments = StreamingDetector(rows, RATE, self._vad), [0] * rows
        elif fresh:
            self._det.reset(sorted(fresh))
            for b in fresh:
                self._segments[b] = 0
        self._det.push(frames)
        for b, s in live:
            n = len(self._det.segments(b))
            if n > self._segments[b]:
                self._segments[b] = n
                self._loop.call_soon_threadsafe(self._respond, s)

    # -- on the event loop -----------------------------------------------------------------------
    def _append(self, sends: list[tuple[_Session, str]]) -> None:
        for s, audio in sends:
            if not s.closing:
                s.outbox.put_nowait(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))

    def _send(self, s: _Session, event: dict) -> None:
        if not s.closing:
            s.outbox.put_nowait(json.dumps(event))

    def _respond(self, s: _Session) -> None:
        self._send(s, {"type": "input_audio_buffer.commit"})
        self._send(s, {"type": "response.create"})
        if s.awaiting is None:
            s.expect("response.created")

    async def _start(self, s: _Session, config: dict) -> None:
        from websockets.exceptions import ConnectionClosed

        sender = None
        try:
            s.conn = await self._client.realtime.connect(model=self.model).enter()
            await s.conn.session.update(session=config)
            sender = asyncio.create_task(self._sender(s))
            while True:
                self._handle(s, json.loads(await s.conn.recv_bytes()))
        except asyncio.CancelledError:
            pass
        except ConnectionClosed as e:
            code = e.rcvd.code if e.rcvd is not None else None
            reason = e.rcvd.reason if e.rcvd is not None else ""
            s.fail(f"the service closed the session (code {code}{': ' + reason if reason else ''}) "
                   f"at {time.monotonic() - s.opened:.1f} s")
        except Exception as e:  # whatever broke this session is its conversation's error
            s.fail(f"session failed at {time.monotonic() - s.opened:.1f} s: {type(e).__name__}: {e}")
        finally:
            if sender is not None:
                sender.cancel()
            if s.conn is not None:
                with contextlib.suppress(Exception):  # closing a socket that may have broken already
                    await s.conn.close()

    async def _sender(self, s: _Session) -> None:
        # raw JSON through the SDK's connection: the typed helpers validate every event, too slow for
        # 12.5 appends a second per session times dozens of sessions
        while True:
            await s.conn.send_raw(await s.outbox.get())

    def _handle(self, s: _Session, ev: dict) -> None:
        """One server event of session ``s`` (docs: the Realtime API's server events)."""
        now = time.monotonic()
        s.last_event = now
        kind = ev.get("type")
        if kind == "response.output_audio.delta":
            pcm = b64_pcm16(ev["delta"])
            s.audio_out += len(pcm)
            s.inbox.append(("audio", ev.get("item_id"), pcm))
        elif kind == "session.updated":
            s.acknowledged = ev.get("session", {}).get("audio", {}).get("input", {}).get("turn_detection")
            if s.awaiting == "session.updated":
                s.expect(None)
        elif kind == "input_audio_buffer.speech_started":
            if self.interrupts:
                s.inbox.append(("interrupt",))
        elif kind == "input_audio_buffer.speech_stopped":
            if self.creates_response and s.awaiting is None:
                s.expect("response.created")
        elif kind == "response.created":
            s.expect("response.done")
        elif kind == "response.done":
            resp = ev.get("response", {})
            status = resp.get("status", "unknown")
            s.responses[status] = s.responses.get(status, 0) + 1
            self._count(s, resp.get("usage") or {})
            if s.awaiting in ("response.done", "response.created"):
                s.expect(None)
        elif kind == "rate_limits.updated":
            for lim in ev.get("rate_limits", []):
                least = self.admit_min_remaining.get(lim.get("name"))
                if least is not None and lim.get("remaining") is not None and lim["remaining"] < least:
                    self._blocked_until = max(self._blocked_until, now + float(lim.get("reset_seconds") or 0.0))
        elif kind == "error":
            err = ev.get("error", {})
            what = f"{err.get('type')}/{err.get('code')}: {err.get('message')}"
            if err.get("code") in self.benign_error_codes:
                s.ignored_errors.append(what)
            else:
                s.fail(f"the service sent an error at {now - s.opened:.1f} s: {what}")

    @staticmethod
    def _count(s: _Session, usage: dict) -> None:
        """Add one ``response.done`` usage to the session's disjoint token counts."""
        inp, out = usage.get("input_token_details") or {}, usage.get("output_token_details") or {}
        cached = inp.get("cached_tokens_details") or {}
        c_text, c_audio = cached.get("text_tokens") or 0, cached.get("audio_tokens") or 0
        s.tokens["input_text"] += (inp.get("text_tokens") or 0) - c_text
        s.tokens["input_text_cached"] += c_text
        s.tokens["input_audio"] += (inp.get("audio_tokens") or 0) - c_audio
        s.tokens["input_audio_cached"] += c_audio
        s.tokens["output_text"] += out.get("text_tokens") or 0
        s.tokens["output_audio"] += out.get("audio_tokens") or 0
