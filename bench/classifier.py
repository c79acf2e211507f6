"""The default policy's mind, priced: the sentence classifier (MiniLM + the trained head) and the
llm policy's skip.

    .venv/bin/python -m bench.run --only classifier      # or: .venv/bin/python -m bench.classifier

1. In a fresh process (as a curator starts): the detector's load time and resident memory, then the
   classification cost per message (split into sentences, classified in one call, as a run does)
   on the embedder bench's messages (bench/embedder.py), one message at a time and in runs of 20;
   and the update reader's cost (agent/replace.py) for one sentence against ten memories, and the slot
   reader's (agent/slots.py) for a sentence and ten memories with two clauses each; then the
   reader of other languages (classify.py) and the whole-message encoder of repeats (embeddings/e5.py):
   their load, resident memory and cost per message.
2. Model calls per 100 user windows on a realistic mix, with and without the skip: every
   conversation of the labelled train and dev splits is one window (the curator's unit of work;
   test is never read here). The hypotheses a window could revisit are those the default policy
   holds at that point (it is replayed beside), so "no hypothesis to revisit" is judged as it would
   be in a live curator. A model that answers with no tool call makes one call per window it is
   sent; a real model makes a few per window, so the ratio carries over. Items at risk: expected
   memories (remember and update items) all of whose evidence sits in skipped windows.

No stack needed; nothing is downloaded.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.embedder import _rss_mb, corpus


def child(messages: int, singles: int) -> dict[str, Any]:
    """Runs in a fresh process: load the detector, then time it per message."""
    started = time.perf_counter()
    from memwright.agent import rules
    from memwright.agent.classify import shared_detector

    imported = time.perf_counter()
    rss_before, _ = _rss_mb()
    detector = shared_detector()
    detector.classify(["warm up"])
    loaded = time.perf_counter()
    rss_loaded, _ = _rss_mb()
    texts = corpus(messages)
    split = [rules.sentences(t) for t in texts]
    per_message = []
    cpu0 = time.process_time()
    for said in split[:singles]:
        t0 = time.perf_counter()
        detector.classify(said)
        per_message.append((time.perf_counter() - t0) * 1000)
    single_cpu = time.process_time() - cpu0
    t0, cpu0 = time.perf_counter(), time.process_time()
    for start in range(0, len(split), 20):
        detector.classify([s for said in split[start : start + 20] for s in said])
    batch_s, batch_cpu = time.perf_counter() - t0, time.process_time() - cpu0
    reader_ms = _update_reader_ms(detector, split)
    slot_ms = _slot_reader_ms(detector, split)
    foreign = _foreign_cost(detector, singles)
    message = _message_cost(detector, texts[:singles])
    repeat = _repeat_match_ms(detector, texts)
    rss_after, peak = _rss_mb()
    return {
        **foreign,
        **message,
        "detector": detector.version,
        "import_s": round(imported - started, 3),
        "load_s": round(loaded - imported, 3),
        "rss_before_mb": rss_before,
        "rss_loaded_mb": rss_loaded,
        "rss_model_mb": round(rss_loaded - rss_before, 1),
        "rss_after_mb": rss_after,
        "rss_peak_mb": peak,
        "messages": len(texts),
        "sentences_per_message": round(sum(map(len, split)) / len(split), 2),
        "message_p50_ms": round(statistics.median(per_message), 2),
        "message_p95_ms": round(statistics.quantiles(per_message, n=20)[-1], 2),
        "message_cpu_ms": round(single_cpu * 1000 / len(per_message), 2),
        "batched_message_ms": round(batch_s * 1000 / len(split), 2),
        "batched_message_cpu_ms": round(batch_cpu * 1000 / len(split), 2),
        "update_reader_ms": reader_ms,
        "slot_reader_ms": slot_ms,
        **repeat,
        "load_average": round(os.getloadavg()[0], 2),
    }


def _foreign_cost(detector: Any, singles: int) -> dict[str, Any]:
    """The reader of other languages (loaded on the first sentence in one): its load time and
    resident memory, and the cost per message of the train split's messages in other languages."""
    from memwright.agent import phrasing, rules
    from memwright.eval.dataset import load, split_path

    texts = [
        m.text
        for case in load(split_path("train"))
        for conv in case.conversations
        for m in conv.messages
        if m.role == "user" and not phrasing.is_english(m.text)
    ][:singles]
    if not texts or not hasattr(detector, "foreign"):
        return {}
    loaded = _lazy_load(detector.foreign)
    if loaded is None:
        return {}
    load_s, rss_before, rss_loaded = loaded
    return {
        "foreign_load_s": round(load_s, 3),
        "foreign_rss_mb": round(rss_loaded - rss_before, 1),
        "foreign_messages": len(texts),
        "foreign_message_p50_ms": _p50_ms(detector.classify, [rules.sentences(t) for t in texts]),
    }


