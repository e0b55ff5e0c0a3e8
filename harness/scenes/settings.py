"""The ``scenes`` stage's settings (conf/scenes/; spec section 2): generate or import the corpus."""

from __future__ import annotations

from dataclasses import dataclass

from harness.checks import require_integer
from harness.scenes.generator import check_profile, check_share, generate_pairs
from harness.scenes.schema import Scene, import_manifest, validate_scenes


@dataclass(frozen=True)
class ScenesSettings:
    n_pairs: int = 32
    seed: int = 20260902
    four_party_share: float = 0.25
    n4_share: float = 0.6
    manifest: str | None = None  # import a JSONL manifest instead of generating scenes
    profile: str = "compact"  # generator profile: compact (demo) or paper (harness/scenes/generator.py)

    def __post_init__(self) -> None:
        require_integer(self, "n_pairs", "seed")
        check_profile(self.profile)
        if self.manifest is None and self.n_pairs < 1:
            raise ValueError(f"n_pairs must be >= 1 (or give a manifest), got {self.n_pairs}")
        for name in ("four_party_share", "n4_share"):
            check_share(name, getattr(self, name))


def make_scenes(s: ScenesSettings) -> tuple[list[Scene], dict[str, str]]:
    """The valid scenes ``s`` names, in manifest order, and ``{scene_id: why}`` of the refused ones:
    imported from ``s.manifest`` (the same line and pair rules as generated scenes, docs/formats.md)
    or generated. The stage writes them; the cost projection counts them before it runs."""
    if s.manifest:
        with open(s.manifest, encoding="utf-8-sig") as fh:  # a byte-order mark, as editors save it
            return import_manifest(fh)
    return validate_scenes(generate_pairs(s.n_pairs, s.seed, s.four_party_share, s.n4_share, s.profile), strict=True)
