"""What fits on a GPU (docs/models.md, "Memory"): every default the memory table states is the model's
config, and at that default the model fits an 80 GB GPU by the table's figures; Voila's LLM is read
straight onto a CUDA device (no whole CPU copy first)."""

from __future__ import annotations

import pytest
import torch

from harness.models.registry import model_configs
from harness.models.voila import VoilaModel
from tests.fixtures.memory_table import GPU_80GB_GIB, memory_table, replicas
from tests.fixtures.tiny.voila import codec_files, llm_files, upstream, voices, write

TABLE = memory_table()
HEADROOM = 0.95  # fragmentation, the CUDA context


def test_the_table_covers_every_evaluated_model_that_runs_on_a_gpu():
    on_gpu = {n for n, c in model_configs().items() if c.get("role", "evaluated") == "evaluated" and c.get("num_gpus")}
    assert set(TABLE) == on_gpu


@pytest.mark.parametrize("name", sorted(TABLE))
def test_each_default_is_the_config_and_fits_an_80_gb_gpu(name):
    row, cfg = TABLE[name], model_configs()[name]
    assert cfg[row.key] == pytest.approx(row.default), f"docs/models.md says {row.key}: {row.default}"
    if row.per_row is not None:  # rows stepped together on one GPU
        assert cfg["num_gpus"] == 1
        need = row.fixed + row.per_row * cfg["batch_size"]
    else:  # batch-1 replicas sharing a GPU
        assert cfg["batch_size"] == 1 and row.key == "num_gpus"
        need = replicas(cfg["num_gpus"]) * row.per_replica
    assert need <= HEADROOM * GPU_80GB_GIB, f"{name}: {need:.1f} GiB at its default"


def test_the_per_row_figure_reproduces_the_measured_points():
    row = TABLE["moshi"]
    assert len(row.measured) >= 3 and max(row.measured) > row.default  # it interpolates the default
    for rows, gib in row.measured.items():
        assert row.fixed + row.per_row * rows == pytest.approx(gib, rel=0.02), rows


def test_voila_reads_its_llm_straight_onto_a_cuda_device(tmp_path, monkeypatch):
    with upstream(monkeypatch):
        llm, codec = write(tmp_path / "llm", llm_files()), write(tmp_path / "codec", codec_files())
        m = VoilaModel(weights_path=str(llm), codec_path=str(codec), voice_file=str(voices(tmp_path)),
                       codec_context_frames=3)
        try:
            m.load("cuda:0")
        except (RuntimeError, AssertionError):  # no CUDA here: the first tensor put on the device fails
            assert not torch.cuda.is_available()
        assert m.llm.loaded_with == {"torch_dtype": torch.bfloat16, "attn_implementation": "sdpa", "use_cache": True,
                                     "device_map": torch.device("cuda", 0)}
