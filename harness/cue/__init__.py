"""Duplex Cue, the companion protocol (spec section 9): what a model does when a listener reacts
while it holds the floor. ``schema`` (items and recordings), ``corpus`` (serialisation and validated
ingest), ``generate`` (the espeak-ng generator with known labels), ``plan`` (the run's prefixes),
``continuation`` (the teacher-forced conditional continuation), ``scoring`` (labels,
eligibility, statistics)."""
