"""``make model-smoke MODEL=<name> SRC=<checkout>``: one adapter end to end on its real upstream code.

The five systems other than Moshi come from GitHub only, so the test suite checks their
adapters against stand-ins. This smoke run checks the real thing without weights:

1. outside: a throw-away virtualenv that sees the harness's own packages (torch, numpy,
   silero-vad: a path file names the calling interpreter's site-packages) gets the pins of the
   model's image installed from the package index (``images/<family>/requirements.txt`` of
   the family its config's ``image`` names: the same file the image installs, with the
   harness's pins as constraints; :func:`family_pins`);
2. inside that environment: the checkout's source folders (``SOURCE_DIRS`` of the adapter
   class, relative to ``SRC``) go first on ``sys.path``, the adapter is built with
   ``tiny=True`` (its ``load`` then builds a tiny randomly initialised instance of the real
   upstream architecture instead of reading weights) and streams three short conversations
   of espeak-ng speech through :func:`harness.runtime.runner.run_conversations`, with
   ``min(2, max_batch)`` rows so a batched adapter is refilled mid-run.

The last line printed is one JSON object: model, the checkout's upstream commit and the one
the image pins (``UPSTREAM_COMMIT`` in ``images/<family>/build-args``; a checkout at another
commit is run, and said so on stderr), statuses, steps and the per-stream real-time factor; the
exit status is 0 only when every conversation streamed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from harness.models.model_env import REPO, family_pins, image_family


def smoke_scenes():
    """Three short scenes (three and four people; T early and late; an N4 pair), ``Scene`` objects."""
    from harness.scenes.schema import Label, Scene, Target, Turn

    def turns(*spec):
        return tuple(Turn(sp, text, lab, tgt, ans) for sp, text, lab, tgt, ans in spec)

    h, a, n = Target.HUMAN, Target.ARIA, Target.NONE
    return [
        Scene("smoke-0-explicit", "smoke-0", "explicit", ("A", "B", "C"), turns(
            ("A", "Ben, the train leaves at seven.", Label.N2, h, None),
            ("B", "Aria, when does the train leave?", Label.T, a, None),
            ("C", "I still need to pack.", Label.N3, n, None)), "seven"),
        Scene("smoke-1-explicit", "smoke-1", "explicit", ("A", "B", "C", "D"), turns(
            ("A", "Dana, did you water the plants?", Label.N4_Q, h, "yes"),
            ("D", "Yes, this morning.", Label.N4_R, h, None),
            ("B", "The shop closes at nine tonight.", Label.N1, n, None),
            ("C", "Aria, what time does the shop close?", Label.T, a, None),
            ("A", "Good, we have time.", Label.N3, n, None)), "nine"),
        Scene("smoke-2-explicit", "smoke-2", "explicit", ("A", "B", "C"), turns(
            ("C", "I brought four chairs, Ben.", Label.N2, h, None),
            ("A", "Aria, how many chairs did Carl bring?", Label.T, a, None),
            ("B", "Thanks, that is plenty.", Label.N3, n, None)), "four"),
    ]


def smoke_conversations(sample_rate: int = 24_000):
    """The :func:`smoke_scenes` as ``ConversationInput`` with espeak-ng speech (a voice per speaker)."""
    from harness.audio.tts.espeak import EspeakTTS
    from harness.runtime.runner import ConversationInput

    tts = EspeakTTS(sample_rate)
    voices = {"A": "en-us+m1", "B": "en-us+f2", "C": "en-gb", "D": "en-us+m3"}
    preamble = tts.synthesize("Aria, you are listening to a group conversation. Answer only when addressed.",
                              "en-us+m7")
    return [ConversationInput(s, [tts.synthesize(t.text, voices[t.speaker]) for t in s.turns], preamble, seed,
                              "Answer only when you are addressed.")
            for seed, s in enumerate(smoke_scenes())]


def run_inside(model_name: str, src: Path | None) -> dict:
    """Stream the smoke conversations through ``model_name`` built with ``tiny=True``; returns the summary."""
    from harness.models.registry import build_model, model_class
    from harness.protocol.scheduler import ProtocolSettings
    from harness.runtime.runner import run_conversations
    from harness.vad.settings import VadSettings

    cls = model_class(model_name)
    if src is not None:
        for d in reversed(getattr(cls, "SOURCE_DIRS", (".",))):
            sys.path.insert(0, str((src / d).resolve()))
    model = build_model(model_name, {"tiny": True} if src is not None else {})
    t0 = time.perf_counter()
    model.load("cpu")
    load_s = time.perf_counter() - t0
    convs = smoke_conversations()
    protocol = ProtocolSettings(tail_s=1.0)
    t0 = time.perf_counter()
    res = run_conversations(model, convs, protocol, VadSettings(), rows=min(2, model.info.max_batch))
    wall = time.perf_counter() - t0
    audio_s = sum(len(r.output) for r in res if r.output is not None) / protocol.sample_rate
    commit = None
    if src is not None:
        commit = subprocess.run(["git", "-C", str(src), "rev-parse", "HEAD"], capture_output=True,
                                text=True).stdout.strip() or None
    family = image_family(model_name)
    pinned = family_pins(family)[1].get("UPSTREAM_COMMIT") if family else None
    if pinned and commit != pinned:
        print(f"model-smoke: {src} is at {commit or 'an unknown commit'}, not the commit images/{family}/build-args "
              f"pins ({pinned})", file=sys.stderr)
    return {"model": model_name, "upstream_commit": commit, "pinned_commit": pinned,
            "statuses": [r.status for r in res],
            "reasons": [r.reason for r in res if r.status != "ok"],
            "max_abs_output": max((float(np.abs(r.output).max(initial=0)) for r in res if r.output is not None),
                                  default=None),
            "rows": min(2, model.info.max_batch), "load_s": round(load_s, 2), "wall_s": round(wall, 2),
            "audio_s": round(audio_s, 2), "aggregate_rtf": round(audio_s / wall, 3) if wall else None}


def run_outside(model_name: str, src: Path, venv: Path) -> int:
    """Create the throw-away environment with the pins of the model's image (the recipe of
    ``make model-env``: :func:`harness.models.model_env.create`), rerun this module inside it."""
    from harness.models.model_env import create

    py = create(venv, image_family(model_name))
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_TORCH_COMPILE": "1", "NO_CUDA_GRAPH": "1"}
    return subprocess.run([str(py), "-m", "harness.models.smoke", "--inside", "--model", model_name,
                           "--src", str(src)], env=env, cwd=REPO).returncode


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="make model-smoke", description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="model config name (conf/model/<name>.yaml), e.g. flm_audio")
    ap.add_argument("--src", type=Path, help="checkout of the upstream repository at the pinned commit")
    ap.add_argument("--venv", type=Path, help="throw-away virtualenv (default: a folder under the temp dir)")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inside:
        summary = run_inside(args.model, args.src)
        print(json.dumps(summary))
        return 0 if all(s == "ok" for s in summary["statuses"]) else 1
    if args.src is None or not args.src.is_dir():
        ap.error(f"SRC must be a checkout of the upstream repository (got {args.src})")
    venv = args.venv or Path(tempfile.gettempdir()) / f"duplex-mpe-smoke-{args.model}"
    return run_outside(args.model, args.src, venv)


if __name__ == "__main__":
    sys.exit(main())
