"""The settings of the VAD (conf/vad): the detector and its post-processor. Apart from
:mod:`harness.vad.silero` (which imports torch), so that a run's config is read without it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from harness.vad.segments import SegmentRules
from harness.vad.sweep import sweep_points


@dataclass(frozen=True)
class VadSettings:
    """conf/vad: the detector and its post-processor."""

    rules: SegmentRules = field(default_factory=SegmentRules)
    model: str = "silero-vad-jit"
    batch: int = 32  # conversations per offline batch (one call of an actor of the vad stage's pool)
    device: str = "cpu"  # where the offline detector runs ("cuda": one GPU per batch; make batch thousands)
    # CPU threads of the online detector: its rows are scored in fixed groups of SileroProbs.GROUP_ROWS,
    # these threads run the groups side by side (speed only: the numbers depend on the groups, not on this)
    threads: int = 2
    # segmenter settings to sweep, one at a time around `rules` (harness.vad.sweep): {name: [values]}
    sweep: tuple[tuple[str, tuple[float, ...]], ...] = ()

    def __post_init__(self) -> None:
        items = self.sweep.items() if isinstance(self.sweep, Mapping) else self.sweep
        object.__setattr__(self, "sweep", tuple((str(k), tuple(float(v) for v in vs)) for k, vs in items))
        if self.batch < 1:
            raise ValueError(f"vad.batch must be >= 1, got {self.batch}")
        if self.threads < 1:
            raise ValueError(f"vad.threads must be >= 1, got {self.threads}")
        if not re.fullmatch(r"(cpu|cuda)(:\d+)?", str(self.device)):
            raise ValueError(f"vad.device must be cpu or cuda[:n], got {self.device!r}")
        sweep_points(self.rules, dict(self.sweep))  # raises ValueError on a bad sweep
