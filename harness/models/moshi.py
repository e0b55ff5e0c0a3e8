"""Moshi (kyutai/moshiko-pytorch-bf16) through Kyutai's ``moshi`` package (PyPI ``moshi==0.2.13``).

One step is one Mimi frame: 1,920 samples at 24 kHz (80 ms) in and out. Rows batch natively:
``LMGen`` keeps per-row offsets and honours reset and exec masks (``moshi/models/lm.py``
``_LMGenState``), and so does Mimi (``moshi/modules/streaming.py``), so ``max_batch`` is large
and a refilled row is reset alone (``reset_streaming(mask)``) while the others stream on.

Duty instruction: moshiko has no system prompt or voice prompt (its conditioning is for other
checkpoints), so the instruction reaches it only as the spoken preamble the runner plays at the
start of every stream (docs/models.md).

Upstream behaviours handled here, once:

* ``LMGen.step`` yields no tokens for a stream's first step (``offset <= max_delay``): that
  row says 80 ms of silence. With the default ``support_out_of_sync=False`` a masked
  ``reset_streaming`` sets the *shared* ``offset_cpu`` to 0, so every row would return ``None``
  on the step after any refill (``lm.py _LMGenState.reset``); ``support_out_of_sync=True`` keeps
  per-row offsets and marks the rows with nothing yet as ``ungenerated`` (-2) instead.
* Mimi's batched decoder must decode every row (a subset breaks its state), but must not
  advance a row that has nothing to decode yet, or that row's first decoded frame would depend
  on a placeholder; the decoder runs with an exec mask over the rows that have tokens.
* The first input frame is encoded and fed once like every other frame (the server instead
  drops it after encoding, ``server.py recv_loop``; ``run_inference.py`` feeds it twice): the
  harness stream starts with room tone, so there is no start-up click to hide.
* No echo cancellation upstream (``protocol.echo`` feeds the model its own output if set).
* ``torch.compile`` of parts of the LM on first use (``NO_TORCH_COMPILE=1`` disables it; tests
  set it); CUDA graphs only on CUDA.

Sampling: Moshi samples from torch's global generator (``moshi/utils/sampling.py``), one
stream for the whole batch, seeded once per actor from ``seed``. With ``use_sampling`` a
conversation's tokens therefore depend on its batch neighbours (same distribution, different
draws); greedy decoding (``use_sampling: false``) is row-independent.
"""

from __future__ import annotations

import numpy as np

from harness.models.base import DuplexModel, ModelInfo, StreamContext

RATE = 24_000
FRAME = 1_920

# A tiny randomly initialised Moshi with the real architecture (tests, bench --smoke, model smoke).
TINY_MIMI = {
    "sample_rate": RATE, "channels": 1, "frame_rate": 12.5,
    "seanet": {"channels": 1, "dimension": 16, "causal": True, "n_filters": 4, "n_residual_layers": 1,
               "activation": "ELU", "compress": 2, "dilation_base": 2, "disable_norm_outer_blocks": 0,
               "kernel_size": 7, "residual_kernel_size": 3, "last_kernel_size": 3, "norm": "none",
               "pad_mode": "constant", "ratios": [8, 6, 5, 4], "true_skip": True},
    "quantizer": {"dimension": 8, "n_q": 8, "bins": 64, "input_dimension": 16, "output_dimension": 16},
    "transformer": {"d_model": 16, "num_heads": 2, "num_layers": 1, "causal": True, "layer_scale": 0.01,
                    "context": 25, "conv_layout": True, "max_period": 10000, "gating": "none",
                    "norm": "layer_norm", "positional_embedding": "rope", "dim_feedforward": 32,
                    "input_dimension": 16, "output_dimensions": [16]},
}
TINY_LM = {
    "dim": 32, "text_card": 64, "existing_text_padding_id": 3, "n_q": 16, "dep_q": 8, "card": 64,
    "num_heads": 2, "num_layers": 2, "hidden_scale": 2.0, "causal": True, "layer_scale": None, "context": 50,
    "max_period": 10000, "gating": "silu", "norm": "rms_norm_f32", "positional_embedding": "rope",
    "depformer_dim": 16, "depformer_dim_feedforward": 32, "depformer_num_heads": 1, "depformer_num_layers": 1,
    "depformer_layer_scale": None, "depformer_multi_linear": True, "depformer_context": 8,
    "depformer_max_period": 10000, "depformer_gating": "silu", "depformer_pos_emb": "none",
    "depformer_weights_per_step": True, "delays": [0, 0, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, 1, 1, 1, 1],
}


