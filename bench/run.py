"""`make bench`: every figure of issues 8 and 13 (the context read), each printed beside the
baseline it is compared with (measured in the same run, on the same machine), and, as the last
line, one JSON object with every figure.

    eval "$(deploy/local/stack.sh env)"          # or let `make bench` start the stack
    .venv/bin/python -m bench.run                 # a few minutes
    .venv/bin/python -m bench.run --quick         # shorter loads, 10 s long window: a smoke run
    .venv/bin/python -m bench.run --only ingest   # one part: ingest, context, sweeper, pipeline, curator,
                                                  # window, embedder, classifier or index

The bench uses its own database (memwright_bench_<run>) and Kafka topics (b<run>...) on the
stack named by MEMWRIGHT_PG_DSN / MEMWRIGHT_KAFKA_BOOTSTRAP, and removes them at the end.
Loads go only to 127.0.0.1 and are bounded in count and time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import classifier, context, curation, embedder, index, ingest, pipeline, sweeper
from bench.harness import BenchStack

PARTS = ("ingest", "context", "sweeper", "pipeline", "curator", "window", "embedder", "classifier", "index")


def say(line: str) -> None:
    print(line, flush=True)


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x.strip())


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="short loads and a 10 s long window (smoke run)")
    p.add_argument("--only", choices=PARTS, action="append", help="run only these parts (repeatable)")
    p.add_argument("--duration", type=float, help="seconds per fixed ingest load (default 8; quick 3)")
    p.add_argument("--single-rates", type=_floats, help="offered requests/s of single signals (default 500,1000,2000)")
    p.add_argument("--batch-rates", type=_floats, help="offered requests/s of batches (default 20,80)")
    p.add_argument("--batch", type=int, default=50, help="signals per batch request (default 50)")
    p.add_argument("--context-users", type=int, default=50, help="users of 40 memories each read in context (50)")
    p.add_argument("--long-window", type=float, help="the long sweep window in seconds (default 60; quick 10)")
    p.add_argument("--curator-users", type=int, help="users curated in the curator figure (default 300; quick 100)")
    p.add_argument("--llm-delay", type=float, default=1.0, help="fake LLM answer delay in seconds (default 1)")
    p.add_argument("--keep", action="store_true", help="keep the bench database, topics and service logs")
    return p


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    parts = args.only or list(PARTS)
    work = Path(tempfile.mkdtemp(prefix="memwright-bench-"))
    stack = BenchStack(work)
    started = time.monotonic()
    say(f"== memwright bench {stack.run_id} == ({os.cpu_count()} cores, Python {platform.python_version()})")
    say(f"   service logs in {work} (kept with --keep or when the run fails)")
    say(f"   database {stack.database}, topics b{stack.run_id}*, loads to 127.0.0.1 only")
    report: dict[str, Any] = {"run": stack.run_id, "cores": os.cpu_count(), "quick": quick}
    await stack.create_database()
    try:
        if "embedder" in parts:  # no stack needed: fresh processes, the local model beside hashing
            report["embedder"] = await embedder.run(say, quick)
        if "classifier" in parts:  # no stack needed: the default policy's classifier, the llm skip
            report["classifier"] = await classifier.run(say, quick)
        if "index" in parts:  # no stack needed: the embedded index at 10k, 100k and 1M memories
            report["index"] = await index.run(say, quick)
        if "ingest" in parts:
            cfg = ingest.IngestConfig(
                single_rates=args.single_rates or ((200.0, 1000.0) if quick else (500.0, 1000.0, 2000.0)),
                batch_rates=args.batch_rates or ((10.0,) if quick else (20.0, 80.0)),
                batch=args.batch,
                duration_s=args.duration or (3.0 if quick else 8.0),
                ceiling_s=3.0 if quick else 6.0,
            )
            report["ingest"] = await ingest.run(stack, cfg, say)
            report["ingest_vs_raw_ratio"] = report["ingest"]["ingest_vs_raw_ratio"]
            report["ingest_path_calls"] = report["ingest"]["calls"]
        if "context" in parts:
            cfg_x = context.ContextConfig(
                users=args.context_users,
                duration_s=args.duration or (3.0 if quick else 8.0),
                ceiling_s=3.0 if quick else 6.0,
            )
            report["context"] = await context.run(stack, cfg_x, say)
            report["context_vs_raw_ratio"] = report["context"]["context_vs_raw_ratio"]
        if "sweeper" in parts:
            cfg_s = sweeper.SweeperConfig(signals=15_000 if quick else 60_000, users=500 if quick else 2_000)
            report["sweeper"] = await sweeper.run(stack, cfg_s, say)
        if {"pipeline", "curator", "window"} & set(parts):
            cfg_p = pipeline.PipelineConfig(
                latency_samples=12 if quick else 30,
                fairness_seconds=6.0 if quick else 12.0,
                load_seconds=3.0 if quick else 8.0,
                long_window_s=args.long_window or (10.0 if quick else 60.0),
            )
            cfg_c = curation.CuratorConfig(
                users=args.curator_users or (100 if quick else 300),
                llm_users=20 if quick else 40,
                index_events=500 if quick else 2000,
                llm_delay_s=args.llm_delay,
            )
            async with pipeline.Pipeline(stack, say) as pipe:
                if "pipeline" in parts:
                    report.update(await pipe.short_window_figures(cfg_p))
                if "curator" in parts:
                    report.update(await curation.run(pipe, cfg_c, say))
                if "window" in parts:
                    report.update(await pipe.long_window_figures(cfg_p))
                report["footprint"] = pipe.footprint(report.get("ingest"))
    finally:
        if not args.keep:
            await stack.cleanup()
    if not args.keep:  # a failed run keeps its service logs (the exception skips this)
        shutil.rmtree(work, ignore_errors=True)
    report["bench_seconds"] = round(time.monotonic() - started, 1)
    return report


def targets(report: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets for this machine, each with the figure measured against it."""
    out: dict[str, Any] = {}

    def check(name: str, value: float | None, limit: float, at_most: bool = True) -> None:
        met = None if value is None else (value <= limit if at_most else value >= limit)
        out[name] = {"value": value, "target": ("<= " if at_most else ">= ") + f"{limit:g}", "met": met}

    points = report.get("ingest", {}).get("points", [])
    at_1000 = [p for p in points if p["mode"] == "single" and p["ingest"]["offered_rps"] == 1000.0]
    if at_1000:
        check("ingest_p99_ms_at_1000rps", at_1000[0]["ingest"]["p99_ms"], 10)
    ratios = report.get("ingest_vs_raw_ratio", {})
    batch = [v for k, v in ratios.items() if k.startswith("batch")]
    if batch:
        check("ingest_vs_raw_ratio_batches", batch[0], 0.5, at_most=False)
    for key, figure in report.items():
        if key.startswith("signal_to_memory_"):
            check(f"{key}_p95_s", figure["p95_s"], figure["window_s"] + 5)
    if "fairness" in report:
        f = report["fairness"]
        check("light_users_max_wait_s", f["light_max_wait_s"], 2 * f["window_s"])
    ctx = report.get("context", {})
    at = {(p["mode"], p["api"]["offered_rps"]): p["api"] for p in ctx.get("points", [])}
    if ("200", 1000.0) in at:
        check("context_p99_ms_at_1000rps", at[("200", 1000.0)]["p99_ms"], 10)
    if "304" in ctx.get("ceilings", {}):
        check("context_304_ceiling_rps", ctx["ceilings"]["304"]["rps"], 2000, at_most=False)
    if "context_vs_raw_ratio" in report:
        check("context_vs_raw_select_ratio", report["context_vs_raw_ratio"], 0.5, at_most=False)
    calls = report.get("ingest_path_calls")
    if calls:
        total = sum(v for k, v in calls.items() if k != "socket_samples")
        check("ingest_path_db_and_llm_calls", total, 0)
    return out


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    report = asyncio.run(main_async(args))
    report["targets"] = targets(report)
    say("targets (issues 8 and 13, this machine):")
    for name, t in report["targets"].items():
        verdict = {True: "met", False: "NOT met", None: "not measured"}[t["met"]]
        say(f"  {name:<34} {t['value']!s:>10}  target {t['target']:<8} {verdict}")
    say(f"== done in {report['bench_seconds']:.0f}s ==")
    say(json.dumps(report, separators=(",", ":"), default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
