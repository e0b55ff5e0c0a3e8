"""Scene schema rules and the template generator (spec section 2)."""

from __future__ import annotations

import dataclasses
import io
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harness.scenes.generator import T_POSITIONS, corpus_stats, generate_pairs, t_bucket
from harness.scenes.schema import (
    Label,
    Scene,
    SceneError,
    Target,
    Turn,
    iter_manifest,
    names_assistant,
    names_assistant_or_designates,
    read_manifest,
    validate_pair,
    write_manifest,
)
from tests.fixtures.runs import SILENT, tiny_config

SID = "p00042-explicit"


def _scene(turns: list[Turn] | None = None, **changes) -> Scene:
    base = Scene(
        scene_id=SID,
        pair_id="p00042",
        condition="explicit",
        speakers=("A", "B", "C"),
        turns=tuple(turns) if turns is not None else (
            Turn("A", "Sam, the bus leaves at nine.", Label.N2, Target.HUMAN),
            Turn("B", "Aria, when does the bus leave?", Label.T, Target.ARIA),
            Turn("C", "Hmm, where is my ticket?", Label.N3, Target.NONE),
            Turn("A", "Aria, how tall is Everest?", Label.N4_Q, Target.ARIA, answer="About twenty nine thousand feet."),
            Turn("B", "Never mind, Aria.", Label.N4_R, Target.ARIA),
        ),
        gold_answer="at nine",
        attributes={"setting": "kitchen at home"},
        t_position="early-middle",
    )
    return dataclasses.replace(base, **changes)


def _turns(*labels: Label) -> list[Turn]:
    speakers = "ABC"
    return [Turn(speakers[i % 3], f"turn number {i} here", lab) for i, lab in enumerate(labels)]


N2, T, N3, Q, R = Label.N2, Label.T, Label.N3, Label.N4_Q, Label.N4_R

# (scene, expected rule, expected turn index)
BROKEN = {
    "t_missing": (_scene(_turns(N2, N2, N3)), "t_missing", None),
    "t_first": (_scene(_turns(T, N2, N3)), "t_first", 0),
    "t_last": (_scene(_turns(N2, N3, T)), "t_last", 2),
    "two_t": (_scene(_turns(N2, T, N3, T, N2)), "two_t", 3),
    "n4_r_without_n4_q": (_scene(_turns(N2, T, N3, R, N2)), "n4_r_without_n4_q", 3),
    "n4_r_first": (_scene(_turns(R, T, N3)), "n4_r_without_n4_q", 0),
    "n4_q_without_n4_r": (_scene(_turns(N2, T, N3, Q, N2)), "n4_q_without_n4_r", 3),
    "n4_q_last": (_scene(_turns(N2, T, N3, Q)), "n4_q_without_n4_r", 3),
    "turn_speaker_unknown": (
        _scene([*_turns(N2, T), Turn("D", "who am I", N3)]), "unknown_speaker", 2),
    "scene_speaker_unknown": (_scene(speakers=("A", "B", "E")), "unknown_speaker", None),
    "empty_text": (_scene([*_turns(N2, T), Turn("C", "   ", N3)]), "empty_text", 2),
    "two_speakers": (_scene(speakers=("A", "B")), "speakers", None),
    "five_speakers": (_scene(speakers=("A", "B", "C", "D", "E")), "speakers", None),
    "duplicate_speakers": (_scene(speakers=("A", "B", "B")), "speakers", None),
    "bad_condition": (_scene(condition="whispered"), "condition", None),
    "empty_gold": (_scene(gold_answer=" "), "gold_answer", None),
    "no_turns": (_scene([]), "turns", None),
}


def test_base_scene_is_valid():
    _scene().validate()


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_validation_rule(case):
    scene, rule, turn = BROKEN[case]
    with pytest.raises(SceneError, match=rf"\[rule {rule}\]$") as info:
        scene.validate()
    err = info.value
    assert (err.rule, err.turn, err.scene_id) == (rule, turn, SID)
    assert repr(SID) in str(err)
    if turn is not None:
        assert f"turn {turn}" in str(err)


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_manifest_reports_rule_and_goes_on(case):
    scene, rule, turn = BROKEN[case]
    good = _scene(scene_id="p00043-explicit", pair_id="p00043")
    buf = io.StringIO()
    write_manifest([scene, good], buf)
    items = list(iter_manifest(buf.getvalue().splitlines()))
    assert [type(x) for x in items] == [SceneError, Scene]
    assert (items[0].rule, items[0].turn, items[0].line) == (rule, turn, 1)
    assert str(items[0]).startswith("manifest line 1: ")
    assert items[1] == good
    with pytest.raises(SceneError, match=re.escape(repr(SID))):
        read_manifest(buf.getvalue().splitlines())


