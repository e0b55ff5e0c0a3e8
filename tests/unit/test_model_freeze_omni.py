"""The Freeze-Omni adapter against a stand-in of its upstream calls (tests/fixtures/standins/freeze_omni).

The stand-in keeps upstream's module paths, signatures, returned dicts, tensor shapes and
hard-coded CUDA; what the adapter adds is checked here: the server's duplex state machine
(VAD start, replay, state head, interrupt), sentence-level speech through the output queue, the
duty instruction as system role, per-stream seeding, and the upstream quirks it handles. The
checks every adapter shares (no stack on import, params, output contract, alone equals after a
refill, RowError isolation) are in tests/contract/.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.models.base import TEXT_PROMPT, RowError, StreamContext
from harness.models.registry import build_model
from harness.protocol.scheduler import ProtocolSettings
from harness.runtime.runner import run_conversations
from harness.vad.settings import VadSettings
from tests.fixtures.tiny.freeze_omni import conversation
from tests.fixtures.tiny.freeze_omni import upstream as standin
from tests.fixtures.tiny.freeze_omni import weights as checkpoint_folders

CHUNK = 2_560  # 160 ms at 16 kHz
OUT = 3_840  # 160 ms at 24 kHz
LEVEL = np.float32(0.5)  # the stand-in TTS's level
ROLE = "You are a helpful voice assistant."


@pytest.fixture()
def upstream(monkeypatch):
    """The stand-in first on the import path; its generic package names (``models``, ``web``) never
    outlive the test. Yields the stand-in's record of upstream calls."""
    with standin(monkeypatch) as calls:
        yield calls


@pytest.fixture()
def weights(tmp_path):
    return checkpoint_folders(tmp_path)


def _model(weights, **params):
    m = build_model("freeze_omni", {**weights, **params})
    m.load("cpu")
    return m


def _ctx(seed: int = 0, duty: str = "Answer only when addressed.") -> StreamContext:
    return StreamContext("c", seed, duty, None)


def _chunks(*spec: tuple[float, int]) -> list[np.ndarray]:
    """``(rms, n)`` pairs -> n chunks of noise at that RMS (fixed noise, so runs are comparable)."""
    rng = np.random.default_rng(7)
    out = []
    for rms, n in spec:
        out += [(rng.standard_normal(CHUNK) * rms).astype(np.float32) for _ in range(n)]
    return out


def _stream(model, chunks) -> np.ndarray:
    return np.concatenate([model.step(c[None])[0] for c in chunks])


QUESTION = ((0.0, 2), (0.3, 4), (0.0, 1))  # silence, four loud chunks, the pause that ends the turn


# ---------------------------------------------------------------------------- contract and load


def test_native_frames_rates_and_capabilities(upstream, weights):
    m = _model(weights)
    info = m.info
    assert (info.input_rate, info.frame_in, info.output_rate, info.frame_out) == (16_000, CHUNK, 24_000, OUT)
    assert info.frame_s == pytest.approx(0.16)
    assert info.max_batch == 1 and info.capabilities == frozenset({TEXT_PROMPT})
    assert info.weights == f"{weights['weights_path']}+{weights['llm_path']}"
    # the folder holds the repository's checkpoints/, which is what upstream calls the model path
    assert upstream["args"] == {"model_path": f"{weights['weights_path']}/checkpoints", "llm_path": weights["llm_path"],
                                "temperature": 0.7, "top_k": 5, "top_p": 0.8}


