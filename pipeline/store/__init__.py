"""The store below every reader: what ingesting a file writes and the rules every reader shares.

* :mod:`.files`: ``ingested_files`` (a file registered, its counts), rejects, ``account_lines``
  (read = ingested + duplicate + rejected + ignored), the error type and the per-file summary;
* :mod:`.staging`: the readers' temporary tables, from Polars schemas, batch by batch;
* :mod:`.canonical_events`: canonical incidents by content key, deduplicated against earlier
  batches and stored rows, and the one-time rekey of keys that carried the session's time zone;
* :mod:`.events`: the one rule by which a later record closes a stored open event;
* :mod:`.jobs`, :mod:`.inventory`: scheduler jobs and service intervals, the newest export winning;
* :mod:`.taxonomy`: each stored category's failure class and ``interrupting`` flag;
* :mod:`.lake`: a ``failcast extract`` lake merged by these same rules.

It imports no reader (:mod:`pipeline.readers` is above it, :mod:`pipeline.ingest` above both).
"""
