"""Can one actor keep many hosted realtime sessions paced? ``--sessions`` concurrent sessions
(default 64) of a hosted adapter (``--provider openai``: :class:`~harness.models.openai_realtime.OpenAIRealtimeModel`;
``gemini``: :class:`~harness.models.gemini_live.GeminiLiveModel`) through the real runner, against
the local fake of that API (tests/fixtures/fake_realtime*.py) in its own process on loopback, so
the service's work is not the actor's. No real API call is made.

Measured per session:

* **runner lag**: at each step, the wall clock minus the stream seconds streamed so far (the
  timeline's offset from the wall clock); a session's lag is how far that offset rose above its
  smallest value (its timeline falling behind, whatever the start); the target is every session
  within 100 ms (issue 14). Its first second is reported apart (sessions opened at the same
  refill wait for each other's ``open``);
* **first frame after open**: wall seconds from a session's ``open`` to its first frame (the
  runner's first step of a fresh state includes its own warm-up; the paced clock starts when that
  step is done, so the delay is an offset of the whole session, not made up by a burst);
* **arrival lag** (OpenAI fake only): at the server, the spread of each ``input_audio_buffer.append``'s
  arrival minus the audio before it (the sending path's added delay: event loop, socket, and the
  burst of audio queued while a socket connects);
* the usage the fake billed, priced with the repository's price table (:mod:`harness.pricing`)
  and projected to ``--projected`` conversations (4,000 by default). The fakes bill the APIs'
  documented audio token rates (OpenAI: 10 tokens per second in, 20 out, every earlier turn
  re-read as cached input per response; Gemini: 32 per second each way, earlier turns re-read as
  uncached input), so the projection scales with the scenes' length and the number of
  responses: these scenes are short (three turns), the paper's are longer.

A warm-up run (one conversation) comes first, so one-time compilation (numba, Silero) is not
counted. Prints the figures; the last line is one JSON object. Asserts nothing.

    .venv/bin/python bench/realtime_pacing.py [--provider openai|gemini] [--sessions 64] [--reply-s 1.0] [--model ID]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harness.audio.tts.espeak import EspeakTTS  # noqa: E402
from harness.models.gemini_live import GeminiLiveModel  # noqa: E402
from harness.models.openai_realtime import OpenAIRealtimeModel  # noqa: E402
from harness.pricing import ledger_cost, load_prices  # noqa: E402
from harness.protocol.scheduler import ProtocolSettings  # noqa: E402
from harness.runtime.runner import ConversationInput, ModelThread, run_conversations  # noqa: E402
from harness.scenes.schema import Label, Scene, Target, Turn  # noqa: E402
from harness.vad.settings import VadSettings  # noqa: E402

STARTUP_S = 1.0  # a session's first second: opened together with the others, its socket still connecting
TEXTS = (("A", "Ben, the train leaves at seven tonight.", Label.N2, Target.HUMAN),
         ("B", "Aria, what time does the train leave?", Label.T, Target.ARIA),
         ("C", "We should leave the house early.", Label.N3, Target.NONE))


RATE = 24_000  # the timeline's


class Timed:
    """Mixed into an adapter: each session's timeline checked against the wall clock at every step."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.opened: dict[int, float] = {}
        self.offsets: dict[str, list[float]] = {}  # conversation -> wall clock minus stream time at each step
        self.offset: dict[str, float] = {}  # conversation -> seconds from open to its first frame
        self.steps: dict[int, int] = {}
        self.ids: dict[int, str] = {}

    def open(self, row, stream):
        super().open(row, stream)
        self.opened[row], self.steps[row], self.ids[row] = time.perf_counter(), 0, stream.conversation_id

    def step(self, frames):
        now = time.perf_counter()
        for row, opened in self.opened.items():
            t, cid = self.steps[row] * self.info.frame_s, self.ids[row]
            if not self.steps[row]:
                self.offset[cid], self.offsets[cid] = now - opened, []
            self.offsets[cid].append(now - t)
            self.steps[row] += 1
        return super().step(frames)

    def close(self, row):
        super().close(row)
        self.opened.pop(row, None)

    def lags(self, cid: str) -> tuple[float, float]:
        """(max lag in the session's first :data:`STARTUP_S`, max lag after it), seconds."""
        o = np.asarray(self.offsets[cid])
        k = round(STARTUP_S / self.info.frame_s)
        return float(o[:k].max() - o.min()), float(o[k:].max() - o.min()) if len(o) > k else 0.0


def conversations(tts: EspeakTTS, n: int) -> list[ConversationInput]:
    voices = {"A": "en-us+m1", "B": "en-us+f2", "C": "en-gb"}
    clips = [tts.synthesize(text, voices[who]) for who, text, _, _ in TEXTS]
    turns = tuple(Turn(who, text, label, target) for who, text, label, target in TEXTS)
    return [ConversationInput(Scene(f"b{i:03d}-explicit", f"b{i:03d}", "explicit", ("A", "B", "C"), turns, "seven"),
                              clips, np.zeros(0, np.float32), i, duty_text="You are Aria. Answer when addressed.")
            for i in range(n)]