def test_load_hides_argv_and_redirects_hard_coded_cuda_only_while_it_runs(upstream, weights, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prog", "--transformer-num-blocks", "7"])
    to, module_to, autocast, load = torch.Tensor.to, torch.nn.Module.to, torch.autocast, torch.load
    _model(weights)  # the stand-in calls .to(torch.device("cuda")) and .cuda(): no CUDA here
    assert upstream["argv"] == ["prog"]
    assert sys.argv == ["prog", "--transformer-num-blocks", "7"]
    assert (torch.Tensor.to, torch.nn.Module.to, torch.autocast, torch.load) == (to, module_to, autocast, load)
    if not torch.cuda.is_available():
        with pytest.raises((AssertionError, RuntimeError)):
            torch.zeros(1).to("cuda")


def test_incomplete_weights_are_refused_naming_the_missing_files(upstream, weights):
    Path(weights["weights_path"], "checkpoints", "codec", "final.pt").unlink()
    with pytest.raises(FileNotFoundError, match=r"weights folder .* lacks checkpoints/codec/final\.pt: give a folder "
                                                r"laid out as the model's repository is"):
        _model(weights)
    assert upstream["args"] is None  # refused before anything is loaded


def test_the_speech_decoder_settings_come_from_the_released_server_json_unless_given(upstream, weights):
    """bin/server.py reads checkpoints/server.json; a param given in the config overrides one key."""
    from tests.fixtures.tiny.freeze_omni import SERVER

    assert _model(weights).tts_settings == SERVER
    assert _model(weights, decoder_top_k=7).tts_settings == {**SERVER, "decoder_top_k": 7}
    server = Path(weights["weights_path"], "checkpoints", "server.json")
    server.write_text('{"decoder_top_k": 2}')
    with pytest.raises(ValueError, match=r"server\.json has no decoder_penalty_window_size, decoder_penalty, .*: give "
                                         r"them as params"):
        _model(weights)


def test_an_llm_whose_hidden_size_the_tts_reshape_cannot_take_is_refused(upstream, weights):
    Path(weights["llm_path"], "config.json").write_text('{"hidden_size": 1000}')
    with pytest.raises(ValueError, match=r"LLM hidden size 1000 .* is not a multiple of 896"):
        _model(weights)
    assert upstream["args"] is None  # refused before anything is loaded


@pytest.mark.parametrize("bad", [{"temperature": 0.0}, {"top_p": 1.5}, {"max_new_tokens": 0}])
def test_bad_sampling_settings_are_refused(bad):
    with pytest.raises(ValueError, match="bad sampling settings"):
        build_model("freeze_omni", bad)


# ------------------------------------------------------------------------ the duplex machine


def test_duty_instruction_is_the_system_role_computed_once_per_role(upstream, weights):
    m = _model(weights)
    m.open(0, _ctx(1))
    m.open(0, _ctx(2))
    m.open(0, _ctx(3, duty="Speak only to Ben."))
    assert upstream["roles"] == [f"{ROLE} Answer only when addressed.", f"{ROLE} Speak only to Ben."]


def test_an_answer_follows_the_pause_whole_and_sentence_by_sentence(upstream, weights):
    m = _model(weights)
    m.open(0, _ctx(1))
    y = _stream(m, _chunks(*QUESTION, (0.0, 40)))
    answer_step = 2 + 4  # the pause chunk: the state head says 'ss' and the answer starts in its frame
    assert not y[:answer_step * OUT].any()
    calls = upstream["tts"]
    assert len(calls) >= 2  # several sentences, each synthesised on its own
    assert [c["chunk"] for c in calls] == [20] + [40] * (len(calls) - 1)  # server.json first/later chunk sizes
    assert [c["threshold"] for c in calls] == [0.1] + [0.015] * (len(calls) - 1)
    assert all(c["states"] >= 4 for c in calls[:-1])
    assert all(c["top_k"] == 2 and c["overlap"] == 10 and c["N"] == 2401 for c in calls)
    # every sample of every sentence is said, in order, without gaps; only the answer's quiet onset is trimmed
    said = np.flatnonzero(y)
    assert said[0] == answer_step * OUT and said[-1] - said[0] + 1 == len(said)
    assert len(said) == 600 * sum(c["states"] for c in calls) - 120
    assert np.count_nonzero(y[said] == LEVEL) == len(said) - 120 * (len(calls) - 1)


def test_sentences_carry_their_text_and_an_incomplete_character_waits_for_its_end(upstream, weights):
    m = _model(weights)
    m.open(0, _ctx(1, duty="BYTES"))
    _stream(m, _chunks(*QUESTION))
    first = upstream["tts"][0]["ids"]
    assert first[:2] == [29, 30]  # "é" as its two tokens, not U+FFFD
    assert first[-1] == 27 and 27 not in first[:-1]  # one sentence, ended by its full stop


def test_an_answer_that_ends_at_once_says_nothing(upstream, weights):
    m = _model(weights)
    m.open(0, _ctx(1, duty="MUTE"))
    y = _stream(m, _chunks(*QUESTION, (0.0, 5)))
    assert not y.any() and upstream["tts"] == []


def test_a_new_turn_interrupts_the_answer_and_the_next_one_replaces_it(upstream, weights):
    m = _model(weights, max_new_tokens=100)
    m.open(0, _ctx(1, duty="LONG"))
    _stream(m, _chunks(*QUESTION))
    first = upstream["tts"][:]
    total = 600 * sum(c["states"] for c in first) - 120
    assert m._queue.pending(0) == total - OUT  # the answer is queued whole; one frame said
    assert sum(c["states"] for c in first) == 101  # capped at max_new_tokens (bin/server.py: 500)
    y = _stream(m, _chunks((0.3, 4)))
    assert np.all(y != 0)  # the answer goes on while the next turn is heard
    upstream["tts"].clear()
    _stream(m, _chunks((0.0, 1)))  # the pause after it: 'ss' again
    second = 600 * sum(c["states"] for c in upstream["tts"]) - 120
    assert m._queue.pending(0) == second - OUT  # what was left of the first answer is dropped


def test_a_stop_from_the_state_head_ends_listening_without_an_answer(upstream, weights):
    m = _model(weights)
    m.open(0, _ctx(1))
    y = _stream(m, _chunks((0.3, 2), (1.0, 1), (0.0, 3), (0.3, 1), (0.0, 1)))
    assert not y.any() and upstream["tts"] == []  # 'el'; then one loud chunk is too short a turn


def test_the_answer_is_drawn_from_the_streams_seed(upstream, weights):
    def answer(seed):
        upstream["tts"].clear()
        m.open(0, _ctx(seed))
        _stream(m, _chunks(*QUESTION))
        return [c["ids"] for c in upstream["tts"]]

    m = _model(weights)
    assert answer(1) == answer(1) != answer(2)


def test_non_finite_input_is_that_rows_error(upstream, weights):
    m = _model(weights)
    m.open(0, _ctx())
    x = np.zeros((1, CHUNK), np.float32)
    x[0, 5] = np.nan
    with pytest.raises(RowError) as e:
        m.step(x)
    assert e.value.reasons == {0: "input frame has NaN/Inf samples"}
    assert e.value.output.shape == (1, OUT)


# ------------------------------------------------------------------------ through the runner


def test_through_the_runner_it_answers_after_a_turn_never_before(upstream, weights):
    m = _model(weights)
    res = run_conversations(m, [conversation("p0", 3), conversation("p1", 4)], ProtocolSettings(tail_s=0.5),
                            VadSettings(), rows=1)
    assert [r.status for r in res] == ["ok"] * 2
    for r in res:
        spoken = np.flatnonzero(np.abs(r.output) > 0.25)
        first_turn_end = r.placements[0].start + r.placements[0].length if r.placements else 0
        assert spoken.size and spoken[0] >= first_turn_end  # it answers after a turn, never before
