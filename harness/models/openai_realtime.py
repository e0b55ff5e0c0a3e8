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
  (``usage.settings``: what was asked, what the service acknowledged in ``session.updated``
  and where they differ: :meth:`~harness.models.hosted.HostedRealtimeModel.acknowledge`):
  ``turn_detection`` from config goes verbatim to ``audio.input.turn_detection`` (``server_vad``
  with ``threshold``, ``prefix_padding_ms``, ``silence_duration_ms``, ``create_response``,
  ``interrupt_response``; or ``semantic_vad``).
  With ``server_vad`` + ``create_response`` the service answers every speaker's end of speech,
  so runs with different settings must never be compared as one model (docs/models.md). With
  ``interrupt_response`` the client stops playback when the service hears speech start and
  tells it what was heard (``conversation.item.truncate``), as the API's guide prescribes.
  ``turn_detection: null`` is manual turn-taking: the adapter commits the input and asks for a
  response (``input_audio_buffer.commit`` + ``response.create``) at each end of speech the
  harness's own causal Silero finds on its input (``manual_silence_s`` of silence closes a turn).
* **Execution** (docs/adding-a-model.md, "Remote services"; :mod:`harness.models.hosted`):
  ``realtime`` capability, so the runner paces steps to the wall clock; rows are concurrent
  sessions, ``max_sessions`` (the per-provider concurrency cap) is ``max_batch``. The sessions
  run on one asyncio event loop in a thread of the actor: ``step`` hands every row's frame to
  the loop without waiting and returns what each session has sent back so far.
* **Admission**: a ``rate_limits.updated`` event whose ``remaining`` falls below
  ``admit_min_remaining`` (per limit name) stops admitting new conversations until that
  limit's ``reset_seconds`` have passed (:meth:`admit`); running sessions go on.
* **Failures** are the conversation's error (:class:`~harness.models.base.RowError`), never
  silence: the socket closed by the service, an ``error`` event (except the benign races in
  ``benign_error_codes``), a ``response.done`` whose ``status`` is ``failed``, ``incomplete`` or
  ``cancelled`` (with its ``status_details`` reason and error; a reply cancelled because someone
  started speaking, reason ``turn_detected``, is the protocol's barge-in and is benign:
  ``benign_response_reasons``), turn-taking settings acknowledged other than asked (see
  ``on_settings_mismatch``), a refused connection, and the **stall detector**: while the session
  owes an event (``session.updated`` after the configuration, ``response.created`` after an end
  of speech with ``create_response``, the rest of a response until ``response.done``) and
  none arrives for ``stall_timeout_s``. The SDK's reconnection stays off: a new socket would
  be a new session without the conversation so far.
