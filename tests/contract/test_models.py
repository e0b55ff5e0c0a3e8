"""One contract over every registered model (every ``conf/model/*.yaml``; issue 20, architecture:
DuplexModel). A new model config is checked here without an edit:

* importing its adapter's module imports no stack beyond the harness's own (checked in a fresh
  process: a model stack is imported in ``load`` only);
* its config's ``params`` bind to the adapter's constructor, which names every parameter (so
  preflight can check a config without building anything), and a key it does not take is refused;

and, for each model with a tiny instance runnable here (``tests/fixtures/tiny/<name>.py``:
baselines, cascade, tiny Moshi, the upstream-code adapters against their stand-ins, the hosted
models against their fake servers), streamed through the real runner:

* every step keeps the output contract: ``float32[R, frame_out]``, finite, within [-1, 1] (up
  to one step of the 16-bit grid);
* a stream is told only what its model declares: the script (answer key included) only with
  ``reads_schedule``, the room's vocabulary only with ``vocabulary``;
* a stream run alone gives the same output as in a row that held another stream before;
* a ``RowError`` fails only its conversation, and the next stream in that row is unharmed.

Models without a tiny instance here are skipped with the reason.
"""

from __future__ import annotations

import inspect
import subprocess
import sys

import numpy as np
import pytest

from harness.audio.io import PCM_SCALE
from harness.models.base import READS_SCHEDULE, REALTIME, VOCABULARY, DuplexModel
from harness.models.registry import check_params, model_class, model_configs
from harness.runtime.runner import run_conversations
from harness.vad.settings import VadSettings
from tests.fixtures.import_probe import added_packages
from tests.fixtures.tiny import recipe

CONFIGS = model_configs()
MODELS = sorted(CONFIGS)
PEAK = 1.0 + 1.0 / PCM_SCALE


def adapter_module(name: str) -> str:
    return CONFIGS[name]["target"].split(":", 1)[0]


@pytest.fixture(scope="module")
def imported() -> dict[str, list[str]]:
    """``{adapter module: packages its import added}``, for every registered model's module at once."""
    return added_packages(sorted({adapter_module(n) for n in MODELS}))


@pytest.mark.parametrize("name", MODELS)
def test_importing_the_adapter_imports_no_model_stack(imported, name):
    assert imported[adapter_module(name)] == []


def test_the_import_probe_sees_a_stack_imported_at_module_level(tmp_path):
    """The probe itself can fail: a module that imports a package outside the harness's stack is named."""
    (tmp_path / "h20_eager_adapter.py").write_text("import yaml, pytest  # noqa: F401\n")
    added = added_packages(["h20_eager_adapter"], [tmp_path])["h20_eager_adapter"]
    assert "pytest" in added
    assert "yaml" not in added  # the harness's own stack (the runner imports it) is not a model stack


