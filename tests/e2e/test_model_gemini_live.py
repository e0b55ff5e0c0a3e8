"""The Gemini Live adapter end to end through the runner, against a local fake of the Live API on a
real TLS websocket on loopback (tests/fixtures/fake_realtime_gemini.py), driven through the
official SDK. No real API call is made. One paced run (~12 s) serves every test: an answering
session, one that reconnects after goAway and resumes, a stall and a disconnect."""

from __future__ import annotations

import numpy as np
import pytest

from harness.models.gemini_live import DEFAULT_ACTIVITY_DETECTION
from harness.models.registry import build_model
from harness.pricing import load_prices
from harness.runtime.runner import run_conversations
from harness.vad.settings import VadSettings
from tests.fixtures.fake_realtime import Behaviour
from tests.fixtures.fake_realtime_gemini import FakeGeminiLive
from tests.fixtures.realtime_scene import PROTOCOL, conversation, duty_text

KEY = "fake-gemini-key"


@pytest.fixture(scope="module")
def run(tts):
    reply = tts.synthesize("The train leaves at seven.", "en-us+f3")
    behaviours = {"answer": Behaviour("answer", reply), "goaway": Behaviour("goaway", reply, disconnect_after_s=1.0),
                  "stall": Behaviour("stall", reply), "disconnect": Behaviour("disconnect", reply),
                  "rejected": Behaviour("answer", reply, turn_complete_reason="RESPONSE_REJECTED"),
                  "more": Behaviour("answer", reply, turn_complete_reason="NEED_MORE_INPUT"),
                  "totals": Behaviour("answer", reply, breakdown=False)}
    tags = list(behaviours)
    with pytest.MonkeyPatch.context() as mp, \
            FakeGeminiLive(lambda text: behaviours[text.rsplit("[", 1)[1].rstrip("]")]) as srv:
        mp.setenv("GEMINI_API_KEY", KEY)
        mp.delenv("GOOGLE_API_KEY", raising=False)
        mp.setenv("SSL_CERT_FILE", str(srv.ca_file))  # trust the fake's certificate (the SDK reads this)
        model = build_model("gemini_live", {"base_url": srv.base_url, "stall_timeout_s": 1.0, "max_sessions": 7})
        model.load("cpu")
        results = run_conversations(model, [conversation(tts, i, duty_text(t)) for i, t in enumerate(tags)], PROTOCOL,
                                    VadSettings())
    by_tag = {}
    for log in srv.sessions:
        text = " ".join(p["text"] for p in log.setup["system_instruction"]["parts"])
        by_tag[text.rsplit("[", 1)[1].rstrip("]")] = log
    return dict(zip(tags, results, strict=True)), by_tag


def test_it_answers_when_addressed_with_16_khz_in_and_24_khz_out(run):
    results, sessions = run
    res, log = results["answer"], sessions["answer"]
    assert res.status == "ok", res.reason
    assert log.api_key == KEY
    assert log.setup["model"] == "models/gemini-2.5-flash-native-audio-preview-09-2025"
    assert log.setup["realtime_input_config"]["automatic_activity_detection"] == DEFAULT_ACTIVITY_DETECTION
    assert log.setup["proactivity"] == {"proactive_audio": False}
    assert log.setup["generation_config"]["response_modalities"] == ["AUDIO"]
    assert log.audio_s == pytest.approx(len(res.output) / 24_000, abs=0.5)  # 16 kHz frames, the whole stream
    assert "onset" in [e.kind for e in res.events] and np.abs(res.output).max() > 0.1
    assert log.interrupted >= 1  # B spoke over its first reply


def test_goaway_resumes_the_same_session(run):
    results, sessions = run
    res, log = results["goaway"], sessions["goaway"]
    assert res.status == "ok", res.reason
    assert len(log.connections) == 2 and len(log.resumed_with) == 1  # one session, two connections
    assert res.usage["resumptions"] == 1
    assert log.audio_s == pytest.approx(len(res.output) / 24_000, abs=0.5)  # no audio lost across the reconnection
    assert "onset" in [e.kind for e in res.events]


def test_usage_and_settings_are_recorded(run):
    results, sessions = run
    usage, sent = results["answer"].usage, sessions["answer"].usage
    assert usage["provider"] == "google" and usage["tokens"]["output_audio"] == sum(
        u["responseTokensDetails"][0]["tokenCount"] for u in sent) > 0
    assert usage["tokens"]["input_audio"] == sum(u["promptTokensDetails"][1]["tokenCount"] for u in sent)
    assert usage["tokens"]["input_text"] == sum(u["promptTokensDetails"][0]["tokenCount"] for u in sent) > 0
    assert usage["settings"]["automatic_activity_detection"] == DEFAULT_ACTIVITY_DETECTION
    assert usage["owed_at_close"] is None


def test_a_stall_and_a_disconnect_fail_only_their_conversations(run):
    results, _ = run
    assert results["stall"].status == "error" and "stalled: no event" in results["stall"].reason
    assert results["disconnect"].status == "error" and "1011" in results["disconnect"].reason


def test_a_reply_the_service_rejected_fails_its_conversation_a_benign_reason_does_not(run):
    results, _ = run
    res = results["rejected"]
    assert res.status == "error" and "turnCompleteReason RESPONSE_REJECTED" in res.reason
    assert results["more"].status == "ok", results["more"].reason  # NEED_MORE_INPUT: a normal end of a reply


def test_usage_with_counts_but_no_modality_details_is_never_zero(run):
    results, sessions = run
    tokens, sent = results["totals"].usage["tokens"], sessions["totals"].usage
    assert sum(tokens[k] for k in ("input_text", "input_audio", "output_text", "output_audio")) == 0
    assert tokens["input_unattributed"] == sum(u["promptTokenCount"] for u in sent) > 0
    assert tokens["output_unattributed"] == sum(u["responseTokenCount"] for u in sent) > 0
    assert tokens["unattributed"] == 0  # the total is prompt + response
    cost = load_prices().cost(results["totals"].usage)
    assert cost.upper_bound and cost.usd > 0


