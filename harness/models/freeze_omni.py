"""Freeze-Omni (VITA-MLLM/Freeze-Omni at the commit ``images/freeze-omni/build-args`` pins) as a full-duplex model.

Freeze-Omni is a frozen Qwen2-7B-Instruct with a streaming speech encoder, a "state head"
that decides when the user has finished (``models/audioLLM.py``), and a speech decoder
(``models/decoder/llm2tts.py``: an AR Llama decoder over TiCodec tokens, 24 kHz) that speaks
whole sentences. Its full-duplex behaviour lives outside the model, in the demo server
(``bin/server.py send_pcm/llm_prefill/generate``, ``web/vad.py VAD``); this adapter runs the
same state machine synchronously, one 160 ms chunk per step:

1. ``web.vad.VAD.predict`` (upstream, used as is: Silero VAD, threshold 0.8, 512-sample
   windows, 2 s of silence ends speech) turns the chunk into 80-d kaldi fbank features
   (``float[1, 19, 80]``: 16 new frames + 3 of overlap) and a VAD status.
2. On a VAD start the LLM state goes back to the last snapshot (the system role, or the end
   of the last answer), the 6 chunks before the start are replayed, then every chunk is fed
   to ``inferencePipeline.speech_dialogue`` while the state head says ``cl`` (listen on).
3. On ``ss`` (start speaking) the answer is generated at once, token by token, and each
   sentence is synthesised by ``llm2TTS.run`` as soon as it ends (the server's rules: a
   first piece may end at a comma, pieces need at least 4 tokens, at most ``max_new_tokens``
   tokens). A new ``ss`` while the last answer is still being said cuts it off (the server's
   ``interrupt``), exactly as the demo client stops playback.

Time model (models.md, "Time model"): the harness gives a step unlimited compute, so an
answer is generated completely in the step whose chunk made the state head say ``ss`` and
starts in that step's output frame (as any model's output of a step follows its input up to
that step); the speech is queued in an :class:`OutputQueue` (sentences of any length, padded
with silence, never dropped or stretched). In the server the same work runs in a thread while
audio keeps coming in, so there the answer starts later by its compute time.

Duty instruction (docs/protocol-decisions.md): Freeze-Omni takes a system role as text
(``AudioLLM.set_system_role``): the role is ``system_role`` (upstream's preset), followed by the
stream's ``duty_text`` when the protocol gives it (``protocol.duty_as_text``); the spoken preamble
comes through the audio like every other input. The role's KV cache is computed once per
distinct role and copied for each stream.

Upstream behaviours handled here, once:

* CUDA is hard-coded (``.to('cuda')``, ``.cuda()``, ``torch.autocast("cuda")`` in
  ``models/pipeline.py``, ``models/audioLLM.py``, ``models/encoder/transformer.py``,
  ``models/decoder/llm2tts.py``): on a CUDA device the code runs unchanged; on another device
  (the CPU of ``tiny`` runs) :func:`_upstream_calls` redirects those calls to it and runs
  CUDA autocast as bfloat16 CPU autocast, as on a bf16-capable GPU.
* ``models/encoder/encoder.py speechEncoder`` parses ``sys.argv`` (``parse_known_args``), so
  a process argument such as ``--transformer-num-blocks`` would silently change the encoder:
  the model is built with an empty argument list.
* Checkpoints are read with ``torch.load`` and torch's pre-2.6 default ``weights_only=False``
  (upstream pins torch 2.2.0; ``models/utils.py``, ``models/decoder/llm2tts.py``,
  ``models/decoder/ticodec/vqvae.py``): only the configured local weights folder is read.
* ``bin/server.py`` cannot be imported (it starts the server at import) and
  ``bin/inference.py`` imports flask through ``web/parms.py``: the generation loop and the
  sentence decoder are re-expressed here from ``bin/server.py generate/decoder``.
* ``bin/server.py generate`` fails (``KeyError``) when the first token already ends the
  answer, and reads ``last_text[-1]`` of an empty string when the first piece is ``"."``:
  here an immediate end says nothing, and an empty ``last_text`` is not a digit.
* The TTS call reshapes the LLM's embeddings and hidden states to ``(-1, 896)``
  (``bin/server.py decoder``): an LLM whose hidden size is not a multiple of 896 is refused
  at load.
* Upstream prints a line per chunk (``audioLLM.py _generate_one_step``) and per TTS piece:
  stdout is discarded during upstream calls.
* Batch 1 only (``last_id[0][0]``, ``[1, T]`` masks, per-user caches): ``max_batch`` is 1;
  throughput comes from several actors per GPU (fractional ``num_gpus``).

Sampling uses torch's global generator (``audioLLM.py _post_decode``, ``decoder.py infer``):
it is seeded from the stream's seed (plus ``seed``) when the stream opens, so a
conversation's output does not depend on what the actor ran before.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import itertools
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from harness.models.base import TEXT_PROMPT, DuplexModel, ModelInfo, OutputQueue, RowError, StreamContext
from harness.weights import Repo, Requirements, loaded, locate

INPUT_RATE = 16_000
OUTPUT_RATE = 24_000
FRAME_IN = 2_560  # one 160 ms chunk (web/vad.py VAD.CHUNK: 16 fbank frames of 10 ms)
FRAME_OUT = 3_840
TTS_DIM = 896  # bin/server.py decoder: embeddings and hidden states reshaped to (-1, 896)
PIECE_END = (",", "，", "。", "：", "？", "！", ".", ":", "?", "!", "\n")  # bin/server.py generate
SENTENCE_END = ("。", "：", "？", "！", ".", "?", "!", "\n")
MIN_PIECE_TOKENS = 4
LONG_PIECE_TOKENS = 20  # from this many tokens a piece may end at a comma too
FIRST_SEGMENT_ONSET = 0.03  # bin/server.py decoder: the first segment starts at its first |x| > 0.03
MAX_BATCH = 1  # batch-1 code (module docstring)
# the weights, as the Hub repository lays them out and bin/server.py, models/pipeline.py and
# models/decoder/llm2tts.py read them (model_path = the checkpoints folder)
CHECKPOINTS = "checkpoints"
CHECKPOINT_FILES = ("audiollm/train.yaml", "audiollm/global_cmvn", "audiollm/final.pt", "decoder/model.json",
                    "decoder/final.pt", "codec/model.json", "codec/final.pt", "server.json")
# models/audioLLM.py: AutoModelForCausalLM / AutoTokenizer.from_pretrained(llm_path)
LLM_FILES = ("config.json", "tokenizer_config.json")
LLM_ALTERNATIVES = (("model.safetensors.index.json", "model.safetensors"), ("tokenizer.json", "vocab.json"))
STACK = ("models.pipeline:inferencePipeline", "models.decoder.llm2tts:llm2TTS", "web.vad:VAD")
# the speech decoder's settings in checkpoints/server.json (bin/server.py decoder)
TTS_KEYS = ("decoder_top_k", "decoder_penalty_window_size", "decoder_penalty", "decoder_first_chunk_size",
            "decoder_chunk_size", "decoder_chunk_overlap_size", "decoder_N", "decoder_seg_threshold_first_pack",
            "decoder_seg_threshold")
# the tiny instance's server.json: the values upstream PR #15 mirrors from the released file
TINY_SERVER = {"decoder_top_k": 2, "decoder_penalty_window_size": -1, "decoder_penalty": 1.1,
               "decoder_first_chunk_size": 20, "decoder_chunk_size": 40, "decoder_chunk_overlap_size": 10,
               "decoder_N": 2401, "decoder_seg_threshold_first_pack": 0.1, "decoder_seg_threshold": 0.015}


@contextlib.contextmanager
def _upstream_calls(device: str, *, loading: bool = False) -> Iterator[None]:
    """Run Freeze-Omni code on ``device`` (see the module docstring for each patch).

    On a CUDA device only stdout is discarded (and, while ``loading``, ``torch.load`` keeps
    the pre-2.6 default and ``sys.argv`` is empty). On another device every hard-coded CUDA
    transfer goes to ``device`` and CUDA autocast becomes bfloat16 autocast there. Patches
    are process-wide while the block runs; every model call runs on the actor's one model
    thread, and nothing else in the harness moves tensors to CUDA or uses autocast.
    """
    import torch

    saved = []

    def patch(owner: Any, name: str, value: Any) -> None:
        saved.append((owner, name, getattr(owner, name)))
        setattr(owner, name, value)

    target = torch.device(device)
    if target.type != "cuda":
        tensor_to, module_to, autocast = torch.Tensor.to, torch.nn.Module.to, torch.autocast

        def is_cuda(a: Any) -> bool:
            return (isinstance(a, str) and a.startswith("cuda")) or (isinstance(a, torch.device) and a.type == "cuda")

        def redirect(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
            args = tuple(target if is_cuda(a) else a for a in args)
            if is_cuda(kwargs.get("device")):
                kwargs = {**kwargs, "device": target}
            return args, kwargs

        def to(self, *args, **kwargs):
            args, kwargs = redirect(args, kwargs)
            return tensor_to(self, *args, **kwargs)

        def module_to_(self, *args, **kwargs):
            args, kwargs = redirect(args, kwargs)
            return module_to(self, *args, **kwargs)

        def cuda_autocast(device_type: str, *args, **kwargs):
            return autocast(target.type if device_type == "cuda" else device_type, *args, **kwargs)

        patch(torch.Tensor, "to", to)
        patch(torch.Tensor, "cuda", lambda self, *a, **k: tensor_to(self, target))
        patch(torch.nn.Module, "to", module_to_)
        patch(torch.nn.Module, "cuda", lambda self, *a, **k: module_to(self, target))
        patch(torch, "autocast", cuda_autocast)
        patch(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    if loading:
        load = torch.load
        patch(torch, "load", lambda *a, **k: load(*a, **{"weights_only": False, **k}))
        patch(sys, "argv", sys.argv[:1])
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for owner, name, value in reversed(saved):
            setattr(owner, name, value)


class _Stream:
    """One row's conversation: the server's per-user state (``web/parms.py GlobalParams``)."""

    def __init__(self, vad: Any, system_role: dict):
        self.vad = vad
        self.snapshot = copy.deepcopy(system_role)  # GlobalParams.generate_outputs
        self.outputs: dict | None = None  # the listening state (send_pcm's ``outputs``)


class FreezeOmniModel(DuplexModel):
    """Freeze-Omni behind the server's duplex state machine; one stream per instance.

    Args:
        weights_path: a local folder laid out as the VITA-MLLM/Freeze-Omni repository is (its
            ``checkpoints/`` holding ``audiollm/{train.yaml,global_cmvn,final.pt}``,
            ``decoder/{model.json,final.pt}``, ``codec/{model.json,final.pt}`` and ``server.json``:
            the layout of the README's "move ``checkpoints`` into the repo" and of the Hub
            snapshot); default: ``repo@revision`` from the Hugging Face cache (``HF_HOME``).
        llm_path: local Qwen2-7B-Instruct folder; default ``llm_repo@llm_revision`` from the cache.
        repo, revision, llm_repo, llm_revision: the two repositories and their commits (40 hex
            digits each), fetched once by ``make weights MODEL=freeze_omni``, never downloaded at
            run time; ``ModelInfo.weights`` records both ``repo@<commit>`` after load.
        system_role: the system role's preset text, always sent (the report shows it); the duty
            instruction follows it when the protocol gives it (``protocol.duty_as_text``).
        temperature, top_k, top_p: the LLM's sampling (``bin/server.py`` defaults 0.7, 5, 0.8).
        max_new_tokens: longest answer in tokens (``bin/server.py generate``: 500).
        decoder_top_k, decoder_penalty_window_size, decoder_penalty, decoder_first_chunk_size,
            decoder_chunk_size, decoder_chunk_overlap_size, decoder_N,
            decoder_seg_threshold_first_pack, decoder_seg_threshold: the speech decoder's
            settings; ``None`` (the default): the released ``checkpoints/server.json``'s value,
            which ``bin/server.py decoder`` reads; a value given here overrides it.
        seed: added to each stream's seed before seeding torch's generator.
        tiny: build a tiny randomly initialised instance of the real architecture on the CPU
            (``make model-smoke``) instead of reading weights.

    Raises:
        ValueError: sampling settings out of range; from ``load``, a ``server.json`` that lacks a
            decoder setting left ``None``, or an LLM whose hidden size is not a multiple of 896.
    """

    SOURCE_DIRS = (".",)

    def __init__(self, weights_path: str | None = None, llm_path: str | None = None,
                 repo: str = "VITA-MLLM/Freeze-Omni", revision: str | None = None,
                 llm_repo: str = "Qwen/Qwen2-7B-Instruct", llm_revision: str | None = None,
                 system_role: str = "You are a helpful voice assistant.",
                 temperature: float = 0.7, top_k: int = 5, top_p: float = 0.8, max_new_tokens: int = 500,
                 decoder_top_k: int | None = None, decoder_penalty_window_size: int | None = None,
                 decoder_penalty: float | None = None, decoder_first_chunk_size: int | None = None,
                 decoder_chunk_size: int | None = None, decoder_chunk_overlap_size: int | None = None,
                 decoder_N: int | None = None, decoder_seg_threshold_first_pack: float | None = None,
                 decoder_seg_threshold: float | None = None, seed: int = 0, tiny: bool = False):
        if temperature <= 0 or top_k < 0 or not 0 <= top_p <= 1 or max_new_tokens < 1:
            raise ValueError(f"freeze_omni: bad sampling settings temperature={temperature} top_k={top_k} "
                             f"top_p={top_p} max_new_tokens={max_new_tokens}")
        self.weights_path, self.llm_path = weights_path, llm_path
        self.repo, self.revision, self.llm_repo, self.llm_revision = repo, revision, llm_repo, llm_revision
        self.system_role = system_role
        self.sampling = SimpleNamespace(temperature=temperature, top_k=top_k, top_p=top_p)
        self.max_new_tokens = max_new_tokens
        self.tts_overrides = {k: v for k, v in {
            "decoder_top_k": decoder_top_k, "decoder_penalty_window_size": decoder_penalty_window_size,
            "decoder_penalty": decoder_penalty, "decoder_first_chunk_size": decoder_first_chunk_size,
            "decoder_chunk_size": decoder_chunk_size, "decoder_chunk_overlap_size": decoder_chunk_overlap_size,
            "decoder_N": decoder_N, "decoder_seg_threshold_first_pack": decoder_seg_threshold_first_pack,
            "decoder_seg_threshold": decoder_seg_threshold}.items() if v is not None}
        self.seed, self.tiny = seed, tiny
        weights = "random:tiny" if tiny else "+".join(map(str, self._repos()))
        self.info = ModelInfo("freeze_omni", INPUT_RATE, OUTPUT_RATE, FRAME_IN, FRAME_OUT, MAX_BATCH,
                              capabilities=frozenset({TEXT_PROMPT}), weights=weights,
                              preset_text=system_role.strip())
        self._streams: dict[int, _Stream] = {}
        self._vads: dict[int, Any] = {}  # row -> web.vad.VAD, reset for each stream
        self._roles: dict[str, dict] = {}  # role text -> speech_dialogue(stat="pre") outputs
        self._queue = OutputQueue(MAX_BATCH, FRAME_OUT)

    # ------------------------------------------------------------------------------------ load

    def _repos(self) -> tuple[Repo, Repo]:
        """The Freeze-Omni repository (its ``checkpoints/``) and the LLM's."""
        return (Repo(self.weights_path or self.repo, None if self.weights_path else self.revision,
                     tuple(f"{CHECKPOINTS}/{f}" for f in CHECKPOINT_FILES),
                     source_key="weights_path" if self.weights_path else "repo"),
                Repo(self.llm_path or self.llm_repo, None if self.llm_path else self.llm_revision, LLM_FILES,
                     LLM_ALTERNATIVES, role="LLM", source_key="llm_path" if self.llm_path else "llm_repo",
                     revision_key="llm_revision"))

    def requirements(self) -> Requirements:
        """The Freeze-Omni checkout's ``models`` and ``web`` and, unless tiny, both repositories."""
        return Requirements(STACK, () if self.tiny else self._repos(),
                            "the checkout's top-level packages are named `models` and `web`: only its root may "
                            "be on the path")

    def load(self, device: str) -> None:
        import tempfile

        import torch

        self.torch, self.device = torch, device
        if self.tiny:
            self._tmp = tempfile.TemporaryDirectory(prefix="freeze-omni-tiny-")
            model_path, llm_path = Path(self._tmp.name) / CHECKPOINTS, Path(self._tmp.name) / "llm"
            with _upstream_calls("cpu", loading=True):
                write_tiny_checkpoint(model_path, llm_path)
        else:
            repos = self._repos()
            root, llm_path = (locate(r, self.info.name) for r in repos)
            model_path = root / CHECKPOINTS
            self.info = dataclasses.replace(self.info, weights="+".join(
                loaded(r, d) for r, d in zip(repos, (root, llm_path), strict=True)))
        released = json.loads((model_path / "server.json").read_text())
        self.tts_settings = {k: self.tts_overrides.get(k, released.get(k)) for k in TTS_KEYS}
        unset = [k for k, v in self.tts_settings.items() if v is None]
        if unset:
            raise ValueError(f"freeze_omni: {model_path / 'server.json'} has no {', '.join(unset)}: give them as "
                             "params (the speech decoder's settings, bin/server.py decoder)")
        hidden = json.loads((llm_path / "config.json").read_text()).get("hidden_size")
        if not isinstance(hidden, int) or hidden % TTS_DIM:
            raise ValueError(f"freeze_omni: LLM hidden size {hidden} ({llm_path / 'config.json'}) is not a "
                             f"multiple of {TTS_DIM} (bin/server.py decoder reshapes to (-1, 896))")
        with _upstream_calls(device, loading=True):
            from models.decoder.llm2tts import llm2TTS
            from models.pipeline import inferencePipeline

            args = SimpleNamespace(model_path=str(model_path), llm_path=str(llm_path), **vars(self.sampling))
            self.pipeline = inferencePipeline(args)
            self.tts = llm2TTS(str(model_path))

    # -------------------------------------------------------------------------------- streams

    def open(self, row: int, stream: StreamContext) -> None:
        role = " ".join(t for t in (self.system_role.strip(), stream.duty_text.strip()) if t)
        if role not in self._roles:
            with _upstream_calls(self.device):
                self._roles[role] = self.pipeline.speech_dialogue(None, stat="pre", role=role)
        if row not in self._vads:
            with _upstream_calls(self.device):
                from web.vad import VAD

                self._vads[row] = VAD()
        self._vads[row].reset_vad()
        self._streams[row] = _Stream(self._vads[row], self._roles[role])
        self._queue.clear(row)
        self.torch.manual_seed((stream.seed + self.seed) % 2**63)

    def close(self, row: int) -> None:
        self._streams.pop(row, None)
        self._queue.clear(row)

    def step(self, frames: np.ndarray) -> np.ndarray:
        frames = np.asarray(frames, dtype=np.float32)
        rows = frames.shape[0]
        if frames.shape != (rows, FRAME_IN):
            raise ValueError(f"freeze_omni: step expects float32[R, {FRAME_IN}], got {frames.shape}")
        bad = {}
        for b in range(rows):
            st = self._streams.get(b)
            if st is None:
                continue
            if not np.isfinite(frames[b]).all():
                bad[b] = "input frame has NaN/Inf samples"
                continue
            with _upstream_calls(self.device), self.torch.no_grad():
                self._listen(b, st, frames[b])
        out = self._queue.take()[:rows]
        if bad:
            raise RowError(bad, out)
        return out

    # ------------------------------------------------------------------ the server's machine

    def _listen(self, row: int, st: _Stream, chunk: np.ndarray) -> None:
        """``bin/server.py send_pcm`` for one chunk of ``float32[2560]`` at 16 kHz."""
        res = st.vad.predict(chunk)
        if res["status"] == "sl":  # VAD start: back to the snapshot, replay the last chunks
            outputs = copy.deepcopy(st.snapshot)
            outputs.update(adapter_cache=None, encoder_cache=None, pe_index=0, stat="sl", last_id=None)
            outputs.pop("text", None)
            outputs.pop("hidden_state", None)
            for i, feature in enumerate(res["feature_last_chunk"]):
                outputs = self._prefill(row, st, "sl" if i == 0 else "cl", feature, outputs, first_pack=True)
            st.outputs = self._prefill(row, st, "cl", res["feature"], outputs)
        elif res["status"] in ("cl", "el"):
            st.outputs = self._prefill(row, st, res["status"], res["feature"], st.outputs)

    def _prefill(self, row: int, st: _Stream, status: str, feature: list, outputs: dict,
                 first_pack: bool = False) -> dict:
        """``bin/server.py llm_prefill``: feed one chunk of features; speak on ``ss``."""
        dialogue = self.pipeline.speech_dialogue
        if status == "sl":
            outputs = dialogue(self.torch.tensor(feature), **outputs)
        elif status == "el":
            st.vad.in_dialog = False
        elif status == "cl":
            if outputs["stat"] == "cl":
                outputs = dialogue(self.torch.tensor(feature), **outputs)
            if first_pack:
                outputs["stat"] = "cl"
            if outputs["stat"] == "el":
                st.vad.in_dialog = False
            if outputs["stat"] == "ss":
                self._queue.clear(row)  # interrupt(): what is left of the last answer is not said
                st.vad.in_dialog = False
                self._generate(row, st, copy.deepcopy(outputs))
        return outputs

    def _generate(self, row: int, st: _Stream, outputs: dict) -> None:
        """``bin/server.py generate``: the whole answer, each piece synthesised as it ends."""
        dialogue = self.pipeline.speech_dialogue
        outputs = dialogue(None, **outputs)
        st.snapshot = outputs
        if outputs["stat"] != "cs":  # the first token ends the answer: nothing to say
            return
        hidden, piece, last_text, pieces = [outputs["hidden_state"]], "", "", 0
        while len(outputs["past_tokens"]) <= self.max_new_tokens:
            del outputs["text"], outputs["hidden_state"]
            outputs = dialogue(None, **outputs)
            st.snapshot = outputs
            if outputs["stat"] != "cs":
                break
            hidden.append(outputs["hidden_state"])
            new = outputs["text"][len(last_text):]
            if "\ufffd" in new:  # an incomplete UTF-8 sequence: wait for its next token
                continue
            piece += new
            ends = PIECE_END if pieces == 0 or len(hidden) >= LONG_PIECE_TOKENS else SENTENCE_END
            if new.endswith(ends) and len(hidden) >= MIN_PIECE_TOKENS and not (
                    new.endswith(".") and last_text[-1:].isdigit()):
                pieces = self._say(row, hidden, piece, pieces)
                piece, hidden = "", []
            last_text = outputs["text"]
        if hidden:
            self._say(row, hidden, piece, pieces)

    def _say(self, row: int, hidden: list, text: str, pieces: int) -> int:
        """``bin/server.py decoder``: synthesise one piece; returns the pieces said so far."""
        torch, s = self.torch, self.tts_settings
        model = self.pipeline.model
        states = torch.cat(hidden).squeeze(1)
        ids = model.tokenizer.encode(self.pipeline.post_process(text))
        if not ids:  # upstream fails here (float tensor into embed_tokens): a piece without text is not said
            return pieces
        ids = torch.tensor(ids, dtype=torch.long, device=states.device)
        embeddings = model.llm_decoder.model.embed_tokens(ids)
        first = pieces == 0
        for seg in self.tts.run(embeddings.reshape(-1, TTS_DIM).unsqueeze(0), s["decoder_top_k"],
                                states.reshape(-1, TTS_DIM).unsqueeze(0),
                                s["decoder_first_chunk_size"] if first else s["decoder_chunk_size"],
                                s["decoder_chunk_overlap_size"], s["decoder_penalty_window_size"],
                                s["decoder_penalty"], s["decoder_N"],
                                s["decoder_seg_threshold_first_pack"] if first else s["decoder_seg_threshold"]):
            y = seg.reshape(-1).float().cpu().numpy()
            if pieces == 0:  # the answer starts at its first audible sample
                loud = np.flatnonzero(np.abs(y) > FIRST_SEGMENT_ONSET)
                y = y[loud[0]:] if loud.size else y
            pieces += 1
            self._queue.put(row, np.clip(y, -1.0, 1.0))
        return pieces


