"""The single-file HTML review page: every item with its audio players, text and instructions.

Audio is embedded as ``data:audio/flac;base64,...`` URIs in ``<audio controls>`` players, so the
page works offline and can be mailed; no scripts. The judge's verdict of an item sits in a
closed ``<details>`` element: a reviewer decides first and opens it afterwards, if at all.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Mapping, Sequence
from typing import Any

from harness.review.forms import REVIEW_COLUMNS, allowed
from harness.scenes.schema import Label, Scene
from harness.scoring.flow import CONTEXT_TURNS

INSTRUCTIONS = {
    "construction": (
        "Construction check of one conversation (the script as synthesised, before any model). Listen to the "
        "turns and read the script. Enter <b>pass</b> when all of these hold, else <b>fail</b> and name the "
        "turn in <i>notes</i>: every turn is intelligible and says its text; the <b>T</b> turn is a real, "
        "still-unresolved request to the assistant Aria (explicit version: it names Aria; implicit version: "
        "no name, but the context makes Aria the addressee) and the gold answer answers it from what was "
        "said; <b>N1</b> mentions Aria but asks nothing of her; <b>N2</b> is addressed to another person or "
        "a device; <b>N3</b> is self-talk; an <b>N4_Q</b> asks Aria a question and the <b>N4_R</b> after it "
        "resolves it, so Aria should stop. Leave <i>transcript_ok</i> empty."),
    "answer": (
        "A model's spoken response to the T request (its speech in the response window, as the speech "
        "recogniser heard it). <i>verdict</i>: <b>correct</b> when what you hear answers the request with the "
        "gold answer's content (ignore fillers, politeness, extra words), else <b>incorrect</b>. "
        "<i>transcript_ok</i>: <b>yes</b> when the transcript matches what you hear closely enough that the "
        "judgement would not change, else <b>no</b>."),
    "window": (
        "Model speech in a window where it should stay silent (an N1, N2 or N3 turn and the pause after it). "
        "<i>verdict</i>: <b>backchannel</b> for a short acknowledgement that adds nothing, answers nothing "
        "and does not take the floor (\"mm-hm\", \"okay\"); <b>intrusion</b> for anything else: answering, "
        "explaining, suggesting, asking, or acknowledgements that take the floor. Duration alone decides "
        "nothing. <i>transcript_ok</i>: <b>yes</b> when the transcript matches what you hear closely "
        "enough that the classification would not change, else <b>no</b>."),
}
KIND_HEADINGS = {"construction": "Construction checks", "answer": "T answers", "window": "N1-N3 windows"}

CSS = """
body { margin: 0; color: #1a202c; font: 15px/1.5 -apple-system, "Segoe UI", Roboto, Arial, sans-serif; }
main { max-width: 1100px; margin: 0 auto; padding: 1.5rem 1.5rem 4rem; }
h2 { margin-top: 2.5rem; border-bottom: 2px solid #e2e8f0; }
.item { border: 1px solid #cbd5e0; border-radius: 6px; padding: 0.6rem 1rem; margin: 1rem 0; }
.item h3 { margin: 0.2rem 0 0.5rem; font-size: 1rem; }
.id { font-family: ui-monospace, Menlo, Consolas, monospace; background: #edf2f7; padding: 0 0.3em; }
.instr { background: #fffbea; border: 1px solid #f6e05e; border-radius: 6px; padding: 0.5rem 1rem; }
table { border-collapse: collapse; font-size: 0.92rem; }
th, td { border: 1px solid #e2e8f0; padding: 0.2rem 0.5rem; text-align: left; vertical-align: middle; }
tr.target td { background: #ebf8ff; }
audio { height: 2rem; vertical-align: middle; }
dl { display: grid; grid-template-columns: max-content auto; gap: 0.15rem 1rem; margin: 0.4rem 0; }
dt { color: #4a5568; } dd { margin: 0; }
details { margin-top: 0.4rem; color: #4a5568; }
""".strip()


def flac_data_uri(flac: bytes) -> str:
    """``data:audio/flac;base64,...`` for FLAC bytes."""
    return "data:audio/flac;base64," + base64.b64encode(flac).decode("ascii")


def _player(uri: str) -> str:
    return f'<audio controls preload="none" src="{uri}"></audio>'


def _esc(x: Any) -> str:
    return html.escape(str(x))


def _dl(pairs: Sequence[tuple[str, str]]) -> str:
    """A definition list; values are already HTML."""
    return "<dl>" + "".join(f"<dt>{_esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def _construction(scene: Scene, audio: Sequence[str]) -> str:
    if len(audio) != len(scene.turns):
        raise ValueError(f"construction item {scene.scene_id}: {len(audio)} audio clip(s) for {len(scene.turns)} turns "
                         "(one per turn)")
    rows = "".join(
        f'<tr{" class=target" if t.label is Label.T else ""}><td>{i}</td><td>{_esc(t.speaker)}</td>'
        f"<td>{_esc(t.label.value)}</td><td>{_esc(t.target.value)}</td><td>{_esc(t.text)}</td>"
        f"<td>{_player(uri)}</td></tr>" for i, (t, uri) in enumerate(zip(scene.turns, audio, strict=True)))
    attrs = ", ".join(f"{k}: {v}" for k, v in sorted(scene.attributes.items()))
    return (_dl([("condition", _esc(scene.condition)), ("pair", _esc(scene.pair_id)),
                 ("gold answer", f"<b>{_esc(scene.gold_answer)}</b>"), ("setting", _esc(attrs or "—"))])
            + "<table><thead><tr><th>#</th><th>speaker</th><th>label</th><th>addressed to</th><th>text</th>"
            + f"<th>audio</th></tr></thead><tbody>{rows}</tbody></table>")


def _model_item(item: Mapping[str, Any], scene: Scene, audio: Sequence[str]) -> str:
    turn = scene.turns[item["turn"]]
    if item["kind"] == "answer":
        pairs = [("request (T)", f"{_esc(turn.speaker)}: {_esc(turn.text)}"),
                 ("gold answer", f"<b>{_esc(scene.gold_answer)}</b>")]
    else:
        i = item["turn"]  # the judge's context: up to CONTEXT_TURNS human turns, the window's own last
        shown = scene.turns[max(0, i - CONTEXT_TURNS + 1): i + 1]
        pairs = [("conversation up to the window's turn", "<br>".join(f"{_esc(t.speaker)}: {_esc(t.text)}"
                                                                       for t in shown)),
                 ("window's turn", f"{_esc(turn.label.value)}, addressed to {_esc(turn.target.value)}"),
                 ("model speech", f"{item['speech_s']:.2f} s, {item['overlap_s']:.2f} s of it over the human turn")]
    pairs += [("model speech (audio)", _player(audio[0])), ("transcript", f"<q>{_esc(item['transcript'])}</q>")]
    return (_dl([("model", _esc(item["model"])), ("condition", _esc(item["condition"])), *pairs])
            + f"<details><summary>judge's verdict (open after deciding)</summary>{_esc(item['judge_label'])}"
            "</details>")


def review_page(run_id: str, items: Sequence[Mapping[str, Any]], scenes: Mapping[str, Scene],
                audio: Mapping[str, Sequence[str]], notes: Sequence[str]) -> str:
    """The review page.

    Args:
        run_id: the run reviewed.
        items: the items in page (and CSV) order.
        scenes: every scene an item refers to, by scene id.
        audio: per item id, data URIs: one per turn (construction) or one (answer, window).
        notes: sentences about the sample (sizes, shortfalls) shown at the top.

    Raises:
        ValueError: when a construction item has not exactly one audio clip per turn.
    """
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           '<meta name="viewport" content="width=device-width, initial-scale=1">',
           f"<title>Duplex-MPE human validation: {_esc(run_id)}</title><style>{CSS}</style></head><body><main>",
           f"<h1>Duplex-MPE human validation: run <span class=id>{_esc(run_id)}</span></h1>",
           "<div class=instr><p>Review every item below and fill in <b>your own copy</b> of <code>review.csv</code> "
           "(one row per item, in this page's order; the row number is shown with each item). Columns: "
           f"<code>{','.join(REVIEW_COLUMNS)}</code>. Fill <i>verdict</i>, <i>transcript_ok</i> where asked, and "
           "<i>notes</i> for anything odd; do not change <i>item_id</i> or <i>kind</i>. Work independently of the "
           "other reviewer. Values are case-insensitive. Allowed values:</p><ul>"]
    for kind in KIND_HEADINGS:
        ok = allowed(kind, "transcript_ok")
        out.append(f"<li>{KIND_HEADINGS[kind]}: verdict {' / '.join(allowed(kind, 'verdict'))}; transcript_ok "
                   f"{' / '.join(ok) if ok else 'empty'}</li>")
    out.append("</ul>" + "".join(f"<p>{_esc(n)}</p>" for n in notes) + "</div>")
    row = 1  # the header is CSV line 1
    for kind, heading in KIND_HEADINGS.items():
        group = [it for it in items if it["kind"] == kind]
        out.append(f"<h2 id={kind}>{heading} ({len(group)} items)</h2><p class=instr>{INSTRUCTIONS[kind]}</p>")
        for it in group:
            row += 1
            scene = scenes[it["scene_id"]]
            body = (_construction(scene, audio[it["item_id"]]) if kind == "construction"
                    else _model_item(it, scene, audio[it["item_id"]]))
            out.append(f'<section class=item id="{_esc(it["item_id"])}"><h3>CSV line {row}: '
                       f"<span class=id>{_esc(it['item_id'])}</span></h3>{body}</section>")
    out.append("</main></body></html>")
    return "\n".join(out)
