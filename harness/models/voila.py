"""Voila-autonomous (maitrix-org/Voila, weights ``maitrix-org/Voila-autonomous-preview``).

Upstream has no step API: ``infer.py`` tokenises a whole user file up front and
``model.py:VoilaAutonomousModel.run_generate`` loops over the sequence, pulling one user frame
from a generator at each *audio* step; audio is decoded once at the end. This adapter
re-expresses that loop body as one harness step per 40 ms input frame (``models.md``, "Voila"):

* the sequence is ``[1, L, 8]`` tokens: the user channel (4 codebooks) then the agent channel
  (4 codebooks); the LLM embeds all 8 and averages them (``model.py:forward``);
* each iteration samples a text token from the LLM head (``temperature``, ``top_k``); the
  2-class "start speaking" head (``voila_pred``) forces ``<|VOILA|>`` when it says 1 and the
  agent is not speaking; ``eos`` ends speaking;
* a sampled ``<au_token>`` is an **audio step**: the depth head
  (``audio_transformer.py:AudioTransformer.inference``, ``audio_temperature``, ``audio_top_k``)
  gives the agent's 4 codes, the step's input frame is encoded into the user's 4 codes, and
  ``[user codes, agent codes]`` is appended; the agent codes are decoded to 640 samples;
* any other token is a **text step**: it consumes no input (the user channel gets a copy of
  the token, ``model.py`` ``new_input_tokens = next_tokens``) and produces no audio. A step
  runs text steps until its audio step (the harness gives each step unlimited compute, so the
  model "thinks" between two input frames as upstream's offline loop does), at most
  ``max_text_steps``; past that the audio step is forced.

So each step consumes exactly one input frame and produces exactly one frame: the agent's
audio at a step is predicted from the input *before* that step's frame (one frame, 40 ms, of
latency, as in upstream's token order). Output goes through :class:`OutputQueue` all the same,
the adapter contract for models whose output per step varies.

The duty instruction (docs/protocol-decisions.md): the spoken preamble comes through the audio
like every model's; when the protocol gives it as text too (``protocol.duty_as_text``), its text
(:attr:`StreamContext.duty_text`) goes into the system prompt, where upstream puts the
``instruction`` (``tokenize_func.py:_token_input_format_autonomous``:
``<SYSTEM><stream_chat><chat_audio_output><au_chat_ref_start><au_chat_ref><au_chat_ref_end>
{instruction}</SYSTEM><|HUMAN|>`` on both channels); otherwise the instruction is empty, upstream's
default (``infer.py --instruction ""``), so Voila has no preset text. The
voice prompt is a stored 256-d speaker embedding (``examples/character_ref_emb_demo.pkl`` of
the upstream checkout, by name), added at position 4 of the prompt through
``ref_emb_linear``.

Upstream quirks handled here, once (``models.md``):

* ``infer.py:load_model`` passes ``use_flash_attention_2=True``; flash-attn is not in the image
  (a CUDA build against one torch), so the LLM loads with ``attn_implementation="sdpa"``.
* ``model.py:run_generate`` is batch 1 (``voila_head_pred.cpu()[0].item()``, ``next_tokens[0]``,
  ``audio_token_mask[0, 0, 0].item()``): ``max_batch = 1``; throughput comes from several
  replicas per GPU (fractional ``num_gpus``, ``conf/model/voila.yaml``).
* ``model.py:run_generate`` samples with the global torch RNG and treats temperature 0 as
  "no scaling" (sampling at 1, not greedy, also in ``audio_transformer.py:inference``): each
  stream gets its own RNG state, seeded from :attr:`StreamContext.seed` and swapped in around
  its calls; temperatures must be > 0.
* ``voila_tokenizer.py:VoilaTokenizer`` (transformers ``EncodecModel``) has no streaming state:
  encoding or decoding each 40 ms frame alone differs from the offline codec and clicks at
  frame edges, so each frame is encoded and decoded with ``codec_context_frames`` frames of
  left context (the last frame of the window is kept). It still sees no right context.
* the KV cache grows without a window (``DynamicCache``): a stream whose sequence would pass
  ``max_tokens`` (default: the LLM's ``max_position_embeddings``) is that conversation's
  error (:class:`RowError`), never silently run past the trained context.
* ``model.py:run_generate`` computes the depth head's audio codes at every iteration and
  discards them on text steps; here they are computed only on audio steps (same
  distribution, less compute; a different draw order from upstream's).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pickle
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from harness.models.base import TEXT_PROMPT, DuplexModel, ModelInfo, OutputQueue, RowError, StreamContext
from harness.weights import Repo, Requirements, loaded, locate

RATE = 16_000  # tokenize_func.AUDIO_SR: the codec's rate, in and out
FRAME = 640  # tokenize_func.SEG_LEN: one codec frame (40 ms, 25 Hz)
CHANNELS = 2  # user, agent
TINY_MAX_TEXT_STEPS = 2  # tiny=True: random weights sample text almost always; bound the work per step
# what load reads: the LLM and its tokenizer (VoilaAutonomousModel / AutoTokenizer.from_pretrained) and the codec
# (voila_tokenizer.py VoilaTokenizer: AutoProcessor + EncodecModel.from_pretrained)
LLM_FILES = ("config.json", "tokenizer_config.json")
LLM_CHECKPOINT = ("model.safetensors.index.json", "model.safetensors")
CODEC_FILES = ("config.json", "preprocessor_config.json")
CODEC_CHECKPOINT = ("model.safetensors", "pytorch_model.bin")
STACK = ("model:VoilaAutonomousModel", "voila_tokenizer:VoilaTokenizer", "tokenize_func:DEFAULT_AUDIO_TOKEN")


@dataclass
class _Stream:
    """One row's stream: the LLM's cache and last outputs, the codec windows, its RNG."""

    cache: Any  # transformers DynamicCache
    length: int  # tokens in the cache
    logits: Any  # float[V]: text logits at the last position
    hidden: Any  # [1, 1, H]: last hidden state (the depth head's input)
    start: bool  # voila head says "start speaking" at the last position
    rng: tuple  # (cpu state, cuda state or None) of the stream's RNG
    speaking: bool = False
    wav: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # input window, 16 kHz
    agent: list = field(default_factory=list)  # agent code frames ([4] each), the decode window
    text_steps: int = 0
    audio_steps: int = 0


class VoilaModel(DuplexModel):
    """Voila-autonomous as a per-frame duplex model: 16 kHz x 640 (40 ms) in and out, batch 1.

    Args:
        weights_path: local directory of ``maitrix-org/Voila-autonomous-preview`` (LLM, depth
            head and text tokenizer), or that hub id, then read only from the local Hugging Face
            cache (``HF_HOME``; fetched once by ``make weights MODEL=voila``, never downloaded at
            run time).
        revision: the weights' commit (40 hex digits) when ``weights_path`` is a hub id.
            ``ModelInfo.weights`` records both repositories' ``repo@<commit>`` after load.
        codec_path, codec_revision: the same for ``maitrix-org/Voila-Tokenizer`` (Encodec,
            16 kHz, 4 codebooks x 2048 at 25 Hz).
        voice: speaker embedding name in ``voice_file`` (the voice prompt); ``None``: none.
        voice_file: pickle of ``{name: 256 floats}``; relative paths are in the upstream checkout.
        temperature, top_k: text-token sampling (upstream ``infer.py``: 0.2, 50).
        audio_temperature, audio_top_k: depth-head sampling (upstream: 0.8, 50).
        max_text_steps: most text steps before a frame's audio step is forced.
        codec_context_frames: frames of left context when encoding/decoding one frame.
        max_tokens: longest sequence (tokens) a stream may reach; ``None``: the LLM's
            ``max_position_embeddings``.
        dtype: LLM dtype on CUDA (``"bfloat16"`` as upstream); float32 on CPU.
        tiny: build a tiny randomly initialised instance of the real upstream classes on CPU
            (no weights; ``make model-smoke``) instead of loading weights. Random weights sample
            text almost always, so ``max_text_steps`` is then at most 2 (bounded work per step).

    Raises:
        ValueError: a temperature <= 0, ``top_k``/``audio_top_k`` < 1, ``max_text_steps`` < 0 or
            ``codec_context_frames`` < 0.
    """

    SOURCE_DIRS = (".",)  # flat modules model.py, audio_transformer.py, voila_tokenizer.py, tokenize_func.py

    def __init__(self, weights_path: str = "maitrix-org/Voila-autonomous-preview", revision: str | None = None,
                 codec_path: str = "maitrix-org/Voila-Tokenizer", codec_revision: str | None = None,
                 voice: str | None = "Samantha", voice_file: str = "examples/character_ref_emb_demo.pkl",
                 temperature: float = 0.2, top_k: int = 50,
                 audio_temperature: float = 0.8, audio_top_k: int = 50, max_text_steps: int = 64,
                 codec_context_frames: int = 25, max_tokens: int | None = None, dtype: str = "bfloat16",
                 tiny: bool = False):
        if temperature <= 0 or audio_temperature <= 0:
            raise ValueError(f"voila: temperature and audio_temperature must be > 0 (got {temperature}, "
                             f"{audio_temperature}); upstream treats 0 as sampling at 1, not greedy")
        if top_k < 1 or audio_top_k < 1:
            raise ValueError(f"voila: top_k and audio_top_k must be >= 1 (got {top_k}, {audio_top_k})")
        if max_text_steps < 0 or codec_context_frames < 0:
            raise ValueError(f"voila: max_text_steps and codec_context_frames must be >= 0 (got {max_text_steps}, "
                             f"{codec_context_frames})")
        self.weights_path, self.revision = weights_path, revision
        self.codec_path, self.codec_revision = codec_path, codec_revision
        self.voice, self.voice_file = voice, voice_file
        self.temperature, self.top_k = float(temperature), int(top_k)
        self.audio_temperature, self.audio_top_k = float(audio_temperature), int(audio_top_k)
        self.max_text_steps = min(max_text_steps, TINY_MAX_TEXT_STEPS) if tiny else int(max_text_steps)
        self.codec_context_frames, self.max_tokens = int(codec_context_frames), max_tokens
        self.dtype, self.tiny = dtype, tiny
        weights = "random:tiny" if tiny else "+".join(map(str, self._repos()))
        self.info = ModelInfo("voila", RATE, RATE, FRAME, FRAME, max_batch=1, capabilities=frozenset({TEXT_PROMPT}),
                              weights=weights, voice_prompt=None if voice is None else f"{voice} ({voice_file})")
        self._streams: list[_Stream | None] = [None] * self.info.max_batch
        self._queue = OutputQueue(self.info.max_batch, FRAME)

    # ------------------------------------------------------------------ loading

    def _repos(self) -> tuple[Repo, Repo]:
        return (Repo(self.weights_path, self.revision, LLM_FILES, (LLM_CHECKPOINT,)),
                Repo(self.codec_path, self.codec_revision, CODEC_FILES, (CODEC_CHECKPOINT,), role="codec",
                     source_key="codec_path", revision_key="codec_revision"))

    def requirements(self) -> Requirements:
        """maitrix-org/Voila's flat modules and, unless tiny, the model and its tokenizer's repositories."""
        return Requirements(STACK, () if self.tiny else self._repos())

    def load(self, device: str) -> None:
        import tokenize_func as tf
        import torch
        from model import VoilaAutonomousModel
        from transformers import AutoTokenizer, DynamicCache
        from voila_tokenizer import VoilaTokenizer

        self._torch, self._DynamicCache = torch, DynamicCache
        self.device = torch.device(device)
        if self.device.type == "cuda" and self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        if self.tiny:  # the same random instance every time, the global RNG untouched
            self._tmp = tempfile.TemporaryDirectory(prefix="voila-tiny-")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(0)
                llm_dir, codec_dir = _tiny_checkpoint(Path(self._tmp.name), tf)
                self.tokenizer = AutoTokenizer.from_pretrained(llm_dir)
                self.llm = _tiny_llm(VoilaAutonomousModel, len(self.tokenizer))
        else:
            repos = self._repos()
            llm_dir, codec_dir = (locate(r, self.info.name) for r in repos)
            self.info = dataclasses.replace(self.info, weights="+".join(
                loaded(r, d) for r, d in zip(repos, (llm_dir, codec_dir), strict=True)))
            self.tokenizer = AutoTokenizer.from_pretrained(llm_dir)
            cuda = self.device.type == "cuda"
            dtype = getattr(torch, self.dtype) if cuda else torch.float32
            # on CUDA straight onto the device in its dtype (accelerate's device_map), not first a whole CPU copy:
            # four replicas per pod would need four LLMs' worth of pod memory at once (docs/models.md, "Memory")
            onto = {"device_map": self.device} if cuda else {}
            self.llm = VoilaAutonomousModel.from_pretrained(llm_dir, torch_dtype=dtype, attn_implementation="sdpa",
                                                            use_cache=True, **onto)
        self.llm = self.llm.to(self.device).eval()
        self.codec = VoilaTokenizer(model_path=str(codec_dir), device=str(self.device))
        cfg = self.llm.config
        self.num_codebooks, self.codebook_size = int(cfg.num_codebooks), int(cfg.codebook_size)
        self._limit = self.max_tokens or int(cfg.max_position_embeddings)
        ids = self.tokenizer.convert_tokens_to_ids
        self.audio_id, self.assistant_id = ids(tf.DEFAULT_AUDIO_TOKEN), ids(tf.DEFAULT_ASSISTANT_TOKEN)
        self.human_id, self.min_audio_id = ids(tf.DEFAULT_HUMAN_TOKEN), ids(tf.AUDIO_TOKEN_FORMAT.format(0))
        self.eos_id = self.tokenizer.eos_token_id
        system = (tf.DEFAULT_SYSTEM_START_TOKEN + tf.TASK_TYPE_CONF["chat_aiao_auto"] + tf.DEFAULT_CHAT_REF_START_TOKEN
                  + tf.DEFAULT_CHAT_REF_TOKEN + tf.DEFAULT_CHAT_REF_END_TOKEN + tf.DEFAULT_SYSTEM_END_TOKEN)
        self._system_ids = self.tokenizer.encode(system, add_special_tokens=False)
        self._offsets = (self.min_audio_id + torch.arange(self.num_codebooks, device=self.device)
                         * self.codebook_size)  # codebook c's code k is token min_audio_id + c * codebook_size + k
        self._ref = self._ref_mask = None
        if self.voice is not None:
            self._ref = torch.tensor(self._voice_embedding(sys.modules[VoilaAutonomousModel.__module__].__file__),
                                     dtype=torch.float32, device=self.device)
            self._ref_mask = torch.tensor([1], device=self.device)

    def _voice_embedding(self, model_file: str) -> list[float]:
        """The 256 floats of ``voice`` in ``voice_file`` (relative to the upstream checkout)."""
        path = Path(self.voice_file)
        if not path.is_absolute():
            path = Path(model_file).resolve().parent / path
        with open(path, "rb") as f:
            voices = pickle.load(f)  # upstream's own file (gradio_demo.py loads it the same way)
        if self.voice not in voices:
            raise ValueError(f"voila: voice {self.voice!r} is not in {path}; it has: {', '.join(sorted(voices))}")
        emb = list(voices[self.voice])
        if len(emb) != 256:
            raise ValueError(f"voila: voice {self.voice!r} in {path} has {len(emb)} values, expected 256")
        return emb

    # ------------------------------------------------------------------ rows

    def open(self, row: int, stream: StreamContext) -> None:
        """Prefill ``row`` with the prompt (system text with the duty instruction when given, voice embedding).

        Raises :class:`RowError` when the prompt leaves no room in ``max_tokens`` or its logits
        are not finite.
        """
        torch = self._torch
        self.close(row)
        instruction = self.tokenizer.encode(stream.duty_text, add_special_tokens=False) if stream.duty_text else []
        ids = self._system_ids[:-1] + list(instruction) + self._system_ids[-1:] + [self.human_id]
        if len(ids) >= self._limit:
            raise RowError({row: f"the prompt ({len(ids)} tokens with the duty text) does not fit the "
                                 f"{self._limit}-token context"})
        prompt = torch.tensor(ids, device=self.device)[None, :, None].expand(1, len(ids), CHANNELS * self.num_codebooks)
        st = _Stream(self._DynamicCache(), 0, None, None, False, self._seeded_rng(stream.seed))
        try:
            with torch.inference_mode():
                self._forward(st, prompt, ref=True)
        except _StreamFault as e:
            raise RowError({row: str(e)}) from None
        self._streams[row] = st

    def close(self, row: int) -> None:
        self._streams[row] = None
        self._queue.clear(row)

    def step(self, frames: np.ndarray) -> np.ndarray:
        """``float32[1, 640]`` at 16 kHz in -> ``float32[1, 640]`` at 16 kHz out, clipped to [-1, 1].

        Raises :class:`RowError` for a row whose sequence would pass ``max_tokens`` or whose
        logits are not finite.
        """
        torch = self._torch
        rows = frames.shape[0]
        bad: dict[int, str] = {}
        with torch.inference_mode():
            for b in range(rows):
                st = self._streams[b]
                if st is None:
                    continue
                try:
                    with self._rng(st):
                        self._queue.put(b, self._advance(st, np.asarray(frames[b], np.float32)))
                except _StreamFault as e:
                    bad[b] = str(e)
        out = self._queue.take()[:rows]
        if bad:
            raise RowError(bad, out)
        return out

    # ------------------------------------------------------------------ the loop body of run_generate

    def _advance(self, st: _Stream, frame: np.ndarray) -> np.ndarray:
        """Text steps until this frame's audio step; returns the agent's decoded frame ``float32[640]``."""
        torch = self._torch
        n_text = 0
        while True:
            token = self._sample_text(st)
            if st.start and not st.speaking:  # the voila head starts speech (model.py run_generate)
                token, st.speaking = self.assistant_id, True
            elif token == self.eos_id:
                st.speaking = False
            if token != self.audio_id and n_text >= self.max_text_steps:
                token = self.audio_id
            if token == self.audio_id:
                break
            # a text step: no input consumed, the user channel repeats the token
            self._forward(st, torch.full((1, 1, CHANNELS * self.num_codebooks), token, device=self.device))
            n_text += 1
        st.text_steps += n_text
        st.audio_steps += 1
        agent = self.llm.audio_transformer.inference(st.hidden, temperature=self.audio_temperature,
                                                     top_k=self.audio_top_k)[0, 0]  # [4] codes in [0, codebook_size)
        user = self._encode(st, frame)
        self._forward(st, torch.cat([user + self._offsets, agent + self._offsets])[None, None, :])
        return self._decode(st, agent)

    def _sample_text(self, st: _Stream) -> int:
        """model.py run_generate's text sampling: temperature, top-k, multinomial."""
        torch = self._torch
        logits = st.logits / self.temperature
        k = min(self.top_k, logits.shape[-1])
        logits = logits.masked_fill(logits < torch.topk(logits, k)[0][-1], -float("inf"))
        return int(torch.multinomial(torch.softmax(logits, dim=-1), 1))

    def _forward(self, st: _Stream, tokens: Any, ref: bool = False) -> None:
        """Append ``tokens`` ``[1, n, 8]`` to the stream; keep the last position's outputs."""
        torch = self._torch
        n = tokens.shape[1]
        if st.length + n > self._limit:
            raise _StreamFault(f"the sequence reached the {self._limit}-token context (max_tokens) after "
                               f"{st.audio_steps} audio steps ({st.audio_steps * FRAME / RATE:.2f} s) and "
                               f"{st.text_steps} text steps")
        kw = {"ref_embs": self._ref, "ref_embs_mask": self._ref_mask} if ref and self._ref is not None else {}
        out = self.llm(input_ids=tokens, past_key_values=st.cache, use_cache=True, return_dict=True, **kw)
        logits = out.logits[0, -1].float()
        if not bool(torch.isfinite(logits).all()):
            raise _StreamFault(f"the LLM's logits are not finite at token {st.length + n}")
        st.cache, st.length, st.logits = out.past_key_values, st.length + n, logits
        st.hidden = out.last_hidden_state[:, -1:]
        st.start = int(out.voila_pred[0, -1].argmax()) == 1

    def _encode(self, st: _Stream, frame: np.ndarray) -> Any:
        """The user's ``[4]`` codes of ``frame``, encoded with ``codec_context_frames`` of left context."""
        st.wav = np.concatenate([st.wav, frame])[-FRAME * (self.codec_context_frames + 1):]
        codes = self.codec.encode(st.wav, sr=RATE)  # [4, frames]
        return codes[:, -1].to(self.device)

    def _decode(self, st: _Stream, agent: Any) -> np.ndarray:
        """``float32[640]``: the last frame of the agent's codes decoded with left context."""
        st.agent = [*st.agent, agent][-(self.codec_context_frames + 1):]
        wav = self.codec.decode(self._torch.stack(st.agent, dim=1))  # [frames * 640]
        return np.clip(wav[-FRAME:].float().cpu().numpy(), -1.0, 1.0)

    # ------------------------------------------------------------------ per-stream RNG

    def _seeded_rng(self, seed: int) -> tuple:
        torch = self._torch
        with torch.random.fork_rng(devices=self._rng_devices()):
            torch.manual_seed(seed)
            return self._rng_state()

    def _rng_devices(self) -> list:
        return [self.device.index] if self.device.type == "cuda" else []

    def _rng_state(self) -> tuple:
        torch = self._torch
        return (torch.get_rng_state(), torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None)

    @contextlib.contextmanager
    def _rng(self, st: _Stream):
        """Run with the stream's own RNG state (upstream samples from the global RNG)."""
        torch = self._torch
        with torch.random.fork_rng(devices=self._rng_devices()):
            torch.set_rng_state(st.rng[0])
            if st.rng[1] is not None:
                torch.cuda.set_rng_state(st.rng[1], self.device)
            try:
                yield
            finally:
                st.rng = self._rng_state()


