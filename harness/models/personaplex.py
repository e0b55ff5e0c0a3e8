"""PersonaPlex (nvidia/personaplex-7b-v1): NVIDIA's voice- and role-prompted fine-tune of Moshi.

Upstream code: GitHub NVIDIA/personaplex, package ``moshi-personaplex`` in its ``moshi/``
folder, which **imports as** ``moshi`` (so it cannot share an environment with Kyutai's
``moshi``; it has its own image, ``images/personaplex``, pinned to the commit named there).
Model facts: ``shared/spec/models.md``, "PersonaPlex"; this adapter follows
``moshi/moshi/offline.py:run_inference`` and ``moshi/moshi/server.py:ServerState``.

Time model: frame-synchronous. Each step hears ``float32[1, 1920]`` at 24 kHz (80 ms, one
Mimi frame) and says ``float32[1, 1920]`` at 24 kHz: Mimi encodes the frame to 8 user
codebooks, ``LMGen.step`` samples one text token and 16 audio codebooks (8 for the agent, 8
predicting the user), and Mimi decodes the agent's 8 (``tokens[:, 1:9]``).

Duty instruction (docs/models.md, "personaplex"; docs/protocol-decisions.md): the spoken preamble
reaches the model through the audio like every other input. PersonaPlex's *text prompt*
(``<system> {text} <system>``, upstream ``wrap_with_system_tags``) is ``text_prompt``, upstream's
default assistant preset (upstream always runs with a text prompt: it cannot run with an empty
one), followed by the duty text when the protocol gives it (``protocol.duty_as_text``); the
*voice prompt* (``voice_prompt``, one of the released voices) sets the voice. Both are fed in
upstream's prompt phase (``LMGen.step_system_prompts``) when a stream opens: one step per
voice-prompt frame, 6 silent steps, one step per text token, 6 silent steps (a few hundred LM
steps per stream, no audio in or out).

Context: the LM attends over its last 3,000 steps (``LM_CONTEXT_STEPS``, 240 s; upstream's ring KV
cache), the prompt phase included: past that it drops its oldest steps, first the prompts, then,
once the stream itself is longer than 240 s, the start of the spoken preamble; it streams on
(``ModelInfo.context_s``; reduce flags such conversations).

Teacher forcing (``step_forced``, Duplex Cue, spec section 9; docs/models.md, "Teacher
forcing") is native upstream: ``LMGen.step(input_tokens, moshi_tokens, text_token)`` writes the
agent's 8 codebooks (``moshi_tokens``) where the user's frame goes, with the same acoustic delays,
and conditions the depformer on them. The forced audio is encoded by a second Mimi
(``harness.models.moshi.mimi_twin``: the same weights, its own streaming state, reset with the
stream, advanced only on forced steps). The agent's frame written at step ``n`` comes out of step
``n + 1`` (upstream returns the agent's audio one step after it is written, forced or not), so a
forced step returns the rendering of the previous step's forced frame. The text stream is the
model's own prediction (``text_token=None``) unless ``forced_text="pad"`` (``text_token`` the
text padding token, as the prompt phase forces it).

One stream per instance (``max_batch=1``): ``LMGen``'s streaming offset is one Python int for
the whole batch, ``reset_streaming`` has no row mask, and the voice-prompt phase fails for B>1
(models.md). Throughput comes from several actors per GPU (fractional ``num_gpus``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from harness.models.base import (
    AUDIO_PROMPT,
    TEACHER_FORCING,
    TEXT_PROMPT,
    DuplexModel,
    ModelInfo,
    OutputQueue,
    RowError,
    StreamContext,
)
from harness.models.moshi import FORCED_TEXT, mimi_twin
from harness.weights import Repo, Requirements, loaded, locate

RATE = 24_000  # moshi/models/loaders.py SAMPLE_RATE (Mimi), in and out
FRAME = 1_920  # one Mimi frame: RATE / 12.5 Hz = 80 ms
AGENT_CODEBOOKS = slice(1, 9)  # tokens[:, 0] is text, 1..8 the agent's audio, 9..16 the predicted user
PROMPT_SILENCE_S = 0.5  # offline.py/server.py: LMGen(audio_silence_frame_cnt=int(0.5 * frame_rate))
DEFAULT_REPO = "nvidia/personaplex-7b-v1"
# the text prompt preset "Assistant (default)" of upstream's client (also offline.py's --text-prompt default)
ASSISTANT_PRESET = ("You are a wise and friendly teacher. Answer questions or provide advice in a clear and "
                    "engaging way.")
LM_CONTEXT_STEPS = 3000  # moshi/models/loaders.py _lm_kwargs["context"] (get_moshi_lm builds that 7B config)
# files of the weights repo (moshi/models/loaders.py MOSHI_NAME, MIMI_NAME, TEXT_TOKENIZER_NAME)
WEIGHT_FILES = ("model.safetensors", "tokenizer-e351c8d8-checkpoint125.safetensors", "tokenizer_spm_32k_3.model")
VOICES_ARCHIVE = "voices.tgz"  # the released voices, as the gated repo ships them
# what load imports: modules only PersonaPlex's fork has (moshi.offline), so Kyutai's moshi does not pass
STACK = ("moshi.offline:wrap_with_system_tags", "moshi.models:LMGen", "moshi.models.loaders:get_moshi_lm",
         "sentencepiece")
SHADOWED = ("PersonaPlex's code is NVIDIA/personaplex's package `moshi-personaplex`, which also imports as `moshi`: "
            "Kyutai's `moshi` (the harness environment installs it for the moshi model) shadows it, so personaplex "
            "never runs in the harness environment")


class PersonaPlexModel(DuplexModel):
    """PersonaPlex 7B, one stream per instance.

    Args:
        weights_path: a local folder laid out as ``nvidia/personaplex-7b-v1`` is
            (``model.safetensors``, ``tokenizer-e351c8d8-checkpoint125.safetensors``,
            ``tokenizer_spm_32k_3.model`` and the voices as ``voices/`` or ``voices.tgz``), or a repo
            id; ``None``: ``repo``.
        repo, revision: the gated repository and its commit (40 hex digits), read from the local
            Hugging Face cache (:func:`harness.weights.locate`; fetched once with
            ``make weights MODEL=personaplex`` and ``HF_TOKEN``, never downloaded at run time);
            ``ModelInfo.weights`` records ``repo@<commit>`` after load.
        text_prompt: the text prompt's preset (default: upstream's "Assistant (default)"); the duty
            text follows it when the protocol gives it (``protocol.duty_as_text``). ``""``: the
            duty text alone (or, without it, no text steps).
        voice_prompt: file name of the voice prompt in the voices folder: a released voice's
            embeddings (``NATF2.pt``; ``NAT``/``VAR`` + ``F``/``M`` + digit) or a ``.wav`` of
            any voice (upstream loudness-normalises it to -24 LUFS; needs ``pyloudnorm``).
        voices_dir: folder of the voice prompts (default: ``<weights_path>/voices``; when that
            is absent the one file is taken from ``<weights_path>/voices.tgz``).
        temp_audio, temp_text, topk_audio, topk_text: sampling of the audio and text tokens
            (upstream defaults 0.8, 0.7, 250, 25).
        greedy: argmax instead of sampling (upstream ``--greedy``).
        dtype: torch dtype of the LM (``"bfloat16"`` as upstream; Mimi stays float32).
        tiny: build a tiny randomly initialised instance of the real architecture on CPU instead
            of reading weights (``make model-smoke``): the real ``LMModel`` (17 streams, the
            real delays, 2048-entry codebooks; 2 layers of width 32), the real Mimi (width 32,
            random codebooks), a sentencepiece tokenizer trained on a few sentences, and a voice
            prompt of 13 random embedding frames (1.04 s).
        forced_text: the text stream of a teacher-forced step (``step_forced``): ``"model"`` the
            model's own prediction, ``"pad"`` the text padding token (docs/models.md, "Teacher forcing").

    Each stream is seeded with ``StreamContext.seed`` (``torch.manual_seed``; upstream samples
    with torch's global generator, ``moshi/utils/sampling.py``).

    Raises:
        ValueError: an unknown ``dtype`` or ``forced_text``, or a voice prompt that is neither
            ``.pt`` nor ``.wav``.
    """

    SOURCE_DIRS = ("moshi",)  # the checkout's moshi/ holds the package `moshi` (PersonaPlex's fork)

    def __init__(self, weights_path: str | None = None, repo: str = DEFAULT_REPO, revision: str | None = None,
                 text_prompt: str = ASSISTANT_PRESET, voice_prompt: str = "NATF2.pt",
                 voices_dir: str | None = None, temp_audio: float = 0.8,
                 temp_text: float = 0.7, topk_audio: int = 250, topk_text: int = 25, greedy: bool = False,
                 dtype: str = "bfloat16", tiny: bool = False, forced_text: str = "model"):
        if dtype not in ("bfloat16", "float16", "float32"):
            raise ValueError(f"personaplex dtype must be bfloat16, float16 or float32, got {dtype!r}")
        if forced_text not in FORCED_TEXT:
            raise ValueError(f"personaplex forced_text must be one of {FORCED_TEXT}, got {forced_text!r}")
        if Path(voice_prompt).suffix not in (".pt", ".wav"):
            raise ValueError(f"personaplex voice_prompt must be a .pt (released voice embeddings) or a .wav file, "
                             f"got {voice_prompt!r}")
        self.weights_path, self.repo, self.revision, self.tiny, self.dtype = weights_path, repo, revision, tiny, dtype
        self.voice_prompt, self.voices_dir, self.forced_text = voice_prompt, voices_dir, forced_text
        self.text_prompt = text_prompt.strip()
        self.sampling = dict(use_sampling=not greedy, temp=temp_audio, temp_text=temp_text, top_k=topk_audio,
                             top_k_text=topk_text)
        self._settings = json.dumps({**self.sampling, "voice_prompt": voice_prompt, "dtype": dtype,
                                     "forced_text": forced_text}, sort_keys=True)
        weights = "tiny-random" if tiny else str(self._repos()[0])
        self.info = ModelInfo("personaplex", RATE, RATE, FRAME, FRAME, max_batch=1,
                              capabilities=frozenset({TEXT_PROMPT, AUDIO_PROMPT, TEACHER_FORCING}),
                              weights=f"{weights} {self._settings}", preset_text=self.text_prompt,
                              voice_prompt=voice_prompt, context_s=LM_CONTEXT_STEPS * FRAME / RATE,
                              output_lag_steps=1)  # step n returns the agent frame written at n - 1
        self._queue = OutputQueue(1, FRAME)

    # ------------------------------------------------------------------ loading

    def _repos(self) -> tuple[Repo, ...]:
        """The weights repository and, with ``voices_dir``, the folder of the voice prompt."""
        voices = () if self.voices_dir else ((f"voices/{self.voice_prompt}", VOICES_ARCHIVE),)
        weights = Repo(self.weights_path or self.repo, self.revision, WEIGHT_FILES, voices,
                       source_key="weights_path" if self.weights_path else "repo", gated=True)
        if not self.voices_dir:
            return (weights,)
        return weights, Repo(self.voices_dir, None, (self.voice_prompt,), role="voice prompts",
                             source_key="voices_dir")

    def requirements(self) -> Requirements:
        """PersonaPlex's fork of ``moshi`` and, unless tiny, the gated weights (voices included)."""
        return Requirements(STACK, () if self.tiny else self._repos(), SHADOWED)

    def load(self, device: str) -> None:
        import sentencepiece
        import torch
        from moshi.models import LMGen, loaders
        from moshi.offline import wrap_with_system_tags

        self._wrap = wrap_with_system_tags
        with tempfile.TemporaryDirectory(prefix="personaplex-") as tmp:  # everything in it is read during load
            if self.tiny:
                device = "cpu"
                self._mimi, lm, tokenizer, voice = _build_tiny(Path(tmp))
            else:
                weights, *voices = self._repos()
                root = locate(weights, self.info.name)
                voice = self._voice_file(locate(voices[0], self.info.name) if voices else root, Path(tmp))
                moshi_file, mimi_file, tokenizer = (root / f for f in WEIGHT_FILES)
                self.info = dataclasses.replace(self.info, weights=f"{loaded(weights, root)} {self._settings}")
                self._mimi = loaders.get_mimi(str(mimi_file), device)
                lm = loaders.get_moshi_lm(str(moshi_file), device=device, dtype=getattr(torch, self.dtype))
                lm.eval()
            self._device = torch.device(device)
            self._forced_mimi = mimi_twin(self._mimi)  # encodes the forced audio (step_forced)
            self._tokenizer = sentencepiece.SentencePieceProcessor(str(tokenizer))
            self._context = lm.context  # the LM's attention window, in steps
            # upstream LMGen defaults to sample_rate=32000: always pass Mimi's rates (offline.py does)
            self._lm_gen = LMGen(lm, device=device, sample_rate=self._mimi.sample_rate,
                                 frame_rate=self._mimi.frame_rate,
                                 audio_silence_frame_cnt=int(PROMPT_SILENCE_S * self._mimi.frame_rate), **self.sampling)
            # server.py/offline.py also build a second Mimi ("other_mimi") that encodes and decodes the same
            # frames and whose results are discarded: it cannot change the output, so it is left out here
            self._mimi.streaming_forever(1)
            self._forced_mimi.streaming_forever(1)
            self._lm_gen.streaming_forever(1)
            with torch.no_grad():
                self._warmup()
                if voice.suffix == ".pt":
                    self._lm_gen.load_voice_prompt_embeddings(str(voice))
                    voice_frames = len(self._lm_gen.voice_prompt_embeddings)
                else:
                    self._lm_gen.load_voice_prompt(str(voice))
                    voice_frames = math.ceil(self._lm_gen.voice_prompt_audio.shape[-1] / FRAME)
        # prompt-phase steps besides the text tokens (LMGen.step_system_prompts: voice, silence, text, silence)
        self._prompt_base = voice_frames + 2 * self._lm_gen.audio_silence_frame_cnt

    def _voice_file(self, root: Path, tmp: Path) -> Path:
        """The voice prompt's path: in ``root`` (``voices_dir``) or ``<root>/voices``, else taken out of
        ``<root>/voices.tgz`` into ``tmp`` (upstream extracts the whole archive next to itself,
        which a read-only weights cache does not allow)."""
        folder = root if self.voices_dir else root / "voices"
        if (folder / self.voice_prompt).is_file():
            return folder / self.voice_prompt
        archive = root / VOICES_ARCHIVE
        if self.voices_dir is None and archive.is_file():
            with tarfile.open(archive, "r:gz") as tar:
                for member in tar.getmembers():
                    if member.isfile() and Path(member.name).name == self.voice_prompt:
                        (tmp / self.voice_prompt).write_bytes(tar.extractfile(member).read())
                        return tmp / self.voice_prompt
        raise FileNotFoundError(f"personaplex voice prompt {self.voice_prompt!r} is neither in {folder} nor in "
                                f"{archive} (released voices: NATF0-3, NATM0-3, VARF0-4, VARM0-4, as .pt)")

    def _warmup(self) -> None:
        """Four silent frames through encode, step and decode before the first stream, as
        ``server.py ServerState.warmup`` does (it captures the CUDA graphs); ``open`` resets it all."""
        import torch

        for _ in range(4):
            codes = self._mimi.encode(torch.zeros(1, 1, FRAME, device=self._device))
            tokens = self._lm_gen.step(codes)
            if tokens is not None:
                self._mimi.decode(tokens[:, AGENT_CODEBOOKS])

    # ------------------------------------------------------------------ streaming

    def open(self, row: int, stream: StreamContext) -> None:
        import torch

        if row != 0:
            raise RowError({row: f"personaplex runs one stream per instance (max_batch=1), asked for row {row}"})
        # upstream (offline.py/server.py) sets text_prompt_tokens = None for an empty prompt, and
        # lm.py LMGen._step_text_prompt_core then iterates over None (TypeError): no text steps instead
        text = " ".join(t for t in (self.text_prompt, stream.duty_text.strip()) if t)
        tokens = self._tokenizer.encode(self._wrap(text)) if text else []
        steps = self._prompt_base + len(tokens)
        if steps > self._context:
            raise RowError({row: f"the prompt phase ({steps} steps: voice prompt, silences and {len(tokens)} text "
                                 f"tokens) exceeds the LM's {self._context}-step context, so the model would "
                                 "forget the start of its prompt before the conversation begins"})
        self._queue.clear(0)
        torch.manual_seed(stream.seed)  # upstream seeds once per connection, before the prompt phase (server.py)
        self._lm_gen.text_prompt_tokens = tokens
        with torch.no_grad():
            self._mimi.reset_streaming()
            self._forced_mimi.reset_streaming()
            self._lm_gen.reset_streaming()
            self._lm_gen.step_system_prompts(self._mimi)
            # the voice-prompt phase may encode audio with the same Mimi: reset it before the conversation,
            # as offline.py and server.py do
            self._mimi.reset_streaming()

    def step(self, frames: np.ndarray) -> np.ndarray:
        self._check(frames)
        return self._step(frames)

    def step_forced(self, frames: np.ndarray, forced: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """:meth:`DuplexModel.step_forced` for the one row: ``float32[1, 1920]`` heard and forced
        (24 kHz), ``bool[1]`` ``mask`` -> ``float32[1, 1920]``; the forced frame comes out one
        step later (upstream's output lag, module docstring).

        Raises:
            ValueError: a shape other than ``[1, 1920]`` or a ``mask`` that is not ``bool[1]``.
        """
        self._check(frames)
        self._check(forced)
        mask = np.asarray(mask)
        if mask.shape != (1,) or mask.dtype != np.bool_:
            raise ValueError(f"personaplex step_forced takes mask bool[1], got {mask.dtype}{list(mask.shape)}")
        return self._step(frames, forced if mask[0] else None)

    @staticmethod
    def _check(frames: np.ndarray) -> None:
        if np.shape(frames) != (1, FRAME):
            raise ValueError(f"personaplex steps float32[1, {FRAME}], got {np.shape(frames)}")

    def _step(self, frames: np.ndarray, forced: np.ndarray | None = None) -> np.ndarray:
        """One step, teacher-forced with ``forced`` when given."""
        import torch

        with torch.no_grad():
            codes = self._mimi.encode(self._tensor(frames))  # [1, 8, 1]: one Mimi frame per 80 ms
            forcing = {}
            if forced is not None:
                forcing["moshi_tokens"] = self._forced_mimi.encode(self._tensor(forced))  # [1, 8, 1]
                if self.forced_text == "pad":
                    forcing["text_token"] = self._lm_gen.zero_text_code
            tokens = self._lm_gen.step(codes, **forcing)  # [1, 17, 1]
            # lm.py LMGen.step returns None while its offset is within the delays (max_delay=1):
            # after the prompt phase that never happens in a stream, but a None is silence, not an error
            if tokens is not None:
                pcm = self._mimi.decode(tokens[:, AGENT_CODEBOOKS])  # [1, 1, 1920]
                self._queue.put(0, np.clip(pcm[0, 0].float().cpu().numpy(), -1.0, 1.0))
        return self._queue.take()

    def _tensor(self, frames: np.ndarray):
        """``float32[1, 1920]`` -> Mimi's input ``[1, 1, 1920]`` on the device."""
        import torch

        return torch.from_numpy(np.ascontiguousarray(frames, np.float32)).to(self._device)[:, None, :]

    def close(self, row: int) -> None:
        self._queue.clear(0)


# ---------------------------------------------------------------------- tiny random instance

TINY_DIM = 32
TINY_VOICE_FRAMES = 13  # 1.04 s of voice prompt
TINY_CORPUS = (
    "You are Aria, listening to a group conversation. Answer only when you are addressed.",
    "Aria, when does the train leave? The shop closes at nine tonight. I brought four chairs.",
    "You enjoy having a good conversation. You are a wise and friendly teacher.",
)


def _build_tiny(tmp: Path) -> tuple[Any, Any, Path, Path]:
    """A tiny randomly initialised PersonaPlex on CPU from the real upstream classes: ``(mimi,
    lm, tokenizer_file, voice_prompt_file)``, the files written into ``tmp``.

    The configurations are upstream's (``moshi/models/loaders.py`` ``_seanet_kwargs``,
    ``_quantizer_kwargs``, ``_transformer_kwargs``, ``_lm_kwargs`` with ``dep_q=16`` as
    ``get_moshi_lm`` sets it), narrowed; ``get_mimi``/``get_moshi_lm`` themselves only load
    checkpoints, so the models are assembled here as they assemble them.
    """
    import sentencepiece
    import torch
    from moshi.models import LMModel, MimiModel, loaders
    from moshi.models.lm import SILENCE_TOKENS, SINE_TOKENS
    from moshi.modules import SEANetDecoder, SEANetEncoder, transformer
    from moshi.quantization import SplitResidualVectorQuantizer

    torch.manual_seed(0)
    seanet = {**loaders._seanet_kwargs, "dimension": TINY_DIM, "n_filters": 4}
    mimi_tr = {**loaders._transformer_kwargs, "d_model": TINY_DIM, "num_heads": 2, "num_layers": 1,
               "dim_feedforward": 2 * TINY_DIM, "input_dimension": TINY_DIM, "output_dimensions": [TINY_DIM]}
    encoder = SEANetEncoder(**seanet)
    mimi = MimiModel(
        encoder, SEANetDecoder(**seanet),
        SplitResidualVectorQuantizer(**{**loaders._quantizer_kwargs, "dimension": 16, "input_dimension": TINY_DIM,
                                        "output_dimension": TINY_DIM}),
        channels=1, sample_rate=loaders.SAMPLE_RATE, frame_rate=loaders.FRAME_RATE,
        encoder_frame_rate=loaders.SAMPLE_RATE / encoder.hop_length, causal=True, resample_method="conv",
        encoder_transformer=transformer.ProjectedTransformer(device="cpu", **mimi_tr),
        decoder_transformer=transformer.ProjectedTransformer(device="cpu", **mimi_tr)).eval()
    mimi.set_num_codebooks(8)
    # a fresh codebook is all zeros (quantization/core_vq.py EuclideanCodebook): every frame would encode
    # to code 0 and decode to the same audio whatever the LM said, so the tiny codebooks are random
    for name, buf in mimi.named_buffers():
        if name.endswith("embedding_sum"):
            buf.normal_()
    lm = LMModel(device="cpu", dtype=torch.float32, **{
        **loaders._lm_kwargs, "dep_q": 16, "dim": TINY_DIM, "num_heads": 2, "num_layers": 2,
        "depformer_dim": TINY_DIM, "depformer_dim_feedforward": 2 * TINY_DIM, "depformer_num_heads": 2,
        "depformer_num_layers": 1}).eval()
    tokenizer = tmp / "tokenizer.model"
    with tokenizer.open("wb") as f:
        sentencepiece.SentencePieceTrainer.train(sentence_iterator=iter(TINY_CORPUS), model_writer=f, vocab_size=64,
                                                 hard_vocab_limit=False, minloglevel=2)
    # a voice prompt in the released voices' format (lm.py LMGen.load_voice_prompt_embeddings): the
    # embeddings of each prompt frame and the token cache after it (text pad 3, agent silence, user sine)
    cache = torch.empty(1, lm.num_codebooks, max(lm.delays) + 3, dtype=torch.long)
    cache[:, 0] = 3
    cache[:, 1:9] = torch.as_tensor(SILENCE_TOKENS)[:, None]
    cache[:, 9:] = torch.as_tensor(SINE_TOKENS)[:, None]
    voice = tmp / "tiny-voice.pt"
    torch.save({"embeddings": torch.randn(TINY_VOICE_FRAMES, 1, 1, TINY_DIM), "cache": cache}, voice)
    return mimi, lm, tokenizer, voice
