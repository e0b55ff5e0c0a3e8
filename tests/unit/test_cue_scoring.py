"""Duplex Cue scoring: the rule labeller's golden cases, eligibility, statistics against hand
computations, the LLM labeller's cache and cost, and the score and reduce stages end to end on
a small generated corpus with hand-written continuation outputs."""

from __future__ import annotations

import io
from types import SimpleNamespace

import numpy as np
import pytest

from harness.cue.schema import RESPONSES, CueItem, Recording, Word
from harness.cue.scoring import (
    ACK_SENTENCES,
    RULE_LABELER,
    CueView,
    LLMLabeler,
    Response,
    RuleLabeler,
    active_at,
    analyse_response,
    build_labeler,
    cue_view,
    exclusion,
    item_row,
    vocabulary,
)
from harness.cue.stats import distribution, funnel, model_metrics, paired_adapted, paired_table, stuart_maxwell
from harness.metrics.stats import bootstrap_indices
from tests.fixtures.cue import write_continuations, write_corpus

SWITCH, END = 10.0, 20.0


def _item(intent="collaboration", cue=("the", "lighthouse"), label=None) -> CueItem:
    words = tuple(Word(t, 10.08 + 0.4 * i, 10.4 + 0.4 * i) for i, t in enumerate(cue))
    return CueItem("it-1", "rec-1", intent, words, 10.08, 18.0, label)


def _view(item: CueItem) -> CueView:
    return CueView(item, SWITCH, END, 15.0, (("A", Word("we", 8.0, 8.2)), ("B", Word("mm", 9.0, 9.2))), ())


def _resp(words=(), speech=((5.0, 19.0),), active=True) -> Response:
    return Response("model", tuple(Word(t, a, a + 0.3) for t, a in words), tuple(speech), active)


# ----------------------------------------------------------------------------- the rule


def test_rule_yielded_when_silent_for_most_of_the_window():
    # speech after the onset: 10.08 -> 10.5 = 0.42 s of 9.92 s, under 0.25
    lab = RuleLabeler().label(_view(_item()), _resp([("on", 10.1)], speech=((5.0, 10.5),)))
    assert lab.label == "yielded"
    # 2.48 s is exactly 0.25 of 9.92 s: not yielded (the threshold is strict)
    lab = RuleLabeler().label(_view(_item()), _resp([("top", 10.1), ("of", 10.5)], speech=((10.08, 12.56),)))
    assert lab.label == "continued"


def test_rule_adapted_on_an_acknowledgement_or_the_cues_word():
    view = _view(_item())
    # a word that began before the onset does not count; "oh" is the first word after it
    assert RuleLabeler().label(view, _resp([("tower", 9.9), ("oh", 10.9), ("yes", 11.2)])).label == "adapted"
    # uptake: the cue's content word "lighthouse" among the first four words ("the" is a stopword)
    assert RuleLabeler().label(view, _resp([("the", 10.9), ("big", 11.2), ("lighthouse", 11.5)])).label == "adapted"
    # an acknowledgement as third word is beyond ack_words=2
    assert RuleLabeler().label(view, _resp([("the", 10.9), ("old", 11.2), ("right", 11.5)])).label == "continued"
    assert RuleLabeler(ack_words=3).label(view, _resp([("the", 10.9), ("old", 11.2), ("right", 11.5)])).label \
        == "adapted"


def test_rule_continued_and_unscoreable():
    view = _view(_item())
    lab = RuleLabeler().label(view, _resp([("the", 10.9), ("old", 11.2), ("fire", 11.5), ("tower", 11.8)]))
    assert lab.label == "continued" and "fire" in lab.raw
    # speaking, but nothing recognised after the onset: no label
    assert RuleLabeler().label(view, _resp([("tower", 9.9)])).label is None


def test_rule_parameters_are_checked():
    with pytest.raises(ValueError, match="yield_max_speech_share"):
        RuleLabeler(yield_max_speech_share=0)
    with pytest.raises(ValueError, match="unknown cue labeler"):
        build_labeler("oracle")
    assert build_labeler("rule", {"ack_words": 1}).ack_words == 1
    assert RuleLabeler.description == RULE_LABELER


# ----------------------------------------------------------------------------- eligibility


