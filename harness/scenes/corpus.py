"""``make corpus``: generate (or import), validate and count a scene corpus without running a model.

    python -m harness.scenes.corpus [--n-pairs 2000] [--scenes conf/scenes/paper.yaml]
                                    [--manifest external.jsonl [--strict]] [--out DIR]
                                    [--llm anthropic|gemini [--model ID] [--budget-usd 20]]

``--llm`` has a language model write the texts on the generator's layouts
(:mod:`harness.scenes.llm`; key from the environment, replies cached under ``DIR/../cache``,
no call once the budget is spent); pairs whose script failed validation on every attempt, or
that the budget left, are listed in ``llm_rejected.json`` and left out.

Writes ``scenes.jsonl`` (the valid scenes), ``invalid.json`` (``{scene_id: why}``),
``corpus_stats.json`` (:func:`harness.scenes.stats.corpus_stats` plus the generation and
validation times) and ``corpus.md`` (the report's corpus section) into ``DIR`` (default
``runs/corpus/<profile>-<n_pairs>-<seed>``, or ``runs/corpus/import-<name>``), and prints the path
of ``corpus_stats.json``. Exit status 1 when a generated scene fails validation (a generator
bug); an imported manifest's invalid scenes are reported, not fatal. ``--strict`` holds an imported
manifest to the generated scenes' rules: the context singles out the assistant and the content
rules of :func:`harness.scenes.schema.check_content` (the gold said before T and not in it, N1
refers to the assistant, N3 addresses no one, the versions differ only where allowed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from harness.report.corpus import corpus_markdown
from harness.scenes.generator import generate_pairs
from harness.scenes.schema import import_manifest, validate_scenes, write_manifest
from harness.scenes.stats import corpus_stats


def build(n_pairs: int | None, scenes_conf: Path, manifest: Path | None, out: Path | None,
          llm: Any = None, budget_usd: float | None = None, strict: bool = False) -> Path:
    """Run the whole thing; return the path of ``corpus_stats.json``. ``llm``: an LLM backend
    (:mod:`harness.scoring.judge.llm`) that writes the scripts instead of the templates."""
    conf = yaml.safe_load(scenes_conf.read_text(encoding="utf-8")) or {}
    n = conf.get("n_pairs", 2000) if n_pairs is None else n_pairs
    t0 = time.perf_counter()
    if manifest is not None:
        with manifest.open(encoding="utf-8") as fh:
            scenes, invalid = import_manifest(fh, strict=strict)
        gen_s = 0.0
        out = out or Path("runs/corpus") / f"import-{manifest.stem}"
        source = {"manifest": str(manifest), "strict": strict}
    else:
        profile = conf.get("profile", "compact")
        args = (n, conf.get("seed", 0), conf.get("four_party_share", 0.25), conf.get("n4_share", 0.5), profile)
        out = out or Path("runs/corpus") / f"{'llm-' if llm else ''}{profile}-{n}-{conf.get('seed', 0)}"
        source = {"generator": {k: conf.get(k) for k in ("seed", "four_party_share", "n4_share", "profile")}
                  | {"n_pairs": n}}
        if llm is None:
            generated = generate_pairs(*args)
        else:
            from harness.scenes.llm import LLMScriptWriter
            from harness.scoring.cache import ContentCache
            from harness.store.base import LocalStore

            writer = LLMScriptWriter(llm, ContentCache(LocalStore(out.parent), "cache/scripts"), budget_usd)
            result = writer.write_corpus(*args)
            generated = result.scenes
            out.mkdir(parents=True, exist_ok=True)
            (out / "llm_rejected.json").write_text(json.dumps(result.rejected, indent=1) + "\n", encoding="utf-8")
            source["llm"] = {"backend": llm.name, "model": llm.model, "calls": writer.calls,
                             "cost_usd": round(writer.cost.usd, 4), "saved_by_cache_usd": round(writer.saved.usd, 4),
                             "budget_usd": budget_usd, "rejected_pairs": len(result.rejected)}
        gen_s = time.perf_counter() - t0
        scenes, invalid = validate_scenes(generated, strict=True)
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
    ap.add_argument("--strict", action="store_true",
                    help="hold an imported manifest to the generated scenes' context and content rules")
    ap.add_argument("--out", type=Path, default=None, help="output folder")
    ap.add_argument("--llm", choices=("anthropic", "gemini"), default=None, help="LLM backend writing the scripts")
    ap.add_argument("--model", default=None, help="model id of the LLM backend (default: the backend's)")
    ap.add_argument("--budget-usd", type=float, default=None, help="no LLM call once this much is spent")
    args = ap.parse_args(argv)
    if args.n_pairs is not None and args.n_pairs < 1:
        ap.error(f"--n-pairs must be >= 1, got {args.n_pairs}")
    llm = None
    if args.llm:
        from harness.scoring.judge import build_judge

        llm = build_judge(args.llm, model=args.model, max_output_tokens=4000)
    if args.strict and args.manifest is None:
        ap.error("--strict applies to an imported manifest (--manifest); generated scenes are always strict")
    path = build(args.n_pairs, args.scenes, args.manifest, args.out, llm, args.budget_usd, args.strict)
    stats = json.loads(path.read_text(encoding="utf-8"))
    print(f"{stats['n_pairs']} pairs, {stats['invalid_scenes']} invalid scenes, "
          f"{stats['timing_s']['generate_and_validate']:.1f} s to generate and validate", file=sys.stderr)
    print(path)
    if not stats["n_pairs"]:  # nothing usable (every scene refused, or an LLM that wrote no valid pair)
        print(f"no valid pair: the reasons are in {path.parent / 'invalid.json'}"
              + (f" and {path.parent / 'llm_rejected.json'}" if args.llm else ""), file=sys.stderr)
        return 2
    return 1 if args.manifest is None and stats["invalid_scenes"] else 0


if __name__ == "__main__":
    sys.exit(main())
