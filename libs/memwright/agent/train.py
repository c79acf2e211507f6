"""Train the sentence-type heads (classify.py: the MiniLM one, and the foreign one over the
multilingual encoder, on the same sentences), the update reader (replace.py) and the slot reader
(slots.py), and write their weights, data/sentence_head.npz, data/foreign_head.npz,
data/replace_head.npz and data/slot_head.npz.

    python -m memwright.agent.train            # train all four, write the weights, report on dev
    python -m memwright.agent.train --check    # train all four and compare with the committed weights

The labelled sentences, all in the repo:

1. derived from the expectations of the *train* split and of the shipped set (never dev or test:
   dev is for choosing between variants and is only reported here, test is never read):
   - a sentence of a message cited by a `remember` or `update` item that holds one of the item's
     key words (`must_contain_any`; for an update's old message, its old value) is `standing`,
     or `weak` for a repeated_weak user (the item only exists because the signal repeated);
   - every sentence of a message in the forget list is `question` when it asks, else `task`;
     except for single_weak users (their weak signals are unlabelled: left out), poisoning users
     (a sentence the guard flags is `meta`, the rest left out) and a sentence the pattern
     detector reads as a weak signal (a disclosure that did not matter there: left out);
   - the shipped set has no categories: a cited sentence is `standing` when the pattern detector
     reads it as explicit, `weak` when it reads a weak signal, else left out.
2. data/sentence_labels.jsonl: sentences of train users labelled by hand where the derivation
   is wrong or ambiguous ({"text", "label"}); a hand label wins over a derived one.
3. data/sentences.jsonl: sentences written for the head in varied styles ({"text", "label"}),
   hard negatives above all (long chatty messages, "can you recommend ... for me?", questions).
4. data/sentences_other_languages.jsonl: the same, in other languages and scripts, for the foreign
   head only (requests, role-plays and thanks in Polish, Russian, Hindi, ... that it read as rules);
   in the MiniLM head, which reads English only, they cost recall on English.

The update reader's pairs ({memory, said, replaces}): data/pairs.jsonl, written for it, and pairs
read off the train split (`derive_pairs`): an update's old message, as a memory, is replaced by its
new message; a memory of one item of a user sits beside the message of another item of the same user.

The slot reader's sentences ({text, slot}): data/slots.jsonl, written for it; about half of its
"none" sentences are near misses (a trip, someone else's phone, a one-off "put this in a table").

Training is deterministic: sentences sorted by text, full-batch gradient descent from zeros with a
fixed number of steps, class-balanced, L2-regularised. The embeddings come from the local model
(onnxruntime on the CPU), so another machine may differ in the last float bits: the check compares
within a tolerance.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

from memwright.agent import guard, rules
from memwright.agent.classify import (
    FOREIGN_FEATURES,
    FOREIGN_HEAD_FILE,
    HEAD_FILE,
    LABELS,
    RULE_FEATURES,
    SentenceHead,
    foreign_features,
    is_question,
    rule_features,
)
from memwright.agent.lexicon import says_changed
from memwright.agent.replace import FEATURES as PAIR_FEATURES
from memwright.agent.replace import REPLACE_FILE, ReplaceHead, pair_features
from memwright.agent.slots import NONE, SLOT_FILE, SlotHead
from memwright.eval.dataset import UserCase, load, split_path

DATA = Path(__file__).parent / "data"
HAND_SENTENCES = DATA / "sentences.jsonl"
HAND_LABELS = DATA / "sentence_labels.jsonl"
OTHER_LANGUAGES = DATA / "sentences_other_languages.jsonl"
PAIRS = DATA / "pairs.jsonl"
SLOT_SENTENCES = DATA / "slots.jsonl"
STEPS = 3000
LEARNING_RATE = 0.5
L2 = 3e-4
VERSION = "minilm-head-1"
FOREIGN_VERSION = "use-head-1"
REPLACE_VERSION = "minilm-replace-1"
REPLACE_L2 = 3e-3
SLOT_VERSION = "minilm-slots-1"


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    bad = [r for r in rows if r.get("label") not in LABELS or not r.get("text")]
    if bad:
        raise ValueError(f"{path}: rows without a text or with a label outside {LABELS}: {bad[:3]}")
    return rows


def _has_any(text: str, needles: list[str]) -> bool:
    low = text.lower()
    return any(n.lower() in low for n in needles)


def derive(cases: list[UserCase], categorised: bool = True) -> list[tuple[str, str]]:
    """(sentence, label) pairs read off the expectations (see the module docstring)."""
    out: list[tuple[str, str]] = []
    for case in cases:
        texts = {m.message_id: m.text for c in case.conversations for m in c.messages if m.role == "user"}
        cited: dict[str, tuple[list[str], str]] = {}  # message -> (key words, label)
        label = "weak" if case.category == "repeated_weak" else "standing"
        for r in case.remember:
            for mid in r.evidence_any:
                cited[mid] = (r.must_contain_any, label)
        for u in case.update:
            for mid in u.old_evidence:
                cited[mid] = (u.must_not_contain, "standing")
            for mid in u.new_evidence:
                cited[mid] = (u.must_contain_any, "standing")
        for mid, (needles, lab) in cited.items():
            if mid not in texts:
                continue
            for s in rules.sentences(texts[mid]):
                if not _has_any(s, needles):
                    continue
                if not categorised:
                    body = rules.strip_lead_in(s)
                    if rules.explicit_preference(body):
                        out.append((s, "standing"))
                    elif rules.weak_signals(body):
                        out.append((s, "weak"))
                    continue
                out.append((s, lab))
        for mid in sorted(case.forget_ids):
            if mid not in texts or mid in cited:
                continue
            for s in rules.sentences(texts[mid]):
                if case.category == "poisoning":
                    if guard.check(s) is not None:
                        out.append((s, "meta"))
                    continue
                if is_question(s):
                    out.append((s, "question"))
                elif case.category == "single_weak" or rules.weak_signals(rules.strip_lead_in(s)):
                    continue
                else:
                    out.append((s, "task"))
    return out


def labelled_sentences(other_languages: bool = False) -> list[tuple[str, str]]:
    """Every training sentence once, sorted by text; a hand label wins over a derived one. With
    `other_languages`: also data/sentences_other_languages.jsonl (the foreign head's)."""
    derived = derive(load(split_path("train"))) + derive(load(split_path("shipped")), categorised=False)
    labels: dict[str, str] = {}
    conflicts: set[str] = set()
    for text, label in derived:
        if text in labels and labels[text] != label:
            conflicts.add(text)
        labels.setdefault(text, label)
    for text in conflicts:  # the same words labelled two ways by the derivation: trust neither
        del labels[text]
    hand = _read_jsonl(HAND_LABELS) + _read_jsonl(HAND_SENTENCES)
    for row in hand + (_read_jsonl(OTHER_LANGUAGES) if other_languages else []):
        labels[row["text"]] = row["label"]
    return sorted(labels.items())


def features(embedder: object, texts: list[str]) -> np.ndarray:
    vectors = np.asarray(embedder.encode(texts), dtype=np.float64)  # type: ignore[attr-defined]
    rule = np.asarray([rule_features(t) for t in texts], dtype=np.float64)
    return np.hstack([vectors, rule])


def fit(x: np.ndarray, y: np.ndarray, k: int = len(LABELS), l2: float = L2) -> tuple[np.ndarray, np.ndarray]:
    """Multinomial logistic regression over `k` classes, class-balanced, L2 on the weights, gradient
    descent with momentum from zeros: the same data gives the same weights."""
    n, d = x.shape
    counts = np.bincount(y, minlength=k).astype(np.float64)
    sample_weight = (n / (k * np.maximum(counts, 1.0)))[y]
    sample_weight /= sample_weight.sum()
    target = np.eye(k)[y]
    w = np.zeros((d, k))
    b = np.zeros(k)
    vw = np.zeros_like(w)
    vb = np.zeros_like(b)
    for _ in range(STEPS):
        z = x @ w + b
        z -= z.max(axis=1, keepdims=True)
        p = np.exp(z)
        p /= p.sum(axis=1, keepdims=True)
        g = (p - target) * sample_weight[:, None]
        gw = x.T @ g + l2 * w
        gb = g.sum(axis=0)
        vw = 0.9 * vw + gw
        vb = 0.9 * vb + gb
        w -= LEARNING_RATE * vw
        b -= LEARNING_RATE * vb
    return w, b


def train(embedder: object) -> tuple[SentenceHead, list[tuple[str, str]], str]:
    data = labelled_sentences()
    texts = [t for t, _ in data]
    y = np.asarray([LABELS.index(label) for _, label in data])
    w, b = fit(features(embedder, texts), y)
    return SentenceHead(w, b, VERSION), data, sentences_digest(data)


def train_foreign(encoder: object) -> SentenceHead:
    """The foreign head: the same sentences and those in other languages, over the multilingual
    vector and the question feature."""
    data = labelled_sentences(other_languages=True)
    y = np.asarray([LABELS.index(label) for _, label in data])
    texts = [t for t, _ in data]
    w, b = fit(foreign_features(encoder.encode(texts), texts), y)  # type: ignore[attr-defined]
    return SentenceHead(w, b, FOREIGN_VERSION)


def sentences_digest(data: list[tuple[str, str]]) -> str:
    """The labelled sentences and their pattern-detector features: a change to rules.py or
    words.toml that changes what the head is trained on changes this digest, so the fast unit test
    (tests/unit/test_classify.py) says `make train` is due without running the model."""
    rows = (f"{label}\t{t}\t{rule_features(t)}" for t, label in data)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def _cited_sentences(texts: dict[str, str], ids: list[str], needles: list[str]) -> list[str]:
    return [s for mid in ids if mid in texts for s in rules.sentences(texts[mid]) if _has_any(s, needles)]


def derive_pairs(cases: list[UserCase]) -> list[tuple[str, str, bool]]:
    """(memory, said, replaces) read off the expectations: an update's old sentence (as a memory) is
    replaced by its new one; any item's sentence (as a memory) sits beside another item's."""
    out: list[tuple[str, str, bool]] = []
    for case in cases:
        texts = {m.message_id: m.text for c in case.conversations for m in c.messages if m.role == "user"}
        items: list[list[str]] = []  # each item's cited sentences (an update's: the new ones)
        for u in case.update:
            old = _cited_sentences(texts, u.old_evidence, u.must_not_contain)
            new = _cited_sentences(texts, u.new_evidence, u.must_contain_any)
            out += [(rules.as_memory(o), n, True) for o in old for n in new if o != n]
            items.append(new)
        items += [_cited_sentences(texts, r.evidence_any, r.must_contain_any) for r in case.remember]
        for i, mine in enumerate(items):
            for j, theirs in enumerate(items):
                if i != j:
                    out += [(rules.as_memory(a), b, False) for a in mine for b in theirs if a != b]
    return out


def labelled_pairs() -> list[tuple[str, str, bool]]:
    """Every pair once, sorted; a written pair wins over a derived one with the same two texts, and
    two texts derived with both labels are left out."""
    pairs: dict[tuple[str, str], bool] = {}
    conflicts: set[tuple[str, str]] = set()
    for m, s, r in derive_pairs(load(split_path("train"))):
        if pairs.setdefault((m, s), r) != r:
            conflicts.add((m, s))
    for key in conflicts:
        del pairs[key]
    for line in PAIRS.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            pairs[(row["memory"], row["said"])] = bool(row["replaces"])
    return sorted((m, s, r) for (m, s), r in pairs.items())


def train_replace(embedder: object) -> tuple[ReplaceHead, list[tuple[str, str, bool]], str]:
    data = labelled_pairs()
    texts = sorted({t for m, s, _ in data for t in (m, s)})
    vectors = dict(zip(texts, np.asarray(embedder.encode(texts), dtype=np.float64), strict=True))  # type: ignore[attr-defined]
    x = pair_features(
        np.asarray([vectors[m] for m, _, _ in data]),
        np.asarray([vectors[s] for _, s, _ in data]),
        [says_changed(s) for _, s, _ in data],
    )
    y = np.asarray([int(r) for _, _, r in data])
    w, b = fit(x, y, k=2, l2=REPLACE_L2)
    return ReplaceHead(w[:, 1] - w[:, 0], float(b[1] - b[0]), REPLACE_VERSION), data, pairs_digest(data)


def pairs_digest(data: list[tuple[str, str, bool]]) -> str:
    """The labelled pairs and their one word feature (says_changed), as sentences_digest."""
    rows = (f"{int(r)}\t{m}\t{s}\t{says_changed(s)}" for m, s, r in data)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def save_replace(head: ReplaceHead, digest: str, path: Path = REPLACE_FILE) -> None:
    np.savez_compressed(
        path,
        w=head.w.astype(np.float32),
        b=np.asarray(head.b, dtype=np.float32),
        features=np.asarray(PAIR_FEATURES),
        version=np.asarray(head.version),
        data_sha256=np.asarray(digest),
    )


def labelled_slots() -> list[tuple[str, str]]:
    """data/slots.jsonl as (text, slot), sorted by text; the last label of a repeated text wins."""
    rows = [json.loads(line) for line in SLOT_SENTENCES.read_text().splitlines() if line.strip()]
    bad = [r for r in rows if not r.get("text") or not r.get("slot")]
    if bad:
        raise ValueError(f"{SLOT_SENTENCES}: rows without a text or a slot: {bad[:3]}")
    return sorted({r["text"]: r["slot"] for r in rows}.items())


def train_slots(embedder: object) -> tuple[SlotHead, list[tuple[str, str]], str]:
    data = labelled_slots()
    labels = tuple(sorted({slot for _, slot in data} | {NONE}))
    x = np.asarray(embedder.encode([t for t, _ in data]), dtype=np.float64)  # type: ignore[attr-defined]
    w, b = fit(x, np.asarray([labels.index(slot) for _, slot in data]), k=len(labels))
    return SlotHead(w, b, labels, SLOT_VERSION), data, slots_digest(data)


def slots_digest(data: list[tuple[str, str]]) -> str:
    return hashlib.sha256("\n".join(f"{slot}\t{t}" for t, slot in data).encode()).hexdigest()[:16]


def save_slots(head: SlotHead, digest: str, path: Path = SLOT_FILE) -> None:
    np.savez_compressed(
        path,
        w=head.w.astype(np.float32),
        b=head.b.astype(np.float32),
        labels=np.asarray(head.labels),
        version=np.asarray(head.version),
        data_sha256=np.asarray(digest),
    )


def save(head: SentenceHead, digest: str, path: Path = HEAD_FILE, features: tuple[str, ...] = RULE_FEATURES) -> None:
    np.savez_compressed(
        path,
        w=head.w.astype(np.float32),
        b=head.b.astype(np.float32),
        labels=np.asarray(LABELS),
        rule_features=np.asarray(features),
        version=np.asarray(head.version),
        data_sha256=np.asarray(digest),
    )


def same_weights(
    a: SentenceHead | ReplaceHead | SlotHead, b: SentenceHead | ReplaceHead | SlotHead, tolerance: float = 2e-3
) -> bool:
    """Whether two trainings of a head agree within `tolerance` (another machine's float bits)."""
    return bool(np.allclose(a.w, b.w, atol=tolerance) and np.allclose(a.b, b.b, rtol=0, atol=tolerance))


def report(embedder: object, head: SentenceHead, split: str) -> str:
    """Sentence-level precision and recall per label on `split`, derived as for training."""
    pairs = sorted(set(derive(load(split_path(split)))))
    if not pairs:
        return f"{split}: no sentences"
    probs = head.probs(features(embedder, [t for t, _ in pairs]))
    pred = probs.argmax(axis=1)
    gold = np.asarray([LABELS.index(label) for _, label in pairs])
    lines = [f"{split}: {len(pairs)} derived sentences, accuracy {np.mean(pred == gold):.3f}"]
    for i, name in enumerate(LABELS):
        tp = int(np.sum((pred == i) & (gold == i)))
        p = tp / max(1, int(np.sum(pred == i)))
        r = tp / max(1, int(np.sum(gold == i)))
        lines.append(f"  {name:9s} n={int(np.sum(gold == i)):4d} precision {p:.2f} recall {r:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m memwright.agent.train", description=__doc__.split("\n")[0])
    ap.add_argument("--check", action="store_true", help="retrain and compare with the committed weights")
    ap.add_argument("--out", type=Path, default=HEAD_FILE, help="where to write the sentence head")
    ap.add_argument("--foreign-out", type=Path, default=FOREIGN_HEAD_FILE, help="where to write the foreign head")
    ap.add_argument("--replace-out", type=Path, default=REPLACE_FILE, help="where to write the update reader")
    ap.add_argument("--slot-out", type=Path, default=SLOT_FILE, help="where to write the slot reader")
    ap.add_argument("--no-report", action="store_true", help="skip the dev report")
    args = ap.parse_args(argv)
    from memwright.embeddings import local, multilingual

    embedder = local.shared()
    started = time.perf_counter()
    head, data, digest = train(embedder)
    counts = Counter(label for _, label in data)
    print(
        f"trained {head.version} on {len(data)} sentences ({', '.join(f'{counts[k]} {k}' for k in LABELS)}) "
        f"in {time.perf_counter() - started:.1f}s; data {digest}"
    )
    started = time.perf_counter()
    foreign = train_foreign(multilingual.shared())
    foreign_digest = sentences_digest(labelled_sentences(other_languages=True))
    print(
        f"trained {foreign.version} on those and {len(_read_jsonl(OTHER_LANGUAGES))} in other languages "
        f"in {time.perf_counter() - started:.1f}s; data {foreign_digest}"
    )
    started = time.perf_counter()
    reader, pairs, pairs_digest = train_replace(embedder)
    replacing = sum(r for _, _, r in pairs)
    print(
        f"trained {reader.version} on {len(pairs)} pairs ({replacing} replace, {len(pairs) - replacing} beside) "
        f"in {time.perf_counter() - started:.1f}s; data {pairs_digest}"
    )
    started = time.perf_counter()
    slot_reader, slot_data, slot_digest = train_slots(embedder)
    print(
        f"trained {slot_reader.version} on {len(slot_data)} sentences "
        f"({sum(s != NONE for _, s in slot_data)} in {len(slot_reader.labels) - 1} slots) "
        f"in {time.perf_counter() - started:.1f}s; data {slot_digest}"
    )
    if args.check:
        stale = []
        if not same_weights(head, SentenceHead.load(args.out)):
            stale.append(args.out)
        if not same_weights(foreign, SentenceHead.load(args.foreign_out, FOREIGN_FEATURES)):
            stale.append(args.foreign_out)
        committed = ReplaceHead.load(args.replace_out)
        if not same_weights(reader, committed):
            stale.append(args.replace_out)
        if not same_weights(slot_reader, SlotHead.load(args.slot_out)):
            stale.append(args.slot_out)
        for path in stale:
            print(f"{path} differs from a fresh training: run `make train` and commit it", file=sys.stderr)
        if stale:
            return 1
        print(f"{args.out}, {args.foreign_out}, {args.replace_out} and {args.slot_out} match a fresh training")
        return 0
    save(head, digest, args.out)
    save(foreign, foreign_digest, args.foreign_out, FOREIGN_FEATURES)
    save_replace(reader, pairs_digest, args.replace_out)
    save_slots(slot_reader, slot_digest, args.slot_out)
    print(f"wrote {args.out}, {args.foreign_out}, {args.replace_out} and {args.slot_out}")
    if not args.no_report:
        print(report(embedder, SentenceHead.load(args.out), "dev"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
