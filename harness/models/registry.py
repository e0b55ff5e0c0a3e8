"""Lazy model registry: a model's adapter is named by its config, imported only when it is built.

Each ``conf/model/<name>.yaml`` names its adapter as ``target: "<module>:<Class>"``; that file is
the registration (there is no list in the code to edit: docs/adding-a-model.md). A target is
either such a ``"module:Class"`` path or the name of a model config, resolved through that
config's own target, so ``build_model("silent")`` and ``model.x.target=silent`` keep working.
Listing models reads the YAML files only: importing the harness never imports a model stack
(their dependency pins conflict; each family lives in its own image). Architecture: "a lazy
name -> module:Class registry".
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from harness.models.base import DuplexModel

#: the model configs: ``<name>.yaml``, each holding ``{name: {target: "module:Class", params: {...}, ...}}``
CONF_DIR = Path(__file__).resolve().parents[2] / "conf" / "model"


def _read(path: Path) -> dict[str, Any]:
    doc = yaml.safe_load(path.read_text())
    if not isinstance(doc, dict) or list(doc) != [path.stem] or not isinstance(doc[path.stem], dict):
        raise ValueError(f"{path}: a model config holds one mapping, under its own name {path.stem!r}")
    settings = doc[path.stem]
    target = settings.get("target")
    if not isinstance(target, str) or ":" not in target:
        raise ValueError(f"{path}: target must name the adapter as 'module:Class', got {target!r}")
    return settings


def model_configs(conf_dir: Path = CONF_DIR) -> dict[str, dict[str, Any]]:
    """Every model config under ``conf_dir``: ``{name: its settings}`` (``target``, ``params``,
    ``image``, ...), by name; the YAML is read, no adapter is imported.

    Raises:
        ValueError: a file that does not hold one mapping under its own name, or whose ``target``
            is not a ``"module:Class"`` path.
    """
    return {p.stem: _read(p) for p in sorted(Path(conf_dir).glob("*.yaml"))}


def model_config(name: str, conf_dir: Path = CONF_DIR) -> dict[str, Any]:
    """The settings of the model config ``name`` (``conf_dir/<name>.yaml``; see :func:`model_configs`).

    Raises:
        ValueError: there is no such config (the message lists those there are), or it is malformed.
    """
    path = Path(conf_dir) / f"{name}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in Path(conf_dir).glob("*.yaml"))
        raise ValueError(f"unknown model {name!r}; the model configs ({conf_dir}): {names} (or give 'module:Class')")
    return _read(path)


def resolve_target(target: str, conf_dir: Path = CONF_DIR) -> str:
    """The ``"module:Class"`` path ``target`` names: itself when it is one, else the target of the
    model config of that name (:func:`model_config`).

    Raises:
        ValueError: neither a ``"module:Class"`` path nor the name of a model config (the message
            lists the configs), or a malformed config.
    """
    return target if ":" in target else model_config(target, conf_dir)["target"]


def model_class(target: str, conf_dir: Path = CONF_DIR) -> type:
    """The class ``target`` (a ``"module:Class"`` path or a model config name, :func:`resolve_target`)
    names, importing its module (an adapter imports its stack only in ``load``) but building nothing.

    Raises:
        ValueError: an unknown name, or a module without that class.
        ImportError: the module (or what it imports) cannot be imported.
    """
    module, cls_name = resolve_target(target, conf_dir).split(":", 1)
    cls = getattr(importlib.import_module(module), cls_name, None)
    if cls is None:
        raise ValueError(f"module {module} has no class {cls_name!r}")
    return cls


def check_params(cls: type, params: Mapping[str, Any]) -> None:
    """Bind ``params`` to ``cls``'s constructor without calling it (issue 19 item 12: a misspelt key
    is found before anything runs, as torchtune validates a config without building it).

    Raises:
        ValueError: a key the constructor does not take, or a required one missing; the message
            names them and lists the keys it accepts.
    """
    sig = inspect.signature(cls)
    try:
        sig.bind(**params)
    except TypeError as e:
        accepted = [n for n, p in sig.parameters.items()
                    if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)]
        unknown = [k for k in params if k not in accepted]
        what = f"unknown parameter{'s' * (len(unknown) > 1)} {', '.join(map(repr, unknown))}" if unknown else str(e)
        raise ValueError(f"{what}; {cls.__name__} accepts: {', '.join(accepted) or 'no parameters'}") from None


def build_model(target: str, params: dict[str, Any] | None = None, conf_dir: Path = CONF_DIR) -> DuplexModel:
    """Instantiate the class ``target`` names (:func:`model_class`) with ``params``; loads no weights.

    Raises:
        ValueError: an unknown name, or an object that is not a :class:`DuplexModel`.
        TypeError: ``params`` do not fit the constructor.
        ImportError: the model's module (or its dependencies) cannot be imported.
    """
    cls = model_class(target, conf_dir)
    model = cls(**(params or {}))
    if not isinstance(model, DuplexModel):
        raise ValueError(f"{resolve_target(target, conf_dir)} is not a DuplexModel")
    return model
