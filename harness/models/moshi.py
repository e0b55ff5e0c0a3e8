"""Moshi (kyutai/moshiko-pytorch-bf16) through Kyutai's ``moshi`` package (PyPI; the release
``images/moshi/requirements.txt`` pins).

One step is one Mimi frame: 1,920 samples at 24 kHz (80 ms) in and out. Rows batch natively:
``LMGen`` keeps per-row offsets and honours reset and exec masks (``moshi/models/lm.py``
``_LMGenState``), and so does Mimi (``moshi/modules/streaming.py``), so ``max_batch`` is large
and a refilled row is reset alone (``reset_streaming(mask)``) while the others stream on.

Duty instruction: moshiko has no system prompt or voice prompt (its conditioning is for other
checkpoints), so the instruction reaches it only as the spoken preamble the runner plays at the
start of every stream (docs/models.md).

Context: the LM attends over its last 3,000 steps (``LM_CONTEXT_STEPS``, 240 s: the ring KV cache of
the 7B config; a random instance: its ``lm_kwargs["context"]``). A longer stream goes on, attending
to its last 240 s only, so the start of the spoken preamble drops out of its window
(``ModelInfo.context_s``; reduce flags such conversations). ``context_steps`` sizes the ring to the
streams instead (moshi's own ``set_attention_context`` on the LM's transformer, before any stream
opens; issue 24, item 2): the ring's memory and the attention's reads scale with it, and a stream
shorter than the ring attends exactly as with the full ring (its slots past the stream are masked
either way: greedy tokens identical, tested), while a longer one attends to its last
``context_steps`` and is flagged like any overrun (``ModelInfo.context_s``). ``context_steps="auto"``
sizes it per shard (:meth:`MoshiModel.fit_streams`) to the longest stream the shard's scripts allow
whatever the model says (with ``attention="flex"`` rounded up to one of :data:`RING_RUNGS` sizes), never
past the checkpoint's: exact for every stream of the shard.

Attention (issue 24, item 1): the LM attends every step over its whole ring with a boolean mask
(``attention="dense"``, upstream's attention, its mask made once a step for all layers:
``harness.models.moshi_attention.DenseStreamingAttention``, upstream's output bit for bit).
``attention="flex"`` reads only the slots each row has filled
(``harness.models.moshi_attention``: FlexAttention with a block mask from the ring's per-row lengths
on the device, compiled on CUDA; the same mask, so the same attention up to float rounding: greedy
tokens identical on CPU, tested), for the LM's transformer only (Mimi and the depformer keep theirs).
``attention="paged"`` (issue 24, item 3) is flex over one pool of K/V pages for all rows instead of a ring
a row (``harness.models.moshi_attention.KVPages``): a row holds pages for the steps it has written, taken
as it writes them and given back when its stream ends, and the pool holds ``kv_pool`` full rings a row.
Below 1 the memory is overcommitted: admission (:meth:`MoshiModel.admit`) waits while less than a ring is
free, and when the pool runs out mid-stream the youngest streams give their pages to the older ones and are
run again from their start (:class:`~harness.models.base.RowPreempted`), then with their whole ring taken at
once; never scored in part.

Upstream behaviours handled here, once:

* ``LMGen.step`` yields no tokens for a stream's first step (``offset <= max_delay``): that
  row says 80 ms of silence. With the default ``support_out_of_sync=False`` a masked
  ``reset_streaming`` sets the *shared* ``offset_cpu`` to 0, so every row would return ``None``
  on the step after any refill (``lm.py _LMGenState.reset``); ``support_out_of_sync=True`` keeps
  per-row offsets and marks the rows with nothing yet as ``ungenerated`` (-2) instead.
* Mimi's batched decoder must decode every row (a subset breaks its state), but must not
  advance a row that has nothing to decode yet, or that row's first decoded frame would depend
  on a placeholder; the decoder runs with an exec mask over the rows that have tokens (on a batch's
  first step none: it runs and advances no row).
* Host syncs (issue 24, item 4): which rows have tokens is decided on the device, inputs reach it
  through pinned buffers without blocking the host (CUDA), and the output comes back in one copy,
  so the host waits for the GPU once a step (upstream's ``LMGen.step`` reads nothing back: its
  boolean write is a ``masked_fill``).
* The first input frame is encoded and fed once like every other frame (the server instead
  drops it after encoding, ``server.py recv_loop``; ``run_inference.py`` feeds it twice): the
  harness stream starts with room tone, so there is no start-up click to hide.
* No echo cancellation upstream (``protocol.echo`` feeds the model its own output if set).
* ``torch.compile`` of parts of the LM on first use (``NO_TORCH_COMPILE=1`` disables it; tests
  set it); CUDA graphs only on CUDA.

Teacher forcing (``step_forced``, Duplex Cue, spec section 9; docs/models.md, "Teacher
forcing"): the forced audio is encoded by a second Mimi (:func:`mimi_twin`: Mimi's weights, a
streaming state of its own per row, reset with the row, advanced only on the row's forced steps),
and its 8 codes replace the row's own in ``LMGen``'s token cache where the model's own output
tokens live. ``LMGen`` keeps its output in the delayed layout: the step that reads position ``n``
writes position ``n + 1``, where codebook ``k`` (acoustic delay ``d_k``) holds frame
``n + 1 - d_k``. So frame ``n``'s acoustic codebooks (``d_k = 1``) are written by step ``n``, and
replaced through ``on_audio_hook`` (it gets the sampled tokens before they are cached, and is
edited in place per row: ``depformer_replace_tokens`` replaces every row and would skip the
depformer, which must still predict the next frame's semantic token, the one a row keeps when its
forcing ends); frame ``n``'s semantic codebook (``d_k = 0``) was written by step ``n - 1`` before
the forced audio of frame ``n`` existed, and is overwritten in the cache (``_LMGenState.cache``)
right before step ``n`` reads it. The LM therefore holds the forced codes, aligned, as its own
output (tested), and step ``n`` returns them for frame ``n``. The text stream is the model's own
prediction unless ``forced_text="pad"``.

Sampling: Moshi samples from torch's global generator (``moshi/utils/sampling.py``), one
stream for the whole batch, seeded once per actor from ``seed``. With ``use_sampling`` a
conversation's tokens therefore depend on its batch neighbours (same distribution, different
draws); greedy decoding (``use_sampling: false``) is row-independent.
"""

