"""The offline text reference: a deterministic name rule, a **stand-in, never an LLM**.

``RESPOND`` when the assistant's name ("Aria", :data:`harness.scenes.schema.ASSISTANT_NAME`)
is spoken in the current utterance, as a whole word, case-insensitively ("Aria's" counts,
"Arial" does not); ``SILENT`` otherwise. The history is not used. It writes no answer, so
conditional answer accuracy is "not scored" for it. It needs no network, key or model, so
the embedded default exercises the whole reference path; its figures describe the name cue,
not an LLM's reading of the conversation.
"""

from __future__ import annotations

import re
from typing import Any

from harness.reference import RESPOND, SILENT, Decision, TurnInput
from harness.scenes.schema import ASSISTANT_NAME
from harness.scoring.judge import Cost

RULES_ID = "name_spoken_v1"
NAME = re.compile(rf"(?<![A-Za-z0-9]){re.escape(ASSISTANT_NAME)}(?![A-Za-z0-9])", re.IGNORECASE)


class RuleReference:
    """``RESPOND`` iff the name is spoken in the current utterance (see the module docstring)."""

    name = "rule"
    model = RULES_ID
    prompt_version = RULES_ID
    description = (f"rule-based stand-in, not an LLM: RESPOND when the name \"{ASSISTANT_NAME}\" is spoken "
                   "in the current utterance; writes no answer")
    writes_answers = False

    def decide(self, turn: TurnInput, run: int) -> Decision:
        if run < 1:
            raise ValueError(f"run index must be >= 1, got {run}")
        if NAME.search(turn.current.text):
            return Decision(RESPOND, None, f"rule: {ASSISTANT_NAME!r} spoken in the current utterance -> RESPOND")
        return Decision(SILENT, None, f"rule: {ASSISTANT_NAME!r} not spoken in the current utterance -> SILENT")

    def stats(self) -> dict[str, Any]:
        zero = Cost().to_dict()
        return {"backend": self.name, "model": self.model, "hits": 0, "misses": 0, "cost": zero, "saved": zero}
