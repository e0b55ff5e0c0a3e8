"""The job preflight (harness/runtime/preflight.py; issue 8 item 7, "Configuration faults are
found before anything is spent"): each check with its exact message, only the stages that will
run, every problem at once, and the real entry point stopping before anything is written."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from harness.runtime.config import RunConfig
from harness.runtime.executor import RESOURCE_HINT
from harness.runtime.plan import RunPlan
from harness.runtime.preflight import INSTALL_HINT, PreflightError, preflight, problems
from harness.stages import STAGES
from harness.store.base import LocalStore, StoreError, put_json
from tests.fixtures.keys import ANTHROPIC_KEY_MISSING, KEYS
from tests.fixtures.runs import SILENT, tiny_config

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def no_keys(monkeypatch):
    for k in KEYS:
        monkeypatch.delenv(k, raising=False)


def cfg(tmp_path, model: dict | None = None, cluster: dict | None = None, **sections) -> RunConfig:
    """A run of ``model`` (default: silent) on 4 CPUs and no GPU unless ``cluster`` says otherwise."""
    return tiny_config(tmp_path / "store", "r1", model or SILENT, cluster=cluster or {"num_cpus": 4, "num_gpus": 0},
                       **sections)


def found(c: RunConfig, stages=STAGES) -> list[str]:
    return problems(c, LocalStore(c.store.root), stages)


# -- credentials and SDKs -------------------------------------------------------------------------
def test_an_llm_judge_without_its_key_is_named_for_the_stages_that_need_it(tmp_path, monkeypatch):
    c = cfg(tmp_path, judge={"kind": "anthropic", "params": {"model": "claude-sonnet-4-5"}})
    assert found(c) == [ANTHROPIC_KEY_MISSING.format("the score stage")]  # reference=rule writes no answers
    assert found(c, ["score"]) == [ANTHROPIC_KEY_MISSING.format("the score stage")]
    for stages in (["scenes"], ["reference"], ["synth"], ["infer"], ["vad"], ["reduce"]):
        assert found(c, stages) == [], stages
    monkeypatch.setenv("ANTHROPIC_API_KEY", "")  # set but empty: no key
    assert found(c, ["score"]) == [ANTHROPIC_KEY_MISSING.format("the score stage")]
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-key")
    assert found(c) == []


def test_an_llm_reference_needs_its_key_and_the_judge_for_its_answers(tmp_path, monkeypatch):
    c = cfg(tmp_path, judge={"kind": "anthropic"},
            reference={"kind": "gemini", "params": {"model": "gemini-2.5-flash"}})
    assert found(c, ["reference"]) == [
        "reference=gemini: no API key: set GEMINI_API_KEY or GOOGLE_API_KEY in the environment (keys are read from "
        "the environment only); needed by the reference stage",
        ANTHROPIC_KEY_MISSING.format("the reference stage")]
    assert found(c)[1] == ANTHROPIC_KEY_MISSING.format("the reference and score stages")
    monkeypatch.setenv("GOOGLE_API_KEY", "AIza-secret-value")  # either Gemini variable will do
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret-value")
    assert found(c) == []


def test_a_key_value_is_never_printed(tmp_path, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-secret-value")
    c = cfg(tmp_path, judge={"kind": "anthropic"}, reference={"kind": "gemini"})
    text = "\n".join(found(c))
    assert "ANTHROPIC_API_KEY" in text
    assert "GEMINI_API_KEY" not in text and "AIza-secret-value" not in text


def test_a_missing_sdk_is_named_with_its_package(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "google.genai", None)  # import raises ImportError
    monkeypatch.setenv("GEMINI_API_KEY", "AIza-secret-value")
    c = cfg(tmp_path, judge={"kind": "gemini"})
    assert found(c, ["score"]) == [
        "judge=gemini: the `google-genai` package is not importable (import of google.genai halted; None in "
        f"sys.modules); {INSTALL_HINT}"]


def test_bad_backend_params_are_found_before_the_stage(tmp_path):
    c = cfg(tmp_path, judge={"kind": "anthropic", "params": {"model": "claude-unknown-9"}}, reference={"kind": "rule",
            "params": {"model": "x"}})
    out = found(c)
    assert out[0] == "reference=rule: the rule reference takes no parameters, got ['model']"
    assert out[1].startswith("judge=anthropic: no price for judge model anthropic/claude-unknown-9 in prices v2")
    assert len(out) == 2


# -- ASR ------------------------------------------------------------------------------------------
def test_an_asr_whose_stack_does_not_import_is_named(tmp_path, monkeypatch):
    from harness.scoring.asr import qwen3

    monkeypatch.setitem(sys.modules, "pocketsphinx", None)
    assert found(cfg(tmp_path), ["score"]) == [
        "asr=pocketsphinx: the pocketsphinx ASR backend needs the `pocketsphinx` package (import of pocketsphinx "
        "halted; None in sys.modules); install it with `.venv/bin/pip install 'pocketsphinx>=5.1,<6'` (pinned in "
        "requirements.txt)"]
    for mod in ("transformers", "qwen_asr"):
        monkeypatch.setitem(sys.modules, mod, None)
    assert found(cfg(tmp_path, asr={"kind": "qwen3"}), ["score"]) == [
        "asr=qwen3: cannot import transformers (import of transformers halted; None in sys.modules), qwen_asr "
        f"(import of qwen_asr halted; None in sys.modules): {qwen3.INSTALL_HINT}"]
    assert found(cfg(tmp_path, asr={"kind": "qwen3"}), ["infer", "vad", "reduce"]) == []  # only score transcribes


# -- the store ------------------------------------------------------------------------------------
class RefusingStore(LocalStore):
    def probe(self) -> None:
        raise StoreError("s3:http://minio:9000/bucket/prefix: a conditional put (create only if absent) of the "
                         "existing probe object '_probe/conditional-put.json' was accepted instead of refused")


def test_the_store_probe_message_is_reported_as_is_with_the_other_problems(tmp_path):
    c = cfg(tmp_path, judge={"kind": "anthropic"})
    assert problems(c, RefusingStore(tmp_path / "store"), ["score"]) == [
        "s3:http://minio:9000/bucket/prefix: a conditional put (create only if absent) of the existing probe "
        "object '_probe/conditional-put.json' was accepted instead of refused",
        ANTHROPIC_KEY_MISSING.format("the score stage")]


def test_a_store_that_cannot_be_written_is_named(tmp_path):
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "_probe").write_text("a file where the probe's folder goes")
    out = found(cfg(tmp_path), ["reduce"])
    assert out == [f"local:{tmp_path / 'store'}: not usable as a store: FileExistsError: [Errno 17] File exists: "
                   f"'{tmp_path / 'store' / '_probe'}'"]


# -- resources ------------------------------------------------------------------------------------
def test_a_request_the_local_node_cannot_hold_is_found_before_ray_starts(tmp_path):
    c = cfg(tmp_path, model={"silent": {"target": "silent", "num_gpus": 1}}, score={"num_cpus": 8})
    assert found(c) == [
        "model 'silent' asks for num_cpus=1, num_gpus=1 per actor, but no node of the Ray cluster has that "
        "(nodes: 4 CPU, 0 GPU)" + RESOURCE_HINT,
        "the scoring actor (score.num_cpus / score.num_gpus) asks for num_cpus=8, num_gpus=0 per actor, but no "
        "node of the Ray cluster has that (nodes: 4 CPU, 0 GPU)" + RESOURCE_HINT]
    assert found(c, ["vad", "reduce"]) == []
    fits = cfg(tmp_path, model={"silent": {"target": "silent", "num_gpus": 1}}, cluster={"num_cpus": 8, "num_gpus": 1},
               score={"num_cpus": 8}, infer={"allow_cpu_for_gpu_actors": True})
    assert found(fits) == []
    joined = cfg(tmp_path, model={"silent": {"target": "silent", "num_gpus": 1}},
                 cluster={"address": "ray://head:10001", "num_gpus": 0})
    assert found(joined) == []  # the executor checks the joined cluster's nodes after connecting


def test_a_local_gpu_model_without_usable_cuda_is_found_before_ray_starts(tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    c = cfg(tmp_path, model={"silent": {"target": "silent", "num_gpus": 1}}, cluster={"num_cpus": 4, "num_gpus": 1})
    assert found(c) == [
        f"model 'silent' is given num_gpus=1 but torch sees no usable CUDA (CUDA_VISIBLE_DEVICES=unset, torch "
        f"{torch.__version__} built for CUDA {torch.version.cuda or 'none'}): it would run on CPU and book GPU-hours. "
        "Check the node's NVIDIA driver and the image's torch build, or set infer.allow_cpu_for_gpu_actors=true to "
        "run it on CPU on purpose"]
    assert found(c, ["score"]) == []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert found(c) == []


# -- model stacks ---------------------------------------------------------------------------------
@pytest.fixture
def adapter_module(tmp_path, monkeypatch):
    (tmp_path / "h9_stackless_adapter.py").write_text("import moshi_stack_not_here  # noqa\n\nclass Adapter: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "h9_stackless_adapter"
    sys.modules.pop("h9_stackless_adapter", None)


def test_a_model_whose_stack_does_not_import_names_the_model_and_its_image(tmp_path, adapter_module):
    image = "ghcr.io/org/duplex-mpe-moshi:1"
    c = cfg(tmp_path, model={"m1": {"target": f"{adapter_module}:Adapter", "image": image},
                             "m2": {"target": f"{adapter_module}:Adapter"}, "silent": {"target": "silent"},
                             "m3": {"target": "harness.models.baselines:NoSuchModel"}})
    why = "cannot import its stack: ModuleNotFoundError: No module named 'moshi_stack_not_here'"
    assert found(c) == [
        f"model 'm1' ({adapter_module}:Adapter): {why}; it runs in image {image}: run the job there, or in the "
        "environment `make model-env MODEL=m1` makes (images/README.md)",
        f"model 'm2' ({adapter_module}:Adapter): {why}; model.m2.image is not set: install the model's stack in "
        "this environment (docs/adding-a-model.md)",
        "model 'm3': module harness.models.baselines has no class 'NoSuchModel'"]
    assert found(c, ["scenes", "synth", "vad", "score", "reduce"]) == []  # only infer loads models


def test_a_model_whose_infer_is_complete_needs_nothing(tmp_path, adapter_module):
    c = cfg(tmp_path, model={"m1": {"target": f"{adapter_module}:Adapter", "num_gpus": 1}},
            judge={"kind": "anthropic"})
    store = LocalStore(c.store.root)
    plan = RunPlan.from_config(c)
    lay = plan.layout
    put_json(store, lay.file(plan.infer["m1"], "plan.json"), {"shard-00000": ["p001-explicit"]})
    assert len(problems(c, store, ["infer"])) == 2  # import and GPU: a shard has no marker yet
    put_json(store, lay.marker(lay.shard(plan.infer["m1"], "shard-00000")), {"ok": 1})
    put_json(store, lay.marker(plan.score["m1"]), {})
    assert problems(c, store, STAGES) == []  # infer and score complete: neither model nor judge is needed


# -- model params ---------------------------------------------------------------------------------
def test_a_model_param_the_adapter_does_not_take_is_named_with_the_accepted_ones_whatever_the_stages(tmp_path):
    c = cfg(tmp_path, model={"oracle": {"target": "oracle", "params": {"voice": "en-us+f3", "answer_delay": 1}},
                             "cascade": {"target": "cascade", "params": {"endpoint_s": 0.3, "max_batch": 4}},
                             "silent": {"target": "silent", "params": {"api_key": "x", "sk": 1}}})
    expected = [
        "model 'oracle' (oracle): model.oracle.params: unknown parameter 'answer_delay'; OracleModel accepts: "
        "answer_delay_s, stop_delay_s, voice, max_batch",
        "model 'silent' (silent): model.silent.params: unknown parameters 'api_key', 'sk'; SilentModel accepts: "
        "voice, max_batch"]
    assert found(c) == expected
    for stages in (["scenes"], ["reduce"], ["cue-corpus"]):  # before anything runs, whatever runs
        assert found(c, stages) == expected, stages
    assert found(cfg(tmp_path, model={"oracle": {"target": "oracle", "params": {"answer_delay_s": 1}}})) == []


def test_a_required_param_that_is_missing_is_named(tmp_path, monkeypatch):
    (tmp_path / "h12_needs_a_path.py").write_text(
        "from harness.models.baselines import SilentModel\n\n"
        "class Needy(SilentModel):\n    def __init__(self, weights_path: str, voice: str = 'x'):\n"
        "        super().__init__(voice)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    c = cfg(tmp_path, model={"needy": {"target": "h12_needs_a_path:Needy", "params": {"voice": "y"}}})
    assert found(c, ["scenes"]) == [
        "model 'needy' (h12_needs_a_path:Needy): model.needy.params: missing a required argument: 'weights_path'; "
        "Needy accepts: weights_path, voice"]


# -- one message, exit status 2 -------------------------------------------------------------------
def test_a_scene_manifest_that_is_not_a_file_is_named_before_the_scenes_stage(tmp_path):
    missing = tmp_path / "nope.jsonl"
    assert found(cfg(tmp_path, scenes={"manifest": str(missing)}), ["scenes"]) == [
        f"scenes.manifest={missing}: no such file (a JSONL scene manifest, one scene per line)"]
    assert found(cfg(tmp_path, scenes={"manifest": str(tmp_path)}), ["scenes"]) == [
        f"scenes.manifest={tmp_path}: a directory (a JSONL scene manifest, one scene per line)"]
    # every later stage's prefix hashes the manifest's content, so a later stage needs it too (issue 19.4)
    assert found(cfg(tmp_path, scenes={"manifest": str(missing)}), ["synth"]) == [
        f"scenes.manifest={missing}: no such file (a JSONL scene manifest, one scene per line)"]
    missing.write_text("")
    assert found(cfg(tmp_path, scenes={"manifest": str(missing)}), ["scenes"]) == []


def test_preflight_raises_one_error_listing_every_problem(tmp_path):
    c = cfg(tmp_path, judge={"kind": "anthropic"}, model={"silent": {"target": "silent", "num_gpus": 2}})
    with pytest.raises(PreflightError, match=r"^preflight: 2 problem\(s\); nothing was started:\n") as e:
        preflight(c, LocalStore(c.store.root), STAGES)
    lines = str(e.value).splitlines()[1:]
    assert lines[0] == "  - " + ANTHROPIC_KEY_MISSING.format("the score stage")
    assert lines[1].startswith("  - model 'silent' asks for num_cpus=1, num_gpus=2 per actor")
    preflight(cfg(tmp_path), LocalStore(c.store.root), STAGES)  # nothing wrong: returns


def test_a_hosted_model_without_its_key_is_named_before_infer(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    c = cfg(tmp_path, model={"openai_realtime": {"target": "openai_realtime"}})
    assert found(c, ["infer"]) == [
        "model=openai_realtime: no API key: set OPENAI_API_KEY in the environment (keys are read from the environment "
        "only); needed by model 'openai_realtime' in the infer stage"]
    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-a-real-key")
    assert found(c, ["infer"]) == []


# -- Duplex Cue (jobs.cue) ------------------------------------------------------------------------
CUE = ("cue-corpus", "cue-infer", "cue-score", "cue-reduce")


def test_cue_an_llm_labeller_needs_its_sdk_and_key_the_rule_nothing(tmp_path, monkeypatch):
    assert found(cfg(tmp_path), CUE) == []  # the defaults: the rule and pocketsphinx, offline
    c = cfg(tmp_path, cue={"labeler": "anthropic", "labeler_params": {"model": "claude-sonnet-4-5"}})
    assert found(c, CUE) == [
        "cue.labeler=anthropic: no API key: set ANTHROPIC_API_KEY in the environment (keys are read from the "
        "environment only); needed by the cue-score stage"]
    assert found(c, ["cue-corpus", "cue-infer", "cue-reduce"]) == []  # only cue-score labels
    assert found(c, STAGES) == []  # a Duplex-MPE job does not label cue items
    monkeypatch.setitem(sys.modules, "anthropic", None)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-not-a-real-key")
    assert found(c, CUE) == [
        "cue.labeler=anthropic: the `anthropic` package is not importable (import of anthropic halted; None in "
        f"sys.modules); {INSTALL_HINT}"]
    assert found(cfg(tmp_path, cue={"labeler": "rule", "labeler_params": {"nope": 1}}), CUE)[0].startswith(
        "cue.labeler=rule: ")
    # a model whose cue-score is complete needs no labeller
    from harness.cue.plan import CuePlan

    plan = CuePlan.from_config(c)
    put_json(LocalStore(c.store.root), plan.layout.marker(plan.score["silent"]), {})
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    assert found(c, CUE) == []


def test_cue_the_gpu_transcriber_needs_its_stack_and_its_weights(tmp_path, monkeypatch):
    from harness.scoring.asr import qwen3

    c = cfg(tmp_path, cue={"transcriber": "qwen3"})
    for mod in ("transformers", "qwen_asr"):
        monkeypatch.setitem(sys.modules, mod, None)
    assert found(c, CUE) == [
        "cue.transcriber=qwen3: cannot import transformers (import of transformers halted; None in sys.modules), "
        f"qwen_asr (import of qwen_asr halted; None in sys.modules): {qwen3.INSTALL_HINT}"]
    monkeypatch.setattr(qwen3, "_require", lambda: "0.0")  # the stack imports: now its weights
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-cache"))
    [problem] = found(c, CUE)
    assert problem.startswith(f"cue.transcriber=qwen3: the model weights {qwen3.DEFAULT_MODEL!r}"), problem
    weights = tmp_path / "qwen3-asr"
    weights.mkdir()
    assert found(cfg(tmp_path, cue={"transcriber": "qwen3"}, asr={"kind": "qwen3", "params": {"model": str(weights)}}),
                 CUE) == []  # asr.params apply when the transcriber is the run's ASR kind


def test_cue_a_manifest_that_is_not_a_file_is_named_before_the_corpus(tmp_path):
    missing = tmp_path / "cues.jsonl"
    hint = '(a JSONL cue manifest of recordings and cue items: docs/formats.md, "Duplex Cue corpus")'
    assert found(cfg(tmp_path, cue={"manifest": str(missing)}), CUE) == [f"cue.manifest={missing}: no such file {hint}"]
    assert found(cfg(tmp_path, cue={"manifest": str(tmp_path)}), CUE) == [
        f"cue.manifest={tmp_path}: a directory {hint}"]
    assert found(cfg(tmp_path, cue={"manifest": str(missing)}), ["cue-score"]) == [  # its prefix hashes the content
        f"cue.manifest={missing}: no such file {hint}"]
    missing.write_text("")
    assert found(cfg(tmp_path, cue={"manifest": str(missing)}), CUE) == []


def test_a_stack_that_fails_at_import_or_lacks_a_name_is_reported_never_raised(tmp_path, monkeypatch):
    """``requirements().imports``: the first module of the stack that does not import (with any error:
    upstream code may raise anything at import) or lacks the name ``load`` takes from it."""
    (tmp_path / "h21_broken_stack.py").write_text("raise RuntimeError('needs CUDA at import')\n")
    (tmp_path / "h21_thin_stack.py").write_text("x = 1\n")
    (tmp_path / "h21_adapter.py").write_text(
        "from harness.models.baselines import SilentModel\nfrom harness.weights import Requirements\n\n"
        "class Broken(SilentModel):\n    def requirements(self):\n"
        "        return Requirements(('json', 'h21_broken_stack'), stack='it lives in image x')\n\n"
        "class Thin(SilentModel):\n    def requirements(self):\n"
        "        return Requirements(('h21_thin_stack:LMGen',))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    c = cfg(tmp_path, model={"b": {"target": "h21_adapter:Broken", "image": "duplex-mpe-x"},
                             "t": {"target": "h21_adapter:Thin"}})
    assert found(c, ["infer"]) == [
        "model 'b': its stack does not import here: `h21_broken_stack`: RuntimeError: needs CUDA at import; it lives "
        "in image x; it runs in image duplex-mpe-x: run the job there, or in the environment `make model-env MODEL=b` "
        "makes (images/README.md)",
        "model 't': its stack does not import here: `h21_thin_stack`: it has no 'LMGen'; model.t.image is not set: "
        "install the model's stack in this environment (docs/adding-a-model.md)"]
    assert found(c, ["scenes", "score"]) == []  # only infer loads models
    for name in ("h21_broken_stack", "h21_thin_stack", "h21_adapter"):
        sys.modules.pop(name, None)