def pct(xs, q):
    return float(np.percentile(np.asarray(xs), q)) if len(xs) else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sessions", type=int, default=64)
    ap.add_argument("--reply-s", type=float, default=1.0)
    ap.add_argument("--provider", choices=("openai", "gemini"), default="openai")
    ap.add_argument("--model", default=None, help="the provider's model id (default: the adapter's)")
    ap.add_argument("--projected", type=int, default=4000)
    args = ap.parse_args()
    fake = "tests.fixtures.fake_realtime" + ("_gemini" if args.provider == "gemini" else "")
    server = subprocess.Popen([sys.executable, "-m", fake, "--reply-s", str(args.reply_s)],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        first = server.stdout.readline()
        if args.provider == "openai":
            os.environ.setdefault("OPENAI_API_KEY", "sk-fake-bench")  # the fake takes any key
            base, cls = f"http://127.0.0.1:{int(first)}/v1", OpenAIRealtimeModel
        else:
            info = json.loads(first)
            os.environ.setdefault("GEMINI_API_KEY", "fake-bench")
            os.environ["SSL_CERT_FILE"] = info["ca_file"]  # trust the fake's certificate
            base, cls = f"https://127.0.0.1:{info['port']}", GeminiLiveModel
        tts = EspeakTTS(RATE)
        convs = conversations(tts, args.sessions + 1)
        model = type("Timed" + cls.__name__, (Timed, cls), {})(
            max_sessions=args.sessions, base_url=base, **({"model": args.model} if args.model else {}))
        thread = ModelThread("bench")
        thread.call("load", model.load, "cpu")
        protocol, vad = ProtocolSettings(), VadSettings()
        warm = run_conversations(model, convs[:1], protocol, vad, thread=thread)
        model.offsets.clear(), model.offset.clear()
        load0 = os.getloadavg()[0]
        cpu0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        results = run_conversations(model, convs[1:], protocol, vad, thread=thread)
        wall = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    finally:
        out, _ = server.communicate("", timeout=60)
    logs = [json.loads(line) for line in out.splitlines() if line.startswith("{")][1:]  # without the warm-up's

    ok = [r for r in results if r.status == "ok"]
    start, lags = zip(*(model.lags(r.scene_id) for r in results), strict=True)
    offset = [model.offset[r.scene_id] for r in results]
    arrival = [log["max_lag_s"] for log in logs if "max_lag_s" in log]  # the OpenAI fake measures it
    audio_s = sum(len(r.output) for r in ok) / RATE
    cpu_s = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    table = load_prices()
    cost = ledger_cost([r.usage for r in results], table)
    per_conv = cost.usd / cost.priced if cost.priced else None
    print(f"warm-up: {warm[0].status}; {args.sessions} sessions: {len(ok)} ok, "
          f"{len(results) - len(ok)} errors {sorted({r.reason for r in results if r.status != 'ok'})}")
    print(f"wall {wall:.1f} s for {audio_s:.1f} s of audio ({audio_s / wall:.1f} x real time in aggregate); "
          f"actor CPU {cpu_s:.1f} s ({cpu_s / wall:.2f} cores); load average at start {load0:.1f}")
    print(f"runner lag per session after its first {STARTUP_S:g} s (max over its steps): p50 "
          f"{1000 * pct(lags, 50):.0f} ms, p95 {1000 * pct(lags, 95):.0f} ms, max {1000 * max(lags):.0f} ms; "
          f"sessions over 100 ms: {sum(x > 0.1 for x in lags)}")
    print(f"runner lag in a session's first {STARTUP_S:g} s (opening with the others): p50 "
          f"{1000 * pct(start, 50):.0f} ms, max {1000 * max(start):.0f} ms")
    print(f"first frame after open: p50 {1000 * pct(offset, 50):.0f} ms, max {1000 * max(offset):.0f} ms")
    if arrival:
        print(f"arrival lag at the server per session (max): p50 {1000 * pct(arrival, 50):.0f} ms, "
              f"p95 {1000 * pct(arrival, 95):.0f} ms, max {1000 * max(arrival):.0f} ms")
    print(f"usage ({cost.table}): {cost.describe()}; tokens {dict(cost.tokens)}")
    if per_conv is not None:
        print(f"projected: {args.projected} conversations like these on {model.model} = "
              f"${per_conv * args.projected:,.2f} (${per_conv:.4f} per conversation, "
              f"${per_conv / (audio_s / len(ok) / 60):.3f} per conversation-minute)")
    print(json.dumps({
        "sessions": args.sessions, "ok": len(ok), "wall_s": round(wall, 2), "audio_s": round(audio_s, 2),
        "actor_cpu_cores": round(cpu_s / wall, 3), "loadavg": round(load0, 2),
        "runner_lag_ms": {"p50": round(1000 * pct(lags, 50), 1), "p95": round(1000 * pct(lags, 95), 1),
                          "max": round(1000 * max(lags), 1)},
        "sessions_over_100ms": int(sum(x > 0.1 for x in lags)),
        "startup_lag_ms": {"p50": round(1000 * pct(start, 50), 1), "max": round(1000 * max(start), 1)},
        "first_frame_ms": {"p50": round(1000 * pct(offset, 50), 1), "max": round(1000 * max(offset), 1)},
        "arrival_lag_ms": {"p50": round(1000 * pct(arrival, 50), 1), "max": round(1000 * max(arrival), 1)}
        if arrival else None,
        "prices": cost.table, "usd_per_conversation": per_conv, "provider": args.provider, "model": model.model,
        "projected_conversations": args.projected,
        "projected_usd": None if per_conv is None else round(per_conv * args.projected, 2)}))


if __name__ == "__main__":
    main()
