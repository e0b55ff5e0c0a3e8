"""``gemini_live``: a hosted speech-to-speech model behind the Gemini Live API.

Through the official SDK (``google-genai``: ``Client().aio.live.connect``); nothing here speaks
the wire format itself. What all hosted adapters share (sessions on an event loop thread, pacing,
playback, the stall detector, admission, the usage record) is :mod:`harness.models.hosted`.

* **Audio**: pcm16 at 16 kHz in (``send_realtime_input``, one 80 ms frame per step; the runner's
  streaming resampler brings the timeline's 24 kHz down), 24 kHz out (``modelTurn`` inline audio
  parts, played out one frame per step through the output queue).
* **Prompt**: the duty instruction is the session's ``system_instruction``; the spoken preamble
  reaches it as audio.
* **Turn-taking** is part of the protocol and recorded with each conversation
  (``usage.settings``): ``automatic_activity_detection`` (the service's VAD: sensitivities,
  ``prefix_padding_ms``, ``silence_duration_ms``; manual activity signalling is not supported)
  and ``proactive_audio`` (the service may choose not to answer what is not for it). When the
  service reports ``interrupted`` (someone spoke over its reply), playback stops.
* **One session per conversation**, across connections: a connection lasts about 10 minutes, so
  the session asks for resumption handles (``session_resumption``) and, on ``goAway``, reconnects
  with the latest handle; the service keeps the context (``resumptions`` in the usage record).
  ``context_window_compression`` (default: a sliding window) keeps a long conversation inside
  the context. A ``goAway`` before any resumable handle, or a refused resumption, fails the
  conversation.
* **Failures** (never silence): a closed connection that was not announced by ``goAway``, an
  SDK error, a reply ended with a ``turnCompleteReason`` that is not benign (the service
  rejected the input or the output: ``RESPONSE_REJECTED``, ``PROHIBITED_INPUT_CONTENT``, the
  ``GENERATED_*`` safety blocks, ...; benign: ``benign_turn_complete_reasons``), and the stall
  detector (``setupComplete`` after connecting, the rest of a reply
  until ``turnComplete``: no event for ``stall_timeout_s``).
* **Usage**: ``usageMetadata`` summed over the session (assumed per reply, as the fake sends it;
  not verified against the service), as disjoint token kinds by modality (``input_text``,
  ``input_audio``, ``input_*_cached`` from the cache details, ``output_text``, ``output_audio``;
  thinking tokens count as ``output_text``, billed as output). What the counts
  (``promptTokenCount`` + ``toolUsePromptTokenCount``, ``responseTokenCount``,
  ``totalTokenCount``) hold beyond the per-modality details is ``*unattributed``, priced as an
  upper bound (:func:`harness.models.hosted.count_unattributed`); cached tokens without a
  modality breakdown stay in their modality's uncached input (an upper bound too).
* **Settings**: the service does not acknowledge them (``setupComplete`` carries none), so the
  usage record's ``settings.acknowledged`` is None: what ran is what was asked, unverified.
* **Key**: ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY`` from the environment only (read by the SDK).
  ``base_url`` points the client elsewhere (the tests' fake, ``tests/fixtures/fake_realtime_gemini.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from harness.models.base import ModelInfo, StreamContext
from harness.models.hosted import HostedRealtimeModel, HostedSession, count_unattributed

RATE_IN, RATE_OUT = 16_000, 24_000
FRAME_IN, FRAME_OUT = 1_280, 1_920  # 80 ms
DEFAULT_ACTIVITY_DETECTION = {"disabled": False, "prefix_padding_ms": 300, "silence_duration_ms": 500}


class GeminiLiveModel(HostedRealtimeModel):
    """A Gemini Live model, one session per conversation (see the module docstring).

    Args:
        model: the Live model id.
        voice: a prebuilt voice name.
        automatic_activity_detection: the service's VAD settings (``realtime_input_config``);
            ``disabled: true`` (manual activity signals) is refused.
        proactive_audio: let the model decide not to answer input that is not for it.
        context_window_compression: passed to the session (``None``: off).
        max_sessions: concurrent sessions of one actor (``max_batch``): the concurrency cap.
        stall_timeout_s: seconds without any event while one is owed before the conversation fails.
        benign_turn_complete_reasons: ``turnCompleteReason`` values (the SDK's
            ``TurnCompleteReason`` names) that end a reply normally; any other fails the
            conversation with that reason.
        base_url: the API's base URL (``None``: the SDK's default).

    Raises:
        ValueError: manual activity detection, ``max_sessions < 1`` or ``stall_timeout_s <= 0``.
    """

    provider = "google"
    sdk_module = "google.genai"
    sdk_package = "google-genai"
    credentials_env = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    first_event = "setupComplete"
    turn_taking_params = ("automatic_activity_detection", "proactive_audio")

    @classmethod
    def turn_taking(cls, params: Mapping[str, Any]) -> dict[str, Any]:
        settings = super().turn_taking(params)
        if settings["automatic_activity_detection"] is None:
            settings["automatic_activity_detection"] = dict(DEFAULT_ACTIVITY_DETECTION)
        settings["proactive_audio"] = bool(settings["proactive_audio"])
        return settings

    def __init__(self, model: str = "gemini-2.5-flash-native-audio-preview-09-2025", voice: str = "Kore",
                 automatic_activity_detection: Mapping[str, Any] | None = None, proactive_audio: bool = False,
                 context_window_compression: Mapping[str, Any] | None = None, max_sessions: int = 16,
                 stall_timeout_s: float = 15.0,
                 benign_turn_complete_reasons: Sequence[str] = ("TURN_COMPLETE_REASON_UNSPECIFIED", "NEED_MORE_INPUT"),
                 base_url: str | None = None):
        aad = dict(DEFAULT_ACTIVITY_DETECTION if automatic_activity_detection is None else automatic_activity_detection)
        if aad.get("disabled"):
            raise ValueError("automatic_activity_detection.disabled: manual activity signals are not supported")
        super().__init__(ModelInfo("gemini_live", RATE_IN, RATE_OUT, FRAME_IN, FRAME_OUT, max_sessions,
                                   weights=f"google:{model}"), model, stall_timeout_s)
        self.voice, self.automatic_activity_detection, self.proactive_audio = voice, aad, bool(proactive_audio)
        self.context_window_compression = (
            {"sliding_window": {}} if context_window_compression is None else dict(context_window_compression))
        self.benign_turn_complete_reasons = frozenset(benign_turn_complete_reasons)
        self.base_url = base_url

    def _make_client(self) -> Any:
        from google import genai
        from google.genai import types

        return genai.Client(http_options=types.HttpOptions(base_url=self.base_url) if self.base_url else None)

    def connect_config(self, instructions: str, handle: str | None) -> Any:
        """The session's ``LiveConnectConfig`` (``handle``: resume that session)."""
        from google.genai import types

        return types.LiveConnectConfig(
            response_modalities=["AUDIO"], system_instruction=instructions or None,
            speech_config=types.SpeechConfig(voice_config=types.VoiceConfig(
                prebuilt_voice_config=types.PrebuiltVoiceConfig(voice_name=self.voice))),
            realtime_input_config={"automatic_activity_detection": self.automatic_activity_detection},
            proactivity={"proactive_audio": self.proactive_audio},
            session_resumption=types.SessionResumptionConfig(handle=handle),
            context_window_compression=self.context_window_compression or None)

    def settings(self, s: HostedSession) -> dict[str, Any]:
        return {"automatic_activity_detection": self.automatic_activity_detection,
                "proactive_audio": self.proactive_audio, "context_window_compression": self.context_window_compression,
                "voice": self.voice}

    def _encode(self, frame: np.ndarray) -> bytes:
        return (np.clip(frame, -1.0, 1.0) * 32767.0).round().astype("<i2").tobytes()

    async def _session(self, s: HostedSession, stream: StreamContext) -> None:
        from google.genai import types

        s.extra["resumptions"] = 0
        state = {"handle": None, "turn": 0}  # the latest resumable handle; replies so far (playback item ids)
        unsent: list[bytes] = []  # a frame taken from the outbox whose send a reconnection cut
        while True:
            config = self.connect_config(stream.duty_text, state["handle"])
            async with self._client.aio.live.connect(model=self.model, config=config) as session:
                s.heard()
                if s.awaiting == "setupComplete":
                    s.expect(None)

                async def send(session=session) -> None:
                    while True:
                        if not unsent:
                            unsent.append(await s.outbox.get())
                        await session.send_realtime_input(
                            audio=types.Blob(data=unsent[0], mime_type=f"audio/pcm;rate={RATE_IN}"))
                        unsent.pop()

                sender = self.spawn(s, send())
                try:
                    went_away = await self._receive(s, session, state)
                finally:
                    sender.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await sender
            if not went_away:
                return
            if not state["handle"]:
                raise RuntimeError("the service sent goAway before any resumable session handle")
            s.extra["resumptions"] += 1
            s.expect("setupComplete")

    async def _receive(self, s: HostedSession, session: Any, state: dict[str, Any]) -> bool:
        """Handle the connection's messages; True when it ends with ``goAway`` (resume), else raises."""
        while True:
            async for msg in session.receive():
                s.heard()
                if msg.go_away is not None:
                    return True
                if msg.session_resumption_update is not None:
                    upd = msg.session_resumption_update
                    if upd.resumable and upd.new_handle:
                        state["handle"] = upd.new_handle
                if msg.usage_metadata is not None:
                    count_usage(s.tokens, msg.usage_metadata)
                content = msg.server_content
                if content is None:
                    continue
                if content.interrupted:
                    s.inbox.append(("interrupt",))
                    s.responses["interrupted"] = s.responses.get("interrupted", 0) + 1
                    state["turn"] += 1
                    s.expect(None)
                if content.model_turn is not None:
                    if s.awaiting is None:
                        s.expect("turnComplete")
                    for part in content.model_turn.parts or []:
                        if part.inline_data is not None and part.inline_data.data:
                            pcm = np.frombuffer(part.inline_data.data, "<i2").astype(np.float32) / 32768.0
                            s.audio_out += len(pcm)
                            s.inbox.append(("audio", f"turn-{state['turn']}", pcm))
                reason = content.turn_complete_reason
                reason = getattr(reason, "name", reason)  # an SDK enum, or a string it does not know yet
                if reason is not None and reason not in self.benign_turn_complete_reasons:
                    s.responses[str(reason)] = s.responses.get(str(reason), 0) + 1
                    s.fail(f"a reply ended with turnCompleteReason {reason} {s.at()}")
                elif content.turn_complete:
                    s.responses["completed"] = s.responses.get("completed", 0) + 1
                if content.turn_complete or reason is not None:
                    state["turn"] += 1
                    s.expect(None)


