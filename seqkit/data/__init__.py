"""Data layer: dictionaries, memory-mapped token arrays, token-budget batching, pair datasets."""
