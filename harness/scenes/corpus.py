"""``make corpus``: generate (or import), validate and count a scene corpus without running a model.

    python -m harness.scenes.corpus [--n-pairs 2000] [--seed 20260902] [--scenes conf/scenes/paper.yaml]
                                    [--manifest external.jsonl [--strict]] [--out DIR]
                                    [--llm anthropic|gemini [--model ID] [--budget-usd 20]]

The scenes are made as the pipeline's scenes stage makes them (``make_scenes`` of
:mod:`harness.scenes.settings`, from the scenes config with the flags in place of its values).
``--llm`` has a language model write the texts on the generator's layouts (``scenes.source=llm``;
:mod:`harness.scenes.llm`; key from the environment, replies cached under ``DIR/../_cache/scripts``,
no call once ``--budget-usd`` US dollars are spent); both versions of every pair whose script failed
validation on every attempt, or that the budget left, are listed with why in ``llm_rejected.json``
(``{scene_id: why}``) and left out.

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
from harness.scenes.schema import write_manifest
from harness.scenes.settings import ScenesSettings, make_scenes
from harness.scenes.stats import corpus_stats
from harness.store.base import LocalStore


def corpus_settings(scenes_conf: Path, n_pairs: int | None = None, seed: int | None = None,
                    manifest: Path | None = None, strict: bool = False, llm: Any = None,
                    budget_usd: float | None = None) -> ScenesSettings:
    """The scenes settings of the config file ``scenes_conf`` with the flags in place of its values
    (None: the config's; ``llm``: its backend's name and model, ``source=llm``). Raises
    ``ValueError`` for a combination the settings refuse, ``OSError`` for an unreadable file."""
    conf = yaml.safe_load(scenes_conf.read_text(encoding="utf-8")) or {}
    over: dict[str, Any] = {"manifest": str(manifest) if manifest is not None else None, "strict": strict}
    if n_pairs is not None:
        over["n_pairs"] = n_pairs
    if seed is not None:
        over["seed"] = seed
    if llm is not None:
        over |= {"source": "llm", "llm": {**(conf.get("llm") or {}), "backend": llm.name, "model": llm.model,
                                          "budget_usd": budget_usd}}
    return ScenesSettings(**(conf | over))


def build(n_pairs: int | None, scenes_conf: Path, manifest: Path | None, out: Path | None,
          llm: Any = None, budget_usd: float | None = None, strict: bool = False, seed: int | None = None) -> Path:
    """Run the whole thing; return the path of ``corpus_stats.json``. The scenes are made as the
    pipeline's scenes stage makes them (:func:`harness.scenes.settings.make_scenes`) from the
    scenes config ``scenes_conf`` with ``n_pairs`` and ``seed`` (None: the config's) and
    ``manifest`` / ``strict`` in place of the config's (:func:`corpus_settings`). ``llm``: an LLM backend
    (:mod:`harness.scoring.judge.llm`) that writes the scripts instead of the templates
    (``source=llm``), spending at most ``budget_usd`` US dollars (None: no limit); its replies are
    cached in ``<out>/../_cache/scripts``.

    Raises:
        ValueError: a setting the scenes settings refuse; OSError: a file that cannot be read.
    """
    settings = corpus_settings(scenes_conf, n_pairs, seed, manifest, strict, llm, budget_usd)
    if manifest is not None:
        out = out or Path("runs/corpus") / f"import-{manifest.stem}"
        source: dict[str, Any] = {"manifest": str(manifest), "strict": strict}
    else:
        name = f"{'llm-' if llm else ''}{settings.profile}-{settings.n_pairs}-{settings.seed}"
        out = out or Path("runs/corpus") / name
        source = {"generator": {k: getattr(settings, k) for k in ("seed", "four_party_share", "n4_share", "profile",
                                                                  "n_pairs")}}
    t0 = time.perf_counter()
    made = make_scenes(settings, LocalStore(out.parent) if llm is not None else None, llm)
    total_s = time.perf_counter() - t0
    scenes, invalid = made.scenes, made.invalid
    out.mkdir(parents=True, exist_ok=True)
    if made.llm is not None:
        (out / "llm_rejected.json").write_text(json.dumps(dict(made.rejected), indent=1, sort_keys=True) + "\n",
                                               encoding="utf-8")
        source["llm"] = {k: v for k, v in made.llm.items() if k != "usage"}
    with (out / "scenes.jsonl").open("w", encoding="utf-8") as fh:
        write_manifest(scenes, fh)
    (out / "invalid.json").write_text(json.dumps(invalid, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    stats = corpus_stats(scenes)
    stats["source"] = source
    stats["invalid_scenes"] = len(invalid)
    stats["timing_s"] = {"generate_and_validate": round(total_s, 3)}
    path = out / "corpus_stats.json"
    path.write_text(json.dumps(stats, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    (out / "corpus.md").write_text(corpus_markdown(stats), encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make corpus", description=__doc__.split("\n\n")[0])
    ap.add_argument("--n-pairs", type=int, default=None, help="pairs to generate (default: the scenes config's)")
    ap.add_argument("--seed", type=int, default=None, help="generator seed (default: the scenes config's)")
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
    if args.llm and args.manifest is not None:
        ap.error("--llm scripts the generator's layouts; it cannot be combined with --manifest")
    try:
        corpus_settings(args.scenes, args.n_pairs, args.seed, args.manifest, args.strict, llm, args.budget_usd)
    except (ValueError, TypeError) as e:  # a setting the scenes settings refuse (e.g. a negative budget)
        ap.error(f"{args.scenes}: {e}")
    path = build(args.n_pairs, args.scenes, args.manifest, args.out, llm, args.budget_usd, args.strict, args.seed)
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