def test_exclusion_funnel_order_and_error_rows():
    it = _item(label="adapted")
    on, off = _resp(), _resp(active=False)
    assert exclusion("boom", on, on, "adapted", "adapted") == "error"
    assert exclusion(None, off, off, None, None) == "model_inactive_at_onset"
    assert exclusion(None, on, off, None, None) == "reference_inactive_at_onset"
    assert exclusion(None, on, on, None, "adapted") == "model_unscoreable"
    assert exclusion(None, on, on, "yielded", None) == "reference_unscoreable"
    assert exclusion(None, on, on, "yielded", "adapted") is None
    err = item_row(it, SWITCH, END, RULE_LABELER, error="continuation failed: watchdog")
    assert (err["eligible"], err["exclusion"], err["model_label"], err["model_words"]) == (False, "error", None, None)
    rows = [err, item_row(it, SWITCH, END, RULE_LABELER, model=off, reference=on)]
    assert funnel(rows) == {"items": 2, "eligible": 0, "excluded": {
        "error": 1, "model_inactive_at_onset": 1, "reference_inactive_at_onset": 0, "model_unscoreable": 0,
        "reference_unscoreable": 0}}
    # an error row is never a response: it adds nothing to any distribution
    m = model_metrics(rows, reps=50)
    assert m["intents"]["collaboration"]["model"]["n"] == 0
    assert m["intents"]["all"]["model"]["counts"] == {"continued": 0, "adapted": 0, "yielded": 0}


def test_active_at_the_onset_is_the_speakers_own_speech_at_the_onset():
    """Issue 23.1: onset 10.08 s, switch 10.00 s, model speech only up to 9.994 s: the model fell
    silent at the switch point, before hearing the cue: excluded (model inactive at the onset)."""
    onset = 10.08
    assert not active_at([(1.0, 9.994)], onset)
    # the VAD's release tail: speech that stopped at the switch point may be reported up to 80 ms longer
    assert not active_at([(1.0, SWITCH + 0.08)], onset) and not active_at([(1.0, onset + 0.08)], onset)
    assert active_at([(1.0, onset + 0.081)], onset) and active_at([(onset, 12.0)], onset)
    assert not active_at([(onset + 0.001, 12.0)], onset)  # started after the onset
    assert active_at([(1.0, onset + 0.02)], onset, release_s=0.0)  # cue.vad_release_s
    m = analyse_response("model", np.zeros(48_000, np.float32), 8.0, [(1.0, 9.994)], _item(), SWITCH, END, 24_000,
                         None, [])  # no speech in the window: no transcription
    r = _resp()
    assert not m.active_at_onset and exclusion(None, m, r, None, None) == "model_inactive_at_onset"
    row = item_row(_item(), SWITCH, END, RULE_LABELER, model=m, reference=r)
    assert (row["eligible"], row["exclusion"], row["model_active_at_onset"]) == (False, "model_inactive_at_onset",
                                                                                 False)


def test_the_vocabulary_holds_nothing_of_as_recorded_continuation():
    """Issue 23.3: a window is transcribed with A's words before the switch point, B's words,
    the cue and generic phrases, never A's recorded continuation (the reference response)."""
    a = (Word("we", 9.0, 9.2), Word("hiked", 9.3, 9.9), Word("up", 9.95, 10.3), Word("tower", 12.0, 12.5))
    b = (Word("the", 10.08, 10.3), Word("lighthouse", 10.4, 10.9))
    rec = Recording("rec-1", 24_000, 24_000 * 22, a, b)
    # "up" straddles the switch point: begun while forced, so it is in; "tower" is A's continuation
    assert vocabulary(rec, _item(), SWITCH) == ["we hiked up", "the lighthouse", "the lighthouse", *ACK_SENTENCES]


def test_the_packets_context_cuts_the_word_that_straddles_the_switch_point():
    """Issue 23.7: what the labeller is given before the window ends at the switch point: A's word
    begun before it is cut there (its rest belongs to the response), a later word is not context."""
    a = (Word("we", 9.0, 9.2), Word("hiked", 9.3, 9.9), Word("upwards", 9.95, 10.3), Word("tower", 12.0, 12.5))
    rec = Recording("rec-1", 24_000, 24_000 * 22, a, (Word("mm", 9.5, 9.7), *_item().cue_words))
    view = cue_view(_item(), rec, SWITCH, END, 15.0)
    assert [(s, w.text, w.start_s, w.end_s) for s, w in view.context] == [
        ("A", "we", 9.0, 9.2), ("A", "hiked", 9.3, 9.9), ("B", "mm", 9.5, 9.7), ("A", "upwards", 9.95, SWITCH)]
    assert [w.text for w in view.b_window] == ["the", "lighthouse"]


