"""The papers' tables as declarations, one file per paper (registered on import)."""
