"""The OpenAI Realtime adapter end to end through the runner, against a local fake of the API's
event protocol on a real loopback websocket (tests/fixtures/fake_realtime.py) driven through the
official SDK. No real API call is made. Runs are paced to the wall clock, so each takes as long
as its conversations (about 10-15 s): the conversations of one run share a module fixture."""

from __future__ import annotations

import time

import numpy as np
import pytest

from harness.models.openai_realtime import DEFAULT_TURN_DETECTION
from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import ConversationInput, run_conversations
from harness.scenes.schema import Label, Scene, Target, Turn
from harness.vad.settings import VadSettings
from tests.fixtures.fake_realtime import Behaviour, FakeRealtimeServer
from tests.fixtures.realtime_scene import PROTOCOL, conversation, duty_text

KEY = "sk-fake-test-key"
RESET_S = 2.5  # reset_seconds of the limit the disconnecting session signals just before it closes


@pytest.fixture(scope="module")
def reply(tts) -> np.ndarray:
    return tts.synthesize("The train leaves at seven.", "en-us+f3")  # ~1.5 s of real speech


@pytest.fixture(scope="module")
def key():
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPENAI_API_KEY", KEY)
        yield KEY


def _server(reply: np.ndarray) -> FakeRealtimeServer:
    behaviours = {"answer": Behaviour("answer", reply), "queued": Behaviour("answer", reply),
                  "stall": Behaviour("stall", reply),
                  "disconnect": Behaviour("disconnect", reply, rate_limit_reset_s=RESET_S)}
    return FakeRealtimeServer(lambda instructions: behaviours[instructions.rsplit("[", 1)[1].rstrip("]")])


@pytest.fixture(scope="module")
def run(tts, reply, key):
    """Three rows: an answering session, a stall and a disconnect that signals a rate limit as it goes; a
    fourth conversation waits in the queue for the first free row (the disconnect's)."""
    tags = ["answer", "stall", "disconnect", "queued"]
    with _server(reply) as srv:
        model = build_model("openai_realtime", {"base_url": srv.base_url, "stall_timeout_s": 1.0, "max_sessions": 3})
        model.load("cpu")
        t0 = time.monotonic()
        results = run_conversations(model, [conversation(tts, i, duty_text(t)) for i, t in enumerate(tags)], PROTOCOL,
                                    VadSettings())
    by_tag = {s.session["instructions"].rsplit("[", 1)[1].rstrip("]"): s for s in srv.sessions}
    srv.drained = model.drain_usage()  # every closed session's usage, for an attempt that fails as a whole
    return dict(zip(tags, results, strict=True)), by_tag, t0, srv


def test_it_answers_when_addressed_in_one_session_per_conversation(run):
    results, sessions, _, srv = run
    res = results["answer"]
    assert res.status == "ok", res.reason
    assert len(srv.sessions) == 4  # one session per conversation, for its whole length
    log = sessions["answer"]
    assert log.authorization == f"Bearer {KEY}" and log.model == "gpt-realtime"
    assert log.client_events[0] == "session.update"  # configured before any audio
    assert log.session["instructions"] == duty_text("answer")
    assert log.session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24_000}
    assert log.session["audio"]["input"]["turn_detection"] == DEFAULT_TURN_DETECTION
    assert log.audio_s == pytest.approx(len(res.output) / 24_000, abs=0.5)  # it heard the whole stream
    kinds = [e.kind for e in res.events]
    assert "onset" in kinds  # the runner's detector heard its reply (real speech) after T
    assert np.abs(res.output).max() > 0.1


def test_interrupted_playback_stops_and_tells_the_service_what_was_heard(run):
    _, sessions, _, _ = run
    log = sessions["answer"]  # its first reply (after A) is cut by B, who starts 0.5 s into it
    assert "conversation.item.truncate" in log.client_events
    assert 200 <= log.truncated[0] <= 1000  # ms of the reply played before B spoke


def test_usage_is_recorded_with_the_settings(run):
    results, sessions, _, _ = run
    usage = results["answer"].usage
    log = sessions["answer"]
    sent = log.usage
    assert usage["responses"]["completed"] + usage["responses"].get("cancelled", 0) == len(sent)
    cached_audio = sum(u["input_token_details"]["cached_tokens_details"]["audio_tokens"] for u in sent)
    assert usage["tokens"]["input_audio_cached"] == cached_audio
    assert usage["tokens"]["input_audio"] == sum(u["input_token_details"]["audio_tokens"] for u in sent) - cached_audio
    assert usage["tokens"]["output_audio"] == sum(u["output_token_details"]["audio_tokens"] for u in sent) > 0
    assert usage["seconds"]["audio_in"] == pytest.approx(log.audio_s, abs=0.2)
    assert usage["settings"]["acknowledged"] == {"turn_detection": usage["settings"]["turn_detection"],
                                                 "voice": "marin"}
    assert usage["settings"]["mismatch"] == []
    assert usage["owed_at_close"] is None  # every reply's usage arrived before the conversation ended
    assert results["stall"].usage["provider"] == "openai"  # a failed conversation keeps its usage too
    assert results["stall"].usage["owed_at_close"] == "response.done"
    # the adapter's own count of what its sessions spent (read when an attempt fails) is the records' sum
    from harness.pricing import sum_usage

    _, _, _, srv = run
    drained = sum_usage(srv.drained)["openai/gpt-realtime"]
    recorded = sum_usage(r.usage for r in results.values())["openai/gpt-realtime"]
    assert drained["count"] == 4 and drained["tokens"] == recorded["tokens"]


def test_a_stalled_session_fails_its_conversation_not_the_others(run):
    results, _, _, _ = run
    res = results["stall"]
    assert res.status == "error" and res.output is None
    assert "stalled: no event from the service" in res.reason and "awaiting response.done" in res.reason


