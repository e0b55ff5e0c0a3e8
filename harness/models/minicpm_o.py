"""MiniCPM-o 4.5 in duplex mode (openbmb/MiniCPM-o-4_5; upstream ``MiniCPMODuplex``).

Upstream code: ``MiniCPMO45/modeling_minicpmo.py`` of OpenBMB/MiniCPM-o-Demo (at the commit
``images/minicpm-o/build-args`` pins; the same files ship as remote code in the weights repo),
imported as the package ``MiniCPMO45`` (the upstream README's duplex example does the same).
Weights come from ``weights_path``: a local snapshot of openbmb/MiniCPM-o-4_5 (config,
safetensors, tokenizer, ``assets/token2wav`` vocoder) or that repo id in the mounted Hugging
Face cache, never downloaded here.

Time model (``shared/spec/models.md``, "MiniCPM-o 4.5"): the model hears 16 kHz audio in
units of one second and decides once per unit to listen or speak; speaking yields 24 kHz
speech of varying length (Token2wav), listening yields nothing. The adapter steps in frames
of ``frame_ms`` (100 ms: ``float32[1, 1600]`` at 16 kHz in, ``float32[1, 2400]`` at 24 kHz
out), buffers input until a unit is complete, runs ``streaming_prefill`` +
``streaming_generate`` on it, and queues the speech in an :class:`OutputQueue`. A step
returns what was queued *before* its own input was heard, so speech decided on a unit
starts at the first frame after that unit ends (causal; compute time is not added).

Duty instruction (docs/models.md, "minicpm_o"; docs/protocol-decisions.md): the spoken preamble
reaches the model through the audio like every other input; the system prompt is
``system_prompt``, upstream's English duplex preset, with ``{duty_text}`` filled in by the duty
text when the protocol gives it (``protocol.duty_as_text``) and by nothing otherwise, in the
upstream duplex format
``<|im_start|>system\\n{text}\\n<|audio_start|>`` + reference voice + ``<|audio_end|><|im_end|>``;
the reference voice (``ref_audio``) is both embedded in that prompt and Token2wav's speaker prompt.

One stream per instance (``max_batch=1``: upstream calls ``.item()`` on the sampled token and
asserts a batch of one); throughput comes from several actors per GPU (``num_gpus`` < 1).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness.models.base import AUDIO_PROMPT, TEXT_PROMPT, DuplexModel, ModelInfo, OutputQueue, RowError, StreamContext
from harness.weights import Repo, Requirements, loaded, locate

INPUT_RATE = 16_000  # MiniCPMODuplex.SAMPLE_RATE
OUTPUT_RATE = 24_000  # Token2wav output (MiniCPMODuplex._generate_waveform_from_tokens)
UNIT_S = 1  # MiniCPMODuplex.CHUNK_MS = 1000: one listen/speak decision per second of input
# what MiniCPMODuplex.__init__ reads from the snapshot: MiniCPMOProcessor / AutoTokenizer / AutoConfig /
# MiniCPMO.from_pretrained, then init_tts(streaming=True) -> stepaudio2.Token2wav(<snapshot>/assets/token2wav),
# whose files are the ones minicpmo-utils (the version images/minicpm-o pins) checks for itself
WEIGHT_FILES = ("config.json", "preprocessor_config.json", "tokenizer_config.json")
CHECKPOINT = ("model.safetensors.index.json", "model.safetensors")
TOKEN2WAV_FILES = tuple(f"assets/token2wav/{f}" for f in (
    "speech_tokenizer_v2_25hz.onnx", "campplus.onnx", "flow.yaml", "flow.pt", "config.yaml", "hift.pt",
    "hift_original.pt"))

# The English duplex preset of the upstream demo (assets/presets/audio_duplex/english_call.yaml),
# followed by the benchmark's duty instruction.
DEFAULT_SYSTEM_PROMPT = (
    "Replicate the tone and style from the input audio. Your task is to be a helpful assistant using this voice "
    "pattern. Please answer the user's questions seriously and in a high quality. Please chat with the user in a "
    "high naturalness style. You are in duplex mode, where you can listen and speak at the same time. {duty_text}"
)


class MiniCPMO(DuplexModel):
    """MiniCPM-o 4.5 duplex, one stream per instance.

    Args:
        weights_path: a local folder with an openbmb/MiniCPM-o-4_5 snapshot, or that repo id,
            read from the local Hugging Face cache (``HF_HOME``) at ``revision``; fetched once by
            ``make weights MODEL=minicpm_o``, never downloaded at run time. Required unless ``tiny``.
        revision: the repo's commit (40 hex digits); ``ModelInfo.weights`` records
            ``repo@<commit>`` (or the folder) after load.
        code_package: import name of the upstream code folder (``MiniCPMO45``, on ``sys.path``).
        ref_audio: reference voice, a sound file (any rate; resampled to 16 kHz mono). A
            relative path is taken from the upstream checkout (the folder holding
            ``code_package``). ``None``: no reference voice (only with ``generate_audio=False``).
        system_prompt: system text; ``{duty_text}`` is replaced by the stream's duty instruction
            (empty unless ``protocol.duty_as_text``); the rest is the preset the report shows.
        generate_audio: speak (Token2wav); ``False`` gives text decisions and silent output.
        decode_mode, temperature, top_k, top_p, listen_prob_scale, text_repetition_penalty,
            text_repetition_window_size, max_new_speak_tokens_per_chunk: LLM decoding of
            ``streaming_generate`` (upstream defaults).
        tts_temperature, tts_repetition_penalty, n_timesteps: speech token sampling and the
            Token2wav flow steps (upstream defaults).
        sliding_window_mode, basic_window_high_tokens, basic_window_low_tokens: upstream KV
            window (``"off"``: the cache grows by one unit per second, upstream default).
        force_listen_count: units at the start of a stream forced to listen (upstream, 0 = off).
        frame_ms: the adapter's step in milliseconds; must divide one second.
        attn_implementation, dtype: upstream loading options (``MiniCPMODuplex`` casts to bfloat16).
        tiny: build a tiny randomly initialised instance of the real architecture on CPU
            instead of reading weights (``make model-smoke``): Qwen3 2x64, Whisper encoder
            2x64, speech LM 2x64, no vision; the Token2wav vocoder is replaced by a tone per
            speech token (its checkpoint exists only in the weights).

    Raises:
        ValueError: a setting out of range (at construction).
    """

    SOURCE_DIRS = (".",)  # the MiniCPM-o-Demo checkout root holds the package MiniCPMO45

    def __init__(self, weights_path: str | None = None, revision: str | None = None,
                 code_package: str = "MiniCPMO45", ref_audio: str | None = "assets/ref_audio/ref_en_dlc_1.wav",
                 system_prompt: str = DEFAULT_SYSTEM_PROMPT, generate_audio: bool = True,
                 decode_mode: str = "sampling", temperature: float = 0.7, top_k: int = 20, top_p: float = 0.8,
                 listen_prob_scale: float = 1.0, text_repetition_penalty: float = 1.05,
                 text_repetition_window_size: int = 512, max_new_speak_tokens_per_chunk: int = 20,
                 tts_temperature: float = 0.8, tts_repetition_penalty: float = 1.05, n_timesteps: int = 10,
                 sliding_window_mode: str = "off", basic_window_high_tokens: int = 4000,
                 basic_window_low_tokens: int = 3500, force_listen_count: int = 0, frame_ms: int = 100,
                 attn_implementation: str = "sdpa", tiny: bool = False):
        if (1000 * UNIT_S) % frame_ms:
            raise ValueError(f"frame_ms must divide {1000 * UNIT_S} ms (one unit), got {frame_ms}")
        if decode_mode not in ("sampling", "greedy"):
            raise ValueError(f"decode_mode must be 'sampling' or 'greedy', got {decode_mode!r}")
        if sliding_window_mode not in ("off", "basic", "context"):
            raise ValueError(f"sliding_window_mode must be off, basic or context, got {sliding_window_mode!r}")
        if "{duty_text}" not in system_prompt:
            raise ValueError("system_prompt must contain {duty_text} (the duty instruction goes there)")
        if not tiny and not weights_path:
            raise ValueError("minicpm_o needs weights_path (a local openbmb/MiniCPM-o-4_5 snapshot) unless tiny")
        if generate_audio and ref_audio is None:
            # upstream MiniCPMODuplex.prepare initialises Token2wav only with prompt_wav_path; without it
            # streaming_generate returns no audio at all (a warning), i.e. a silent model
            raise ValueError("generate_audio needs ref_audio (Token2wav's speaker prompt)")
        self.weights_path, self.revision, self.code_package, self.tiny = weights_path, revision, code_package, tiny
        self.ref_audio, self.system_prompt, self.generate_audio = ref_audio, system_prompt, generate_audio
        self.attn_implementation = attn_implementation
        # streaming_generate's decoding arguments (upstream reads them per call: see _run_unit)
        self.decoding = dict(decode_mode=decode_mode, temperature=temperature, top_k=top_k, top_p=top_p,
                             listen_prob_scale=listen_prob_scale, text_repetition_penalty=text_repetition_penalty,
                             text_repetition_window_size=text_repetition_window_size,
                             max_new_speak_tokens_per_chunk=max_new_speak_tokens_per_chunk)
        # MiniCPMODuplex constructor settings
        self.init_kw = dict(tts_temperature=tts_temperature, tts_repetition_penalty=tts_repetition_penalty,
                            n_timesteps=n_timesteps, sliding_window_mode=sliding_window_mode,
                            basic_window_high_tokens=basic_window_high_tokens,
                            basic_window_low_tokens=basic_window_low_tokens, force_listen_count=force_listen_count)
        # the run manifest records these settings as the config's params; the weights' id and revision here
        self.info = ModelInfo("minicpm_o", INPUT_RATE, OUTPUT_RATE, INPUT_RATE * frame_ms // 1000,
                              OUTPUT_RATE * frame_ms // 1000, max_batch=1,
                              capabilities=frozenset({TEXT_PROMPT, AUDIO_PROMPT}),
                              weights="tiny-random" if tiny else str(self._repo()),
                              preset_text=system_prompt.replace("{duty_text}", "").strip(), voice_prompt=ref_audio)
        self._unit = INPUT_RATE * UNIT_S
        self._queue = OutputQueue(1, self.info.frame_out)
        self._heard: list[np.ndarray] = []  # input of the current unit so far
        self._open = False
        self._tmp: tempfile.TemporaryDirectory | None = None

    # ------------------------------------------------------------------ loading

    def _repo(self) -> Repo:
        token2wav = TOKEN2WAV_FILES if self.generate_audio else ()
        return Repo(self.weights_path, self.revision, WEIGHT_FILES + token2wav, (CHECKPOINT,))

    def requirements(self) -> Requirements:
        """The Demo's ``MiniCPMO45`` package, Token2wav (``stepaudio2``, from minicpmo-utils) when it
        speaks, and, unless tiny, the snapshot."""
        stack = (f"{self.code_package}.modeling_minicpmo:MiniCPMODuplex",)
        if self.generate_audio and not self.tiny:
            stack += ("stepaudio2:Token2wav",)
        return Requirements(stack, () if self.tiny else (self._repo(),),
                            f"{self.code_package} is the MiniCPM-o-Demo checkout's folder (on the path), stepaudio2 "
                            "comes with minicpmo-utils[all]")

    def load(self, device: str) -> None:
        """Build ``MiniCPMODuplex`` on ``device`` from the weights (or the tiny instance, on CPU) and
        read the reference voice.

        Raises:
            FileNotFoundError: the weights are neither a folder nor in the local Hugging Face cache.
            ImportError: ``code_package`` is not importable.
            RuntimeError: ``USE_FLAGOS=1`` in the environment.
        """
        import torch

        from harness.audio.resample import resample

        # Upstream quirk (MiniCPMO45/modeling_minicpmo.py, top): with USE_FLAGOS=1 the import needs flag_gems
        # and swaps transformers' Qwen3/Llama RMSNorm for FlagGems kernels process-wide; the same `if` block
        # is why transformers' check_imports rejects the file when it is loaded as remote code
        # (AutoModel, trust_remote_code) without flag_gems installed. The adapter imports the package
        # directly (no check_imports on it) and runs the reference kernels only.
        if os.environ.get("USE_FLAGOS") == "1":
            raise RuntimeError("minicpm_o: USE_FLAGOS=1 would replace transformers' RMSNorm with FlagGems kernels "
                               "(MiniCPMO45/modeling_minicpmo.py); the benchmark runs the reference kernels: unset it")
        code_dir = self._code_dir()
        modeling = importlib.import_module(f"{self.code_package}.modeling_minicpmo")
        if self.tiny:
            self._tmp = tempfile.TemporaryDirectory(prefix="minicpm-o-tiny-")
            path = _build_tiny_checkpoint(modeling, code_dir, Path(self._tmp.name))
            device = "cpu"
        else:
            repo = self._repo()
            path = locate(repo, self.info.name)
            self.info = dataclasses.replace(self.info, weights=loaded(repo, path))
        with _tiny_speech(modeling) if self.tiny else contextlib.nullcontext():
            self.duplex = modeling.MiniCPMODuplex(name_or_path=str(path), generate_audio=self.generate_audio,
                                                  device=device, attn_implementation=self.attn_implementation,
                                                  **self.init_kw)
        torch.set_grad_enabled(False)
        self._ref_path: str | None = None
        self._ref_16k: np.ndarray | None = None
        if self.ref_audio is not None:
            import soundfile as sf

            ref = Path(self.ref_audio)
            ref = ref if ref.is_absolute() else code_dir.parent / ref
            x, sr = sf.read(str(ref), dtype="float32", always_2d=True)
            self._ref_path, self._ref_16k = str(ref), resample(x.mean(axis=1), sr, INPUT_RATE).astype(np.float32)

    def _code_dir(self) -> Path:
        spec = importlib.util.find_spec(self.code_package)
        if spec is None or not spec.submodule_search_locations:
            raise ImportError(f"the MiniCPM-o code package {self.code_package!r} is not on sys.path (the "
                              "MiniCPM-o-Demo checkout's root must be on PYTHONPATH: images/minicpm-o)")
        return Path(next(iter(spec.submodule_search_locations))).resolve()

    # ------------------------------------------------------------------ streaming

    def open(self, row: int, stream: StreamContext) -> None:
        import torch

        if row != 0:
            raise RowError({row: f"minicpm_o runs one stream per instance (max_batch=1), asked for row {row}"})
        self._queue.clear(0)
        self._heard = []
        torch.manual_seed(stream.seed)  # upstream samples with torch's global generator (utils.py StreamDecoder.decode)
        text = self.system_prompt.replace("{duty_text}", stream.duty_text).strip()
        # prepare() resets everything of the previous stream: KV cache and window (decoder.reset), unit
        # counter, audio buffer, TTS and Token2wav state (_reset_streaming_state), the mel processor
        self.duplex.prepare(prefix_system_prompt=f"<|im_start|>system\n{text}\n<|audio_start|>",
                            suffix_system_prompt="<|audio_end|><|im_end|>", ref_audio=self._ref_16k,
                            prompt_wav_path=self._ref_path if self.generate_audio else None)
        self._open = True

    def step(self, frames: np.ndarray) -> np.ndarray:
        if frames.shape != (1, self.info.frame_in):
            raise ValueError(f"minicpm_o steps float32[1, {self.info.frame_in}], got {frames.shape}")
        out = self._queue.take()  # queued before this frame was heard: speech never precedes what caused it
        if self._open:
            self._heard.append(np.asarray(frames[0], np.float32))
            if sum(len(h) for h in self._heard) >= self._unit:
                unit = np.concatenate(self._heard)
                self._heard = [unit[self._unit:]] if len(unit) > self._unit else []
                self._queue.put(0, self._run_unit(unit[:self._unit]))
        return out

    def close(self, row: int) -> None:
        self._open = False
        self._heard = []
        self._queue.clear(0)

    def _run_unit(self, audio: np.ndarray) -> np.ndarray:
        """One second of 16 kHz input -> the speech it produced, ``float32[n]`` at 24 kHz (``n >= 0``)."""
        # Upstream quirk (modeling_minicpmo.py, MiniCPMODuplex.streaming_prefill): the <unit> token is
        # fed into the KV cache before the audio is checked, so a call refused for too little audio
        # ("audio not enough") still alters the context. Only whole units are fed here (the first is
        # left-padded to 1035 ms upstream), so a refusal is a contract break, not a retry case.
        pre = self.duplex.streaming_prefill(audio_waveform=audio)
        if not pre["success"]:
            raise RuntimeError(f"MiniCPMODuplex.streaming_prefill refused a whole unit: {pre.get('reason')}")
        # Upstream quirk (modeling_minicpmo.py): MiniCPMODuplex.__init__ stores temperature/top_k/top_p
        # but streaming_generate samples with its own keyword defaults, so every call passes them.
        res = self.duplex.streaming_generate(prompt_wav_path=self._ref_path if self.generate_audio else None,
                                             **self.decoding)
        wav = res.get("audio_waveform")
        if res["is_listen"] or wav is None:
            # listening returns 1 s of zeros upstream; the queue pads silence itself, and queuing the zeros
            # would push speech still waiting in the queue a second later
            return np.zeros(0, np.float32)
        return np.clip(np.asarray(wav, np.float32).reshape(-1), -1.0, 1.0)


# ---------------------------------------------------------------------- tiny random instance


TINY_LLM = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=32, max_position_embeddings=8192, tie_word_embeddings=False)
TINY_AUDIO = dict(d_model=64, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256, num_mel_bins=80,
                  max_source_positions=1500)
TINY_TTS = dict(llm_dim=64, hidden_size=64, intermediate_size=128, num_attention_heads=2, num_hidden_layers=2,
                num_key_value_heads=2, num_audio_tokens=6562, audio_bos_token_id=151687,
                max_position_embeddings=4096)
TOKENIZER_FILES = ("vocab.json", "merges.txt", "added_tokens.json", "special_tokens_map.json", "tokenizer_config.json",
                   "preprocessor_config.json", "generation_config.json")


def _build_tiny_checkpoint(modeling: Any, code_dir: Path, out: Path) -> Path:
    """Write a checkpoint directory of a tiny randomly initialised ``MiniCPMO`` (the real classes)
    with the upstream tokenizer, processor config and remote code files; returns ``out``."""
    import torch

    for f in (*TOKENIZER_FILES, *(p.name for p in code_dir.glob("*.py"))):
        shutil.copy(code_dir / f, out / f)
    vocab = 1 + max(json.loads((code_dir / "added_tokens.json").read_text()).values())
    cfg = modeling.MiniCPMOConfig(vocab_size=vocab, init_vision=False, init_audio=True, init_tts=True,
                                  audio_config=TINY_AUDIO, tts_config={**TINY_TTS, "num_text_tokens": vocab},
                                  audio_pool_step=5, audio_chunk_length=1.0, **TINY_LLM)
    cfg.auto_map = {"AutoConfig": "configuration_minicpmo.MiniCPMOConfig",
                    "AutoModel": "modeling_minicpmo.MiniCPMO"}
    torch.manual_seed(0)
    modeling.MiniCPMO(cfg).save_pretrained(out)
    return out


class _ToneToken2wav:
    """Stands in for ``stepaudio2.Token2wav`` in the tiny instance only (its flow-matching vocoder
    needs the weights' ``assets/token2wav``): each speech token becomes 40 ms of a quiet tone whose
    pitch follows the token, as the int16 PCM bytes ``Token2wav.stream`` returns."""

    class flow:  # mirrors Token2wav.flow.pre_lookahead_len
        pre_lookahead_len = 3

    def __init__(self):
        self.cache = self.stream_cache = self.hift_cache_dict = None

    def set_stream_cache(self, prompt_wav: str):
        return {}, {}

    def stream(self, tokens: list[int], prompt_wav: str | None = None, last_chunk: bool = False) -> bytes:
        t = np.arange(960) / OUTPUT_RATE
        return b"".join((0.1 * np.sin(2 * np.pi * (200 + tok % 400) * t) * 32767).astype("<i2").tobytes()
                        for tok in tokens)


@contextlib.contextmanager
def _tiny_speech(modeling: Any):
    """While the tiny ``MiniCPMODuplex`` is built, ``MiniCPMO.init_tts`` (which always loads the
    Token2wav checkpoint from the weights) attaches :class:`_ToneToken2wav` instead."""
    original = modeling.MiniCPMO.init_tts

    def init_tts(self, streaming=False, model_dir=None, enable_float16=False, n_timesteps=10):
        self.tts.audio_tokenizer = _ToneToken2wav()
        return self.tts.audio_tokenizer

    modeling.MiniCPMO.init_tts = init_tts
    try:
        yield
    finally:
        modeling.MiniCPMO.init_tts = original