def test_invalid_json_line_is_reported_and_iteration_continues():
    good = _scene()
    lines = ['{"scene_id": "p1-explicit", ', "", json.dumps(good.to_dict()), "[1, 2]"]
    items = list(iter_manifest(lines))
    assert len(items) == 3
    assert isinstance(items[0], SceneError)
    assert (items[0].rule, items[0].turn, items[0].scene_id) == ("json", None, "line 1")
    assert "'line 1'" in str(items[0])
    assert items[1] == good
    assert (items[2].rule, items[2].scene_id) == ("json", "line 4")


@pytest.mark.parametrize("missing", ["pair_id", "condition", "speakers", "turns", "gold_answer"])
def test_missing_field(missing):
    d = _scene().to_dict()
    del d[missing]
    with pytest.raises(SceneError, match=f"missing field '{missing}'") as info:
        Scene.from_dict(d)
    assert (info.value.rule, info.value.turn, info.value.scene_id) == ("missing_field", None, SID)
    assert repr(SID) in str(info.value) and missing in str(info.value)
    [err] = list(iter_manifest([json.dumps(d)]))
    assert isinstance(err, SceneError) and err.rule == "missing_field"


def test_missing_turn_field_and_bad_label():
    d = _scene().to_dict()
    del d["turns"][1]["text"]
    with pytest.raises(SceneError, match="missing field 'text'") as info:
        Scene.from_dict(d)
    assert (info.value.rule, info.value.scene_id) == ("missing_field", SID)
    d = _scene().to_dict()
    d["turns"][1]["label"] = "N9"
    with pytest.raises(SceneError, match="'N9' is not a valid Label") as info:
        Scene.from_dict(d)
    assert (info.value.rule, info.value.scene_id) == ("bad_value", SID)


@pytest.mark.parametrize(
    "field, value",
    [("turns", 5), ("turns", ["oops"]), ("speakers", 5), ("attributes", [1]), ("gold_answer", None)],
)
def test_wrong_field_type_is_reported_and_iteration_continues(field, value):
    good = _scene(scene_id="p00043-explicit", pair_id="p00043")
    bad = {**_scene().to_dict(), field: value}
    items = list(iter_manifest([json.dumps(bad), json.dumps(good.to_dict())]))
    assert isinstance(items[0], SceneError)
    assert (items[0].rule, items[0].turn, items[0].scene_id) == ("bad_value", None, SID)
    assert items[1] == good


def test_duplicate_scene_id_is_an_error_on_every_line_naming_them_all():
    """Neither copy is kept: the manifest does not say which is right. Other lines go on."""
    first = _scene()
    second = _scene(gold_answer="at ten")  # same id, different content
    other = _scene(scene_id="p00043-explicit", pair_id="p00043")
    broken = {**_scene().to_dict(), "gold_answer": " "}  # the same id once more, also invalid on its own
    lines = [json.dumps(first.to_dict()), "", json.dumps(other.to_dict()), json.dumps(second.to_dict()),
             json.dumps(broken)]
    items = list(iter_manifest(lines))
    message = (f"scene {SID!r}: scene id on manifest lines 1, 4 and 5; none of them is used (which one is right "
               f"is unknown); line 5 is also invalid: scene {SID!r}: empty gold answer [rule gold_answer] "
               "[rule duplicate_id]")
    assert [str(x) if isinstance(x, SceneError) else x for x in items] == [
        f"manifest line {n}: {message}" if n else other for n in (1, 0, 4, 5)]
    assert [(x.rule, x.scene_id, x.turn, x.line) for x in items if isinstance(x, SceneError)] == [
        ("duplicate_id", SID, None, n) for n in (1, 4, 5)]
    with pytest.raises(SceneError, match=re.escape(message)):
        read_manifest(lines)


