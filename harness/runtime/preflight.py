"""A job's preflight: what its chosen backends need, checked before anything is spent.

A configuration fault found late costs a run: with ``judge=anthropic`` and no key, scenes are
synthesised and every model streams for hours before the first judge call fails. So every
job that runs stages calls :func:`preflight` first (``jobs/_entry.py``), which collects
**every** problem and raises one :class:`PreflightError` listing them (the job exits with
status 2, docs/cluster.md). It checks, for the stages that will actually run (a stage whose
completion marker exists is skipped by the stage itself, so it needs nothing):

* **the store** (every stage writes): :meth:`~harness.store.base.ObjectStore.probe`, i.e. it
  can be written and honours conditional puts; its message is reported as is;
* **the files settings name** (``scenes.manifest``, the script prompt with ``scenes.source=llm``,
  an LLM judge's or reference's prompts, the price table; for Duplex Cue ``cue.manifest`` and an
  LLM labeller's prompt), whatever the stages: every prefix hashes their content, so the plan
  cannot be built without them (:class:`~harness.store.content.InputFileError`, reported alone:
  nothing else can be planned);
* **the script writer** (``scenes.llm.*`` with ``scenes.source=llm``; needed by ``scenes``): as
  the judge below, its backend built, its SDK importable and its key set;
* **the judge** (``judge.*``; needed by ``score``, and by ``reference`` when the reference
  writes answers) and **the reference** (``reference.*``): the backend can be built from its
  params, its SDK module imports and one of its key's environment variables is set. What a
  backend needs is declared on it (``sdk_module``, ``sdk_package``, ``credentials_env``: any
  one of these variables; :class:`harness.scoring.judge.llm.LLMJudge`). A key's value is
  never read beyond "set and not empty", nor printed;
* **the TTS engine** (``tts.*``; ``synth``): the engine is built from its settings and what its
  load needs is there, without loading it (espeak-ng runs; Qwen3-TTS: the ``qwen-tts`` package
  and the weights in ``tts.params.weights`` or the local cache, never downloaded);
* **the ASR** (``asr.*``; ``score``): the backend is built, which imports its stack and checks
  its params but loads no weights (weights load on the first transcription);
* **each model's params** (``model.<name>.params``), whatever the stages: bound to its
  adapter's constructor without building it (:func:`harness.models.registry.check_params`;
  issue 19 item 12), so an unknown or misspelt key is named, with the keys the adapter
  accepts, before anything runs (a model whose class cannot be imported here is checked where
  it runs);
* **each local model** whose ``infer`` is not complete, from the one statement of what it needs
  (``DuplexModel.requirements``, :class:`harness.weights.Requirements`; the fetch command and the
  adapter's own ``load`` read the same): the adapter is built from its params (its constructor's
  own checks); its stack imports here (each module ``load`` imports: the first that does not is
  named with why, with the package that shadows it when its top-level name comes from another
  distribution, and where the stack lives: ``model.<name>.image`` or ``make model-env``); and every
  repository it reads is pinned to a commit, present in the local Hugging Face cache at that
  commit (or a folder) and holds the files the loader opens (:func:`harness.weights.locate`):
  one message per repository, naming it, its revision and ``make weights MODEL=<name>``;
* **resources** on a local cluster (no ``cluster.address``): each model's and the scoring
  actors' ``num_cpus`` / ``num_gpus`` against ``cluster.num_cpus`` / ``num_gpus``, the Ray
  node this job would start, and for a model given GPUs there, that torch sees usable CUDA
  (:func:`harness.runtime.shard.cuda_problem`; unless ``infer.allow_cpu_for_gpu_actors``).
  On a joined cluster the executor checks the nodes after connecting
  (:func:`harness.runtime.executor.require_resources`) and each GPU actor checks CUDA itself.

For Duplex Cue (``jobs.cue``, stages ``cue-corpus`` / ``cue-score``; docs/cue.md) the same
pattern and messages (:func:`cue_problems`): the files its plan reads (above); the labeller
``cue.labeler`` when it is an LLM backend (its params, SDK and key) and the transcriber
``cue.transcriber`` (its stack imports; a backend that never downloads, e.g. ``qwen3``, also
has its weights, and its forced aligner's, in the local cache or folder), while a model's
cue-score is not complete.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Collection
from dataclasses import dataclass, field

from harness.products.infer import read_ledger
from harness.runtime.config import ModelSettings, RunConfig
from harness.runtime.executor import RESOURCE_HINT, unmet_requests
from harness.runtime.plan import RunPlan
from harness.runtime.shard import cuda_problem
from harness.store.base import ObjectStore, StoreError
from harness.store.content import InputFileError
from harness.weights import Requirements, fetch_command

INSTALL_HINT = "install the pinned requirements (`make setup`, or `.venv/bin/pip install -r requirements.txt`)"


class PreflightError(RuntimeError):
    """What :func:`preflight` found; the message lists every problem, one per line."""


@dataclass
class Pending:
    """What of ``stages`` still has work: the reference, and the models whose infer / score is
    not complete."""

    scenes: bool = False
    synth: bool = False
    reference: bool = False
    infer: list[ModelSettings] = field(default_factory=list)
    score: list[ModelSettings] = field(default_factory=list)


def pending(cfg: RunConfig, store: ObjectStore | None, stages: Collection[str]) -> Pending:
    """The work of ``stages`` that is not complete in ``store`` (``None``: the store cannot be
    read, so all of it). A model's infer is complete when its shard plan exists and every shard
    has its marker; the reference and a model's score when their stage marker exists."""
    plan = RunPlan.from_config(cfg)

    def done(prefix: str) -> bool:
        return store is not None and store.exists(plan.layout.marker(prefix))

    def infer_done(m: ModelSettings) -> bool:
        if store is None:
            return False
        led = read_ledger(store, plan.layout, plan.infer[m.name], m.name, failures=False)
        return bool(led.shards) and not led.missing

    return Pending(
        scenes="scenes" in stages and not done(plan.scenes),
        synth="synth" in stages and not done(plan.synth),
        reference="reference" in stages and not done(plan.reference),
        infer=[m for m in cfg.models if "infer" in stages and not infer_done(m)],
        score=[m for m in cfg.models if "score" in stages and not done(plan.score[m.name])])


