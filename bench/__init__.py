"""memwright's benchmark harness (issue 8): `python -m bench.run`, or `make bench`.

    run.py       the entry point: parts, options, the targets, the final JSON line
    loadgen.py   open-loop (latency at a fixed offered load) and closed-loop (ceiling) generators
    ingest.py    HTTP ingest vs the raw producer; the ingest path's database and LLM calls, counted
    pipeline.py  signal-to-memory latency, fairness under skew, footprint under load
    curation.py  curator users/s (rules and llm policies), indexer events/s, index rebuild
    probes.py    /proc (RSS, sockets), pg_stat_*, Prometheus scrapes
    harness.py   the run's own database, topics and service processes
    fakellm.py, llmfake.py   a counting LLM endpoint; the project's scripted one as a slow model

Black-box on purpose: services are driven through HTTP, Kafka and PostgreSQL as deployed.
"""
