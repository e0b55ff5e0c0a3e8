"""The human validation kit (spec section 6; docs/review.md), with the run's overrides:

    python -m jobs.review run_id=demo review.action=export
    python -m jobs.review run_id=demo review.action=import review.csv=[a.csv,b.csv] [review.adjudication=c.csv]
    python -m jobs.review run_id=cue-demo review.kind=cue review.action=export     # a Duplex Cue run's items
    python -m jobs.review run_id=cue-demo review.kind=cue_intent review.action=export   # its corpus's intents

The export writes a self-contained review page and the CSV to fill in; the import validates
two reviewers' CSVs and writes the results beside the kit (``results.md``, ``results.html``,
``results.json``); the run's report says where they are and is never rewritten. ``review.kind``:
``mpe`` (default) the Duplex-MPE kit (docs/review.md), ``cue`` the Duplex Cue kit on a run of
``jobs.cue`` (docs/cue.md, "Human review"; its results are stored beside the cue review page),
``cue_intent`` the check of a cue corpus's intent labels (the same section).
"""

from omegaconf import DictConfig, OmegaConf, open_dict

from harness.review.cue import (
    export_cue_intent_review,
    export_cue_review,
    import_cue_intent_reviews,
    import_cue_reviews,
)
from harness.review.forms import ReviewFormError
from harness.review.kit import ReviewError, export_review, import_reviews
from jobs._entry import existing_run, fail, hydra_job, new_stage_version, setup


def _where(run, key: str) -> str:
    return f"{run.store.root}/{key}" if run.store.kind == "local" else key


@hydra_job("review")
def main(cfg: DictConfig) -> None:
    with open_dict(cfg):
        review = OmegaConf.to_container(cfg.pop("review"), resolve=True)
    run, store = setup(cfg)
    kind = review.get("kind") or "mpe"
    kits = {"mpe": (export_review, import_reviews), "cue": (export_cue_review, import_cue_reviews),
            "cue_intent": (export_cue_intent_review, import_cue_intent_reviews)}
    if kind not in kits:
        fail(f"config error: review.kind must be mpe (Duplex-MPE), cue (Duplex Cue responses) or cue_intent "
             f"(Duplex Cue intents), got {kind!r}")
    run = existing_run(run, store, config_name="review", allowed=new_stage_version, job="jobs.review")
    export, import_ = kits[kind]
    try:
        if review["action"] == "export":
            keys = export(run, store)
            print(f"\nreview page: {_where(run, keys['page'])}\nCSV to fill in (a copy per reviewer): "
                  f"{_where(run, keys['csv'])}")
        elif review["action"] == "import":
            csvs = review["csv"] if isinstance(review["csv"], list) else [review["csv"]]
            results = import_(run, store, [c for c in csvs if c], review["adjudication"])
            keys = results["keys"]
            print(f"\nresults: {_where(run, keys['markdown'])}\n         {_where(run, keys['html'])}\n"
                  f"{len(results['disagreements'])} disagreement(s), {results['open_disagreements']} open: "
                  f"{_where(run, keys['disagreements'])}")
        else:
            fail(f"config error: review.action must be export or import, got {review['action']!r}")
    except (ReviewError, ReviewFormError, ValueError) as e:
        fail(f"review: {e}")


if __name__ == "__main__":
    main()