# ------------------------------------------------------------------------------- tiny instance
# Invented small sizes of the real architecture (no released config is smaller): the encoder is
# subsampling + a chunked relative-position transformer (the only kind with a streaming ``infer``),
# the LLM a 2-layer Qwen2 of hidden size 896 (the TTS reshape needs a multiple of 896) over a
# byte-level tokenizer with Qwen's chat tokens, the speech decoder a 2-layer Llama over 64 TiCodec
# codes, and TiCodec upsamples 8 * 5 * 5 * 3 = 600 samples per code (40 codes per second at 24 kHz).
# A few weights are scaled so that a random instance takes every branch in bounded time: the state
# head's logits vary (listen on / speak / stop listening all happen), the LLM often ends its answer
# (only ``<|im_end|>`` has full-size output weights) and the speech decoder sometimes ends a sentence.

TINY_CHAT_TEMPLATE = ("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n<audio>"
                      "<|im_end|>\n<|im_start|>assistant\n")
TINY_ENCODER = {
    "overview_conf": {"encoder-input-dim": 80, "encoder-output-dim": 64,
                      "encoder-layer-config": "subsampling-transformer"},
    "para_conf": {
        "subsampling": {"subsampling-input-dim": 80, "subsampling-output-dim": 64, "subsampling-rate": 4,
                        "subsampling-dropout-rate": 0.0},
        "transformer": {"transformer-input-dim": 64, "transformer-output-dim": 64, "transformer-attention-dim": 64,
                        "transformer-attention-heads": 2, "transformer-linear-units": 128,
                        "transformer-num-blocks": 2, "transformer-dropout-rate": 0.0,
                        "transformer-attention-dropout-rate": 0.0, "transformer-positional-dropout-rate": 0.0,
                        "transformer-input-layer": "linear", "transformer-pos-enc-class": "rel-enc",
                        "transformer-normalize-before": True, "transformer-concat-after": False,
                        "transformer-positionwise-layer-type": "linear", "transformer-chunk_size": 4,
                        "transformer-left_chunks": 4, "transformer-dynamic-chunks": False}},
}
TINY_AUDIO_LLM = {"enc_out_dim": 64, "llm_embed_dim": TTS_DIM, "kernel_size": 5, "adpter_type": "subsampling",
                  "llm_head_num": 14, "num_key_value_heads": 2, "task_type": "prompt", "freeze_llm": True,
                  "prompt_finetune": True, "add_prompt_before": True, "prompt_num": 5, "predict_usr_state": 4,
                  "chunk_size": 4, "chat_template": TINY_CHAT_TEMPLATE}