from __future__ import annotations

import copy
import dataclasses
import math

import numpy as np

from harness.models.base import TEACHER_FORCING, DuplexModel, ModelInfo, RowPreempted, StreamContext
from harness.weights import Repo, Requirements, loaded, locate

RATE = 24_000
FRAME = 1_920
# the checkpoint's files (moshi/models/loaders.py MOSHI_NAME, MIMI_NAME): moshiko has no config.json, so
# its LM is the 7B architecture of loaders._lm_kwargs, as CheckpointInfo.from_hf_repo assumes for it
MOSHI_FILE = "model.safetensors"
MIMI_FILE = "tokenizer-e351c8d8-checkpoint125.safetensors"
STACK = ("moshi.models.loaders:get_moshi_lm", "moshi.models.lm:LMGen")
LM_CONTEXT_STEPS = 3000  # loaders._lm_kwargs["context"]: the 7B LM's attention window, in steps

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
AUTO = "auto"  # context_steps: the ring sized per shard to its longest possible stream (fit_streams)
FORCED_TEXT = ("model", "pad")  # the text stream while a row is teacher-forced (docs/models.md)
ATTENTIONS = ("dense", "flex", "paged")  # the LM's attention over its ring (module docstring, "Attention")
# with attention="flex" and context_steps="auto", the ring sizes a process may meet (fit_streams): 6 compiles
# of flex's kernel at most, within torch's recompile limit of 8 with two to spare; 500 steps (40 s) apart
# for the 7B
RING_RUNGS = 6


def mimi_twin(mimi):
    """A second Mimi for a second audio stream: ``mimi``'s weights (parameters and buffers shared,
    not copied), its own streaming state. Call before ``mimi`` starts streaming (a state held
    then would be copied with it)."""
    return copy.deepcopy(mimi, {id(t): t for t in (*mimi.parameters(), *mimi.buffers())})


def _set_context(lm, steps: int) -> None:
    """The ring capacity of ``lm``'s transformer (moshi's ``set_attention_context``; the depformer
    keeps its own per-step ring). Takes effect in the next streaming state."""
    from moshi.modules.transformer import set_attention_context

    set_attention_context(lm.transformer, steps)