class MoshiModel(DuplexModel):
    """Moshi as a batched full-duplex model.

    Args:
        hf_repo, revision: the checkpoint (weights id in the run manifest); read through the
            Hugging Face cache (set ``HF_HUB_OFFLINE=1`` on a cluster with a mounted cache).
        weights_path: a local folder with the checkpoint's files (``model.safetensors`` and
            Mimi's ``tokenizer-e351c8d8-checkpoint125.safetensors``); takes precedence.
        temp, temp_text, top_k, top_k_text, use_sampling: LMGen's decoding settings (the
            defaults are Moshi's own).
        seed: seeds torch's generator once per actor.
        max_batch: most rows one actor steps together.
        dtype: ``bfloat16`` (the released weights) or ``float32``.
        tiny: build a tiny randomly initialised instance of the real architecture instead of
            reading weights (tests, ``make model-smoke``, ``bench/gpu_throughput.py``); ``lm_kwargs``
            / ``mimi_config`` override its sizes (e.g. the full-size config with random weights).
    """

    SMOKE_REQUIREMENTS = ("moshi==0.2.13",)
    SOURCE_DIRS: tuple[str, ...] = ()

    def __init__(self, hf_repo: str = "kyutai/moshiko-pytorch-bf16", revision: str = "main",
                 weights_path: str | None = None, temp: float = 0.8, temp_text: float = 0.7, top_k: int = 250,
                 top_k_text: int = 25, use_sampling: bool = True, seed: int = 0, max_batch: int = 64,
                 dtype: str = "bfloat16", tiny: bool = False, lm_kwargs: dict | None = None,
                 mimi_config: dict | None = None):
        self.hf_repo, self.revision, self.weights_path = hf_repo, revision, weights_path
        self.sampling = {"temp": temp, "temp_text": temp_text, "top_k": top_k, "top_k_text": top_k_text,
                         "use_sampling": use_sampling}
        self.seed, self.dtype, self.tiny = seed, dtype, tiny
        self.lm_kwargs, self.mimi_config = lm_kwargs, mimi_config
        weights = "random:tiny" if tiny else weights_path or f"{hf_repo}@{revision}"
        self.info = ModelInfo("moshi", RATE, RATE, FRAME, FRAME, max_batch, frozenset(), weights=weights)
        self._rows = 0  # R of the current streaming state (0: none yet)
        self._fresh: set[int] = set()  # rows opened since the last step

    def load(self, device: str) -> None:
        import torch
        from moshi.models import loaders
        from moshi.models.lm import LMGen

        dtype = getattr(torch, self.dtype)
        if self.tiny or self.lm_kwargs or self.mimi_config:
            mimi = loaders.get_mimi(None, mimi_config=self.mimi_config or TINY_MIMI, device=device)
            lm = loaders.get_moshi_lm(None, lm_kwargs=self.lm_kwargs or TINY_LM, device=device, dtype=dtype)
        elif self.weights_path:
            from pathlib import Path

            root = Path(self.weights_path)
            mimi = loaders.get_mimi(root / loaders.MIMI_NAME, device=device)
            lm = loaders.get_moshi_lm(root / loaders.MOSHI_NAME, device=device, dtype=dtype)
        else:
            info = loaders.CheckpointInfo.from_hf_repo(self.hf_repo, revision=self.revision)
            mimi, lm = info.get_mimi(device=device), info.get_moshi(device=device, dtype=dtype)
        torch.manual_seed(self.seed)
        self.torch, self.device = torch, device
        self.mimi, self.lm = mimi.eval(), lm.eval()
        self.lm_gen = LMGen(lm, support_out_of_sync=True, **self.sampling)
        self._streams = None

    def _start(self, rows: int) -> None:
        """A fresh streaming state for ``rows`` rows (every row fresh)."""
        if self._streams is not None:
            for ctx in self._streams:
                ctx.close()
        self._streams = (self.mimi.streaming(rows), self.lm_gen.streaming(rows))
        self._rows = rows
        self._all = self.torch.ones(rows, dtype=self.torch.bool, device=self.device)

    def open(self, row: int, stream: StreamContext) -> None:
        self._fresh.add(row)

    def step(self, frames: np.ndarray) -> np.ndarray:
        with self.torch.no_grad():
            return self._step(frames)

    def _step(self, frames: np.ndarray) -> np.ndarray:
        torch = self.torch
        rows = frames.shape[0]
        if rows != self._rows:
            self._start(rows)
        elif self._fresh:
            mask = torch.zeros(rows, dtype=torch.bool, device=self.device)
            mask[sorted(self._fresh)] = True
            self.mimi.reset_streaming(mask)
            self.lm_gen.reset_streaming(mask)
        self._fresh.clear()
        x = torch.from_numpy(np.ascontiguousarray(frames, dtype=np.float32)).to(self.device)[:, None, :]
        codes = self.mimi.encode(x)  # [R, 8, 1]
        tokens = self.lm_gen.step(codes)  # [R, 1 + 8, 1]; -2 (ungenerated) where a row has none yet
        audio = tokens[:, 1:]
        ready = (audio >= 0).all(dim=2).all(dim=1)
        out = np.zeros((rows, FRAME), np.float32)
        if bool(ready.any()):
            partial = not bool(ready.all())
            if partial:
                self.mimi.set_exec_mask(ready)
            pcm = self.mimi.decode(torch.where(ready[:, None, None], audio, torch.zeros_like(audio)))
            if partial:
                self.mimi.set_exec_mask(self._all)
            rows_ready = ready.cpu().numpy()
            out[rows_ready] = pcm[:, 0].float().cpu().numpy()[rows_ready]
        return np.clip(out, -1.0, 1.0)
