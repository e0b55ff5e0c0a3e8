"""Scoring stage helpers that need more than VAD: ASR (``harness.scoring.asr``) and, later, the LLM judge."""