TINY_TTS = {"idim": TTS_DIM, "odim": 64, "encoder_pre_norm_type": "ln", "encoder_drop_rate": 0.0,
            "encoder_criterion": "ce", "encoder_upsample_rate": 1, "kv_cache_prefix_finetune": 1,
            "transformer_attention_dim": TTS_DIM, "transformer_linear_units": 256, "transformer_num_blocks": 2,
            "transformer_attention_heads": 14, "transformer_dropout_rate": 0.0, "encoder_output_dim": TTS_DIM}
TINY_STATE_HEAD = (0.003, [0.0, 1.0, -1.0, 0.0])  # weight std; bias of listen on / speak / stop / (unused)
TINY_EOD_LOGIT = 3.0  # <|im_end|>'s logit on the mean state over the vocabulary (about 0.1 in answers;
#                       the ASCII tokens' are about +-0.01, so an answer ends after ~5 tokens)
TINY_EOS_LOGIT = 1.0  # typical logit of the speech decoder's end (its codes' are about +-0.6)
TINY_CODEC = {"resblock": "1", "upsample_rates": [8, 5, 5, 3], "upsample_kernel_sizes": [16, 11, 11, 7],
              "upsample_initial_channel": 256, "resblock_kernel_sizes": [3], "resblock_dilation_sizes": [[1, 3, 5]],
              "n_codes": 64, "n_code_groups": 1, "residul_layer": 1, "global_code_num": 2, "global_tokens": [3, 7],
              "codebook_loss_lambda": 1.0, "commitment_loss_lambda": 0.25,
              "global_feature_conv": [128, 128, 128, 3, 1]}