class _StreamFault(Exception):
    """A deterministic fault of one stream (becomes its row's :class:`RowError`)."""


# ---------------------------------------------------------------------- tiny random instance (make model-smoke)

def _tiny_checkpoint(root: Path, tf: Any) -> tuple[Path, Path]:
    """Write a tiny text tokenizer (byte-level, Voila's special and audio tokens) and a tiny random
    Encodec (16 kHz, hop 640, 4 x 2048 codebooks at 1.1 kbps, like Voila-Tokenizer) under ``root``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import EncodecConfig, EncodecFeatureExtractor, EncodecModel, PreTrainedTokenizerFast

    llm_dir, codec_dir = root / "llm", root / "codec"
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    tok = Tokenizer(models.BPE({c: i for i, c in enumerate(sorted(alphabet))}, []))
    tok.pre_tokenizer, tok.decoder = pre_tokenizers.ByteLevel(add_prefix_space=False), decoders.ByteLevel()
    specials = [tf.DEFAULT_SYSTEM_START_TOKEN, tf.DEFAULT_SYSTEM_END_TOKEN, tf.DEFAULT_CHAT_REF_START_TOKEN,
                tf.DEFAULT_CHAT_REF_TOKEN, tf.DEFAULT_CHAT_REF_END_TOKEN, tf.DEFAULT_HUMAN_TOKEN,
                tf.DEFAULT_ASSISTANT_TOKEN, tf.DEFAULT_AUDIO_TOKEN, tf.TASK_STREAM_CHAT_TOKEN,
                tf.TASK_CHAT_AUDIO_OUTPUT]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="</s>", pad_token="<pad>",
                                   additional_special_tokens=specials)
    fast.add_tokens([tf.AUDIO_TOKEN_FORMAT.format(i) for i in range(4 * 2048)], special_tokens=True)
    fast.save_pretrained(llm_dir)
    cfg = EncodecConfig(sampling_rate=16_000, target_bandwidths=[1.1], upsampling_ratios=[8, 5, 4, 4],
                        codebook_size=2048, codebook_dim=16, hidden_size=16, num_filters=4, num_lstm_layers=1,
                        num_residual_layers=1)
    cfg.model_version = "tiny"  # voila_tokenizer.py reads model.config.model_version
    codec = EncodecModel(cfg)
    for layer in codec.quantizer.layers:  # spread the codebooks so that codes depend on the audio
        layer.codebook.embed.copy_(torch.randn(layer.codebook.embed.shape))
    codec.save_pretrained(codec_dir)
    EncodecFeatureExtractor(feature_size=1, sampling_rate=16_000).save_pretrained(codec_dir)
    return llm_dir, codec_dir


def _tiny_llm(cls: Any, vocab: int) -> Any:
    """``VoilaAutonomousModel`` on a 2-layer, 64-wide Llama config (random weights; the depth head is
    upstream's fixed 4 x 1024 ``AudioTransformer`` whatever the LLM size)."""
    from transformers import LlamaConfig

    cfg = LlamaConfig(vocab_size=-(-vocab // 64) * 64, hidden_size=64, intermediate_size=128,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=8192, attn_implementation="sdpa")
    cfg.num_codebooks, cfg.codebook_size = 4, 2048
    return cls(cfg)
