"""Results follow the inputs' content, not their names (issue 19.4): every file a stage reads by
path enters its prefix by its bytes (harness/store/content.py, the two plans), so an edited
manifest, recording, prompt or price table is a new prefix and a touched or copied one is not."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from harness import pricing
from harness.cue.corpus import encode_recording
from harness.cue.plan import CuePlan
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.runtime.preflight import problems
from harness.scoring.judge.llm import PROMPTS_DIR
from harness.store import content
from harness.store.base import LocalStore
from harness.store.content import InputFileError, input_digest, listed_digest
from tests.fixtures.runs import one_pair_manifest

SCENES_HINT = "(a JSONL scene manifest, one scene per line)"


def _config(tmp_path: Path, **over) -> RunConfig:
    return RunConfig.from_dict({"run_id": "c1", "store": {"root": str(tmp_path / "runs")},
                                "model": {"silent": {"target": "silent"}, "oracle": {"target": "oracle"}}, **over})


def _prefixes(plan: RunPlan | CuePlan) -> dict[str, str]:
    """Every prefix of a plan, flat: ``{"infer.silent": ..., "scenes": ...}``."""
    out = {}
    for k, v in dataclasses.asdict(plan).items():
        if isinstance(v, str):
            out[k] = v
        elif k not in ("layout", "inputs"):
            out.update({f"{k}.{m}": p for m, p in v.items()})
    return out


# -- the digest ------------------------------------------------------------------------------------
def test_a_digest_is_the_bytes_whatever_the_name_size_or_time(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "sub" / "b.jsonl"
    b.parent.mkdir()
    a.write_bytes(b"thirty dollars\n")
    b.write_bytes(b"thirty dollars\n")
    assert input_digest("x", a, "f") == input_digest("x", b, "f")  # a copy elsewhere: the same
    before = input_digest("x", a, "f")
    os.utime(a, ns=(0, 0))  # touched only
    assert input_digest("x", a, "f") == before
    a.write_bytes(b"eighty dollars\n")  # same size, in place, in the same second
    assert input_digest("x", a, "f") != before


def test_an_unchanged_file_is_read_once_and_a_just_modified_one_every_time(tmp_path, monkeypatch):
    reads = []
    real = content.hashlib.file_digest
    monkeypatch.setattr(content.hashlib, "file_digest", lambda fh, name: reads.append(fh.name) or real(fh, name))
    f = tmp_path / "m.jsonl"
    f.write_bytes(b"x" * 1000)
    input_digest("x", f, "f")
    input_digest("x", f, "f")
    assert len(reads) == 2  # modified within RACY_S of the read: an edit in the same timestamp tick is not missed
    monkeypatch.setattr(content, "RACY_S", 0.0)  # as a file written long before would be
    first = input_digest("x", f, "f")
    assert input_digest("x", f, "f") == first and len(reads) == 3  # unchanged on disk: remembered
    time.sleep(0.05)  # past the file system's timestamp tick
    st = f.stat()
    f.write_bytes(b"y" * 1000)  # same size, mtime put back: its ctime still moves
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert input_digest("x", f, "f") != first and len(reads) == 4


def test_a_file_a_setting_names_that_cannot_be_read_is_named_with_the_setting(tmp_path):
    with pytest.raises(InputFileError, match=rf"^scenes.manifest={tmp_path}/nope.jsonl: no such file \(what\)$"):
        input_digest("scenes.manifest", tmp_path / "nope.jsonl", "what")
    with pytest.raises(InputFileError, match=rf"^scenes.manifest={tmp_path}: a directory \(what\)$"):
        input_digest("scenes.manifest", tmp_path, "what")
    assert listed_digest(tmp_path / "nope.flac") == "absent"  # a listed file is its line's problem


# -- Duplex-MPE: the scene manifest -----------------------------------------------------------------
def test_a_scene_manifest_edited_in_place_changes_scenes_and_every_later_prefix(tmp_path):
    m = one_pair_manifest(tmp_path / "scenes.jsonl")
    cfg = _config(tmp_path, scenes={"manifest": str(m)})
    before = _prefixes(RunPlan.from_config(cfg))
    os.utime(m)  # touched: the same content, the same run
    assert _prefixes(RunPlan.from_config(cfg)) == before
    m.write_text(m.read_text().replace("thirty dollars", "eighty dollars"))  # the gold answer, same size
    after = _prefixes(RunPlan.from_config(cfg))
    assert {k for k in before if before[k] == after[k]} == set()  # scenes, synth, infer, vad, score, reduce, ...
    copy = tmp_path / "elsewhere" / "renamed.jsonl"
    copy.parent.mkdir()
    shutil.copy(m, copy)
    assert _prefixes(RunPlan.from_config(_config(tmp_path, scenes={"manifest": str(copy)}))) == after


def test_the_generated_default_keeps_its_prefixes(tmp_path):
    # Content hashing (8716152) left both unchanged; the 32 s preamble (64f8d08) moved synth from 958fbc96ca;
    # issue 22's generator (templates-v3) moved scenes from 35b8ee65c1, its paper-profile onsets (templates-v4)
    # from f8e0356613, its surface-tell, silence-mix and N4-edit generator (templates-v5) from 2ee363fd37,
    # the reviewed generator (templates-v6: implicit T pointing at Aria, self-talk, fitting values) from 363064a5b7.
    # Change these only with a change to what is made.
    plan = RunPlan.from_config(RunConfig.from_dict({"model": {"silent": {"target": "silent"}}}))
    assert (plan.scenes, plan.synth) == ("demo/scenes/37a4f468fe", "demo/synth/0fcd9c5dc8")


def test_a_missing_scene_manifest_stops_the_plan_and_the_preflight_names_it(tmp_path):
    missing = tmp_path / "nope.jsonl"
    cfg = _config(tmp_path, scenes={"manifest": str(missing)})
    message = f"scenes.manifest={missing}: no such file {SCENES_HINT}"
    with pytest.raises(InputFileError) as e:
        RunPlan.from_config(cfg)
    assert str(e.value) == message
    assert problems(cfg, LocalStore(cfg.store.root), ["reduce"]) == [message]  # every prefix needs it


# -- the price table --------------------------------------------------------------------------------
def test_a_new_price_table_is_a_new_reduce_and_nothing_else(tmp_path, monkeypatch):
    tables = tmp_path / "tables"
    shutil.copytree(pricing.TABLES_DIR, tables)
    monkeypatch.setattr(pricing, "TABLES_DIR", tables)
    newest = max(pricing.tables())
    cfg, pinned = _config(tmp_path), _config(tmp_path, budget={"price_table": newest})
    before, before_pinned = _prefixes(RunPlan.from_config(cfg)), _prefixes(RunPlan.from_config(pinned))
    assert before == before_pinned  # the newest table, named or not: the same content
    text = (tables / f"v{newest}.yaml").read_text()
    assert f"version: {newest}\n" in text
    (tables / f"v{newest + 1}.yaml").write_text(text.replace(f"version: {newest}\n", f"version: {newest + 1}\n"))
    after = _prefixes(RunPlan.from_config(cfg))
    assert {k for k in before if before[k] != after[k]} == {"reduce"}  # the review kit keeps its prefix
    assert _prefixes(RunPlan.from_config(pinned)) == before_pinned  # a pinned table is not the newest one
    (tables / f"v{newest}.yaml").write_text(text.replace("input_audio: 32.00", "input_audio: 40.00", 1))
    assert RunPlan.from_config(pinned).reduce != before_pinned["reduce"]  # an edited table: its content changed
    with pytest.raises(InputFileError, match=r"^budget.price_table=99: no price table v99"):
        RunPlan.from_config(_config(tmp_path, budget={"price_table": 99}))


# -- prompts ----------------------------------------------------------------------------------------
def test_an_llm_judge_prompt_edited_in_place_is_a_new_score_the_lexical_judge_reads_none(tmp_path):
    prompts = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, prompts)
    judge = {"kind": "anthropic", "params": {"model": "claude-sonnet-4-5", "prompts_dir": str(prompts)}}
    cfg = _config(tmp_path, judge=judge)
    before = _prefixes(RunPlan.from_config(cfg))
    lexical = _prefixes(RunPlan.from_config(_config(tmp_path, judge={"kind": "lexical", "params": {}})))
    (prompts / "judge_answer_v1.txt").write_text((prompts / "judge_answer_v1.txt").read_text() + "\nBe strict.\n")
    after = _prefixes(RunPlan.from_config(cfg))
    changed = {k for k in before if before[k] != after[k]}
    assert changed == {"score.silent", "score.oracle", "reference", "reduce", "review"}  # the reference judges too
    assert _prefixes(RunPlan.from_config(_config(tmp_path, judge={"kind": "lexical", "params": {}}))) == lexical
    missing = {**judge, "params": {**judge["params"], "answer_prompt": "judge_answer_v9.txt"}}
    with pytest.raises(InputFileError, match=r"^judge.params.answer_prompt=.*/judge_answer_v9.txt: no such file"):
        RunPlan.from_config(_config(tmp_path, judge=missing))


# -- Duplex Cue: the cue manifest and the recordings it lists ----------------------------------------
def _cue_manifest(folder: Path) -> Path:
    folder.mkdir()
    for i in (1, 2):
        (folder / f"conv{i}.flac").write_bytes(encode_recording(np.full((2, 24_000), 0.01 * i, np.float32), 24_000))
    lines = [{"kind": "recording", "recording_id": f"conv{i}", "audio": f"conv{i}.flac"} for i in (1, 2)]
    lines.append({"kind": "cue", "item_id": "c1", "recording_id": "conv1"})
    path = folder / "manifest.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    return path


def test_a_recording_replaced_under_its_name_changes_every_cue_prefix(tmp_path):
    manifest = _cue_manifest(tmp_path / "corpus")
    cfg = _config(tmp_path, cue={"manifest": str(manifest)})
    before = _prefixes(CuePlan.from_config(cfg))
    rec = tmp_path / "corpus" / "conv2.flac"
    rec.write_bytes(encode_recording(np.full((2, 24_000), 0.5, np.float32), 24_000))  # same name, same length
    after = _prefixes(CuePlan.from_config(cfg))
    assert {k for k in before if before[k] == after[k]} == set()  # corpus, cue-infer, cue-score, cue-reduce
    rec.unlink()  # missing: that recording's problem at ingest (rule missing_file), not the plan's
    missing = _prefixes(CuePlan.from_config(cfg))
    assert missing["corpus"] not in (before["corpus"], after["corpus"])
    moved = tmp_path / "moved"
    shutil.copytree(tmp_path / "corpus", moved)  # the whole folder elsewhere: the same content
    assert _prefixes(CuePlan.from_config(_config(tmp_path, cue={"manifest": str(moved / "manifest.jsonl")}))) \
        == missing


def test_a_missing_cue_manifest_or_labeller_prompt_is_named(tmp_path):
    missing = tmp_path / "cues.jsonl"
    with pytest.raises(InputFileError, match=rf"^cue.manifest={missing}: no such file \(a JSONL cue manifest"):
        CuePlan.from_config(_config(tmp_path, cue={"manifest": str(missing)}))
    params = {"model": "claude-sonnet-4-5", "prompt": "cue_label_v9.txt"}
    with pytest.raises(InputFileError, match=r"^cue.labeler_params.prompt=.*/cue_label_v9.txt: no such file"):
        CuePlan.from_config(_config(tmp_path, cue={"labeler": "anthropic", "labeler_params": params}))


# -- pinned by the job: every process builds the driver's plan without the files ----------------------
def test_a_plan_pinned_by_its_inputs_needs_no_file_and_ignores_later_edits(tmp_path):
    manifest = one_pair_manifest(tmp_path / "scenes.jsonl")
    cues = _cue_manifest(tmp_path / "corpus")
    cfg = _config(tmp_path, scenes={"manifest": str(manifest)}, cue={"manifest": str(cues)},
                  judge={"kind": "anthropic", "params": {"model": "claude-sonnet-4-5"}})
    plan, cue = RunPlan.from_config(cfg), CuePlan.from_config(cfg)
    assert set(plan.inputs) == {"scenes.manifest", "judge.params.answer_prompt", "judge.params.window_prompt"}
    assert plan.inputs["scenes.manifest"] == input_digest("scenes.manifest", manifest, "")
    assert set(cue.inputs) == {"cue.manifest"}
    pinned = dataclasses.replace(cfg, inputs={**plan.inputs, **cue.inputs})
    manifest.unlink()  # a Ray worker on another node: the head's files are not there
    shutil.rmtree(tmp_path / "corpus")
    assert RunPlan.from_config(pinned) == plan and CuePlan.from_config(pinned) == cue
    one_pair_manifest(manifest).write_text(manifest.read_text().replace("thirty", "eighty"))  # edited meanwhile
    assert RunPlan.from_config(pinned) == plan  # the run goes on with what it started from
    assert RunPlan.from_config(cfg).scenes != plan.scenes  # the next job reads the file again
    assert RunConfig.from_dict(pinned.to_dict()) == pinned  # run.json keeps the digests
