"""Replay, chunking strategies, invariants and benchmarks for the artifact gateway."""
