"""The OpenAI Realtime adapter's own logic, without a server: usage counting, event handling,
settings and the key. Streamed end to end against a fake of the API: tests/e2e/test_model_openai_realtime.py."""

from __future__ import annotations

import time

import pytest

from harness.models.hosted import TOKEN_KINDS
from harness.models.openai_realtime import DEFAULT_TURN_DETECTION, OpenAIRealtimeModel, count_usage


def test_usage_counts_are_disjoint_token_kinds():
    tokens = dict.fromkeys(TOKEN_KINDS, 0)
    for _ in range(2):
        count_usage(tokens, {"input_token_details": {
            "text_tokens": 10, "audio_tokens": 50, "cached_tokens": 12,
            "cached_tokens_details": {"text_tokens": 8, "audio_tokens": 4}},
            "output_token_details": {"text_tokens": 3, "audio_tokens": 30}})
    assert tokens == {"input_text": 4, "input_text_cached": 16, "input_audio": 92, "input_audio_cached": 8,
                        "output_text": 6, "output_audio": 60,
                        "input_unattributed": 0, "output_unattributed": 0, "unattributed": 0}


def test_totals_beyond_the_details_are_counted_unattributed_never_zero():
    tokens = dict.fromkeys(TOKEN_KINDS, 0)
    count_usage(tokens, {"total_tokens": 150, "input_tokens": 100, "output_tokens": 40})  # no details at all
    count_usage(tokens, {"total_tokens": 30, "input_tokens": 12, "output_tokens": 10,  # 2 image tokens, 8 unsplit
                         "input_token_details": {"text_tokens": 4, "audio_tokens": 6, "image_tokens": 2},
                         "output_token_details": {"audio_tokens": 10}})
    assert tokens["input_unattributed"] == 100 + 2 and tokens["output_unattributed"] == 40
    assert tokens["unattributed"] == 10 + 8  # the totals beyond input + output
    assert tokens["input_text"] == 4 and tokens["input_audio"] == 6 and tokens["output_audio"] == 10
    # priced at the dearest rate of their direction (an upper bound, flagged), never as $0
    from harness.pricing import ledger_cost, load_prices

    table = load_prices(2)
    cost = table.cost({"provider": "openai", "model": "gpt-realtime", "tokens": tokens})
    assert cost.upper_bound
    assert cost.usd == pytest.approx((4 * 4 + 6 * 32 + 10 * 64 + 102 * 32 + 40 * 64 + 18 * 64) / 1e6)
    books = ledger_cost([{"provider": "openai", "model": "gpt-realtime", "tokens": tokens}], table)
    assert books.overcounted == 1 and "an upper bound" in books.describe()
    exact = table.cost({"provider": "openai", "model": "gpt-realtime", "tokens": {"input_audio": 10}})
    assert not exact.upper_bound


def test_a_reply_cancelled_by_barge_in_is_benign_any_other_cancel_is_not():
    from harness.models.hosted import HostedSession

    model = OpenAIRealtimeModel()

    def done(status: str, details: dict | None) -> HostedSession:
        s = HostedSession(0, "c", time.monotonic(), None)
        s.expect("response.done")
        model._handle(s, {"type": "response.done", "response": {"status": status, "status_details": details}})
        return s

    barge_in = done("cancelled", {"type": "cancelled", "reason": "turn_detected"})
    assert barge_in.failure is None and barge_in.responses == {"cancelled": 1} and barge_in.awaiting is None
    assert "ended cancelled" in done("cancelled", {"type": "cancelled", "reason": "client_cancelled"}).failure
    assert "no reason given" in done("failed", None).failure
    assert done("completed", None).failure is None


def test_with_on_settings_mismatch_record_the_difference_is_recorded_and_the_session_runs():
    from harness.models.hosted import HostedSession

    model = OpenAIRealtimeModel(on_settings_mismatch="record")
    s = HostedSession(0, "c", time.monotonic(), "session.updated")
    acked = {**DEFAULT_TURN_DETECTION, "threshold": 0.7, "idle_timeout_ms": None}  # a default it adds is no change
    session = {"audio": {"input": {"turn_detection": acked}, "output": {"voice": "marin"}}}
    model._handle(s, {"type": "session.updated", "session": session})
    assert s.failure is None and s.awaiting is None
    assert s.mismatch == ["turn_detection.threshold: asked 0.5, acknowledged 0.7"]
    manual = OpenAIRealtimeModel(turn_detection=None)
    s = HostedSession(0, "c", time.monotonic(), "session.updated")
    manual._handle(s, {"type": "session.updated", "session": session})
    assert "turn_detection: asked null, acknowledged {" in s.failure
    with pytest.raises(ValueError, match="on_settings_mismatch"):
        OpenAIRealtimeModel(on_settings_mismatch="ignore")


def test_the_key_comes_from_the_environment_only(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(RuntimeError, match="OPENAI_API_KEY is not set"):
        OpenAIRealtimeModel().load("cpu")
    with pytest.raises(TypeError):
        OpenAIRealtimeModel(api_key="sk-x")  # no such parameter: a key in config is refused


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match=r"turn_detection\.type"):
        OpenAIRealtimeModel(turn_detection={"type": "vad"})
    with pytest.raises(ValueError, match="max_sessions"):
        OpenAIRealtimeModel(max_sessions=0)