# ----------------------------------------------------------------------------- statistics


def test_mcnemar_on_adapted_vs_not_by_hand():
    model = ["adapted"] * 2 + ["continued"] * 7 + ["yielded"] + ["adapted"]
    ref = ["continued"] * 2 + ["adapted"] * 7 + ["adapted"] + ["adapted"]
    p = paired_adapted(model, ref, reps=200)
    # discordant: model only 2, reference only 8; exact two-sided p = 2 * P(X <= 2 | n=10, 1/2) = 2 * 56 / 1024
    assert (p["n"], p["model_only"], p["reference_only"]) == (11, 2, 8)
    assert p["p_mcnemar"] == pytest.approx(112 / 1024)
    assert p["diff"] == pytest.approx((3 - 9) / 11)
    assert p["ci"][0] <= p["diff"] <= p["ci"][1]


def test_stuart_maxwell_sees_the_shift_that_mcnemar_on_adapted_misses():
    """Issue 23.6: 66 pairs, recorded (rows) x generated (columns), continued / adapted / yielded;
    marginals 20/40/6 vs 6/40/20, adapted discordances 4 vs 4."""
    table = [[2, 2, 16], [2, 36, 2], [2, 2, 2]]
    ref = [RESPONSES[i] for i in range(3) for j in range(3) for _ in range(table[i][j])]
    model = [RESPONSES[j] for i in range(3) for j in range(3) for _ in range(table[i][j])]
    assert paired_table(model, ref) == table
    assert paired_adapted(model, ref, reps=50)["p_mcnemar"] == pytest.approx(1.0)
    sm = stuart_maxwell(table)
    assert (round(sm["chi2"], 2), sm["df"], round(sm["p"], 4)) == (9.80, 2, 0.0074)
    assert stuart_maxwell([[3, 0, 0], [0, 4, 0], [0, 0, 0]]) == {"chi2": 0.0, "df": 0, "p": 1.0}  # all agree
    with pytest.raises(ValueError, match="square table"):
        stuart_maxwell([[1, 2, 3]])
    rows = [{"item_id": f"i{k}", "recording_id": f"r{k // 6}", "intent": "collaboration", "eligible": True,
             "exclusion": None, "model_label": m, "reference_label": r}
            for k, (m, r) in enumerate(zip(model, ref, strict=True))]
    per = model_metrics(rows, reps=50)["intents"]["collaboration"]
    assert per["table"] == table and per["homogeneity"] == sm


def test_the_bootstrap_resamples_recordings():
    """Issue 23.6: 66 items in 12 recordings whose responses are correlated (each recording
    mostly one response): the item bootstrap's interval is about half the recording bootstrap's."""
    rng = np.random.default_rng(3)
    labels, recs = [], []
    for k in range(12):
        main = RESPONSES[k % 3]
        for _ in range(5 + k % 2):
            labels.append(main if rng.random() < 0.8 else RESPONSES[rng.integers(3)])
            recs.append(f"rec-{k}")
    assert len(labels) == 66
    by_rec = distribution(labels, reps=2000, clusters=recs)
    by_item = distribution(labels, reps=2000)
    assert by_rec["shares"] == by_item["shares"] and by_rec["counts"] == by_item["counts"]
    for r in RESPONSES:
        ratio = np.diff(by_item["ci"][r])[0] / np.diff(by_rec["ci"][r])[0]
        assert 0.35 < ratio < 0.7, (r, ratio)
    # every recording its own cluster is the item bootstrap, draw for draw
    assert distribution(labels, reps=200, clusters=[str(i) for i in range(66)]) == distribution(labels, reps=200)
    with pytest.raises(ValueError, match="one id per item"):
        distribution(labels, reps=10, clusters=recs[:-1])
    with pytest.raises(ValueError, match="bootstrap_unit"):
        model_metrics([], reps=10, bootstrap_unit="scene")


