"""FLM-Audio (CofeAI/FLM-Audio) through its GitHub source (cofe-ai/flm-audio; the ``flmaudio/``
folder of the checkout on ``sys.path``, not a package on any index).

One step is one Mimi frame: 1,920 samples at 24 kHz (80 ms) in and out. ``flmaudio.models.LMGen``
(``flmaudio/models/streaming_flmaudio.py``) is a batch-1 port of Moshi's: the depth head starts
from ``torch.empty((1, 0))`` and the text token is read as ``sampled_text_token[0]``, so
``max_batch`` is 1 and throughput comes from several replicas per GPU (fractional ``num_gpus``,
``conf/model/flm_audio.yaml``). Each stream runs from a fresh state: ``open`` resets Mimi and
``LMGen`` and seeds torch's generator with the stream's seed, so a conversation's output does
not depend on what the actor streamed before.

Duty instruction: FLM-Audio has no system prompt and no voice prompt (the upstream server's only
settings are ``LMGen``'s sampling attributes, ``flmaudio/server.py handle_settings``), so the
instruction reaches it only as the spoken preamble the runner plays at the start of every stream.
Its text channel (an inner monologue) is not used: only the audio is evaluated.

Upstream behaviours handled here, once (docs/models.md, ``## flm_audio``):

* ``flmaudio/server.py`` runs ``main()`` at import (module level ``with torch.no_grad(): main()``):
  only ``flmaudio.models`` is imported, never ``flmaudio.server``.
* ``flmaudio/models/modeling_flmaudio.py`` ``FLMAudioForCausalLM.forward_audio`` takes four
  arguments (``step``, ``kv_cache``) and passes all four to ``DepthGPT.forward``, which takes two,
  while ``streaming_flmaudio.py`` ``LMGen.depformer_step`` calls it with two keywords: a
  ``TypeError`` on the first step. The adapter binds the two-argument call to the depth head.
* ``streaming_flmaudio.py`` ``LMGen._init_streaming_state`` wraps ``forward`` and
  ``forward_audio`` in ``torch.compile``. Kept on CUDA (``compile: true``, the upstream default,
  with the server's 4-frame warm-up in ``load`` so compilation does not land in a stream); on CPU,
  or with ``compile: false``, the plain methods are put back (inductor on CPU needs a C compiler).
* ``streaming_flmaudio.py`` ``_LMGenState.reset`` zeroes the whole token cache, including the
  initial token (text ``text_wait_token_id``, audio ``aud_pad_token_id``) that
  ``_init_streaming_state`` wrote at position 0: after a reset, upstream starts a stream from
  token 0 everywhere (the server resets per connection after its warm-up, so every connection
  does). ``open`` writes the initial token back, so every stream starts as the first one after
  loading does.
* ``LMGen.step`` returns ``None`` for a stream's first step (``offset <= max_delay``): that step
  says 80 ms of silence.
* The depth head can sample an audio token outside Mimi's codebooks (``DepthGPT`` has
  ``aud_vocab_size`` outputs, which may include the pad id); upstream would fail inside
  ``mimi.decode``. Here it fails that conversation alone (:class:`RowError`) with the token named.
* The LM's ``DynamicCache`` grows by one position per step without a window: a stream longer
  than ``max_steps`` (default: the weights' ``max_position_embeddings``) fails as a
  :class:`RowError` instead of running past the positions the model was built for.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harness.models.base import DuplexModel, ModelInfo, RowError, StreamContext
from harness.weights import Repo, Requirements, loaded, locate

RATE = 24_000
FRAME = 1_920  # one Mimi frame: 80 ms at 24 kHz
WARMUP_STEPS = 4  # flmaudio/server.py ServerState.warmup

# A tiny randomly initialised FLM-Audio with the real architecture (tests and ``make model-smoke``):
# overrides of flmaudio/models/loaders.py's Mimi settings, and an FLMAudioConfig. The released
# weights' config.json was not read here; the audio vocabulary is Mimi's 2,048 codes (pad id inside).
TINY_MIMI = {
    "seanet": {"dimension": 16, "n_filters": 4},
    "quantizer": {"dimension": 8, "n_q": 8, "input_dimension": 16, "output_dimension": 16},
    "transformer": {"d_model": 16, "num_heads": 2, "num_layers": 1, "dim_feedforward": 32, "context": 25,
                    "input_dimension": 16, "output_dimensions": [16]},
}
TINY_LM = {
    "vocab_size": 64, "aud_vocab_size": 2048, "aud_channel": 8, "hidden_size": 32, "intermediate_size": 64,
    "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 4096,
    "mm_token_info": {"text_wait_token_id": 3, "aud_pad_token_id": 2047, "aud_emp_token_id": 2047},
    "aud_depthgpt": {"n_layer": 1, "n_head": 2, "n_embd": 16, "dropout": 0.0, "bias": False, "use_cmlp": True,
                     "use_rmsnorm": True, "use_swiglu": True},
}


# what load reads: Mimi's file (flmaudio/models/loaders.py MIMI_NAME, read from the folder by get_mimi) and the
# LM by FLMAudioForCausalLM.from_pretrained (config.json, one safetensors file or a sharded index)
WEIGHT_FILES = ("config.json", "tokenizer-e351c8d8-checkpoint125.safetensors")
CHECKPOINT = ("model.safetensors.index.json", "model.safetensors")
STACK = ("flmaudio.models.streaming_flmaudio:LMGen", "flmaudio.models.modeling_flmaudio:FLMAudioForCausalLM",
         "flmaudio.models.loaders:get_mimi")


class FLMAudioModel(DuplexModel):
    """FLM-Audio as a one-row full-duplex model.

    Args:
        weights_path: a local folder with the checkpoint (``config.json``, the LM's safetensors,
            and Mimi's ``tokenizer-e351c8d8-checkpoint125.safetensors``), or a Hugging Face repo
            id whose snapshot is in the local Hugging Face cache (``HF_HOME``; fetched once by
            ``make weights MODEL=flm_audio``, never downloaded at run time: :func:`harness.weights.locate`).
        revision: the repo's commit (40 hex digits); ignored for a local folder. ``ModelInfo.weights``
            records ``repo@<commit>`` (or the folder) after load.
        dtype: the LM's torch dtype, ``bfloat16`` (as the upstream server loads it) or ``float32``.
        compile: ``torch.compile`` the LM on CUDA as upstream does (never on CPU).
        use_sampling, temp_audio, temp_text, top_k_audio, top_k_text, top_p_audio, top_p_text,
            repetition_penalty_audio, repetition_penalty_text, repetition_penalty_window_audio,
            repetition_penalty_window_text: ``LMGen``'s decoding settings; the defaults are the
            upstream ones. Upstream ``sample_token`` uses top-p when ``top_p > 0`` and top-k only
            otherwise, and a temperature of 0 is greedy; temperatures and top-p are ``>= 0`` (top-p
            ``<= 1``), penalties ``>= 1``, windows and top-k integers ``>= 1``.
        max_steps: most steps (80 ms each) one stream may take before it fails as an error;
            ``None``: the weights' ``max_position_embeddings`` (one KV-cache position a step).
        tiny: build a tiny randomly initialised instance of the real architecture on the device
            instead of reading weights (tests, ``make model-smoke``).

    Raises:
        ValueError: a decoding setting or ``max_steps`` out of range, or an unknown ``dtype``.
    """

    SOURCE_DIRS = (".",)  # flmaudio/ is at the checkout's root

    def __init__(self, weights_path: str = "CofeAI/FLM-Audio", revision: str | None = None,
                 dtype: str = "bfloat16", compile: bool = True, use_sampling: bool = True,
                 temp_audio: float = 0.5, temp_text: float = 0.01, top_k_audio: int = 1, top_k_text: int = 1,
                 top_p_audio: float = 0.9, top_p_text: float = 0.9, repetition_penalty_audio: float = 1.2,
                 repetition_penalty_text: float = 1.03, repetition_penalty_window_audio: int = 50,
                 repetition_penalty_window_text: int = 50, max_steps: int | None = None, tiny: bool = False):
        if dtype not in ("bfloat16", "float32"):
            raise ValueError(f"flm_audio: dtype must be bfloat16 or float32, got {dtype!r}")
        self.sampling = {
            "use_sampling": bool(use_sampling), "temp_audio": temp_audio, "temp_text": temp_text,
            "top_k_audio": top_k_audio, "top_k_text": top_k_text, "top_p_audio": top_p_audio,
            "top_p_text": top_p_text, "repetition_penalty_audio": repetition_penalty_audio,
            "repetition_penalty_text": repetition_penalty_text,
            "repetition_penalty_window_audio": repetition_penalty_window_audio,
            "repetition_penalty_window_text": repetition_penalty_window_text,
        }
        for name, lo, integer in (("temp_audio", 0, False), ("temp_text", 0, False), ("top_p_audio", 0, False),
                                  ("top_p_text", 0, False), ("repetition_penalty_audio", 1, False),
                                  ("repetition_penalty_text", 1, False), ("top_k_audio", 1, True),
                                  ("top_k_text", 1, True), ("repetition_penalty_window_audio", 1, True),
                                  ("repetition_penalty_window_text", 1, True)):
            v = self.sampling[name]
            if isinstance(v, bool) or not isinstance(v, int if integer else int | float) or v < lo:
                raise ValueError(f"flm_audio: {name} must be {'an integer' if integer else 'a number'} >= {lo}, "
                                 f"got {v!r}")
        for name in ("top_p_audio", "top_p_text"):
            if self.sampling[name] > 1:
                raise ValueError(f"flm_audio: {name} must be at most 1, got {self.sampling[name]!r}")
        if max_steps is not None and (isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1):
            raise ValueError(f"flm_audio: max_steps must be a positive integer or null, got {max_steps!r}")
        self.weights_path, self.revision, self.dtype, self.max_steps = weights_path, revision, dtype, max_steps
        self.compile, self.tiny = compile, tiny
        weights = "random:tiny" if tiny else str(self._repo())
        self.info = ModelInfo("flm_audio", RATE, RATE, FRAME, FRAME, 1, frozenset(), weights=weights)

    # --- loading -----------------------------------------------------------------------------

    def _repo(self) -> Repo:
        return Repo(self.weights_path, self.revision, WEIGHT_FILES, (CHECKPOINT,))

    def requirements(self) -> Requirements:
        """The cofe-ai/flm-audio checkout's ``flmaudio`` and, unless tiny, the checkpoint."""
        return Requirements(STACK, () if self.tiny else (self._repo(),))

    def load(self, device: str) -> None:
        import torch
        from flmaudio.models.streaming_flmaudio import LMGen  # never flmaudio.server: it starts a server

        mimi, lm = self._build_tiny(device) if self.tiny else self._read_weights(device)
        self.torch, self.device = torch, device
        self.mimi, self.lm = mimi.eval(), lm.eval()
        # modeling_flmaudio.py forward_audio(states, ids, step, kv_cache) vs LMGen.depformer_step's
        # two-keyword call: bind the two-argument depth head (before streaming_forever compiles it)
        depth = lm.aud_output_layers

        def forward_audio(transformer_output_states, audio_input_ids):
            return depth(transformer_output_states, audio_input_ids)

        lm.forward_audio = forward_audio
        self.lm_gen = LMGen(lm, **self.sampling)
        self.mimi.streaming_forever(1)
        self.lm_gen.streaming_forever(1)  # streaming_flmaudio.py: wraps forward/forward_audio in torch.compile
        compiled = self.compile and str(device).startswith("cuda")
        if not compiled:
            del lm.forward  # the class's own forward again
            lm.forward_audio = forward_audio
            self.lm_gen._streaming_state.forward_text = lm.forward
        self._initial = lm._get_initial_token()  # [1, 17, 1]: what _init_streaming_state put at position 0
        self.context = self.max_steps or int(lm.config.max_position_embeddings)
        if compiled:  # server.py ServerState.warmup: compile before the first stream, not inside it
            gen = torch.Generator().manual_seed(0)
            with torch.no_grad():
                for _ in range(WARMUP_STEPS):
                    noise = (torch.rand(1, 1, FRAME, generator=gen) - 0.5) * 0.002
                    tokens = self.lm_gen.step(self.mimi.encode(noise.to(device)))
                    if tokens is not None:
                        self.mimi.decode(tokens[:, 1:])
        self._reset()

    def _read_weights(self, device: str):
        """Mimi and the LM from ``weights_path`` (a folder, or a repo in the Hugging Face cache)."""
        import torch
        from flmaudio.models import loaders
        from flmaudio.models.modeling_flmaudio import FLMAudioForCausalLM

        repo = self._repo()
        root = locate(repo, self.info.name)
        self.info = dataclasses.replace(self.info, weights=loaded(repo, root))
        mimi = loaders.get_mimi(str(root), device)
        lm = FLMAudioForCausalLM.from_pretrained(str(root), device_map=device, torch_dtype=getattr(torch, self.dtype),
                                                 low_cpu_mem_usage=True)
        return mimi, lm

    def _build_tiny(self, device: str):
        """A tiny randomly initialised Mimi (as ``loaders._get_mimi`` builds it) and FLM-Audio LM."""
        import torch
        from flmaudio.models import loaders
        from flmaudio.models.configuration_flmaudio import FLMAudioConfig
        from flmaudio.models.modeling_flmaudio import FLMAudioForCausalLM
        from flmaudio.third_party.moshi.models import MimiModel
        from flmaudio.third_party.moshi.modules import SEANetDecoder, SEANetEncoder, transformer
        from flmaudio.third_party.moshi.quantization import SplitResidualVectorQuantizer

        torch.manual_seed(0)
        seanet = {**loaders._seanet_kwargs, **TINY_MIMI["seanet"]}
        tr = {**loaders._transformer_kwargs, **TINY_MIMI["transformer"]}
        encoder = SEANetEncoder(**seanet)
        mimi = MimiModel(
            encoder, SEANetDecoder(**seanet),
            SplitResidualVectorQuantizer(**{**loaders._quantizer_kwargs, **TINY_MIMI["quantizer"]}),
            channels=1, sample_rate=loaders.SAMPLE_RATE, frame_rate=loaders.FRAME_RATE,
            encoder_frame_rate=loaders.SAMPLE_RATE / encoder.hop_length, causal=True, resample_method="conv",
            encoder_transformer=transformer.ProjectedTransformer(device=device, **tr),
            decoder_transformer=transformer.ProjectedTransformer(device=device, **tr)).to(device)
        mimi.set_num_codebooks(8)
        lm = FLMAudioForCausalLM(FLMAudioConfig(**TINY_LM)).to(device=device, dtype=getattr(torch, self.dtype))
        return mimi, lm

    # --- streaming ---------------------------------------------------------------------------

    def _reset(self) -> None:
        """A fresh stream: Mimi and LMGen state reset, the initial token back at position 0."""
        self.mimi.reset_streaming()
        self.lm_gen.reset_streaming()  # streaming_flmaudio.py _LMGenState.reset zeroes the whole cache
        self.lm_gen._streaming_state.cache[:, :, 0:1] = self._initial
        self._steps = 0

    def open(self, row: int, stream: StreamContext) -> None:
        self._reset()
        self.torch.manual_seed(stream.seed)  # LMGen samples from torch's global generator

    def close(self, row: int) -> None:
        self.lm_gen.reset_streaming()  # drop the stream's KV cache now, not at the next open

    def step(self, frames: np.ndarray) -> np.ndarray:
        if frames.shape != (1, FRAME):
            raise ValueError(f"flm_audio steps one row of {FRAME} samples, got frames of shape {frames.shape}")
        out = np.zeros((1, FRAME), np.float32)
        if self._steps >= self.context:
            raise RowError({0: f"stream reached the model's context of {self.context} steps "
                                f"({self.context * FRAME / RATE:.1f} s; max_steps)"})
        torch = self.torch
        with torch.no_grad():
            x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32)).to(self.device)[:, None, :]
            tokens = self.lm_gen.step(self.mimi.encode(x))  # None on the first step, else [1, 1 + 8, 1]
            self._steps += 1
            if tokens is None:
                return out
            audio = tokens[:, 1:]
            bad = (audio < 0) | (audio >= self.mimi.cardinality)
            if bool(bad.any()):
                k = int(bad[0, :, 0].nonzero()[0, 0])
                raise RowError({0: f"sampled audio token {int(audio[0, k, 0])} in codebook {k}, outside "
                                   f"Mimi's {self.mimi.cardinality} codes"})
            pcm = self.mimi.decode(audio)  # [1, 1, FRAME]
            out[0] = pcm[0, 0].float().cpu().numpy()
        return np.clip(out, -1.0, 1.0)
