"""What kind of sentence a user wrote: the default policy's one detector interface.

Five types (LABELS):

- `standing`: a standing preference or fact about the user, said outright ("Horror is a no for me").
- `weak`: a weak self-disclosure ("I sit at a desk all day"); held as a hypothesis until it repeats.
- `task`: a request about the task at hand, chat, a one-time constraint ("for this email ...").
- `question`: a question.
- `meta`: text aimed at the memory or the assistant's rules (claims of authority, "remember that you
  must ...", secrets). The guard (guard.py) refuses those in the tool layer; the type keeps the
  policy from even holding them as hypotheses.

Two detectors behind one interface (`Detector.classify(sentences) -> list[SentenceType]`):

- `PatternDetector` (version "pattern-1"): the regular expressions of rules.py and the guard. High
  precision, low recall; used when the local model is not installed.
- `TrainedDetector` (version "minilm-head-<n>"): a multinomial logistic regression over the frozen
  all-MiniLM-L6-v2 sentence embedding (embeddings/local.py) plus the pattern detector's answers as a
  few features. Its weights are `data/sentence_head.npz`, written by `python -m memwright.agent.train`
  from labelled data in the repo (train.py says which); a unit test retrains and compares.
  A sentence in another language (phrasing.is_english) is read by a second head over the
  multilingual sentence encoder (embeddings/multilingual.py, loaded on the first such sentence),
  trained on the same sentences with only the question feature (the patterns are English):
  `data/foreign_head.npz`. MiniLM reads other languages little better than chance. The sentence's
  vector stays MiniLM's, which the policy's similarities use, beside the multilingual encoder's for
  other languages; whether a weak signal came back in another conversation is also read from whole
  messages by multilingual-e5-small (embeddings/e5.py, loaded on first use; `embed_messages`).

`shared_detector()` loads the trained one once per process (the curator's policy, the llm policy's
window filter and the eval share it) and falls back to the pattern one when the model is missing.
"""

from __future__ import annotations

import re
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import structlog

from memwright.agent import guard, material

LABELS = ("standing", "weak", "task", "question", "meta")
HEAD_FILE = Path(__file__).parent / "data" / "sentence_head.npz"
FOREIGN_HEAD_FILE = Path(__file__).parent / "data" / "foreign_head.npz"

# The rule features, in the order the head was trained with them.
RULE_FEATURES = ("explicit_pattern", "weak_pattern", "question", "guard", "scoped", "standing_words", "first_person")
FOREIGN_FEATURES = ("question",)  # the foreign head's: the other patterns read English only