def _lazy_load(load: Callable[[], Any]) -> tuple[float, float, float] | None:
    """A reader loaded on first use: seconds to load, resident MB before and after; None when it
    loads nothing (not installed)."""
    rss_before, _ = _rss_mb()
    t0 = time.perf_counter()
    if load() is None:
        return None
    load_s = time.perf_counter() - t0
    return load_s, rss_before, _rss_mb()[0]


def _p50_ms(step: Callable[[Any], Any], inputs: list[Any]) -> float:
    """The median milliseconds of `step` over `inputs`, one call each."""
    times = []
    for item in inputs:
        t0 = time.perf_counter()
        step(item)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 2)


def _message_cost(detector: Any, texts: list[str]) -> dict[str, Any]:
    """The whole-message encoder (e5, loaded on the first repeat it reads): its load time and
    resident memory, and its cost per message (each message encoded once, as the policy's cache
    has it)."""
    if not texts or not hasattr(detector, "message_encoder"):
        return {}
    loaded = _lazy_load(detector.message_encoder)
    if loaded is None:
        return {}
    load_s, rss_before, rss_loaded = loaded
    p50 = _p50_ms(lambda text: detector.embed_messages([text]), texts)
    rss_used, _ = _rss_mb()
    detector._message_cache.clear()  # the repeat match after this times uncached messages
    return {
        "message_encoder_load_s": round(load_s, 3),
        "message_encoder_rss_mb": round(rss_loaded - rss_before, 1),
        "message_encoder_rss_in_use_mb": round(rss_used - rss_before, 1),
        "message_encoder_p50_ms": p50,
    }


def _update_reader_ms(detector: Any, split: list[list[str]], memories: int = 10) -> float | None:
    """The update reader's cost for one sentence read against `memories` memories of one clause
    each (vectors already embedded, as the policy's cache has them): the p50 in ms."""
    from memwright.agent import replace

    reader = replace.shared_head()
    if reader is None or not hasattr(detector, "embed"):
        return None
    flat = [s for said in split for s in said]
    held = detector.embed(flat[:memories])
    said = flat[memories : memories + 200]
    times = []
    for sentence, vector in zip(said, detector.embed(said), strict=True):
        t0 = time.perf_counter()
        for memory in held:  # the policy reads one memory (its text and clauses) at a time
            reader.replaces(memory, vector, sentence)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 3) if times else None


def _slot_reader_ms(detector: Any, split: list[list[str]], memories: int = 10) -> float | None:
    """The slot reader's cost for one sentence and `memories` memories of a text and two clauses each,
    read one vector at a time as the policy does (vectors already embedded): the p50 in ms."""
    from memwright.agent import slots

    reader = slots.shared_head()
    if reader is None or not hasattr(detector, "embed"):
        return None
    flat = [s for said in split for s in said]
    vectors = detector.embed(flat[: 3 * memories + 200])
    held, said = vectors[: 3 * memories], vectors[3 * memories :]
    times = []
    for vector in said:
        t0 = time.perf_counter()
        reader.slot(vector, 0.6)
        for memory in held:
            reader.slot(memory, 0.6)
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 3) if times else None