def test_a_disconnect_fails_its_conversation(run):
    results, _, _, _ = run
    res = results["disconnect"]
    assert res.status == "error"
    assert "the service closed the session (code 1011" in res.reason


def test_a_rate_limit_slows_admission_instead_of_failing(run):
    results, sessions, _, _ = run
    assert results["queued"].status == "ok", results["queued"].reason
    # the disconnecting session said "0 requests left for RESET_S" just before it closed, freeing the row
    freed = sessions["disconnect"].closed
    assert sessions["queued"].opened >= freed + RESET_S - 0.2  # left empty until the limit reset


def test_manual_turn_taking_commits_at_each_end_of_speech(tts, reply, key):
    with _server(reply) as srv:
        model = build_model("openai_realtime", {"base_url": srv.base_url, "turn_detection": None})
        model.load("cpu")
        (res,) = run_conversations(model, [conversation(tts, 0, duty_text("answer"))], PROTOCOL, VadSettings())
    assert res.status == "ok", res.reason
    log = srv.sessions[0]
    assert log.session["audio"]["input"]["turn_detection"] is None
    assert log.client_events.count("input_audio_buffer.commit") == log.client_events.count("response.create") >= 2
    assert "onset" in [e.kind for e in res.events] and res.usage["settings"]["turn_detection"] is None


def test_a_refused_handshake_pauses_admission_for_its_retry_after(key):
    sr = 24_000
    turns = (Turn("A", "x", Label.N2, Target.HUMAN), Turn("B", "x", Label.T, Target.ARIA),
             Turn("C", "x", Label.N3, Target.NONE))
    tone = (0.2 * np.sin(2 * np.pi * 220 * np.arange(sr // 4) / sr)).astype(np.float32)
    convs = [ConversationInput(Scene(f"q{i}-explicit", f"q{i}", "explicit", ("A", "B", "C"), turns, "x"),
                               [tone] * 3, np.zeros(0, np.float32), i, duty_text=duty_text("answer")) for i in range(2)]
    with FakeRealtimeServer(Behaviour("answer", reply_s=0.3), refuse=1, retry_after_s=1.5) as srv:
        model = build_model("openai_realtime", {"base_url": srv.base_url, "max_sessions": 1})
        model.load("cpu")
        short = ProtocolSettings(turn_gap_s=0.3, tail_s=0.3, endpoint_silence_s=0.5, fresh_onset_window_s=0.5,
                                 duty_as_text=True)
        refused, ok = run_conversations(model, convs, short, VadSettings())
    assert refused.status == "error" and "HTTP 429 (rate limited)" in refused.reason
    assert "admission paused 1.5 s" in refused.reason
    assert ok.status == "ok", ok.reason
    assert srv.sessions[0].opened - srv.refused[0] >= 1.4  # the free row waited for Retry-After


@pytest.fixture(scope="module")
def faults(tts, reply, key):
    """Four concurrent sessions whose service misbehaves: every reply fails (a server error, no audio, no
    error event) or ends incomplete, usage comes with totals only, or session.updated acknowledges
    another silence_duration_ms than asked."""
    server_error = {"type": "failed", "error": {"type": "server_error", "code": "internal", "message": "boom"}}
    behaviours = {"failed": Behaviour("answer", reply, response_status="failed", status_details=server_error),
                  "incomplete": Behaviour("answer", reply, response_status="incomplete",
                                          status_details={"type": "incomplete", "reason": "content_filter"}),
                  "totals": Behaviour("answer", reply, breakdown=False),
                  "acknowledged": Behaviour("answer", reply, acknowledge={"silence_duration_ms": 800})}
    tags = list(behaviours)
    with FakeRealtimeServer(lambda text: behaviours[text.rsplit("[", 1)[1].rstrip("]")]) as srv:
        model = build_model("openai_realtime", {"base_url": srv.base_url, "max_sessions": 4})
        model.load("cpu")
        results = run_conversations(model, [conversation(tts, i, duty_text(t)) for i, t in enumerate(tags)], PROTOCOL,
                                    VadSettings())
    return dict(zip(tags, results, strict=True)), srv


def test_a_failed_or_incomplete_response_is_the_conversations_error_with_the_reason(faults):
    results, _ = faults
    failed, incomplete = results["failed"], results["incomplete"]
    assert failed.status == "error" and failed.output is None
    assert "a response ended failed" in failed.reason and "server_error/internal: boom" in failed.reason
    assert incomplete.status == "error" and "ended incomplete" in incomplete.reason
    assert "reason content_filter" in incomplete.reason
    assert failed.usage["responses"] == {"failed": 1}  # the failure is in the usage record too


def test_usage_with_totals_only_is_counted_unattributed(faults):
    results, srv = faults
    res = results["totals"]
    assert res.status == "ok", res.reason
    (log,) = [s for s in srv.sessions if s.session["instructions"].endswith("[totals]")]
    tokens = res.usage["tokens"]
    assert tokens["input_unattributed"] == sum(u["input_tokens"] for u in log.usage) > 0
    assert tokens["output_unattributed"] == sum(u["output_tokens"] for u in log.usage) > 0
    assert tokens["input_audio"] == tokens["output_audio"] == 0


def test_settings_acknowledged_other_than_asked_fail_the_conversation(faults):
    results, _ = faults
    res = results["acknowledged"]
    assert res.status == "error"
    assert "turn_detection.silence_duration_ms: asked 500, acknowledged 800" in res.reason
    assert res.usage["settings"]["acknowledged"]["turn_detection"]["silence_duration_ms"] == 800
    assert res.usage["settings"]["mismatch"] == ["turn_detection.silence_duration_ms: asked 500, acknowledged 800"]