def test_bootstrap_interval_by_hand():
    labels = ["adapted", "continued", "continued", "yielded"]
    d = distribution(labels, reps=400, seed=7)
    assert d["counts"] == {"continued": 2, "adapted": 1, "yielded": 1} and d["shares"]["continued"] == 0.5
    # the same resamples by hand: share of "continued" per replicate, then the percentile interval
    idx = np.concatenate(list(bootstrap_indices(4, 400, 7)))
    codes = np.array([1, 0, 0, 2])
    shares = (codes[idx] == 0).mean(axis=1)
    assert d["ci"]["continued"] == pytest.approx(list(np.percentile(shares, [2.5, 97.5])))
    assert distribution([], reps=10)["shares"]["adapted"] is None
    with pytest.raises(ValueError, match="not among"):
        distribution(["ignored"], reps=10)


# ----------------------------------------------------------------------------- the LLM labeller


class _FakeMessages:
    def __init__(self, reply: str):
        self.reply, self.calls = reply, []

    def create(self, **kw):
        self.calls.append(kw)
        return SimpleNamespace(content=[SimpleNamespace(type="text", text=self.reply)],
                               usage=SimpleNamespace(input_tokens=1000, output_tokens=5))


def test_llm_labeller_caches_and_counts_cost(tmp_path):
    from harness.store.base import LocalStore

    store = LocalStore(str(tmp_path))
    fake = SimpleNamespace(messages=_FakeMessages("ADAPTED"))
    lab = LLMLabeler("anthropic", store, "_cache/cue-label", client=fake, model="claude-sonnet-4-5")
    view = _view(_item())
    resp = _resp([("oh", 10.9), ("right", 11.2)])
    first = lab.label(view, resp)
    assert first.label == "adapted" and first.cost.usd == pytest.approx((1000 * 3 + 5 * 15) / 1e6)
    prompt = fake.messages.calls[0]["messages"][0]["content"]
    # issue 23.7: word-level start and end times; ADAPTED is uptake (rephrasing included), not correctness
    assert "8.00-8.20 A: we\n9.00-9.20 B: mm" in prompt and "10.90-11.20 A: oh\n11.20-11.50 A: right" in prompt
    assert "the lighthouse" in prompt and "rephrases" in prompt
    assert "not about whether A's response is correct" in prompt
    again = LLMLabeler("anthropic", store, "_cache/cue-label", client=fake, model="claude-sonnet-4-5")
    second = again.label(view, resp)
    assert len(fake.messages.calls) == 1 and second.label == "adapted" and second.cost.usd == 0
    assert (again.hits, again.misses, again.saved.usd) == (1, 0, first.cost.usd)
    # a reply with two labels is unscoreable, kept verbatim
    bad = LLMLabeler("anthropic", client=SimpleNamespace(messages=_FakeMessages("ADAPTED or YIELDED")))
    out = bad.label(view, resp)
    assert out.label is None and out.raw == "ADAPTED or YIELDED" and bad.misses == 1
    # stored for audit, never served: the next run asks again, and a label replaces it
    for reply, label, calls in (("ADAPTED or YIELDED", None, 1), ("ADAPTED or YIELDED", None, 1),
                                ("YIELDED", "yielded", 1), ("CONTINUED", "yielded", 0)):
        fake = SimpleNamespace(messages=_FakeMessages(reply))
        lab = LLMLabeler("anthropic", store, "_cache/cue-unscoreable", client=fake, model="claude-sonnet-4-5")
        assert lab.label(view, resp).label == label and len(fake.messages.calls) == calls


# ----------------------------------------------------------------------------- the stages


def _synthetic_corpus(n: int = 3):
    """Recordings where A speaks (a tone burst per word) and B cues; no espeak-ng needed."""
    from harness.cue.corpus import CueCorpus

    sr = 24_000
    recs, audio, items = [], {}, []
    for i in range(n):
        rid = f"rec-{i}"
        x = np.zeros((2, 22 * sr), np.float32)
        t = np.arange(22 * sr) / sr
        a_words = tuple(Word(f"word{k}", 2.0 + 0.5 * k, 2.4 + 0.5 * k) for k in range(30))
        for w in a_words:
            seg = slice(int(w.start_s * sr), int(w.end_s * sr))
            x[0, seg] = 0.3 * np.sin(2 * np.pi * 180 * t[seg]) * np.sin(np.pi * (t[seg] - w.start_s) / 0.4)
        cue = (Word("the", 8.1, 8.3), Word("lighthouse", 8.35, 8.9))
        recs.append(Recording(rid, sr, x.shape[1], a_words, cue))
        audio[rid] = x
        items.append(CueItem(f"{rid}-cue", rid, ("collaboration", "backchannel", "interruption")[i % 3], cue, 8.1,
                             17.0, "continued"))
    return CueCorpus(recs, audio, items, [])