def _fit_codebooks(mimi) -> None:
    """Fit a randomly initialised Mimi's codebooks to its encoder, with the quantizer's own k-means
    initialisation (one training-mode pass over the latents of 1.3 s of noise at 16 levels from
    -60 to 0 dBFS). Fresh codebooks are all zeros, so every frame would encode to code 0 and the
    model would hear nothing; plain random ones sit far from the latents (one code for all)."""
    import torch

    device = next(mimi.parameters()).device
    noise = torch.randn(16, 1, 16 * FRAME, device=device) * torch.logspace(-3, 0, 16, device=device)[:, None, None]
    with torch.no_grad():
        latent = mimi._encode_to_unquantized_latent(noise)
        mimi.quantizer.train()
        mimi.quantizer(latent, mimi.frame_rate)
        mimi.quantizer.eval()


class MoshiModel(DuplexModel):
    """Moshi as a batched full-duplex model.

    Args:
        hf_repo, revision: the checkpoint, read from the local Hugging Face cache at that commit
            (``revision``: 40 hex digits; fetched once by ``make weights MODEL=moshi``, never
            downloaded at run time); ``ModelInfo.weights`` records ``hf_repo@<commit>`` after load.
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
            The random weights are drawn after ``torch.manual_seed(seed)`` (the same model on every
            load), and Mimi's codebooks are fitted to its random encoder (:func:`_fit_codebooks`).
        forced_text: the text stream of a teacher-forced row (``step_forced``): ``"model"`` the
            model's own inner-monologue prediction, ``"pad"`` the text padding token
            (docs/models.md, "Teacher forcing").
        context_steps: steps of 80 ms the LM's ring KV cache holds and attends over (None: the
            checkpoint's, 3,000 = 240 s; a random instance: its ``lm_kwargs["context"]``; ``"auto"``:
            per shard, the longest stream its scripts allow, at most the checkpoint's,
            :meth:`fit_streams`); see the module docstring ("Context").
        attention: the LM's attention over its ring KV cache: ``"dense"`` (upstream's: every slot,
            masked), ``"flex"`` (only the filled slots: FlexAttention, compiled on CUDA, eager
            elsewhere) or ``"paged"`` (flex over one pool of K/V pages for all rows); see the module
            docstring ("Attention").
        kv_pool: with ``attention="paged"``, the pool's size in full rings a row (1.0: as much as a ring
            a row, never short; less: overcommitted, the youngest streams are run again when it runs
            out). Memory of the LM's K/V: ``kv_pool`` x a ring a row.

    Raises:
        ValueError: ``forced_text`` is neither ``"model"`` nor ``"pad"``; ``context_steps`` is not a
            positive integer or ``"auto"``; ``attention`` is not one of :data:`ATTENTIONS`; ``kv_pool`` is not
            positive, or not 1.0 without ``attention="paged"``; from
            ``load``, a checkpoint whose agent codebooks have acoustic delays other than 0 and 1 frames
            (teacher forcing relies on Moshi's layout).
        RuntimeError: from ``load`` with ``attention="flex"`` or ``"paged"``, an installed moshi whose attention code
            differs from moshi 0.2.13's (``harness.models.moshi_attention.use_flex_attention``); ``dense``
            then keeps upstream's modules.
    """

    SOURCE_DIRS: tuple[str, ...] = ()

    def __init__(self, hf_repo: str = "kyutai/moshiko-pytorch-bf16", revision: str | None = None,
                 weights_path: str | None = None, temp: float = 0.8, temp_text: float = 0.7, top_k: int = 250,
                 top_k_text: int = 25, use_sampling: bool = True, seed: int = 0, max_batch: int = 64,
                 dtype: str = "bfloat16", tiny: bool = False, lm_kwargs: dict | None = None,
                 mimi_config: dict | None = None, forced_text: str = "model",
                 context_steps: int | str | None = None, attention: str = "dense", kv_pool: float = 1.0):
        if forced_text not in FORCED_TEXT:
            raise ValueError(f"moshi forced_text must be one of {FORCED_TEXT}, got {forced_text!r}")
        if attention not in ATTENTIONS:
            raise ValueError(f"moshi attention must be one of {ATTENTIONS}, got {attention!r}")
        if isinstance(kv_pool, bool) or not isinstance(kv_pool, int | float) or not kv_pool > 0 or (
                kv_pool != 1.0 and attention != "paged"):
            raise ValueError(f"moshi kv_pool must be a positive number of rings a row, and is for attention 'paged' "
                             f"only, got {kv_pool!r} with attention {attention!r}")
        self.attention, self.kv_pool = attention, float(kv_pool)
        if context_steps not in (None, AUTO) and (isinstance(context_steps, bool) or not isinstance(context_steps, int)
                                                  or context_steps < 1):
            raise ValueError("moshi context_steps must be a positive integer (steps of 80 ms) or 'auto', "
                             f"got {context_steps!r}")
        self.context_steps = context_steps
        self.forced_text = forced_text
        self.hf_repo, self.revision, self.weights_path = hf_repo, revision, weights_path
        self.sampling = {"temp": temp, "temp_text": temp_text, "top_k": top_k, "top_k_text": top_k_text,
                         "use_sampling": use_sampling}
        self.seed, self.dtype, self.tiny = seed, dtype, tiny
        self.lm_kwargs, self.mimi_config = lm_kwargs, mimi_config
        weights = "random:tiny" if self.random else str(self._repo())
        # the checkpoint's context, the most "auto" sizes the ring to
        self._full = (self.lm_kwargs or TINY_LM).get("context") if self.random else LM_CONTEXT_STEPS
        context = self._full if context_steps in (None, AUTO) else context_steps
        self._ring = context  # the ring's capacity now (auto: fit_streams changes it per shard)
        self.info = ModelInfo("moshi", RATE, RATE, FRAME, FRAME, max_batch, frozenset({TEACHER_FORCING}),
                              weights=weights, context_s=None if context is None else context * FRAME / RATE)
        self._rows = 0  # R of the current streaming state (0: none yet)
        self._widest = 0  # the most rows stepped in this process (attention="flex" steps that many: _step)
        self._live = 0  # rows the last step was given (the rest of _widest are padding)
        self._fresh: set[int] = set()  # rows opened since the last step
        self._open: set[int] = set()  # rows holding a stream (opened, not closed)
        self._whole: set[int] = set()  # of those, streams run again after they were given back (attention="paged")
        self._given: dict[int, int] = {}  # attention="paged": rows the last step gave back -> steps they had run
        self._forcing = None  # during a forced step: (bool[R] forced rows, int[R, 8, 1] their codes) for the hooks

    @property
    def random(self) -> bool:
        """A randomly initialised instance (``tiny``, ``lm_kwargs`` or ``mimi_config``): no weights read."""
        return bool(self.tiny or self.lm_kwargs or self.mimi_config)

    def _repo(self) -> Repo:
        if self.weights_path:
            return Repo(self.weights_path, None, (MOSHI_FILE, MIMI_FILE))
        return Repo(self.hf_repo, self.revision, (MOSHI_FILE, MIMI_FILE), source_key="hf_repo")

    def requirements(self) -> Requirements:
        """Kyutai's ``moshi`` package and, unless random, the checkpoint's two files."""
        return Requirements(STACK, () if self.random else (self._repo(),))

    def load(self, device: str) -> None:
        import torch
        from moshi.models import loaders
        from moshi.models.lm import LMGen

        dtype = getattr(torch, self.dtype)
        if self.random:
            torch.manual_seed(self.seed)
            mimi = loaders.get_mimi(None, mimi_config=self.mimi_config or TINY_MIMI, device=device)
            _fit_codebooks(mimi)
            lm = loaders.get_moshi_lm(None, lm_kwargs=self.lm_kwargs or TINY_LM, device=device, dtype=dtype)
        else:  # a folder or the cache's snapshot, never a download (CheckpointInfo.from_hf_repo would fetch)
            repo = self._repo()
            root = locate(repo, self.info.name)
            mimi = loaders.get_mimi(root / MIMI_FILE, device=device)
            lm = loaders.get_moshi_lm(root / MOSHI_FILE, device=device, dtype=dtype)
            self.info = dataclasses.replace(self.info, weights=loaded(repo, root))
        if isinstance(self.context_steps, int):  # the ring's capacity is the context (moshi RingKVCache)
            _set_context(lm, self.context_steps)
        from harness.models.moshi_attention import share_step_masks, use_flex_attention, use_paged_attention

        if self.attention == "flex":
            use_flex_attention(lm.transformer, compiled=torch.device(device).type == "cuda")
        elif self.attention == "paged":
            use_paged_attention(lm.transformer, compiled=torch.device(device).type == "cuda", pool=self.kv_pool)
        else:  # upstream's attention, its mask made once a step (upstream's modules on another moshi)
            share_step_masks(lm.transformer)
        delays = lm.delays[1:1 + lm.dep_q]  # the agent's codebooks: semantic, then acoustic
        if not set(delays) <= {0, 1}:
            raise ValueError(f"moshi teacher forcing needs acoustic delays of 0 or 1 frame, got {delays}")
        torch.manual_seed(self.seed)
        self.torch, self.device = torch, device
        self.mimi, self.lm = mimi.eval(), lm.eval()
        self.forced_mimi = mimi_twin(self.mimi)
        # codebooks holding frame n at the position step n reads (written before it) / writes
        self._held = torch.tensor([d == 0 for d in delays], device=device)
        self._late = ~self._held
        self.lm_gen = LMGen(lm, support_out_of_sync=True, on_audio_hook=self._force_audio,
                            on_text_hook=self._force_text if self.forced_text == "pad" else None, **self.sampling)
        self._streams = None
        self._staged = {}  # slot -> pinned host buffer of a step's input (CUDA; _to_device)

    def fit_streams(self, longest_s: float) -> float | None:
        """:meth:`DuplexModel.fit_streams`: with ``context_steps="auto"``, the ring holds the steps of
        ``longest_s`` seconds and one more (never more than the checkpoint's context); a changed size
        takes effect with a fresh streaming state at the next step (no row is open). With ``attention="flex"``
        or ``"paged"`` the ring is one of :data:`RING_RUNGS` sizes, the multiples of the checkpoint's
        context over :data:`RING_RUNGS`, the smallest that holds them: each size a process meets is a compile
        of flex's kernel (fixed shapes), and past torch's recompile limit (8) it would run eager, exact but
        reading every slot. Flex reads only the filled slots, so a larger ring costs memory, not time; dense
        reads them all and keeps the exact fit. Returns the seconds it holds exactly, or None at the
        checkpoint's context (or with a fixed ``context_steps``)."""
        if self.context_steps != AUTO:
            return None
        need = math.ceil(longest_s * RATE / FRAME) + 1
        if self.attention != "dense" and self._full is not None:
            rung = -(-self._full // RING_RUNGS)
            need = -(-need // rung) * rung
        steps = need if self._full is None else min(self._full, need)
        if steps != self._ring:
            _set_context(self.lm, steps)
            self._ring = steps
            self._close_streams()
            self._rows = 0  # the next step starts a streaming state with the new ring
        return None if steps == self._full else (steps - 1) * FRAME / RATE

    def _close_streams(self) -> None:
        if self._streams is not None:
            for ctx in self._streams:
                ctx.close()
            self._streams = None

    def _start(self, rows: int) -> None:
        """A fresh streaming state for ``rows`` rows (every row fresh)."""
        self._close_streams()
        self._streams = (self.mimi.streaming(rows), self.forced_mimi.streaming(rows), self.lm_gen.streaming(rows))
        self._rows = rows
        self._all = self.torch.ones(rows, dtype=self.torch.bool, device=self.device)

    def open(self, row: int, stream: StreamContext) -> None:
        """:meth:`DuplexModel.open`; with ``attention="paged"`` a stream given back before
        (``stream.given_back``) takes its whole ring at its first step, and is given back again only if
        nothing else frees enough."""
        self._fresh.add(row)
        self._open.add(row)
        if stream is not None and stream.given_back:
            self._whole.add(row)
        else:
            self._whole.discard(row)

    def close(self, row: int) -> None:
        """:meth:`DuplexModel.close`: with ``attention="paged"`` the row's K/V pages go back to the pool."""
        self._fresh.discard(row)
        self._open.discard(row)
        self._whole.discard(row)
        if (pages := self._pages()) is not None and row < pages.rows:
            pages.release(row)

    def admit(self) -> bool:
        """:meth:`DuplexModel.admit`: with ``attention="paged"`` and ``kv_pool`` below 1, while the pool has a
        whole ring free beside what the streams opened since the last step take at their first (a page
        each, a whole ring for a rerun), and before the first step of a streaming state (whose rows are
        not known yet) one stream at a time. Otherwise always."""
        if self.attention != "paged" or self.kv_pool >= 1.0:
            return True
        pages = self._pages()
        if pages is None:
            return not self._fresh
        return pages.admits(self._fresh, self._whole)

    def _pages(self):
        """The LM's :class:`~harness.models.moshi_attention.KVPages` (``attention="paged"``, while a streaming
        state is open), else None."""
        if self.attention != "paged" or self._streams is None:
            return None
        from harness.models.moshi_attention import kv_pages

        return kv_pages(self.lm.transformer)

    def step(self, frames: np.ndarray) -> np.ndarray:
        with self.torch.no_grad():
            return self._step(frames)

    def step_forced(self, frames: np.ndarray, forced: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """:meth:`DuplexModel.step_forced`: ``float32[R, 1920]`` heard, ``float32[R, 1920]`` forced
        (24 kHz) where ``bool[R]`` ``mask`` -> ``float32[R, 1920]``: for forced rows Mimi's
        rendering of the forced codes (also on a stream's first step, where the LM has no tokens).

        Raises:
            ValueError: ``forced`` is not ``[R, 1920]`` or ``mask`` not ``bool[R]`` (nothing stepped).
        """
        rows = frames.shape[0]
        mask = np.asarray(mask)
        if np.shape(forced) != (rows, FRAME) or mask.shape != (rows,) or mask.dtype != np.bool_:
            raise ValueError(f"moshi step_forced takes forced float32[{rows}, {FRAME}] and mask bool[{rows}], "
                             f"got {np.shape(forced)} and {mask.dtype}{list(mask.shape)}")
        with self.torch.no_grad():
            return self._step(frames, forced, mask) if mask.any() else self._step(frames)

    def _tensor(self, frames: np.ndarray, slot: str):
        """``float32[R, 1920]`` -> Mimi's input ``[R, 1, 1920]`` on the device (``slot``: :meth:`_to_device`)."""
        return self._to_device(np.asarray(frames, dtype=np.float32), slot)[:, None, :]

    def _to_device(self, array: np.ndarray, slot: str):
        """``array`` as a tensor on the device. On CUDA it goes through a pinned host buffer kept per
        ``slot`` (one per input of a step), copied without blocking the host, so the step holds the
        host only once, in its output copy; a buffer is rewritten only by the next step, after that
        copy has waited for this one's work. Elsewhere the tensor shares ``array``'s memory."""
        tensor = self.torch.from_numpy(np.ascontiguousarray(array))
        if self.torch.device(self.device).type != "cuda":
            return tensor.to(self.device)
        staged = self._staged.get(slot)
        if staged is None or staged.shape != tensor.shape or staged.dtype != tensor.dtype:
            staged = self._staged[slot] = self.torch.empty_like(tensor, pin_memory=True)
        staged.copy_(tensor)
        return staged.to(self.device, non_blocking=True)

    def _hold(self, rows_forced, forced_codes) -> None:
        """Write the forced frame's codebooks without acoustic delay where the step about to run
        reads them: ``LMGen`` wrote them (the model's own prediction) one step earlier, at each
        row's own offset."""
        from moshi.models.lm import scatter_with_mask_

        state = self.lm_gen._streaming_state
        agent = state.cache[:, 1:1 + self.lm.dep_q]  # a view: [R, 8, positions]
        where = (state.offsets % agent.shape[2])[:, None, None].expand(-1, self.lm.dep_q, 1)
        scatter_with_mask_(agent, 2, where, forced_codes, rows_forced[:, None, None] & self._held[None, :, None])

    def _force_audio(self, audio_tokens) -> None:
        """``on_audio_hook``: ``audio_tokens`` ``int[R, 8]`` of the position this step writes;
        forced rows take their frame's codebooks with acoustic delay 1 (in place, before caching)."""
        if self._forcing is not None:
            rows_forced, forced_codes = self._forcing
            late = rows_forced[:, None] & self._late[None, :]
            audio_tokens.copy_(self.torch.where(late, forced_codes[:, :, 0], audio_tokens))

    def _force_text(self, text_token) -> None:
        """``on_text_hook`` with ``forced_text="pad"``: ``text_token`` ``int[R]``; forced rows say
        the text padding token (in place, before the depformer and the cache see it)."""
        if self._forcing is not None:
            rows_forced = self._forcing[0]
            text_token.copy_(self.torch.where(rows_forced, self.lm.existing_text_padding_id, text_token))

    def _step(self, frames: np.ndarray, forced: np.ndarray | None = None, mask: np.ndarray | None = None) -> np.ndarray:
        """One step; with ``forced`` and ``mask`` (some row True) a teacher-forced one. With
        ``attention="flex"`` or ``"paged"`` (compiled for fixed shapes, the batch's included) every step runs as
        many rows as the most this process has stepped: the extra rows hear silence, are never forced, and their
        output is dropped, so a shard with fewer conversations than rows compiles nothing new.

        Raises:
            RowPreempted: ``attention="paged"``: the pool ran out and the youngest streams gave their pages
                to older ones (``output``: the step's output for the others).
        """
        rows = frames.shape[0]
        width = max(rows, self._widest) if self.attention != "dense" else rows
        self._widest = width
        if width > rows:
            extra = ((0, width - rows), (0, 0))
            frames = np.pad(frames, extra)
            if forced is not None:
                forced, mask = np.pad(forced, extra), np.pad(mask, extra[:1])
            if rows < self._live:  # rows that just became padding restart empty (flex reads only filled
                self._fresh.update(range(rows, self._live))  # slots: a stale stream's would cost)
        self._live = rows
        try:
            out = self._step_rows(frames, forced, mask)[:rows]
        except BaseException:
            self._staged.clear()  # a copy from a buffer may still be pending: the next step takes new ones
            self._rows = 0  # and starts a fresh streaming state (this one may be half stepped)
            raise
        if self._given:
            given, self._given, pages = self._given, {}, self._pages()
            raise RowPreempted({b: f"moshi's K/V pool was full ({pages.pages} pages of {pages.page} steps for "
                                   f"{pages.rows} rows, kv_pool {self.kv_pool}): this stream, among the youngest "
                                   f"({n} steps in), gave its pages to older ones" for b, n in given.items()},
                               output=out)
        return out

    def _step_rows(self, frames: np.ndarray, forced: np.ndarray | None, mask: np.ndarray | None) -> np.ndarray:
        torch = self.torch
        rows = frames.shape[0]
        fresh = set(self._fresh)
        if rows != self._rows:
            self._start(rows)
            fresh = set(range(rows))
        elif fresh:
            reset = np.zeros(rows, np.bool_)
            reset[list(fresh)] = True
            reset = self._to_device(reset, "fresh")
            for module in (self.mimi, self.forced_mimi, self.lm_gen):
                module.reset_streaming(reset)
        self._fresh.clear()
        if (pages := self._pages()) is not None:  # rows reset above start with no page (padding rows: none)
            self._given = pages.begin_step(fresh, self._open, self._whole)
            self._open -= set(self._given)
            self._whole -= set(self._given)
        codes = self.mimi.encode(self._tensor(frames, "heard"))  # [R, 8, 1]
        if forced is None:
            tokens = self.lm_gen.step(codes)  # [R, 1 + 8, 1]; -2 (ungenerated) where a row has none yet
            audio = tokens[:, 1:]
        else:
            rows_forced = self._to_device(mask, "forced_rows")
            self.forced_mimi.set_exec_mask(rows_forced)  # the other rows' forced streams stand still
            try:
                forced_codes = self.forced_mimi.encode(self._tensor(forced, "forced"))  # [R, 8, 1]
            finally:
                self.forced_mimi.set_exec_mask(self._all)
            self._hold(rows_forced, forced_codes)
            self._forcing = (rows_forced, forced_codes)
            try:
                tokens = self.lm_gen.step(codes)
            finally:
                self._forcing = None
            # == tokens[:, 1:] for forced rows from a stream's second step on; on its first (no tokens
            # yet) a forced row says the codec's rendering of its forced frame all the same
            audio = torch.where(rows_forced[:, None, None], forced_codes, tokens[:, 1:])
        if pages is not None:  # every row's LM wrote one step (the adapter sets no exec mask on it)
            pages.after_step()
        # decided on the device, so the host waits once, for the output: every row is decoded, and
        # only the rows with tokens advance Mimi's decoder (none on the batch's first step)
        ready = (audio >= 0).all(dim=2).all(dim=1)
        self.mimi.set_exec_mask(ready)
        try:
            pcm = self.mimi.decode(torch.where(ready[:, None, None], audio, torch.zeros_like(audio)))
        finally:
            self.mimi.set_exec_mask(self._all)
        out = torch.where(ready[:, None], pcm[:, 0].float(), 0.0).clamp_(-1.0, 1.0)
        return out.cpu().numpy()
