"""The ``cue-corpus`` stage of Duplex Cue (spec section 9; docs/cue.md): generate the corpus
(``cue.n_items``, ``cue.seed``: :func:`harness.cue.generate.generate_cue_corpus`) or ingest
``cue.manifest`` (:func:`harness.cue.corpus.ingest`), and write it under ``CuePlan.corpus``
(:mod:`harness.products.cue`):

* ``recordings.jsonl``, ``items.jsonl`` (:mod:`harness.cue.corpus`'s JSON lines);
* ``audio/<recording_id>.flac``: stereo 16-bit FLAC at the timeline rate, channel 0 = A, 1 = B
  (:func:`harness.cue.corpus.encode_recording`; read back bit for bit by
  :func:`harness.products.cue.read_recording`);
* ``problems.json``: what ingest rejected, each with its rule and reason (``[]`` when generated);
* the marker ``_SUCCESS.json`` last (counts).
"""

from __future__ import annotations

import io
import logging

from harness.cue.corpus import CueCorpus, encode_recording, ingest, write_items, write_recordings
from harness.cue.plan import CORPUS_VERSION, CuePlan
from harness.products.cue import ITEMS, PROBLEMS, RECORDINGS, recording_key
from harness.runtime.config import RunConfig
from harness.runtime.driver import Output, Stage, Unit
from harness.store.base import ObjectStore, json_bytes

log = logging.getLogger("duplex_mpe")


def build_corpus(cfg: RunConfig) -> CueCorpus:
    """The run's corpus: ``cue.manifest`` ingested (at ``protocol.sample_rate``, checked with the
    run's switch lead, window, turn pause and mid-sentence rule), else generated from
    ``cue.n_items`` and ``cue.seed`` (whose items meet the default rules by construction)."""
    c = cfg.cue
    if c.manifest:
        return ingest(c.manifest, sample_rate=cfg.protocol.sample_rate, lead_s=c.switch_lead_s, window_s=c.window_s,
                      turn_pause_s=c.turn_pause_s, mid_sentence=c.require_mid_sentence,
                      allow_outside=c.allow_outside_paths)
    from harness.cue.generate import GeneratorSettings, generate_cue_corpus

    return generate_cue_corpus(c.n_items, c.seed, settings=GeneratorSettings(lead_s=c.switch_lead_s,
                                                                             window_s=c.window_s))


class CueCorpusStage(Stage):
    """Write the corpus (module docstring). Raises ValueError when the generated or ingested corpus
    has no item (the problems are logged and stored), OSError when the manifest cannot be read."""

    name, version = "cue-corpus", CORPUS_VERSION

    def __init__(self, cfg: RunConfig):
        self.cfg = cfg

    def units(self, plan: CuePlan) -> list[Unit]:
        return [Unit(self.name, plan.corpus)]

    def compute(self, store: ObjectStore, plan: CuePlan, todo: list[Unit]):
        cfg, lay = self.cfg, plan.layout
        recordings, audio, items, problems = build_corpus(cfg)
        for p in problems:
            log.warning("cue-corpus: rejected %s", p["reason"])
        store.put(lay.file(plan.corpus, PROBLEMS), json_bytes(problems))
        if not items:
            raise ValueError(f"cue-corpus: no usable item ({len(problems)} problem(s), listed in "
                             f"{lay.file(plan.corpus, PROBLEMS)})")
        for rec in recordings:  # written as made: a corpus of many long recordings is not held twice
            store.put(recording_key(lay, plan.corpus, rec.recording_id),
                      encode_recording(audio[rec.recording_id], cfg.protocol.sample_rate))
        objects = {}
        for name, write, rows in ((RECORDINGS, write_recordings, recordings), (ITEMS, write_items, items)):
            fh = io.StringIO()
            write(rows, fh)
            objects[name] = fh.getvalue().encode()
        yield todo[0], Output({"recordings": len(recordings), "items": len(items), "problems": len(problems),
                               "source": cfg.cue.manifest or "generated"}, objects)
