"""The local sentence model's cost beside the hashing embedder's, each in a fresh process:
load time, resident memory, sentences per second in batches and the latency of one message.

    .venv/bin/python -m bench.run --only embedder      # or: .venv/bin/python -m bench.embedder

No stack needed. The messages are the bench's own (written for it, varied in length: short
requests, standing preferences, long chatty messages); nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

SHORT = (
    "Always answer in metric units.",
    "How far is Lyon from Paris?",
    "Tables, not prose, for comparisons.",
    "Cap replies at five sentences.",
    "can you give me the Go version?",
    "same thing but in Golang",
    "what's the weather in Oslo",
    "Thanks, that works.",
    "I have a real aversion to cruise holidays.",
    "You keep adding disclaimers. Cut it out.",
)
MEDIUM = (
    "I'm a vegetarian, so which restaurants near the station would work for a group of six on Friday?",
    "Could you rewrite this paragraph so it sounds less formal but keeps the numbers exactly as they are?",
    "My daughter starts school next month and I need a checklist of what to buy, sorted by priority.",
    "Skip the steak options, I stopped eating red meat last year, but fish is fine for me.",
    "Please explain the difference between a mutex and a semaphore with a short example in Rust.",
)
LONG = (
    "So here's the thing, I've been trying to plan this trip for weeks and every itinerary I find "
    "assumes I want to cram in three cities a day, which is exhausting just to read. I'd rather stay "
    "somewhere quiet, walk a lot, eat well, and maybe see one museum if the weather turns. Also, as "
    "always, keep the budget in euros and give me train options before flights because I don't fly "
    "short distances anymore. Can you sketch a slow week in northern Italy with that in mind?",
    "Okay, update on the project: the client moved the deadline up by two weeks, the designer is out "
    "sick, and I still haven't heard back about the API keys. I need a plan for the next ten days that "
    "puts the riskiest parts first, flags what I can drop, and drafts a polite email asking for the "
    "keys again. Keep the email short, no exclamation marks, and sign it with just my first name.",
)


def corpus(n: int) -> list[str]:
    """n messages, about 60% short, 30% medium, 10% long, each made unique (no cache hits)."""
    pool = [*SHORT * 6, *MEDIUM * 6, *LONG * 3]
    return [f"{pool[i % len(pool)]} ({i})" for i in range(n)]


def _rss_mb() -> tuple[float, float]:
    """(resident now, peak resident) in MB, from /proc."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                fields[key] = int(value.split()[0]) / 1024
    return round(fields["VmRSS"], 1), round(fields["VmHWM"], 1)


def child(kind: str, threads: int, cached: bool, messages: int, singles: int) -> dict[str, Any]:
    """Runs in a fresh process: load one embedder, then time it."""
    started = time.perf_counter()
    from memwright.embeddings import HashingEmbedder

    embed: Callable[[list[str]], Any]
    if kind == "local":
        from memwright.embeddings.local import DEFAULT_CACHE_DIR, LocalEmbedder

        imported = time.perf_counter()
        rss_before, _ = _rss_mb()
        local = LocalEmbedder(threads=threads, cache_dir=DEFAULT_CACHE_DIR if cached else None)
        embed = local.encode
        graph = "cached file" if local.graph_path else "built in memory"
    else:
        imported = time.perf_counter()
        rss_before, _ = _rss_mb()
        embed = HashingEmbedder().embed_sync
        graph = "-"
    loaded = time.perf_counter()
    rss_loaded, _ = _rss_mb()
    texts = corpus(messages)
    embed(texts[:8])  # warm-up
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, len(texts), 32):
        embed(texts[start : start + 32])
    batch_s, batch_cpu_s = time.perf_counter() - t0, time.process_time() - cpu0
    latencies = []
    for text in texts[:singles]:
        t1 = time.perf_counter()
        embed([text])
        latencies.append((time.perf_counter() - t1) * 1000)
    rss_after, peak = _rss_mb()
    return {
        "kind": kind,
        "threads": threads,
        "graph": graph,
        "import_s": round(imported - started, 3),
        "load_s": round(loaded - imported, 3),
        "rss_before_mb": rss_before,
        "rss_loaded_mb": rss_loaded,
        "rss_after_mb": rss_after,
        "rss_peak_mb": peak,
        "messages": len(texts),
        "sentences_per_s": round(len(texts) / batch_s, 1),
        "sentences_per_cpu_s": round(len(texts) / batch_cpu_s, 1),  # steadier on a shared machine
        "load_average": round(os.getloadavg()[0], 2),
        "single_p50_ms": round(statistics.median(latencies), 3),
        "single_p95_ms": round(statistics.quantiles(latencies, n=20)[-1], 3),
    }


async def _measure(kind: str, threads: int, cached: bool, messages: int, singles: int) -> dict[str, Any]:
    args = ["--child", kind, "--threads", str(threads), "--messages", str(messages), "--singles", str(singles)]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.embedder",
        *args,
        *([] if cached else ["--no-cache"]),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"embedder bench child {kind} failed: {err.decode()[-2000:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


async def run(say: Callable[[str], None], quick: bool = False) -> dict[str, Any]:
    messages, singles = (256, 50) if quick else (1024, 200)
    cores = os.cpu_count() or 1
    say(f"-- embedder: all-MiniLM-L6-v2 on onnxruntime vs the hashing embedder ({messages} messages, fresh processes)")
    hashing = await _measure("hashing", 0, True, messages, singles)
    local = await _measure("local", 1, True, messages, singles)  # the default, MEMWRIGHT_EMBED_THREADS=1
    every_core = await _measure("local", 0, True, messages, singles)
    cold = await _measure("local", 1, False, 64, 10)
    say(
        f"   load              local {local['load_s']:.2f} s (graph cached), {cold['load_s']:.2f} s (built in memory)"
        f" | hashing {hashing['load_s']:.3f} s"
    )
    grown = local["rss_after_mb"] - local["rss_before_mb"]
    say(
        f"   resident memory   local {local['rss_after_mb']:.0f} MB (+{grown:.0f} for the model; peak "
        f"{local['rss_peak_mb']:.0f}, {cold['rss_peak_mb']:.0f} when built in memory)"
        f" | hashing {hashing['rss_after_mb']:.0f} MB"
    )
    say(
        f"   sentences/s       local {local['sentences_per_s']:,.0f} (1 thread), "
        f"{every_core['sentences_per_s']:,.0f} ({cores} threads), batches of 32"
        f" | hashing {hashing['sentences_per_s']:,.0f}"
    )
    say(
        f"   per CPU-second    local {local['sentences_per_cpu_s']:,.0f} sentences | hashing "
        f"{hashing['sentences_per_cpu_s']:,.0f} (load average {local['load_average']:.1f} on {cores} cores)"
    )
    say(
        f"   one message       local p50 {local['single_p50_ms']:.1f} ms, p95 {local['single_p95_ms']:.1f} ms"
        f" | hashing p50 {hashing['single_p50_ms']:.3f} ms"
    )
    return {"local": local, "local_every_core": every_core, "local_uncached": cold, "hashing": hashing}


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m bench.embedder", description=__doc__.split("\n\n")[0])
    p.add_argument("--child", choices=("hashing", "local"), help=argparse.SUPPRESS)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--no-cache", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--messages", type=int, default=1024, help=argparse.SUPPRESS)
    p.add_argument("--singles", type=int, default=200, help=argparse.SUPPRESS)
    p.add_argument("--quick", action="store_true", help="fewer messages")
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.threads, not args.no_cache, args.messages, args.singles)))
        return
    report = asyncio.run(run(lambda line: print(line, flush=True), args.quick))
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