class _FakeASR:
    """One word per burst of loud audio, named by its order (tests only; no model)."""

    name, version = "fake-asr", "1"

    def __init__(self):
        self.calls = 0
        self.vocabularies: list[tuple[str, ...]] = []

    def transcribe(self, audio, sample_rate, vocabulary=()):
        from harness.scoring.asr import Transcript

        self.calls += 1
        self.vocabularies.append(tuple(vocabulary))
        n = len(audio) // 240 * 240
        env = np.abs(audio[:n]).reshape(-1, 240).max(axis=1) > 0.05  # 10 ms frames
        starts = np.flatnonzero(env & ~np.concatenate([[False], env[:-1]]))
        words = tuple((f"w{k}", s / 100, s / 100 + 0.3) for k, s in enumerate(starts))
        return Transcript(" ".join(w for w, _, _ in words), words)


def _energy_vad(self, waves):
    """A stand-in for Silero in these tests: 10 ms frames above 0.01, gaps under 0.8 s merged."""
    out = []
    for w in waves:
        n = len(w) // 240 * 240
        on = np.abs(w[:n]).reshape(-1, 240).max(axis=1) > 0.01
        segs: list[list[int]] = []
        for k in np.flatnonzero(on):
            if segs and k * 240 - segs[-1][1] < 0.8 * 24_000:
                segs[-1][1] = (k + 1) * 240
            else:
                segs.append([k * 240, (k + 1) * 240])
        out.append(np.asarray(segs, np.int64).reshape(-1, 2))
    return out


