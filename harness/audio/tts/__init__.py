"""Text-to-speech backends. ``espeak`` runs anywhere (Debian espeak-ng); ``qwen3`` is the
cluster backend of the paper (a later issue)."""