def write_tiny_checkpoint(model_path: Path, llm_path: Path, seed: int = 0) -> None:
    """Write a tiny random Freeze-Omni in the released layout: ``model_path`` gets
    ``audiollm/{train.yaml,global_cmvn,final.pt}``, ``decoder/{model.json,final.pt}``,
    ``codec/{model.json,final.pt}`` and ``server.json``, ``llm_path`` a Qwen2 checkpoint with its tokenizer.

    Builds the upstream classes (``models.utils.init_encoder_llm``, ``LLM2TTSCodecAR``, TiCodec's
    ``Generator``/``Quantizer``/``Encoder``), so it needs the upstream checkout on ``sys.path``
    and must run inside :func:`_upstream_calls` (``sys.argv``).
    """
    import torch
    import yaml
    from tokenizers import Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    for d in ("audiollm", "decoder", "codec"):
        (model_path / d).mkdir(parents=True, exist_ok=True)
    (model_path / "server.json").write_text(json.dumps(TINY_SERVER))
    # the LLM: byte-level BPE without merges plus Qwen's three special tokens
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    tokenizer.save_pretrained(llm_path)
    eod = tokenizer.convert_tokens_to_ids("<|im_end|>")
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=TTS_DIM, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=14, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=False, eos_token_id=eod, bos_token_id=eod, torch_dtype="bfloat16")
    llm = Qwen2ForCausalLM(config)
    ascii_ids = [vocab[c] for c in vocab if (c.isascii() and c.isprintable()) or c == "\u0120"]  # U+0120: space
    with torch.no_grad():
        out = llm.lm_head.weight
        keep = out[ascii_ids].clone()
        out.zero_()  # other tokens: logit 0, below the positive ones of the ASCII tokens
        out[ascii_ids] = keep * 0.01
        out[eod] = _along_mean(llm.model(input_ids=torch.arange(config.vocab_size)[None]).last_hidden_state[0],
                               TINY_EOD_LOGIT)
    llm.to(torch.bfloat16).save_pretrained(llm_path)
    # the speech encoder, adapter and state head (final.pt holds all but the LLM, like the release)
    cmvn = model_path / "audiollm" / "global_cmvn"
    n = 1000
    cmvn.write_text(json.dumps({"mean_stat": [10.0 * n] * 80, "var_stat": [109.0 * n] * 80, "frame_num": n}))
    train = {"input_dim": 80, "output_dim": config.vocab_size, "cmvn_file": str(cmvn), "is_json_cmvn": True,
             "encoder_conf": TINY_ENCODER, "model_conf": {**TINY_AUDIO_LLM, "llm_path": str(llm_path)}}
    (model_path / "audiollm" / "train.yaml").write_text(yaml.safe_dump(train))
    from models.utils import init_encoder_llm

    audio_llm = init_encoder_llm(train)
    with torch.no_grad():
        audio_llm.predictor_head.weight.normal_(0.0, TINY_STATE_HEAD[0])
        audio_llm.predictor_head.bias.copy_(torch.tensor(TINY_STATE_HEAD[1]))
    state = {k: v for k, v in audio_llm.state_dict().items() if not k.startswith("llm_decoder.")}
    torch.save(state, model_path / "audiollm" / "final.pt")
    # the speech decoder and TiCodec
    from models.decoder.decoder import LLM2TTSCodecAR
    from models.decoder.ticodec.models import Encoder, Generator, Quantizer
    from models.decoder.ticodec.vqvae import AttrDict

    (model_path / "decoder" / "model.json").write_text(json.dumps([TTS_DIM, TINY_TTS["odim"], TINY_TTS]))
    tts = LLM2TTSCodecAR(TTS_DIM, TINY_TTS["odim"], SimpleNamespace(**TINY_TTS))
    codes, seen = TINY_TTS["odim"], []
    hook = tts.out_fnn.register_forward_hook(lambda mod, args, out: seen.append(args[0].reshape(-1, TTS_DIM)))
    with torch.no_grad():  # never the control tokens bos/sos/pad (a codec code is out of range), sometimes eos
        list(itertools.islice(tts.infer(torch.randn(1, 4, TTS_DIM), 2, torch.randn(1, 4, TTS_DIM), -1, 1.1), 8))
        hook.remove()
        tts.out_fnn.weight[codes:] = 0.0
        tts.out_fnn.bias[codes:] = -10.0
        tts.out_fnn.weight[codes + 2] = _along_mean(torch.cat(seen), TINY_EOS_LOGIT)
        tts.out_fnn.bias[codes + 2] = 0.0
    torch.save({"model": tts.state_dict()}, model_path / "decoder" / "final.pt")
    (model_path / "codec" / "model.json").write_text(json.dumps(TINY_CODEC))
    h = AttrDict(TINY_CODEC)
    torch.save({"generator": Generator(h).state_dict(), "quantizer": Quantizer(h).state_dict(),
                "encoder": Encoder(h).state_dict()}, model_path / "codec" / "final.pt")


def _along_mean(states, logit: float):
    """An output-layer row giving ``logit`` on the mean of ``states`` (``float[n, d]``)."""
    mean = states.float().mean(0)
    return mean * (logit / float(mean @ mean))