def test_imported_manifest_with_a_duplicate_id_records_it_as_invalid(tmp_path):
    """The scenes stage keeps neither copy and records why, under the id, in invalid.json; the
    other half of that pair is then rejected too (a pair is never evaluated half)."""
    from harness.runtime.driver import StageCannotRun
    from harness.runtime.plan import RunPlan
    from harness.stages import run_stage
    from harness.store.base import LocalStore, get_json

    first, implicit, later = _scene(), _scene(scene_id="p00042-implicit", condition="implicit"), _scene()
    path = tmp_path / "import.jsonl"
    path.write_text("".join(json.dumps(s.to_dict()) + "\n" for s in (first, implicit, later)), encoding="utf-8")
    cfg = tiny_config(tmp_path / "store", "dup", SILENT, scenes={"manifest": str(path)})
    store = LocalStore(tmp_path / "store")
    plan = RunPlan.from_config(cfg)
    prefix = plan.scenes
    # nothing valid is left: the stage refuses to run on nothing (jobs: exit 2) and keeps every reason
    with pytest.raises(StageCannotRun, match=r"scenes: no valid scene \(2 invalid\): every scene was refused; the "
                                             r"reasons, one per scene, are in dup/scenes/\w+/invalid\.json"):
        run_stage("scenes", cfg, store)
    assert get_json(store, plan.layout.file(prefix, "invalid.json")) == {
        SID: f"manifest line 3: scene {SID!r}: scene id on manifest lines 1 and 3; none of them is used (which one "
             "is right is unknown) [rule duplicate_id]",
        "p00042-implicit": "scene 'p00042-implicit': pair 'p00042' has no explicit version [rule pair_incomplete]"}
    assert not store.exists(plan.layout.marker(prefix)) and not store.exists(plan.layout.file(prefix, "scenes.jsonl"))


def test_round_trip_hand_made_and_generated():
    scenes = [_scene(), *generate_pairs(10, seed=3)]
    buf = io.StringIO()
    assert write_manifest(scenes, buf) == len(scenes)
    lines = buf.getvalue().splitlines()
    assert len(lines) == len(scenes)
    assert read_manifest(lines) == scenes
    assert read_manifest(io.StringIO(buf.getvalue())) == scenes  # a file handle works too


# --- generator ------------------------------------------------------------------------

N_PAIRS = 200
WORD = re.compile(r"[a-z']+")


def _words(text: str) -> list[str]:
    return WORD.findall(text.lower())


@pytest.fixture(scope="module")
def corpus() -> list[Scene]:
    return generate_pairs(N_PAIRS, seed=7)


@pytest.fixture(scope="module")
def pairs(corpus) -> list[tuple[Scene, Scene]]:
    return list(zip(corpus[::2], corpus[1::2], strict=True))


def test_determinism():
    assert generate_pairs(20, seed=1) == generate_pairs(20, seed=1)
    assert generate_pairs(20, seed=1) != generate_pairs(20, seed=2)


def test_ids_order_and_count(corpus):
    assert len(corpus) == 2 * N_PAIRS
    for i, scene in enumerate(corpus):
        pid = f"p{i // 2:05d}"
        cond = ("explicit", "implicit")[i % 2]
        assert (scene.pair_id, scene.condition, scene.scene_id) == (pid, cond, f"{pid}-{cond}")


def test_every_scene_and_pair_validates(pairs):
    for explicit, implicit in pairs:
        explicit.validate()
        implicit.validate()
        validate_pair(explicit, implicit)


def test_t_position(corpus, pairs):
    for s in corpus:
        t = s.t_index
        assert 0 < t <= len(s.turns) - 3
        assert 7 <= len(s.turns) <= 13
        assert s.t_position == t_bucket(t, len(s.turns))
    counts = [sum(e.t_position == b for e, _ in pairs) for b in T_POSITIONS]
    assert max(counts) - min(counts) <= 1


def test_t_bucket_thirds():
    assert [t_bucket(t, 9) for t in range(9)] == [b for b in T_POSITIONS for _ in range(3)]
    with pytest.raises(ValueError, match="t_index 9 outside a scene of 9 turns"):
        t_bucket(9, 9)


def test_naming_gold_and_support(pairs):
    for explicit, implicit in pairs:
        assert "aria" in _words(explicit.turns[explicit.t_index].text)
        assert "aria" not in _words(implicit.turns[implicit.t_index].text)
        assert explicit.gold_answer == implicit.gold_answer
        assert 1 <= len(explicit.gold_answer.split()) <= 5
        for s in (explicit, implicit):
            gold = set(_words(s.gold_answer))
            assert any(gold <= set(_words(turn.text)) for turn in s.turns[: s.t_index]), s.scene_id
            assert not gold <= set(_words(s.turns[s.t_index].text))


