"""The report of a run: one document model (:mod:`.document`) rendered as Markdown and as a
single-file HTML page (:mod:`.markdown`), the figures (:mod:`.figures`, matplotlib Agg) and the
per-conversation debugging page (:mod:`.conversation`)."""