def backend_problems(label: str, backend: object, needed_by: str) -> list[str]:
    """What ``backend`` (a judge or an LLM reference backend) lacks: its SDK module
    (``sdk_module``, from PyPI ``sdk_package``) and a key in one of its ``credentials_env``
    variables. ``label`` names the config (``"judge=anthropic"``); ``needed_by`` the stages."""
    out = []
    module = getattr(backend, "sdk_module", "")
    if module:
        try:
            importlib.import_module(module)
        except ImportError as e:
            out.append(f"{label}: the `{getattr(backend, 'sdk_package', module)}` package is not importable "
                       f"({e}); {INSTALL_HINT}")
    names = tuple(getattr(backend, "credentials_env", ()))
    if names and not any(os.environ.get(n) for n in names):
        out.append(f"{label}: no API key: set {' or '.join(names)} in the environment (keys are read from the "
                   f"environment only); needed by {needed_by}")
    return out


def _where(m: ModelSettings) -> str:
    """Where model ``m``'s stack is installed, for a message."""
    if m.image:
        return (f"it runs in image {m.image}: run the job there, or in the environment `make model-env "
                f"MODEL={m.name}` makes (images/README.md)")
    return f"model.{m.name}.image is not set: install the model's stack in this environment (docs/adding-a-model.md)"


def model_problem(m: ModelSettings) -> str | None:
    """Why model ``m``'s adapter class cannot be imported here, or None."""
    from harness.models.registry import model_class

    try:
        model_class(m.target)
    except ImportError as e:
        return f"model {m.name!r} ({m.target}): cannot import its stack: {type(e).__name__}: {e}; {_where(m)}"
    except ValueError as e:
        return f"model {m.name!r}: {e}"
    return None


def _shadowed_by(module: str) -> str:
    """For a dotted ``module`` whose top-level package imports here: which distribution and folder it
    comes from (e.g. Kyutai's ``moshi`` where PersonaPlex's fork was meant), else ''."""
    from importlib import metadata

    top = module.split(".")[0]
    if top == module or top not in sys.modules:
        return ""
    dists = sorted(set(metadata.packages_distributions().get(top, ())))
    versions = ", ".join(f"{d} {metadata.version(d)}" for d in dists) or "no installed distribution"
    where = getattr(sys.modules[top], "__file__", None) or next(iter(getattr(sys.modules[top], "__path__", [])), "?")
    return f" (`{top}` imports here from {where}: {versions})"


def stack_problem(m: ModelSettings, needs: Requirements) -> str | None:
    """Why model ``m``'s stack (``needs.imports``: ``"module"`` or ``"module:name"``) does not import
    here, naming the first module that fails, or None. Any exception of an upstream module's import is
    its failure (reported, never raised)."""
    for spec in needs.imports:
        module, _, name = spec.partition(":")
        try:
            mod = importlib.import_module(module)
        except Exception as e:  # upstream code may fail at import with any error: it is reported, never raised
            why = f"{type(e).__name__}: {e}{_shadowed_by(module)}"
        else:
            if not name or hasattr(mod, name):
                continue
            why = f"it has no {name!r}{_shadowed_by(module)}"
        note = f"; {needs.stack}" if needs.stack else ""
        return f"model {m.name!r}: its stack does not import here: `{module}`: {why}{note}; {_where(m)}"
    return None