def _repeat_match_ms(detector: Any, texts: list[str], held: int = 10) -> dict[str, float]:
    """A new message matched against `held` hypotheses (their vectors cached, as across a user's
    runs): by whole sentences (the baseline) and by disclosing clauses as well (rules.py
    `_clause_match`, the new message's pieces read and embedded once): the p50s in ms."""
    from memwright.agent import rules

    policy = rules.RulesPolicy(detector=detector)
    hypotheses, said = texts[:held], texts[held : held + 200]
    policy._clause_match(hypotheses[:1], hypotheses)  # warm: the held ones are read once per user
    sentence_ms, clause_ms, message_ms = [], [], []
    for text in said:
        t0 = time.perf_counter()
        mine = policy._sentence_vectors([text])
        for h in hypotheses:
            theirs = policy._sentence_vectors([h])
            if len(mine) and len(theirs):
                float((mine @ theirs.T).max())
        t1 = time.perf_counter()
        for h in hypotheses:
            policy._clause_match([text], [h])
        t2 = time.perf_counter()
        for h in hypotheses:
            policy._message_match(text, [h])
        t3 = time.perf_counter()
        sentence_ms.append((t1 - t0) * 1000)
        clause_ms.append((t2 - t0) * 1000)
        message_ms.append((t3 - t0) * 1000)
    if not said:
        return {}
    return {
        "repeat_sentences_ms": round(statistics.median(sentence_ms), 2),
        "repeat_with_clauses_ms": round(statistics.median(clause_ms), 2),
        "repeat_with_messages_ms": round(statistics.median(message_ms), 2),
    }


async def _measure(messages: int, singles: int) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.classifier",
        "--child",
        "--messages",
        str(messages),
        "--singles",
        str(singles),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    out, err = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"classifier bench child failed: {err.decode()[-2000:]}")
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


async def windows(splits: tuple[str, ...] = ("train", "dev")) -> dict[str, Any]:
    """Model calls per 100 user windows with and without the skip, on the labelled splits."""
    from memwright.agent.llm import LlmPolicy
    from memwright.agent.rules import RulesPolicy
    from memwright.agent.tools import Memory, MemoryTools, Message
    from memwright.agent.working import WorkingMemory
    from memwright.eval.dataset import load, split_path

    replay = RulesPolicy()
    total = skipped = items = at_risk = 0
    cost: list[float] = []
    for name in splits:
        for case in load(split_path(name)):
            memories: list[Memory] = []
            working = WorkingMemory()
            clock = datetime(2026, 1, 1, tzinfo=UTC)
            skipped_ids: set[str] = set()
            seq = 0
            for conversation in case.conversations:
                new = []
                for m in conversation.messages:
                    seq += 1
                    clock += timedelta(minutes=1)
                    new.append(Message(m.message_id, conversation.conversation_id, m.text, m.role, clock, seq))
                if not any(m.role == "user" for m in new) and not working.hypotheses:
                    continue
                shown = {m.message_id: m for m in new}
                tools = MemoryTools(case.user_id, copy.deepcopy(memories), shown, 40, copy.deepcopy(working))
                total += 1
                t0 = time.process_time()
                if LlmPolicy._one_offs_only(tools, new):
                    skipped += 1
                    skipped_ids |= {m.message_id for m in new}
                cost.append(time.process_time() - t0)
                await replay.run(tools, new)
                memories, working = list(tools.memories.values()), tools.working
            for item in [*case.remember, *case.update]:
                evidence = getattr(item, "evidence_any", None) or [*item.old_evidence, *item.new_evidence]  # type: ignore[union-attr]
                items += 1
                at_risk += all(e in skipped_ids for e in evidence)
    return {
        "splits": list(splits),
        "windows": total,
        "calls_per_100_windows_without_skip": 100.0,
        "calls_per_100_windows_with_skip": round(100.0 * (total - skipped) / max(1, total), 1),
        "windows_skipped": skipped,
        "expected_items": items,
        "items_in_skipped_windows_only": at_risk,
        "skip_check_cpu_ms_per_window": round(1000 * statistics.mean(cost), 2) if cost else None,
    }


