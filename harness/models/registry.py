"""Lazy model registry: name -> ``"module:Class"``, imported only when a model is built.

Importing the harness never imports any model stack (their dependency pins conflict; each
family lives in its own image). A config may also name a class directly as ``"module:Class"``.
"""

from __future__ import annotations

import importlib
from typing import Any

from harness.models.base import DuplexModel

REGISTRY: dict[str, str] = {
    "silent": "harness.models.baselines:SilentModel",
    "babble": "harness.models.baselines:BabbleModel",
    "oracle": "harness.models.baselines:OracleModel",
    "replay": "harness.models.cue_baselines:ReplayModel",  # Duplex Cue self-checks (teacher-forced)
    "yield_now": "harness.models.cue_baselines:YieldNowModel",
    "ignore": "harness.models.cue_baselines:IgnoreModel",
    "personaplex": "harness.models.personaplex:PersonaPlexModel",
    "freeze_omni": "harness.models.freeze_omni:FreezeOmniModel",
    "flm_audio": "harness.models.flm_audio:FLMAudioModel",
    "voila": "harness.models.voila:VoilaModel",
    "minicpm_o": "harness.models.minicpm_o:MiniCPMO",
    "moshi": "harness.models.moshi:MoshiModel",
    "cascade": "harness.models.cascade:CascadeModel",
    "openai_realtime": "harness.models.openai_realtime:OpenAIRealtimeModel",
    "gemini_live": "harness.models.gemini_live:GeminiLiveModel",
}


def model_class(target: str) -> type:
    """The class a registered model name or a ``"module:Class"`` path names, importing its module
    (and with it the model's stack) but loading nothing.

    Raises:
        ValueError: unknown name, or a module without that class.
        ImportError: the model's module (or its dependencies) cannot be imported.
    """
    path = REGISTRY.get(target, target)
    if ":" not in path:
        raise ValueError(f"unknown model {target!r}; registered: {sorted(REGISTRY)} (or give 'module:Class')")
    module, cls_name = path.split(":", 1)
    cls = getattr(importlib.import_module(module), cls_name, None)
    if cls is None:
        raise ValueError(f"module {module} has no class {cls_name!r}")
    return cls


def build_model(target: str, params: dict[str, Any] | None = None) -> DuplexModel:
    """Instantiate a registered model name or a ``"module:Class"`` path with ``params``.

    Raises:
        ValueError: unknown name, or an object that is not a :class:`DuplexModel`.
        ImportError: the model's module (or its dependencies) cannot be imported.
    """
    path = REGISTRY.get(target, target)
    cls = model_class(target)
    model = cls(**(params or {}))
    if not isinstance(model, DuplexModel):
        raise ValueError(f"{path} is not a DuplexModel")
    return model