def needs_problems(m: ModelSettings) -> list[str]:
    """What model ``m`` (whose adapter imports and whose params bind) lacks here, from its
    ``requirements()``: the constructor's refusal of its params, its stack, and each repository
    that is not pinned, not local or not complete (:func:`harness.weights.locate`)."""
    from harness.models.registry import build_model
    from harness.weights import locate

    try:
        needs = build_model(m.target, m.params).requirements()
    except (ValueError, TypeError) as e:
        return [f"model {m.name!r} ({m.target}): model.{m.name}.params: {e}"]
    out = [p] if (p := stack_problem(m, needs)) else []
    for repo in needs.repos:
        try:
            locate(repo, m.name)
        except FileNotFoundError as e:
            out.append(f"model {m.name!r}: {e}")
        except ImportError as e:
            out.append(f"model {m.name!r}: cannot look up {repo} ({e}): huggingface_hub is part of the model's "
                       f"stack; {_where(m)}, then `{fetch_command(m.name)}`")
    return out


def params_problem(m: ModelSettings) -> str | None:
    """Why model ``m``'s ``params`` do not bind to its adapter's constructor, or None (also when its
    class cannot be imported here: :func:`model_problem` reports that where infer needs it)."""
    from harness.models.registry import check_params, model_class

    try:
        cls = model_class(m.target)
    except (ImportError, ValueError):
        return None
    try:
        check_params(cls, m.params)
    except ValueError as e:
        return f"model {m.name!r} ({m.target}): model.{m.name}.params: {e}"
    return None


def resource_problems(cfg: RunConfig, work: Pending) -> list[str]:
    """Requests the local Ray node (``cluster.num_cpus`` or this machine's cores,
    ``cluster.num_gpus``) cannot hold, and models it would give GPUs where torch sees no
    usable CUDA; none for a joined cluster (``cluster.address``)."""
    if cfg.cluster.address:
        return []
    out = []
    if os.environ.get("RAY_ADDRESS"):  # ray.init would join that cluster and refuse the local node's sizes
        out.append(f"RAY_ADDRESS is set ({os.environ['RAY_ADDRESS']!r}) but cluster.address is null, so this job "
                   "would start its own local Ray: unset RAY_ADDRESS to run locally, or join that cluster with "
                   "cluster.address=auto (cluster=kuberay in a KubeRay pod)")
    requests = {f"model {m.name!r}": (m.num_cpus, m.num_gpus) for m in work.infer}
    if work.score:
        requests["the scoring actor (score.num_cpus / score.num_gpus)"] = (cfg.score.num_cpus, cfg.score.num_gpus)
    node = {"CPU": float(cfg.cluster.num_cpus or os.cpu_count() or 1), "GPU": float(cfg.cluster.num_gpus)}
    out += [p + RESOURCE_HINT for p in unmet_requests(requests, [node])]
    given_gpus = [m for m in work.infer if 0 < m.num_gpus <= cfg.cluster.num_gpus]  # actors on this machine
    return out + [p for m in given_gpus if (p := cuda_problem(m, cfg.infer.allow_cpu_for_gpu_actors))]