async def run(say: Callable[[str], None], quick: bool) -> dict[str, Any]:
    messages, singles = (60, 30) if quick else (200, 100)
    say("-- classifier: the default policy's sentence classifier and the llm skip --")
    cost = await _measure(messages, singles)
    say(
        f"   {cost['detector']}: load {cost['load_s']:.2f}s (imports {cost['import_s']:.2f}s), resident "
        f"+{cost['rss_model_mb']:.0f} MB ({cost['rss_loaded_mb']:.0f} MB loaded, peak {cost['rss_peak_mb']:.0f} MB)"
    )
    say(
        f"   per message ({cost['sentences_per_message']} sentences): p50 {cost['message_p50_ms']:.1f} ms, "
        f"p95 {cost['message_p95_ms']:.1f} ms, {cost['message_cpu_ms']:.1f} ms CPU; in runs of 20 messages "
        f"{cost['batched_message_ms']:.1f} ms each (load average {cost['load_average']})"
    )
    if "foreign_load_s" in cost:
        say(
            f"   other languages (the multilingual encoder and foreign head, loaded on the first such sentence): "
            f"load {cost['foreign_load_s']:.2f}s, resident +{cost['foreign_rss_mb']:.0f} MB; per message "
            f"p50 {cost['foreign_message_p50_ms']:.1f} ms ({cost['foreign_messages']} messages of the train split)"
        )
    if "message_encoder_load_s" in cost:
        say(
            f"   whole messages (multilingual-e5-small 4-bit, loaded on the first repeat it reads): load "
            f"{cost['message_encoder_load_s']:.2f}s, resident +{cost['message_encoder_rss_mb']:.0f} MB loaded, "
            f"+{cost['message_encoder_rss_in_use_mb']:.0f} MB in use (its weights are mapped); "
            f"{cost['message_encoder_p50_ms']:.1f} ms p50 per message"
        )
    if cost["update_reader_ms"] is not None:
        say(f"   update reader: {cost['update_reader_ms']:.2f} ms p50 for one sentence against 10 memories")
    if cost["slot_reader_ms"] is not None:
        say(f"   slot reader: {cost['slot_reader_ms']:.2f} ms p50 for one sentence and 10 memories of 3 texts each")
    if "repeat_sentences_ms" in cost:
        say(
            "   repeat match, one message against 10 held hypotheses: by sentences "
            f"{cost['repeat_sentences_ms']:.2f} ms p50 (baseline), with disclosing clauses "
            f"{cost['repeat_with_clauses_ms']:.2f} ms p50, and with whole messages too "
            f"{cost['repeat_with_messages_ms']:.2f} ms p50"
        )
    mix = await windows()
    say(
        f"   {mix['windows']} user windows (train and dev conversations): model calls per 100 windows "
        f"{mix['calls_per_100_windows_without_skip']:.0f} without the skip, "
        f"{mix['calls_per_100_windows_with_skip']:.1f} with it; expected items whose evidence lies only in "
        f"skipped windows: {mix['items_in_skipped_windows_only']} of {mix['expected_items']}; "
        f"the check costs {mix['skip_check_cpu_ms_per_window']} ms CPU per window"
    )
    return {"cost": cost, "skip": mix}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.classifier", description=__doc__.split("\n\n")[0])
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--singles", type=int, default=100)
    p.add_argument("--quick", action="store_true")
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.messages, args.singles)))
        return 0
    report = asyncio.run(run(lambda line: print(line, flush=True), args.quick))
    print(json.dumps(report, separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