def test_versions_differ_only_at_t_the_turn_before_or_the_edited_n4_turns(pairs):
    rewritten = edited = 0
    for explicit, implicit in pairs:
        t = explicit.t_index
        assert implicit.t_index == t
        assert [(a.speaker, a.label, a.target) for a in explicit.turns] == [
            (b.speaker, b.label, b.target) for b in implicit.turns]
        differ = [i for i, (a, b) in enumerate(zip(explicit.turns, implicit.turns, strict=True)) if a != b]
        n4 = [i for i in differ if i != t]
        if differ[:2] == [t - 1, t]:
            rewritten += 1
        elif n4:  # the N4 edits: the implicit N4 question (and a never mind) say no name
            edited += 1
            assert all(explicit.turns[i].label in (Label.N4_Q, Label.N4_R) for i in n4)
            assert not any(names_assistant(implicit.turns[i].text) for i in n4)
            assert any(implicit.turns[i].label is Label.N4_Q for i in n4)
        assert differ[0] in (t - 1, t) and t in differ
        assert (explicit.speakers, explicit.attributes, explicit.t_position) == (
            implicit.speakers, implicit.attributes, implicit.t_position)
    assert 0 < rewritten < N_PAIRS / 2 and 0 < edited < N_PAIRS / 2


def test_shares(pairs):
    with_n4 = sum(any(t.label is Label.N4_Q for t in e.turns) for e, _ in pairs)
    assert 0.35 <= with_n4 / N_PAIRS <= 0.65
    four = sum(len(e.speakers) == 4 for e, _ in pairs)
    assert 0.15 <= four / N_PAIRS <= 0.35
    assert all(len(s.speakers) in (3, 4) for p in pairs for s in p)
    stats = corpus_stats(s for p in pairs for s in p)
    for cond in ("explicit", "implicit"):
        labels = stats[cond]["labels"]
        silence = labels["N1"] + labels["N2"] + labels["N3"]
        assert 0.10 <= labels["N1"] / silence <= 0.20
        assert 0.60 <= labels["N2"] / silence <= 0.78
        assert 0.11 <= labels["N3"] / silence <= 0.21


def test_n4_events(corpus):
    n_events = []
    for s in corpus:
        t = s.t_index
        q_idx = [i for i, turn in enumerate(s.turns) if turn.label is Label.N4_Q]
        for i in q_idx:
            assert i >= t + 2  # after T, with an ordinary turn in between
            assert s.turns[i + 1].label is Label.N4_R
            assert s.turns[i].target is Target.ARIA
            assert 10 <= len(s.turns[i].answer.split()) <= 16
        assert all(turn.answer is None for turn in s.turns if turn.label is not Label.N4_Q)
        if q_idx:
            n_events.append(len(q_idx))
    assert set(n_events) <= {1, 2}
    assert n_events.count(2) > n_events.count(1)


def test_turn_contents(corpus):
    speech = re.compile(r"[A-Za-z][A-Za-z ,.?!:'-]*")
    for s in corpus:
        assert {t.speaker for t in s.turns} == set(s.speakers)
        assert {Label.N1, Label.N2, Label.N3} <= {t.label for t in s.turns}
        for prev, turn in zip(s.turns[:-1], s.turns[1:], strict=True):
            assert prev.speaker != turn.speaker or turn.label is Label.N4_R  # only "never mind" follows its asker
        for turn in s.turns:
            assert speech.fullmatch(turn.text), turn.text
            # a question, T or not, is made of the same parts (opener, reasons, question, closer), and so is
            # wondering aloud (N3: "Hmm, I lost track. I wonder when the ferry is now.")
            long = turn.label in (Label.T, Label.N3) or "?" in turn.text
            assert 2 <= len(turn.text.split()) <= (48 if long else 20), turn.text
            if turn.label.is_silence:  # only N1 refers to the assistant (by name, or as people do: "the speaker")
                assert names_assistant_or_designates(turn.text) == (turn.label is Label.N1), turn.text
            if turn.label in (Label.T, Label.N4_Q):
                assert turn.target is Target.ARIA
            assert (turn.label is Label.N3) == (turn.target is Target.NONE)
        assert set(s.attributes) == {"setting", "activity", "relationship", "device_context", "register",
                                     "implicit_cue"}


def test_vocabulary_varies(pairs):
    for key in ("setting", "activity", "relationship", "device_context", "register"):
        assert len({e.attributes[key] for e, _ in pairs}) >= 4, key
    device_turns = [t for e, _ in pairs for t in e.turns if t.target is Target.DEVICE]
    assert device_turns
    assert len({e.gold_answer for e, _ in pairs}) >= 20


