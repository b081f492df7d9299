"""Scale benchmarks for msop: burst latency against the raw-create limit, API efficiency
(from the API server's audit log), memory per cached pod and CPU per job lifecycle.

Run ``make bench`` (or ``python -m bench --help``). Results go to
``bench/results/<timestamp>/``: ``report.json``, ``report.md`` and PNG plots.
"""
