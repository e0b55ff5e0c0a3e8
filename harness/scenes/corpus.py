"""``make corpus``: generate (or import), validate and count a scene corpus without running a model.

    python -m harness.scenes.corpus [--n-pairs 2000] [--scenes conf/scenes/paper.yaml]
                                    [--manifest external.jsonl] [--out DIR]

Writes ``scenes.jsonl`` (the valid scenes), ``invalid.json`` (``{scene_id: why}``),
``corpus_stats.json`` (:func:`harness.scenes.stats.corpus_stats` plus the generation and
validation times) and ``corpus.md`` (the report's corpus section) into ``DIR`` (default
``runs/corpus/<profile>-<n_pairs>-<seed>``, or ``runs/corpus/import-<name>``), and prints the path
of ``corpus_stats.json``. Exit status 1 when a generated scene fails validation (a generator
bug); an imported manifest's invalid scenes are reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from harness.report.corpus import corpus_markdown
from harness.scenes.generator import generate_pairs
from harness.scenes.schema import import_manifest, validate_scenes, write_manifest
from harness.scenes.stats import corpus_stats


def build(n_pairs: int | None, scenes_conf: Path, manifest: Path | None, out: Path | None) -> Path:
    """Run the whole thing; return the path of ``corpus_stats.json``."""
    conf = yaml.safe_load(scenes_conf.read_text(encoding="utf-8")) or {}
    n = conf.get("n_pairs", 2000) if n_pairs is None else n_pairs
    t0 = time.perf_counter()
    if manifest is not None:
        with manifest.open(encoding="utf-8") as fh:
            scenes, invalid = import_manifest(fh)
        gen_s = 0.0
        out = out or Path("runs/corpus") / f"import-{manifest.stem}"
        source = {"manifest": str(manifest)}
    else:
        profile = conf.get("profile", "compact")
        generated = generate_pairs(n, conf.get("seed", 0), conf.get("four_party_share", 0.25),
                                   conf.get("n4_share", 0.5), profile)
        gen_s = time.perf_counter() - t0
        scenes, invalid = validate_scenes(generated, strict=True)
        out = out or Path("runs/corpus") / f"{profile}-{n}-{conf.get('seed', 0)}"
        source = {"generator": {k: conf.get(k) for k in ("seed", "four_party_share", "n4_share", "profile")}
                  | {"n_pairs": n}}
    total_s = time.perf_counter() - t0
    out.mkdir(parents=True, exist_ok=True)
    with (out / "scenes.jsonl").open("w", encoding="utf-8") as fh:
        write_manifest(scenes, fh)
    (out / "invalid.json").write_text(json.dumps(invalid, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    stats = corpus_stats(scenes)
    stats["source"] = source
    stats["invalid_scenes"] = len(invalid)
    stats["timing_s"] = {"generate": round(gen_s, 3), "generate_and_validate": round(total_s, 3)}
    path = out / "corpus_stats.json"
    path.write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / "corpus.md").write_text(corpus_markdown(stats), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-pairs", type=int, default=None, help="pairs to generate (default: the scenes config's)")
    ap.add_argument("--scenes", type=Path, default=Path("conf/scenes/paper.yaml"), help="scenes config (YAML)")
    ap.add_argument("--manifest", type=Path, default=None, help="import this JSONL manifest instead of generating")
    ap.add_argument("--out", type=Path, default=None, help="output folder")
    args = ap.parse_args(argv)
    if args.n_pairs is not None and args.n_pairs < 1:
        ap.error(f"--n-pairs must be >= 1, got {args.n_pairs}")
    path = build(args.n_pairs, args.scenes, args.manifest, args.out)
    stats = json.loads(path.read_text(encoding="utf-8"))
    print(f"{stats['n_pairs']} pairs, {stats['invalid_scenes']} invalid scenes, "
          f"{stats['timing_s']['generate_and_validate']:.1f} s to generate and validate", file=sys.stderr)
    print(path)
    return 1 if args.manifest is None and stats["invalid_scenes"] else 0


if __name__ == "__main__":
    sys.exit(main())
