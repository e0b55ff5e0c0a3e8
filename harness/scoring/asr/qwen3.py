"""The cluster ASR backend: Qwen3-ASR-1.7B (the paper's recogniser) through PyPI ``qwen-asr``.

Needs the GPU image of the ASR family (``qwen-asr`` pins its own ``transformers``; the harness
core never imports it) and the weights already in the Hugging Face cache: nothing is
downloaded. By default the model directory is resolved with
``huggingface_hub.snapshot_download(..., local_files_only=True)``; ``HF_HUB_OFFLINE=1`` is
honoured either way (transformers and huggingface_hub read it), and a missing snapshot is a
:class:`RuntimeError` that names the repository. A local directory may be given as ``model``.

Usage follows the package's documented API::

    model = Qwen3ASRModel.from_pretrained(path, dtype=torch.bfloat16, device_map="cuda:0",
                                          max_inference_batch_size=..., max_new_tokens=...)
    model.transcribe(audio=(wav_16k, 16000), context="...", language="English")[0].text

``vocabulary`` is passed as the model's *context* (Qwen3-ASR's biasing prompt) unless
``use_context=False``; the scoring flow passes the scene's turns and the duty preamble, and
the gold answer only with ``asr.bias_with_gold`` (:func:`harness.scoring.flow.scene_vocabulary`).
Word times are returned only when a forced aligner
(``Qwen/Qwen3-ForcedAligner-0.6B``) is configured. The text is normalised like every backend's
(:func:`harness.scoring.asr.text.normalize`: lower case, no punctuation, digits spelled out).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from importlib import metadata
from typing import Any

import numpy as np

from harness.scoring.asr import Transcript, prepare_input
from harness.scoring.asr.text import normalize, words
from harness.weights import WeightsNotFoundError, local_weights

IMPL_VERSION = "1"
DECODE_RATE = 16_000
DEFAULT_MODEL = "Qwen/Qwen3-ASR-1.7B"
INSTALL_HINT = (
    "the qwen3 ASR backend needs the GPU image of the Qwen3-ASR family, or "
    "`pip install qwen-asr` (it pins transformers 4.57.x; keep it out of the harness venv) "
    "plus the Qwen/Qwen3-ASR-1.7B weights in the Hugging Face cache"
)


def _require() -> str:
    """Import ``qwen_asr`` (and with it torch + transformers); return its version or raise RuntimeError."""
    missing = []
    for mod in ("torch", "transformers", "qwen_asr"):
        try:
            __import__(mod)
        except ImportError as e:
            missing.append(f"{mod} ({e})")
    if missing:
        raise RuntimeError(f"cannot import {', '.join(missing)}: {INSTALL_HINT}")
    try:
        return metadata.version("qwen-asr")
    except metadata.PackageNotFoundError:
        return "unknown"


class Qwen3ASR:
    """Qwen3-ASR through ``qwen_asr.Qwen3ASRModel`` (transformers backend); weights load lazily.

    Args:
        model: Hugging Face repo id or a local model directory.
        device: ``device_map`` for ``from_pretrained`` (``"cuda:0"``, ``"cpu"``, ...).
        dtype: torch dtype name (``"bfloat16"``, ``"float16"``, ``"float32"``).
        language: forced language (``None``: the model detects it).
        use_context: pass ``vocabulary`` as Qwen3-ASR's context prompt.
        max_context_chars: the context is cut to this many characters (the last ones are kept).
        max_new_tokens: generation limit per audio chunk.
        forced_aligner: repo id or directory of a Qwen3 forced aligner for word times (optional).
        allow_download: let huggingface_hub fetch missing weights (off: the harness never
            downloads at run time).
        model_kwargs: further keyword arguments for ``AutoModel.from_pretrained``
            (e.g. ``attn_implementation="flash_attention_2"``).

    Raises:
        RuntimeError: ``qwen_asr``, ``transformers`` or ``torch`` is not importable (the
            message carries the install hint).
    """

    name = "qwen3-asr"

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        device: str = "cuda:0",
        dtype: str = "bfloat16",
        language: str | None = "English",
        use_context: bool = True,
        max_context_chars: int = 4000,
        max_new_tokens: int = 256,
        forced_aligner: str | None = None,
        allow_download: bool = False,
        model_kwargs: dict[str, Any] | None = None,
    ):
        pkg_version = _require()
        self.model, self.device, self.dtype, self.language = model, device, dtype, language
        self.use_context, self.max_context_chars = use_context, max_context_chars
        self.max_new_tokens, self.forced_aligner = max_new_tokens, forced_aligner
        self.allow_download = allow_download
        self.model_kwargs = dict(model_kwargs or {})
        self._asr: Any = None
        self._lock = threading.Lock()
        settings = {
            "impl": IMPL_VERSION,
            "qwen-asr": pkg_version,
            "model": model,
            "dtype": dtype,
            "language": language,
            "use_context": use_context,
            "max_context_chars": max_context_chars,
            "max_new_tokens": max_new_tokens,
            "forced_aligner": forced_aligner,
        }
        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]
        self.version = f"{IMPL_VERSION}+qwen-asr{pkg_version}.{digest}"

    def _resolve(self, repo_or_dir: str) -> str:
        """A local directory for ``repo_or_dir``; no download unless ``allow_download``."""
        try:
            return str(local_weights(repo_or_dir, what=f"the weights of {repo_or_dir!r}",
                                     allow_download=self.allow_download))
        except ImportError as e:
            raise RuntimeError(f"cannot look up {repo_or_dir!r} in the Hugging Face cache: {e}; "
                               f"{INSTALL_HINT}") from None
        except WeightsNotFoundError as e:
            raise RuntimeError(str(e)) from None

    def load(self) -> Any:
        """Load the model once (idempotent) and return the ``Qwen3ASRModel``."""
        if self._asr is None:
            import torch
            from qwen_asr import Qwen3ASRModel

            kwargs: dict[str, Any] = {
                "dtype": getattr(torch, self.dtype),
                "device_map": self.device,
                "max_inference_batch_size": 8,
                "max_new_tokens": self.max_new_tokens,
                **self.model_kwargs,
            }
            if self.forced_aligner is not None:
                kwargs["forced_aligner"] = self._resolve(self.forced_aligner)
                kwargs["forced_aligner_kwargs"] = {"dtype": kwargs["dtype"], "device_map": self.device}
            self._asr = Qwen3ASRModel.from_pretrained(self._resolve(self.model), **kwargs)
        return self._asr

    def _context(self, vocabulary: Sequence[str]) -> str:
        if not self.use_context:
            return ""
        text = " ".join(t.strip() for t in vocabulary if t.strip())
        return text[-self.max_context_chars:] if len(text) > self.max_context_chars else text

    def transcribe(self, audio: np.ndarray, sample_rate: int, vocabulary: Sequence[str] = ()) -> Transcript:
        """Transcribe mono ``float32[n]`` audio; raises ValueError for non-mono / non-finite input."""
        y, vocabulary = prepare_input(audio, sample_rate, vocabulary, DECODE_RATE)
        if y is None:  # under 100 ms: nothing to recognise
            return Transcript("")
        with self._lock:
            asr = self.load()
            res = asr.transcribe(
                audio=(y, DECODE_RATE),
                context=self._context(vocabulary),
                language=self.language,
                return_time_stamps=self.forced_aligner is not None,
            )[0]
        out: list[tuple[str, float, float]] = []
        for item in getattr(res, "time_stamps", None) or ():
            if item.start_time is None or item.end_time is None:
                continue
            for tok in words(str(item.text)):
                out.append((tok, float(item.start_time), float(item.end_time)))
        return Transcript(normalize(res.text or ""), tuple(out))