def count_usage(tokens: dict[str, int], usage: Any) -> None:
    """Add one ``usageMetadata`` (``types.UsageMetadata``) to ``tokens``, the disjoint token kinds of
    a usage record, by modality (cached tokens split out of the prompt's); what its counts hold
    beyond the details is ``*unattributed`` (:func:`~harness.models.hosted.count_unattributed`)."""

    def by_modality(details: Any) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in details or []:
            kind = "audio" if "AUDIO" in str(d.modality) else "text"
            out[kind] = out.get(kind, 0) + (d.token_count or 0)
        return out

    prompt, cached = by_modality(usage.prompt_tokens_details), by_modality(usage.cache_tokens_details)
    tool = by_modality(usage.tool_use_prompt_tokens_details)
    response = by_modality(usage.response_tokens_details)
    for kind in ("text", "audio"):
        tokens[f"input_{kind}"] += prompt.get(kind, 0) + tool.get(kind, 0) - cached.get(kind, 0)
        tokens[f"input_{kind}_cached"] += cached.get(kind, 0)
        tokens[f"output_{kind}"] += response.get(kind, 0)
    thoughts = usage.thoughts_token_count or 0
    tokens["output_text"] += thoughts
    counted_in = None if usage.prompt_token_count is None and usage.tool_use_prompt_token_count is None else (
        (usage.prompt_token_count or 0) + (usage.tool_use_prompt_token_count or 0))
    count_unattributed(tokens, counted_in, sum(prompt.values()) + sum(tool.values()),
                       None if usage.response_token_count is None else usage.response_token_count + thoughts,
                       sum(response.values()) + thoughts, usage.total_token_count)