def test_stages_end_to_end(tmp_path, monkeypatch):
    from harness.cue.plan import CuePlan
    from harness.runtime.config import CueSettings, ModelSettings, RunConfig, ScoreSettings
    from harness.stages import run_stage
    from harness.stages.cue_score import CueScorer
    from harness.store.base import get_json, put_json
    from harness.store.settings import StoreSettings, open_store

    asr = _FakeASR()
    monkeypatch.setattr("harness.scoring.asr.build_asr", lambda kind, **params: asr)
    monkeypatch.setattr(CueScorer, "_vad", _energy_vad)
    models = (ModelSettings("replay", "replay"), ModelSettings("yield_now", "yield_now"),
              ModelSettings("flaky", "replay"), ModelSettings("other", "silent"))
    cfg = RunConfig(run_id="cue", models=models, cue=CueSettings(bootstrap=100),
                    store=StoreSettings(root=str(tmp_path)), score=ScoreSettings(actors=0))  # in this process
    store, plan = open_store(cfg.store), CuePlan.from_config(cfg)
    corpus = _synthetic_corpus(3)
    write_corpus(store, plan, corpus)
    sr = 24_000

    def replay(it, a, start, switch, end):
        return a[round(start * sr): round(end * sr)]

    def yield_now(it, a, start, switch, end):
        out = replay(it, a, start, switch, end).copy()
        out[round((switch - start) * sr):] = 0
        return out

    write_continuations(store, plan, cfg, "replay", corpus, replay)
    write_continuations(store, plan, cfg, "yield_now", corpus, yield_now)
    write_continuations(store, plan, cfg, "flaky", corpus,
                         lambda it, *a: None if it.item_id == "rec-0-cue" else replay(it, *a))
    put_json(store, plan.layout.marker(plan.infer["other"]), {"applicable": False, "reason": "no TEACHER_FORCING"})

    run_stage("cue-score", cfg, store)
    rows = {m.name: get_json(store, plan.layout.file(plan.score[m.name], "rows.json")) for m in models}
    # replay emits A's recording: its labels are the reference's, item by item
    assert all(r["eligible"] and r["model_label"] == r["reference_label"] == "continued" for r in rows["replay"])
    assert [r["model_words"] for r in rows["replay"]] == [r["reference_words"] for r in rows["replay"]]
    # yield_now stops at the switch point, before the cue: not active at its onset, excluded (issue 23.1)
    assert all(r["exclusion"] == "model_inactive_at_onset" and r["reference_active_at_onset"]
               for r in rows["yield_now"])
    # no window had A's recorded continuation (word13..., after the switch point 8.02 s) in its vocabulary
    assert {v[0] for v in asr.vocabularies} == {" ".join(f"word{k}" for k in range(13))}  # issue 23.3
    flaky = {r["item_id"]: r for r in rows["flaky"]}
    assert flaky["rec-0-cue"]["exclusion"] == "error" and "watchdog" in flaky["rec-0-cue"]["error"]
    assert rows["other"] == []
    mk = get_json(store, plan.layout.marker(plan.score["replay"]))
    assert mk["items"] == 3 and mk["eligible"] == 3 and mk["usd"] == 0
    calls = asr.calls
    run_stage("cue-score", cfg, store)  # complete: skipped
    assert asr.calls == calls

    run_stage("cue-reduce", cfg, store)
    metrics = get_json(store, plan.layout.file(plan.reduce, "cue_metrics.json"))
    assert metrics["not_applicable"] == {"other": "no TEACHER_FORCING"}
    assert metrics["models"]["flaky"]["funnel"]["excluded"]["error"] == 1
    assert metrics["models"]["flaky"]["intents"]["all"]["model"]["n"] == 2  # the error row is no response
    assert metrics["models"]["replay"]["intents"]["all"]["table"] == [[3, 0, 0], [0, 0, 0], [0, 0, 0]]
    assert metrics["models"]["replay"]["voice_prompt"] is None  # a baseline has none; PersonaPlex: NATF2.pt
    from harness.report.cue import cue_report

    voiced = {**metrics, "models": {**metrics["models"], "flaky": {**metrics["models"]["flaky"],
                                                                   "voice_prompt": "NATF2.pt"}}}
    assert "Voice prompt given to cue streams: flaky `NATF2.pt`" in cue_report(voiced, "cue")[0]
    assert metrics["models"]["yield_now"]["funnel"]["excluded"]["model_inactive_at_onset"] == 3
    md = store.get(plan.layout.file(plan.reduce, "cue_report.md")).decode()
    html = store.get(plan.layout.file(plan.reduce, "cue_report.html")).decode()
    for text in ("68.2 %", "34.8 %", "42.4 %", "22.7 %", "208 / 300", "no TEACHER_FORCING", RULE_LABELER,
                 "0 paid calls", "recording bootstrap", "Stuart-Maxwell", "| replay | all | continued | 3 | 0 | 0 |"):
        assert text in md, text
    assert "models not applicable" in html and "| other |" in md
    assert "items/flaky/rec-0-cue.html" in md  # the error row's page: every outcome kind gets one
    page = plan.layout.file(plan.reduce, "items/yield_now/rec-0-cue.html")
    assert "no: model_inactive_at_onset" in store.get(page).decode()
    import soundfile as sf

    mix, rate = sf.read(io.BytesIO(store.get(page.replace(".html", ".flac"))))
    assert rate == sr and mix.shape[1] == 2

    # the human review kit: sample, page with audio, two reviewers, agreement
    import csv

    from harness.review.cue import export_cue_review, import_cue_reviews, sample_cue_items

    keys = export_cue_review(cfg, store)
    manifest = get_json(store, keys["items"])
    items = manifest["items"]
    # 3 models' eligible rows + the reference once; one item per (condition, intent, label) here
    assert {it["model"] for it in items} == {"replay", "flaky", "reference"}  # yield_now: nothing eligible
    assert len(items) == 3 + 2 + 3 and all(it["kind"] == "cue" for it in items)
    assert manifest["sample"]["strata"]["cue/replay/backchannel/continued"] == {"wanted": 5, "available": 1,
                                                                                "taken": 1}
    page = store.get(keys["page"]).decode()
    assert page.count("data:audio/flac;base64,") == len(items) and "labeller's label" in page
    assert export_cue_review(cfg, store) == keys  # idempotent
    again, _ = sample_cue_items(rows)
    assert sorted(i["item_id"] for i in again) == sorted(i["item_id"] for i in items)

    def review(path, flip=None):
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(("item_id", "kind", "verdict", "transcript_ok", "notes"))
            for it in items:
                v = "adapted" if it["item_id"] == flip else it["judge_label"]
                w.writerow((it["item_id"], "cue", v, "yes", ""))
        return path

    flip = items[0]["item_id"]
    res = import_cue_reviews(cfg, store, [review(tmp_path / "ann.csv"), review(tmp_path / "bob.csv", flip)])
    kind = res["kinds"]["cue"]
    assert kind["reviewer_agreement"]["verdict"]["agree"] == len(items) - 1
    assert res["open_disagreements"] == 1 and kind["judge_agreement"]["n"] == len(items) - 1
    assert kind["judge_agreement"]["percent"] == 100.0
    assert store.exists(res["keys"]["json"])


