"""Duplex Cue, the companion protocol (spec section 9): what a model does when a listener reacts
while it holds the floor. ``schema`` (items and recordings), ``corpus`` (ingest and the espeak-ng
generator), ``continuation`` (the teacher-forced conditional continuation), ``scoring`` (labels,
eligibility, statistics)."""
