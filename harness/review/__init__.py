"""The human validation kit (spec section 6; docs/review.md): sampling the review items
(:mod:`.items`), the review page (:mod:`.page`), the reviewers' CSVs (:mod:`.forms`), agreement
(:mod:`.agreement`), the results and their report section (:mod:`.results`), and the export
and import in the store (:mod:`.kit`, which needs the runtime; the rest does not)."""