def test_corpus_stats(corpus):
    stats = corpus_stats(corpus)
    for cond in ("explicit", "implicit"):
        s = stats[cond]
        assert s["scenes"] == N_PAIRS == s["three_party"] + s["four_party"]
        assert s["labels"]["T"] == N_PAIRS
        assert s["n4_events"] == s["labels"]["N4_Q"] == s["labels"]["N4_R"]
        assert s["scenes_with_n4"] <= s["n4_events"] <= 2 * s["scenes_with_n4"]
        assert sum(s["t_position"].values()) == N_PAIRS
        assert 20 < s["mean_t_chars"] < 150
    assert stats["implicit"]["mean_t_chars"] > stats["explicit"]["mean_t_chars"]
    assert corpus_stats([])["explicit"]["mean_t_chars"] == 0.0


def test_bad_arguments():
    for kwargs, match in (({"n_pairs": -1}, "n_pairs must be >= 0, got -1"),
                          ({"four_party_share": 1.5}, r"four_party_share must be a number in \[0, 1\], got 1.5"),
                          ({"n4_share": -0.1}, r"n4_share must be a number in \[0, 1\], got -0.1")):
        with pytest.raises(ValueError, match=match):
            generate_pairs(**{"n_pairs": 2, "seed": 0, **kwargs})
    assert generate_pairs(0, seed=0) == []


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_pairs=st.integers(1, 12),
    four_party_share=st.floats(0.0, 1.0),
    n4_share=st.floats(0.0, 1.0),
    profile=st.sampled_from(["compact", "paper"]),
)
def test_generated_scenes_always_validate(seed, n_pairs, four_party_share, n4_share, profile):
    scenes = generate_pairs(n_pairs, seed, four_party_share=four_party_share, n4_share=n4_share, profile=profile)
    assert len(scenes) == 2 * n_pairs
    for explicit, implicit in zip(scenes[::2], scenes[1::2], strict=True):
        explicit.validate()
        implicit.validate()
        validate_pair(explicit, implicit, strict=True)
        assert explicit.t_position == t_bucket(explicit.t_index, len(explicit.turns))


@pytest.mark.parametrize("bad", ["../escape", "a/b", "_SUCCESS", ".hidden", "tab\there"])
def test_scene_id_that_could_escape_its_prefix_is_rejected(bad):
    with pytest.raises(SceneError, match=r"\[rule scene_id\]$") as info:
        _scene(scene_id=bad).validate()
    assert info.value.rule == "scene_id" and repr(bad) in str(info.value)


def test_a_manifest_saved_by_an_editor_loads_exactly_like_a_clean_one(tmp_path):
    """A UTF-8 byte-order mark (Notepad, spreadsheets), CRLF line ends and blank lines: the same
    scenes as the clean file, nothing invalid (the mark once cost the first pair)."""
    from harness.products.scenes import SceneSet
    from harness.runtime.plan import RunPlan
    from harness.stages import run_stage
    from harness.store.base import LocalStore

    pairs = generate_pairs(2, 11, 0.0, 1.0)
    lines = [json.dumps(s.to_dict()) for s in pairs]
    clean, saved = tmp_path / "clean.jsonl", tmp_path / "saved.jsonl"
    clean.write_text("".join(ln + "\n" for ln in lines), encoding="utf-8")
    saved.write_bytes(b"\xef\xbb\xbf" + "\r\n".join([*lines, "", ""]).encode())
    got = {}
    for path in (clean, saved):
        cfg = tiny_config(tmp_path / "s", path.stem, SILENT, scenes={"manifest": str(path)})
        store = LocalStore(tmp_path / "s")
        run_stage("scenes", cfg, store)
        plan = RunPlan.from_config(cfg)
        got[path.stem] = SceneSet.read(store, plan.layout, plan.scenes)
    assert got["saved"].scenes == got["clean"].scenes == tuple(pairs) and got["saved"].invalid == {}


@pytest.mark.parametrize("sid", ["p 1-explicit", "p#1", "p?1", "p%201", "pé1", "p(1)", "p:1", "[p]", "p" * 129])
def test_an_id_that_would_break_a_link_or_a_file_name_is_refused_naming_the_rule(sid):
    """Scene ids name store objects, files and the report's links: characters special in URLs, file
    names or Markdown (spaces, #, ?, %, :, brackets, non-ASCII) are refused, never half-linked."""
    with pytest.raises(SceneError, match=r"ids are ASCII letters, digits, '\.', '_' and '-', starting with a letter "
                                         r"or digit, at most 128 characters \(they name files and links\)"):
        _scene(scene_id=sid).validate()
