"""What hashing inputs by content costs a plan (issue 19.4; docs/configuration.md, "Files named by settings").

Two inputs at paper scale, on a fresh temporary folder:

* the scene manifest of ``--pairs`` paper-profile pairs (2,000: 4,000 scenes), written as
  ``scenes.manifest`` names it: :meth:`RunPlan.from_config` with it, the first time (the file is
  read) and again in the same process (remembered while the file is unchanged);
* a Duplex Cue manifest listing ``--recordings`` recordings of ``--seconds`` s each, stereo 16-bit
  24 kHz WAV-sized files of random bytes (hashing does not look at what the bytes mean):
  :meth:`CuePlan.from_config` the first time and again, beside what ``os.stat`` of every file
  (the size + mtime alternative) costs.

The files were just written, so they are in the page cache: a cold read is bounded by the disk
instead. The machine is shared: the 1-minute load average is printed with the figures. Figures,
not assertions; the last line is one JSON object.

    .venv/bin/python bench/content_hash.py [--pairs 2000] [--recordings 200] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

from harness.cue.plan import CuePlan
from harness.runtime.config import RunConfig
from harness.runtime.plan import RunPlan
from harness.scenes.generator import generate_pairs
from harness.scenes.schema import validate_scenes, write_manifest
from harness.store import content
from harness.store.content import RACY_S


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--recordings", type=int, default=200)
    ap.add_argument("--seconds", type=float, default=60.0)
    args = ap.parse_args()
    out: dict = {"load_1min": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        scenes, _ = validate_scenes(generate_pairs(args.pairs, 20260902, 0.25, 0.6, "paper"), strict=True)
        manifest = root / "scenes.jsonl"
        with manifest.open("w", encoding="utf-8") as fh:
            write_manifest(scenes, fh)
        size = args.recordings and int(args.seconds * 24_000) * 2 * 2
        folder = root / "cue"
        folder.mkdir()
        lines = []
        for i in range(args.recordings):
            (folder / f"r{i:05d}.wav").write_bytes(os.urandom(size))
            lines.append(json.dumps({"kind": "recording", "recording_id": f"r{i:05d}", "audio": f"r{i:05d}.wav"}))
        (folder / "manifest.jsonl").write_text("\n".join(lines) + "\n")
        time.sleep(RACY_S + 0.1)  # files modified just before a read are read again: let them settle
        models = {"silent": {"target": "silent"}}
        run = RunConfig.from_dict({"model": models, "scenes": {"manifest": str(manifest)}})
        cue = RunConfig.from_dict({"model": models, "cue": {"manifest": str(folder / "manifest.jsonl")}})
        default = RunConfig.from_dict({"model": models})
        content._seen.clear()
        out["scenes"] = {"scenes": len(scenes), "manifest_mb": manifest.stat().st_size / 1e6,
                         "plan_first_s": _timed(lambda: RunPlan.from_config(run)),
                         "plan_again_s": _timed(lambda: RunPlan.from_config(run)),
                         "plan_default_s": _timed(lambda: RunPlan.from_config(default))}
        files = sorted(folder.glob("*.wav"))
        gb = len(files) * size / 1e9
        first = _timed(lambda: CuePlan.from_config(cue))
        out["cue"] = {"recordings": len(files), "audio_gb": gb, "plan_first_s": first,
                      "s_per_gb": first / gb if gb else None,
                      "plan_again_s": _timed(lambda: CuePlan.from_config(cue)),
                      "stat_only_s": _timed(lambda: [os.stat(f) for f in files])}
    s, c = out["scenes"], out["cue"]
    print(f"scene manifest: {s['scenes']} scenes, {s['manifest_mb']:.1f} MB: plan {s['plan_first_s'] * 1e3:.0f} ms "
          f"first, {s['plan_again_s'] * 1e3:.1f} ms again (no manifest: {s['plan_default_s'] * 1e3:.1f} ms)")
    print(f"cue manifest: {c['recordings']} recordings, {c['audio_gb']:.2f} GB: plan {c['plan_first_s']:.2f} s first "
          f"({c['s_per_gb'] or 0:.2f} s/GB), {c['plan_again_s'] * 1e3:.1f} ms again; stat of every file "
          f"{c['stat_only_s'] * 1e3:.1f} ms (load {out['load_1min']:.2f})")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
