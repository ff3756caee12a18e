"""What a run records: the results file's contract and schema, fingerprints, provenance and
atomic writes."""
