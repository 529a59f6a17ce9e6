"""Everything that writes rows: the ``Recorder`` and its one write
(``commit_runs``), the loop's ``RunJournal``, chained appends (``writer``),
content-addressed blobs, imports, batches, derived totals, teacher scores,
retention and synthetic runs for tests and benches."""