def test_listing_and_resolving_models_imports_no_adapter():
    """The registry is the config files: listing the models and resolving a name read YAML only."""
    code = ("import sys; from harness.models.registry import model_configs, resolve_target; "
            "names = model_configs(); [resolve_target(n) for n in names]; "
            "print(sorted(m for m in sys.modules if m.startswith('harness.models.') and m not in "
            "('harness.models.base', 'harness.models.registry')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("name", MODELS)
def test_the_configs_params_bind_to_the_adapters_constructor(name):
    conf = CONFIGS[name]
    cls = model_class(conf["target"])
    assert issubclass(cls, DuplexModel)
    kinds = {p.kind for p in inspect.signature(cls).parameters.values()}
    assert not kinds & {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}, (
        "the constructor must name its parameters (no *args/**kwargs), so preflight can check a config")
    params = conf.get("params") or {}
    check_params(cls, params)
    with pytest.raises(ValueError, match=r"unknown parameter 'no_such_param'; \w+ accepts: "):
        check_params(cls, {**params, "no_such_param": 1})


# ------------------------------------------------------------------------- streamed through the runner


class Spy:
    """Wraps a model's ``open`` and ``step``: keeps every context it is opened with and every breach
    of the output contract."""

    def __init__(self, model: DuplexModel):
        self.contexts: list = []
        self.breaches: list[str] = []
        self.steps = 0
        frame_out = model.info.frame_out
        step, open_ = model.step, model.open

        def checked(frames: np.ndarray) -> np.ndarray:
            y = step(frames)
            self.steps += 1
            want = (frames.shape[0], frame_out)
            if not isinstance(y, np.ndarray) or y.dtype != np.float32 or y.shape != want:
                self.breaches.append(f"step {self.steps}: {type(y).__name__} {getattr(y, 'dtype', '')} "
                                     f"{getattr(y, 'shape', '')}, expected float32{list(want)}")
            elif not np.isfinite(y).all() or np.abs(y).max(initial=0) > PEAK:
                self.breaches.append(f"step {self.steps}: non-finite or out of [-1, 1] (peak {np.abs(y).max()})")
            return y

        def recorded(row: int, stream) -> None:
            self.contexts.append(stream)
            open_(row, stream)

        model.step, model.open = checked, recorded


def _with_tiny() -> list:
    out = []
    for name in MODELS:
        mod = recipe(name)
        skip = (f"no tiny instance of {name} runnable here (tests/fixtures/tiny/{name}.py)" if mod is None
                else getattr(mod, "SKIP", None))
        out.append(pytest.param(name, marks=pytest.mark.skip(reason=skip)) if skip else name)
    return out


WITH_TINY = _with_tiny()


@pytest.fixture(scope="module")
def streamed(request, tmp_path_factory):
    """Model ``request.param``'s tiny instance, streamed: ``(tiny, spy, runs)``; ``runs`` holds
    ``row`` (conversations 0 then 1 in one row), ``alone`` (conversation 1 alone; unless a
    realtime model, whose conversations all stream at once) and ``poison`` (conversation 0, the
    poison, conversation 1, in ``tiny.rows`` rows)."""
    name = request.param
    with pytest.MonkeyPatch.context() as mp, recipe(name).instance(tmp_path_factory.mktemp(name), mp) as tiny:
        spy = Spy(tiny.model)
        realtime = REALTIME in tiny.model.info.capabilities

        def run(convs, rows=1):
            return run_conversations(tiny.model, convs, tiny.protocol, VadSettings(), rows=rows)

        a, b = tiny.conversations[:2]
        runs = {}
        if realtime:  # paced to the wall clock: every conversation at once
            convs = [a, tiny.poison, b] if tiny.poison else [a, b]
            runs["row"] = run(convs, rows=len(convs))
            if tiny.poison:
                runs["poison"], runs["row"] = runs["row"], [runs["row"][0], runs["row"][2]]
        else:
            runs["row"] = run([a, b])
            runs["alone"] = run([b])
            if tiny.poison:
                runs["poison"] = run([a, tiny.poison, b], rows=tiny.rows)
        yield tiny, spy, runs


@pytest.mark.parametrize("streamed", WITH_TINY, indirect=True)
def test_every_step_keeps_the_output_contract(streamed):
    _, spy, runs = streamed
    assert [r.status for r in runs["row"]] == ["ok", "ok"], [r.reason for r in runs["row"]]
    assert spy.steps > 0 and spy.breaches == []
    for r in runs["row"]:
        assert r.output.dtype == np.float32 and len(r.output) >= max(p.end for p in r.placements)


@pytest.mark.parametrize("streamed", WITH_TINY, indirect=True)
def test_a_stream_is_told_only_what_its_model_declares(streamed):
    tiny, spy, _ = streamed
    caps = tiny.model.info.capabilities
    assert spy.contexts
    for ctx in spy.contexts:
        assert (ctx.scene is not None) == (READS_SCHEDULE in caps), ctx.conversation_id
        assert bool(ctx.vocabulary) == (VOCABULARY in caps), ctx.conversation_id


@pytest.mark.parametrize("streamed", WITH_TINY, indirect=True)
def test_a_stream_alone_equals_it_after_a_refill(streamed):
    tiny, _, runs = streamed
    if "alone" not in runs:
        pytest.skip(f"{tiny.model.info.name} is paced to the wall clock (realtime): its service's timing is not "
                    "reproducible run to run")
    if tiny.refill_differs:
        pytest.skip(tiny.refill_differs)
    (alone,), after = runs["alone"], runs["row"][1]
    assert alone.status == after.status == "ok", (alone.reason, after.reason)
    np.testing.assert_array_equal(alone.output, after.output)
    assert alone.events == after.events and alone.placements == after.placements
    if tiny.speaks:
        assert np.abs(after.output).max() > 0, "nothing was said: the comparison would be between silences"


@pytest.mark.parametrize("streamed", WITH_TINY, indirect=True)
def test_a_row_error_fails_only_its_conversation(streamed):
    tiny, _, runs = streamed
    if "poison" not in runs:
        name = tiny.model.info.name
        pytest.skip(f"no input of {name}'s tiny instance makes it raise a RowError (no poison in its "
                    f"tests/fixtures/tiny module)")
    first, poisoned, last = runs["poison"]
    assert (first.status, poisoned.status, last.status) == ("ok", "error", "ok"), [
        r.reason for r in runs["poison"]]
    assert poisoned.output is None and poisoned.reason.startswith(f"model {tiny.model.info.name} "), poisoned.reason
    if "alone" in runs and not tiny.refill_differs:  # the next stream in that row is unharmed
        np.testing.assert_array_equal(last.output, runs["alone"][0].output)
