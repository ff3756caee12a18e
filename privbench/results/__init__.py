"""What a run records: typed records of a trained cell and an attack result (`records`), the
results files' contract and atomic writes (`store`), their schema (`schema`), fingerprints and
provenance."""