* **Usage** (:meth:`usage`, stored in each conversation's record): the sum of every
  ``response.done`` usage, as disjoint token counts (``input_text``, ``input_text_cached``,
  ``input_audio``, ``input_audio_cached``, ``output_text``, ``output_audio``; cached tokens are
  a subset of the API's input counts and are split out here; what ``input_tokens``,
  ``output_tokens`` or ``total_tokens`` count beyond the details is ``*unattributed``, priced as
  an upper bound: :func:`harness.models.hosted.count_unattributed`), seconds of session and of audio
  each way, responses by status, and the settings. Cost is computed later from the price
  table (:mod:`harness.pricing`), so an old run can be re-priced without rerunning it.
* **Key**: ``OPENAI_API_KEY`` from the environment only (read by the SDK), never from config.
  ``base_url`` (default: the SDK's) points the client elsewhere, e.g. at the tests' fake
  server (``tests/fixtures/fake_realtime.py``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.models.base import ModelInfo, StreamContext
from harness.models.hosted import HostedRealtimeModel, HostedSession, count_unattributed

RATE = 24_000  # Hz: the API's pcm16 rate, the timeline's too
FRAME = 1_920  # samples per step (80 ms)
DEFAULT_TURN_DETECTION = {"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                          "silence_duration_ms": 500, "create_response": True, "interrupt_response": True}


def pcm16_b64(x: np.ndarray) -> str:
    """float32[n] in [-1, 1] -> base64 of little-endian int16 (values beyond full scale are clipped)."""
    return base64.b64encode((np.clip(x, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()).decode()


def b64_pcm16(data: str) -> np.ndarray:
    """base64 of little-endian int16 -> float32[n] in [-1, 1)."""
    return np.frombuffer(base64.b64decode(data), "<i2").astype(np.float32) / 32768.0


class OpenAIRealtimeModel(HostedRealtimeModel):
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
        benign_response_reasons: ``status_details.reason`` values of a ``response.done`` that is
            not ``completed`` yet no fault (counted in the usage record's ``responses``); any
            other failed, incomplete or cancelled response fails the conversation.
        on_settings_mismatch: what a ``session.updated`` acknowledging another ``turn_detection``
            (any asked key; the service's defaults for the rest are not compared) or ``voice``
            than asked does: ``"error"`` fails the conversation naming both, ``"record"`` runs
            on and records the difference (``usage.settings.mismatch``; the report shows it).
        manual_silence_s: manual turn-taking only: silence (seconds) that closes a turn.
        base_url: the API's base URL (``None``: the SDK's default, ``OPENAI_BASE_URL`` if set).

    Raises:
        ValueError: an unknown ``turn_detection.type`` or ``on_settings_mismatch``, ``max_sessions < 1``
            or ``stall_timeout_s <= 0``.
    """

    provider = "openai"
    sdk_module = "openai"
    sdk_package = "openai"
    credentials_env = ("OPENAI_API_KEY",)
    first_event = "session.updated"
    turn_taking_params = ("turn_detection",)

    def __init__(self, model: str = "gpt-realtime", voice: str = "marin",
                 turn_detection: Mapping[str, Any] | None = DEFAULT_TURN_DETECTION, max_sessions: int = 16,
                 stall_timeout_s: float = 15.0, admit_min_remaining: Mapping[str, int] | None = None,
                 benign_error_codes: Sequence[str] = ("response_cancel_not_active",),
                 benign_response_reasons: Sequence[str] = ("turn_detected",), on_settings_mismatch: str = "error",
                 manual_silence_s: float = 0.5, base_url: str | None = None):
        if turn_detection is not None and turn_detection.get("type") not in ("server_vad", "semantic_vad"):
            raise ValueError(f"turn_detection.type must be server_vad or semantic_vad (or turn_detection null for "
                             f"manual turn-taking), got {turn_detection.get('type')!r}")
        if on_settings_mismatch not in ("error", "record"):
            raise ValueError(f"on_settings_mismatch must be 'error' or 'record', got {on_settings_mismatch!r}")
        super().__init__(ModelInfo("openai_realtime", RATE, RATE, FRAME, FRAME, max_sessions,
                                   weights=f"openai:{model}"), model, stall_timeout_s)
        self.voice = voice
        self.turn_detection = None if turn_detection is None else dict(turn_detection)
        self.admit_min_remaining = dict(admit_min_remaining or {"requests": 1})
        self.benign_error_codes = frozenset(benign_error_codes)
        self.benign_response_reasons = frozenset(benign_response_reasons)
        self.on_settings_mismatch = on_settings_mismatch
        self.manual_silence_s = manual_silence_s
        self.base_url = base_url
        self._det = None  # manual turn-taking: the harness's causal Silero on every row's input
        self._segments: list[int] = [0] * max_sessions

    @property
    def interrupts(self) -> bool:
        """Does the service cancel its reply when it hears speech start (so playback stops too)?"""
        return self.turn_detection is not None and bool(self.turn_detection.get("interrupt_response", True))

    @property
    def creates_response(self) -> bool:
        return self.turn_detection is not None and bool(self.turn_detection.get("create_response", True))

    def _make_client(self) -> Any:
        from openai import AsyncOpenAI

        if self.turn_detection is None:
            from harness.vad.segments import SegmentRules
            from harness.vad.settings import VadSettings

            self._vad = VadSettings(rules=SegmentRules(min_speech_s=0.2, min_silence_s=self.manual_silence_s))
        return AsyncOpenAI(**({"base_url": self.base_url} if self.base_url else {}))

    def session_config(self, instructions: str) -> dict[str, Any]:
        """The ``session.update`` payload for a conversation whose duty instruction is ``instructions``."""
        fmt = {"type": "audio/pcm", "rate": RATE}
        cfg: dict[str, Any] = {"type": "realtime", "output_modalities": ["audio"],
                               "audio": {"input": {"format": fmt, "turn_detection": self.turn_detection},
                                         "output": {"format": fmt, "voice": self.voice}}}
        if instructions:  # else the service's default instructions
            cfg["instructions"] = instructions
        return cfg

    def settings(self, s: HostedSession) -> dict[str, Any]:
        return {"turn_detection": self.turn_detection, "voice": self.voice}

    def _encode(self, frame: np.ndarray) -> str:
        return json.dumps({"type": "input_audio_buffer.append", "audio": pcm16_b64(frame)})

    def _truncate(self, s: HostedSession, item: str, played_ms: int) -> None:
        event = {"type": "conversation.item.truncate", "item_id": item, "content_index": 0, "audio_end_ms": played_ms}
        self.call_on_loop(self._enqueue, [(s, json.dumps(event))])

    def _on_step(self, frames: np.ndarray, live: list[tuple[int, HostedSession]], fresh: set[int]) -> None:
        """Manual turn-taking: commit and ask for a response at each end of speech on a row's input."""
        if self.turn_detection is not None:
            return
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
                self.call_on_loop(self._respond, s)

    # -- on the event loop -----------------------------------------------------------------------
    def _respond(self, s: HostedSession) -> None:
        self._enqueue([(s, json.dumps({"type": "input_audio_buffer.commit"})),
                       (s, json.dumps({"type": "response.create"}))])
        if s.awaiting is None:
            s.expect("response.created")

    def response_fault(self, response: Mapping[str, Any]) -> str | None:
        """Why a ``response.done``'s ``response`` is the conversation's error, or None: any status
        but ``completed`` unless its ``status_details.reason`` is benign (the service's reason and
        error in the message)."""
        status = response.get("status")
        details = response.get("status_details") or {}
        if status == "completed" or details.get("reason") in self.benign_response_reasons:
            return None
        err = details.get("error") or {}
        parts = [f"reason {details['reason']}" if details.get("reason") else "no reason given",
                 *([f"error {err.get('type')}/{err.get('code')}: {err.get('message')}"] if err else [])]
        return ", ".join(parts)

    async def _session(self, s: HostedSession, stream: StreamContext) -> None:
        import contextlib

        conn = await self._client.realtime.connect(model=self.model).enter()
        sender = None
        try:
            await conn.session.update(session=self.session_config(stream.duty_text))
            # raw JSON through the SDK's connection: its typed helpers validate every event, too slow
            # for 12.5 appends a second per session times dozens of sessions

            async def send() -> None:
                while True:
                    await conn.send_raw(await s.outbox.get())

            sender = self.spawn(s, send())
            while True:
                self._handle(s, json.loads(await conn.recv_bytes()))
        finally:
            if sender is not None:
                sender.cancel()
            with contextlib.suppress(Exception):  # closing a socket that may have broken already
                await conn.close()

    def _handle(self, s: HostedSession, ev: dict) -> None:
        """One server event of session ``s`` (docs: the Realtime API's server events)."""
        s.heard()
        kind = ev.get("type")
        if kind == "response.output_audio.delta":
            pcm = b64_pcm16(ev["delta"])
            s.audio_out += len(pcm)
            s.inbox.append(("audio", ev.get("item_id"), pcm))
        elif kind == "session.updated":
            session = ev.get("session", {})
            self.acknowledge(s, {"turn_detection": session.get("audio", {}).get("input", {}).get("turn_detection"),
                                 "voice": session.get("audio", {}).get("output", {}).get("voice")})
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
            count_usage(s.tokens, resp.get("usage") or {})
            if s.awaiting in ("response.done", "response.created"):
                s.expect(None)
            if why := self.response_fault(resp):
                s.fail(f"a response ended {status} {s.at()}: {why}")
        elif kind == "rate_limits.updated":
            for lim in ev.get("rate_limits", []):
                least = self.admit_min_remaining.get(lim.get("name"))
                if least is not None and lim.get("remaining") is not None and lim["remaining"] < least:
                    self.block_admission(float(lim.get("reset_seconds") or 0.0))
        elif kind == "error":
            err = ev.get("error", {})
            what = f"{err.get('type')}/{err.get('code')}: {err.get('message')}"
            if err.get("code") in self.benign_error_codes:
                s.ignored_errors.append(what)
            else:
                s.fail(f"the service sent an error {s.at()}: {what}")


def count_usage(tokens: dict[str, int], usage: Mapping[str, Any]) -> None:
    """Add one ``response.done`` usage to ``tokens``, the disjoint token kinds of a usage record
    (the API counts cached tokens inside its input counts; they are split out here). What the
    totals count beyond the details (none given, image tokens, a kind the API adds later) is
    ``*unattributed`` (:func:`~harness.models.hosted.count_unattributed`), never 0."""
    inp, out = usage.get("input_token_details") or {}, usage.get("output_token_details") or {}
    cached = inp.get("cached_tokens_details") or {}
    c_text, c_audio = cached.get("text_tokens") or 0, cached.get("audio_tokens") or 0
    i_text, i_audio = inp.get("text_tokens") or 0, inp.get("audio_tokens") or 0
    o_text, o_audio = out.get("text_tokens") or 0, out.get("audio_tokens") or 0
    tokens["input_text"] += i_text - c_text
    tokens["input_text_cached"] += c_text
    tokens["input_audio"] += i_audio - c_audio
    tokens["input_audio_cached"] += c_audio
    tokens["output_text"] += o_text
    tokens["output_audio"] += o_audio
    count_unattributed(tokens, usage.get("input_tokens"), i_text + i_audio, usage.get("output_tokens"),
                       o_text + o_audio, usage.get("total_tokens"))