_QUESTION_START = re.compile(
    r"^(?:what|what's|whats|how|why|where|when|which|who|whom|whose|is|are|was|were|do|does|did|can|could|"
    r"would|will|should|shall|may|might|any|anyone|has|have|qu[eé]|c[oó]mo|cu[aá]l|d[oó]nde|por qu[eé]|"
    r"wie|was|wo|warum|welche|quel|quelle|comment|pourquoi|o[uù]|est-ce)\b",
    re.IGNORECASE,
)
FIRST_PERSON = re.compile(
    r"\b(?:i|i'm|im|i've|i'd|i'll|me|my|mine|myself|we|our|us|je|j'|moi|mon|ma|mes|ich|mich|mir|mein|meine|"
    r"yo|mi|mis|me|eu|meu|minha)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SentenceType:
    """A sentence's type and the detector's probabilities per label (a pattern answer is 0 or 1)."""

    label: str
    probs: dict[str, float]
    vector: tuple[float, ...] | None = None  # the sentence embedding, when the detector made one

    def p(self, label: str) -> float:
        return self.probs.get(label, 0.0)


class Detector(Protocol):
    version: str

    def classify(self, sentences: list[str]) -> list[SentenceType]: ...


def is_question(sentence: str) -> bool:
    """A question as the head's feature reads it (the weights were trained with it): it ends in "?"
    (not a statement's surprised "??": "I love them now??"), opens with "¿", or opens as one and is
    short. The policy asks `material.asks`, which also reads a long one typed without its "?"."""
    s = sentence.strip()
    return material.ends_asking(s) or s.startswith("¿") or bool(_QUESTION_START.match(s) and len(s.split()) <= 12)


def rule_features(sentence: str) -> list[float]:
    """The pattern detector's answers about `sentence`, as 0/1 features (RULE_FEATURES)."""
    from memwright.agent import rules  # rules imports this module for its policy

    body = rules.strip_lead_in(sentence)
    return [
        float(rules.explicit_preference(body) is not None),
        float(bool(rules.weak_signals(body))),
        float(is_question(body)),
        float(guard.check(sentence) is not None),
        float(bool(rules.scoped(body))),
        float(bool(rules.standing_words(body))),
        float(bool(FIRST_PERSON.search(body))),
    ]


def _one_hot(label: str) -> dict[str, float]:
    return {name: float(name == label) for name in LABELS}


class PatternDetector:
    """The regular expressions alone: the guard, a question, an explicit preference, a weak signal."""

    version = "pattern-1"

    def classify(self, sentences: list[str]) -> list[SentenceType]:
        out = []
        for s in sentences:
            explicit, weak, question, flagged, scoped, _, _ = rule_features(s)
            if flagged:
                label = "meta"
            elif explicit:
                label = "standing"
            elif question:
                label = "question"
            elif weak:
                label = "weak"
            else:
                label = "task"
            del scoped
            out.append(SentenceType(label, _one_hot(label)))
        return out


def softmax(z: np.ndarray) -> np.ndarray:
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


class SentenceHead:
    """The trained weights: logits = [embedding, rule features] @ W + b."""

    def __init__(self, w: np.ndarray, b: np.ndarray, version: str) -> None:
        self.w = w.astype(np.float64)
        self.b = b.astype(np.float64)
        self.version = version

    @classmethod
    def load(cls, path: Path = HEAD_FILE, rule_features: tuple[str, ...] = RULE_FEATURES) -> SentenceHead:
        with np.load(path, allow_pickle=False) as data:
            labels = tuple(str(x) for x in data["labels"])
            features = tuple(str(x) for x in data["rule_features"])
            if labels != LABELS or features != rule_features:
                raise ValueError(f"{path} was trained for labels {labels} and features {features}; retrain it")
            return cls(data["w"], data["b"], str(data["version"]))

    def probs(self, x: np.ndarray) -> np.ndarray:
        return softmax(x @ self.w + self.b)


def foreign_features(vectors: np.ndarray, texts: list[str]) -> np.ndarray:
    """The foreign head's input: the texts' multilingual vectors and FOREIGN_FEATURES."""
    return np.hstack([np.asarray(vectors, dtype=np.float64), np.asarray([[float(is_question(t))] for t in texts])])


def _load_foreign() -> tuple[Any, SentenceHead] | None:
    """The multilingual encoder and the foreign head, or None (logged once) when either is missing or
    does not load: other languages are then read by the MiniLM head."""
    try:
        from memwright.embeddings import multilingual

        return multilingual.shared(), SentenceHead.load(FOREIGN_HEAD_FILE, FOREIGN_FEATURES)
    except Exception as exc:  # onnxruntime's own errors too: a broken model must not stop a run
        structlog.get_logger("memwright.classify").warning(
            "foreign_reader_unavailable", error=f"{type(exc).__name__}: {exc}"
        )
        return None


def _load_message_encoder() -> Any | None:
    """The whole-message encoder (embeddings/e5.py), or None (logged once) when it is missing or does
    not load: repeats are then matched by MiniLM's sentences alone."""
    try:
        from memwright.embeddings import e5

        return e5.shared()
    except Exception as exc:  # the engine's own errors too: a broken model must not stop a run
        structlog.get_logger("memwright.classify").warning(
            "message_encoder_unavailable", error=f"{type(exc).__name__}: {exc}"
        )
        return None


def _cached(cache: dict[str, np.ndarray], encoder: Any, texts: list[str], limit: int) -> np.ndarray:
    """`encoder`'s vectors of `texts`, encoding only those not in `cache` (cleared when full)."""
    missing = list(dict.fromkeys(t for t in texts if t not in cache))
    if missing:
        if len(cache) + len(missing) > limit:
            cache.clear()
        for t, v in zip(missing, encoder.encode(missing), strict=True):
            cache[t] = np.asarray(v, dtype=np.float64)
    out = []
    for t in texts:
        v = cache.get(t)  # another run may have cleared the cache meanwhile
        out.append(v if v is not None else np.asarray(encoder.encode([t])[0], dtype=np.float64))
    return np.asarray(out)


class TrainedDetector:
    """The head over the local MiniLM embedding. One per process (`shared_detector`).
    `foreign` loads the reader of other languages (encoder and head) on first use, `message_encoder`
    the whole-message encoder; None: none."""

    def __init__(
        self,
        embedder: Any,
        head: SentenceHead,
        foreign: Callable[[], tuple[Any, SentenceHead] | None] | None = None,
        message_encoder: Callable[[], Any | None] | None = None,
    ) -> None:
        self.embedder = embedder
        self.head = head
        self.version = head.version
        self._cache: dict[str, np.ndarray] = {}
        self._across_cache: dict[str, np.ndarray] = {}
        self._load_foreign = foreign
        self._foreign: tuple[Any, SentenceHead] | None = None
        self._load_lock = threading.Lock()
        self._load_message_encoder = message_encoder
        self._message_encoder: Any | None = None
        self._message_cache: dict[str, np.ndarray] = {}

    def foreign(self) -> tuple[Any, SentenceHead] | None:
        """The reader of other languages, loaded once (a missing one is not retried)."""
        with self._load_lock:
            if self._load_foreign is not None:
                load, self._load_foreign = self._load_foreign, None  # tried once, even if it fails
                self._foreign = load()
            return self._foreign

    def message_encoder(self) -> Any | None:
        """The whole-message encoder, loaded once (a missing one is not retried)."""
        with self._load_lock:
            if self._load_message_encoder is not None:
                load, self._load_message_encoder = self._load_message_encoder, None
                self._message_encoder = load()
            return self._message_encoder

    CACHE = 4096  # sentences whose vectors are kept, per encoder (a run compares a window with what it holds)

    def embed(self, texts: list[str]) -> np.ndarray:
        """MiniLM vectors, cached."""
        return _cached(self._cache, self.embedder, texts, self.CACHE)

    def embed_across(self, texts: list[str]) -> np.ndarray | None:
        """Multilingual vectors (a sentence lies near its translation), cached; None when the reader
        of other languages is not there."""
        reader = self.foreign()
        return None if reader is None else _cached(self._across_cache, reader[0], texts, self.CACHE)

    def embed_messages(self, texts: list[str]) -> np.ndarray | None:
        """Whole-message vectors (e5), cached; None when the encoder is not there."""
        encoder = self.message_encoder()
        return None if encoder is None else _cached(self._message_cache, encoder, texts, self.CACHE)

    def classify(self, sentences: list[str]) -> list[SentenceType]:
        if not sentences:
            return []
        vectors = self.embed(sentences)
        features = np.asarray([rule_features(s) for s in sentences], dtype=np.float64)
        probs = self.head.probs(np.hstack([vectors, features]))
        from memwright.agent import phrasing  # phrasing imports rules, which imports this module

        other = [i for i, s in enumerate(sentences) if not phrasing.is_english(s)]
        reader = self.foreign() if other else None
        if reader is not None:
            texts = [sentences[i] for i in other]
            vectors_across = _cached(self._across_cache, reader[0], texts, self.CACHE)
            probs[other] = reader[1].probs(foreign_features(vectors_across, texts))
        out = []
        for s_probs, vec in zip(probs, vectors, strict=True):
            p = {name: float(v) for name, v in zip(LABELS, s_probs, strict=True)}
            out.append(SentenceType(max(p, key=lambda k: p[k]), p, tuple(float(v) for v in vec)))
        return out


_shared: dict[str, Detector] = {}
_lock = threading.Lock()


def shared_detector() -> Detector:
    """The process's detector: the trained head over the shared local model, loaded once; the
    pattern detector when the model package or the head file is missing."""
    with _lock:
        if "d" not in _shared:
            try:
                from memwright.embeddings import local

                _shared["d"] = TrainedDetector(
                    local.shared(), SentenceHead.load(), _load_foreign, _load_message_encoder
                )
            except (ImportError, ValueError, OSError, KeyError, EOFError, zipfile.BadZipFile):  # missing, stale, torn
                _shared["d"] = PatternDetector()
        return _shared["d"]


def only_one_offs(
    detector: Detector, sentences: list[str], hypotheses: list[str], weak_at: float, match_at: float
) -> bool:
    """True when a window holds nothing a memory agent would act on: every sentence is a task or a
    question by the detector and no pattern reads a preference, a weak signal, a change or a
    request to forget in it, and no held hypothesis (`hypotheses`, their statements) is close in
    meaning to any of them (none to revisit). The llm policy skips the model for such a window."""
    from memwright.agent import rules

    if not sentences:
        return not hypotheses
    for s in sentences:
        body = rules.strip_lead_in(s)
        if rules.forget_request(s) is not None or rules.change_signal(s) is not None:
            return False
        if rules.explicit_preference(body) or rules.weak_signals(body):
            return False
    kinds = detector.classify(sentences)
    if any(k.label not in ("task", "question") or k.p("standing") + k.p("weak") >= weak_at for k in kinds):
        return False
    if hypotheses:
        if not isinstance(detector, TrainedDetector):
            return False  # without a model, a hypothesis cannot be ruled out
        held = detector.embed(hypotheses)
        said = np.asarray([k.vector for k in kinds], dtype=np.float64)
        if float((said @ held.T).max()) >= match_at:
            return False
    return True