def problems(cfg: RunConfig, store: ObjectStore, stages: Collection[str]) -> list[str]:
    """Every problem :func:`preflight` reports for running ``stages`` (names of
    :data:`harness.stages.STAGES`), in pipeline order; empty when the job can start."""
    from harness.audio.tts import TtsUnavailableError, build_tts
    from harness.reference import build_reference
    from harness.scoring.asr import build_asr
    from harness.scoring.judge import build_judge

    out = []
    try:
        store.probe()
        readable: ObjectStore | None = store
    except StoreError as e:
        out.append(str(e))
        readable = None
    try:
        work = pending(cfg, readable, stages)
    except InputFileError as e:  # a file a setting names: no prefix can be derived without its content
        return [*out, str(e)]
    out += [p for m in cfg.models if (p := params_problem(m))]
    if work.scenes and cfg.scenes.source == "llm":  # the script writer's SDK and key
        from harness.scenes.settings import script_backend

        label = f"scenes.llm.backend={cfg.scenes.llm.backend}"
        try:
            writer = script_backend(cfg.scenes.llm)
        except (ValueError, TypeError) as e:
            out.append(f"{label}: {e}")
        else:
            out += backend_problems(label, writer, "the scenes stage (scenes.source=llm writes the scripts)")
    judge_needed_by = ["score"] if work.score else []
    if work.reference:
        rc = cfg.reference
        try:
            reference = build_reference(rc.kind, **rc.params)
        except (ValueError, TypeError) as e:
            out.append(f"reference={rc.kind}: {e}")
        else:
            out += backend_problems(f"reference={rc.kind}", getattr(reference, "backend", reference),
                                    "the reference stage")
            if reference.writes_answers:  # its answers are judged against the gold answer
                judge_needed_by.insert(0, "reference")
    if judge_needed_by:
        try:
            judge = build_judge(cfg.judge.kind, **cfg.judge.params)
        except (ValueError, TypeError) as e:
            out.append(f"judge={cfg.judge.kind}: {e}")
        else:
            out += backend_problems(f"judge={cfg.judge.kind}", judge,
                                    f"the {' and '.join(judge_needed_by)} stage{'s' * (len(judge_needed_by) > 1)}")
    if work.synth:
        try:
            build_tts(cfg.tts, cfg.protocol.sample_rate).check()
        except (TtsUnavailableError, ValueError) as e:
            out.append(f"tts={cfg.tts.engine}: {e}")
    if work.score:
        try:
            build_asr(cfg.asr.kind, **cfg.asr.params)
        except (RuntimeError, ValueError, TypeError) as e:
            out.append(f"asr={cfg.asr.kind}: {e}")
    for m in work.infer:
        problem = model_problem(m)
        if problem:
            out.append(problem)
            continue
        from harness.models.registry import model_class

        if not params_problem(m):  # (reported above otherwise) its stack and weights
            out += needs_problems(m)
        # a hosted model's SDK and API key (its class declares sdk_module, credentials_env)
        out += backend_problems(f"model={m.name}", model_class(m.target), f"model {m.name!r} in the infer stage")
    return out + cue_problems(cfg, readable, stages) + resource_problems(cfg, work)


def cue_problems(cfg: RunConfig, store: ObjectStore | None, stages: Collection[str]) -> list[str]:
    """What the Duplex Cue stages among ``stages`` (``cue-corpus``, ``cue-score``) lack (see the
    module docstring); ``store`` None: it cannot be read, so every stage is pending."""
    from harness.cue.plan import CuePlan
    from harness.cue.scoring import build_labeler
    from harness.scoring.asr import build_asr
    from harness.stages.cue_score import transcriber_params

    try:
        plan, c = CuePlan.from_config(cfg), cfg.cue
    except InputFileError as e:  # cue.manifest or a labeller's prompt: no prefix without its content
        return [str(e)]

    def done(prefix: str) -> bool:
        return store is not None and store.exists(plan.layout.marker(prefix))

    out = []
    if "cue-score" not in stages or all(done(plan.score[m.name]) for m in cfg.models):
        return out
    try:
        labeler = build_labeler(c.labeler, c.labeler_params)
    except (ValueError, TypeError) as e:
        out.append(f"cue.labeler={c.labeler}: {e}")
    else:
        backend = getattr(labeler, "backend", None)  # an LLM labeller's judge backend; the rule has none
        if backend is not None:
            out += backend_problems(f"cue.labeler={c.labeler}", backend, "the cue-score stage")
    try:
        asr = build_asr(c.transcriber, **transcriber_params(cfg))
    except (RuntimeError, ValueError, TypeError) as e:
        out.append(f"cue.transcriber={c.transcriber}: {e}")
    else:
        out += [f"cue.transcriber={c.transcriber}: {p}" for p in weights_problems(asr)]
    return out


def weights_problems(asr: object) -> list[str]:
    """Weights an ASR backend that never downloads (``allow_download`` False) would not find:
    its ``model`` and ``forced_aligner`` (a folder or a Hugging Face repo id in the local cache;
    :func:`harness.weights.local_weights`). A backend without ``allow_download`` has none to check."""
    from harness.weights import local_weights

    if getattr(asr, "allow_download", True):
        return []
    out = []
    for what in ("model", "forced_aligner"):
        where = getattr(asr, what, None)
        if where:
            try:
                local_weights(where, what=f"the {what.replace('_', ' ')} weights {where!r}")
            except (FileNotFoundError, ImportError) as e:
                out.append(str(e))
    return out


def preflight(cfg: RunConfig, store: ObjectStore, stages: Collection[str]) -> None:
    """Check what ``stages`` need before anything is spent (see the module docstring).

    Raises:
        PreflightError: one line per problem found, all of them.
    """
    found = problems(cfg, store, stages)
    if found:
        raise PreflightError(f"preflight: {len(found)} problem(s); nothing was started:\n"
                             + "\n".join(f"  - {p}" for p in found))
