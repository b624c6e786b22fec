"""Benchmarks that print figures side by side in one run (no timed assertions).

    python -m harness.bench rewriter [--mb 4]
    python -m harness.bench relay [--repeat 3] [--quick]
    python -m harness.bench profile [--paced] [--top 10]
    python -m harness.bench links [--files 2000] [--mb 50] [--repeat 3]
    python -m harness.bench store [--repeat 3] [--quick] [--no-calls]
    python -m harness.bench instructions [--requests 200]
    python -m harness.bench traced [--streams 200]

One module per benchmark: :mod:`harness.bench.rewriter`, :mod:`harness.bench.relay`
(with its own upstream and client processes, :mod:`harness.bench.fast_upstream` and
:mod:`harness.bench.raw_client`; :mod:`harness.bench.profile` samples its gateway with
py-spy, :mod:`harness.bench.instructions` counts its instructions per request under
valgrind's callgrind; :mod:`harness.bench.traced` the Python objects per open stream
with tracemalloc in the gateway), :mod:`harness.bench.links`, :mod:`harness.bench.store`
(SQLite vs PostgreSQL, one and two ``gateway run`` processes). Figures measured here and
how to read them: ``docs/benchmarks.md``.
"""