def test_the_intent_check_hides_labels_and_measures_the_corpus_intents(tmp_path):
    """Issue 23.7: the kit validates the corpus's intent labels, model labels hidden: per intent
    up to 20 cues (the paper's 60-cue check), two reviewers, the corpus against the final labels."""
    import csv

    from harness.cue.plan import CuePlan
    from harness.review.cue import export_cue_intent_review, import_cue_intent_reviews
    from harness.runtime.config import CueSettings, ModelSettings, RunConfig
    from harness.store.base import get_json
    from harness.store.settings import StoreSettings, open_store
    from tests.fixtures.cue import write_corpus

    cfg = RunConfig(run_id="cue", models=(ModelSettings("replay", "replay"),), cue=CueSettings(bootstrap=100),
                    store=StoreSettings(root=str(tmp_path)))
    store, plan = open_store(cfg.store), CuePlan.from_config(cfg)
    write_corpus(store, plan, _synthetic_corpus(3))
    keys = export_cue_intent_review(cfg, store)
    manifest = get_json(store, keys["items"])
    items = manifest["items"]
    assert sorted(it["judge_label"] for it in items) == ["backchannel", "collaboration", "interruption"]
    assert manifest["sample"]["strata"]["cue_intent/corpus/backchannel"] == {"wanted": 20, "available": 1,
                                                                             "taken": 1}
    page = store.get(keys["page"]).decode()
    closed = page.split("<details>")
    # the corpus's intent only inside the closed box; nothing of a model or a response label
    assert len(closed) == 4 and all(it["judge_label"] not in c.split("</details>")[-1] for c, it in
                                    zip(closed[1:], items, strict=True))
    assert "labeller" not in page.split("</h1>", 1)[1].replace("labelled", "") and "continued" not in page
    assert export_cue_intent_review(cfg, store) == keys  # idempotent

    def review(path, wrong=0):
        with open(path, "w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(("item_id", "kind", "verdict", "transcript_ok", "notes"))
            for k, it in enumerate(items):
                other = next(i for i in ("backchannel", "collaboration") if i != it["judge_label"])
                v = other if k < wrong else it["judge_label"]
                w.writerow((it["item_id"], "cue_intent", v, "", ""))
        return path

    res = import_cue_intent_reviews(cfg, store, [review(tmp_path / "ann.csv", 1), review(tmp_path / "bob.csv", 1)])
    kind = res["kinds"]["cue_intent"]
    assert kind["reviewer_agreement"]["verdict"]["percent"] == 100.0 and res["open_disagreements"] == 0
    assert kind["judge_agreement"]["n"] == 3 and kind["judge_agreement"]["agree"] == 2  # the corpus vs humans


def test_transcriber_caches_and_spreads_untimed_words(tmp_path):
    """Word times come from the backend; a backend without them (Qwen3-ASR without its aligner)
    gets its words spread evenly over the span; a repeated span is a cache hit."""
    from harness.cue.scoring import WordTranscriber
    from harness.scoring.asr import Transcript
    from harness.scoring.cache import ContentCache
    from harness.store.base import LocalStore

    class Untimed:
        name, version = "untimed", "1"
        calls = 0

        def transcribe(self, audio, sample_rate, vocabulary=()):
            Untimed.calls += 1
            return Transcript("oh right the lighthouse")

    cache = ContentCache(LocalStore(str(tmp_path)), "_cache/asr")
    tr = WordTranscriber(Untimed(), cache, 24_000)
    audio = np.full(24_000 * 2, 0.1, np.float32)  # 2 s starting at 10 s
    words = tr.words(audio, 10.0, ["vocab"])
    assert [(w.text, w.start_s, w.end_s) for w in words] == [("oh", 10.0, 10.5), ("right", 10.5, 11.0),
                                                             ("the", 11.0, 11.5), ("lighthouse", 11.5, 12.0)]
    assert WordTranscriber(Untimed(), cache, 24_000).words(audio, 10.0, ["vocab"]) == words
    assert Untimed.calls == 1 and tr.asr_calls == 1
