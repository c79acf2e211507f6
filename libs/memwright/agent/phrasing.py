"""Memory text in the user's terms: one standalone third-person sentence that keeps the words the
user used for what the preference is about ("Horror films are a hard no for me" -> "Horror films
are a hard no for them."), never a template that loses them.

- English: rules.as_memory (no lead-in, first person to third person, one sentence).
- Another language: the user's sentence quoted after "User said:", so nothing is lost in a
  translation this policy cannot make.
- A long sentence: the run of clauses around the one that carries the preference, at most
  MAX_CHARS characters.
- An update: clauses that only speak of the old value ("python is done for now") are left out, so
  the memory states the new value alone.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable

from memwright.agent import lexicon, material, rules

MAX_CHARS = 240
_CLAUSE_CUT = re.compile(r"(?<=[,;:])\s+|\s+[\u2014\u2013-]{1,2}\s+|\s+\((?=[^)]*\))")
_PAST = lexicon.PAST


_ANY_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")
_OTHER_LANGUAGES = frozenset(lexicon.WORDS["other_languages"])
_ENGLISH = rules.STOP - frozenset(lexicon.WORDS["both_languages"])


def is_english(text: str) -> bool:
    """English unless most of its words are in another script (Cyrillic, Han, Arabic, ...) or it
    holds more function words of another language (data/words.toml `other_languages`) than English
    ones: a short text with neither ("chicken thigh dinner idea") is English. A capitalised word
    after the first is a name ("Los Angeles based"), not a word of either side, nor is a
    capitalised first word before another ("Les Paul guitar owner")."""
    tokens = _ANY_WORD.findall(text.replace("\u2019", "'"))
    if sum(1 for t in tokens if not _latin(t)) * 2 > len(tokens):  # "как приготовить борщ", "请帮我写"
        return False
    capital = [t[:1].isupper() for t in tokens] + [False]
    found = [t.lower() for i, t in enumerate(tokens) if not (capital[i] and (i > 0 or capital[i + 1]))]
    english = sum(1 for w in found if w in _ENGLISH)
    other = sum(1 for w in found if w in _OTHER_LANGUAGES) + (1 if re.search(r"[¿¡]", text) else 0)
    return other <= english


def _latin(word: str) -> bool:
    return word[0].isascii() or unicodedata.name(word[0], "").startswith("LATIN")


def clause_pieces(sentence: str) -> list[str]:
    return [p.strip() for p in _CLAUSE_CUT.split(sentence) if p and p.strip()]


def shorten(sentence: str, score: Callable[[list[str]], list[float]] | None = None) -> str:
    """`sentence` if it is short enough; else the best-scoring clause (by `score`, else the first)
    with its neighbours while they fit in MAX_CHARS."""
    s = " ".join(sentence.split())
    if len(s) <= MAX_CHARS:
        return s
    pieces = clause_pieces(s)
    if len(pieces) < 2:
        return s[:MAX_CHARS].rsplit(" ", 1)[0]
    scores = score(pieces) if score else [0.0] * len(pieces)
    best = max(range(len(pieces)), key=lambda i: (scores[i], -i))
    lo = hi = best
    text = pieces[best]
    while True:
        grew = False
        if hi + 1 < len(pieces) and len(text) + 1 + len(pieces[hi + 1]) <= MAX_CHARS:
            hi += 1
            text = text + " " + pieces[hi]
            grew = True
        if lo > 0 and len(text) + 1 + len(pieces[lo - 1]) <= MAX_CHARS:
            lo -= 1
            text = pieces[lo] + " " + text
            grew = True
        if not grew:
            break
    return text[:MAX_CHARS].rsplit(" ", 1)[0] if len(text) > MAX_CHARS else text


# a clause asks when it ends in "?" or opens as a question: a wh-word with its verb ("what's",
# "how do", "when is") or a verb with its subject ("can you", "is it"); not a statement that only
# starts with such a word ("what I need is ...", "which rules out ...", "can't take calls", "was on
# iPhone for years")
_TRAILING_JOINER = re.compile(r"[\s,;:-]*(?:\b(?:but|so|and)\b)?[\s,;:-]*$", re.I)


def without_question(sentence: str) -> str:
    """The sentence without the question it ends in, when the rest says something ("I'm on neovim,
    which plugin manager is best?" -> "I'm on neovim")."""
    parts = [p for c in rules.clauses(sentence) for p in clause_pieces(c)]
    if len(parts) < 2 or not material.asks(parts[-1]):
        return sentence
    said = _TRAILING_JOINER.sub("", sentence[: sentence.rfind(parts[-1])])
    return said if rules.content_words(rules.strip_lead_in(said)) else sentence


def memory_text(sentence: str, score: Callable[[list[str]], list[float]] | None = None) -> str:
    """One standalone sentence about the user, in the user's words (without a question it ends in)."""
    sentence = without_question(sentence)
    s = shorten(rules.strip_lead_in(sentence) or sentence.strip(), score)
    if not is_english(s):
        return 'User said: "' + s.strip().rstrip(" .\u3002") + '".'
    text = rules.as_memory(s)
    if text.endswith("?.") or text.endswith("?"):
        text = text.rstrip(".?") + "."
    return text


# an update's pieces: clauses, sentences, and "X and Y" ("he passed the 11+ and started at grammar
# school"), whose second half takes the first one's subject when the first is left out
_UPDATE_CUT = re.compile(r"((?<=[,;:.!?])\s+(?:and\s+)?|\s+[\u2014\u2013-]{1,2}\s+|\s+and\s+)", re.IGNORECASE)
_SUBJECT = re.compile(r"^(?:(?:i|he|she|we|they)(?:'m|'ve|'re|'s|'d)?|(?:my|our) \w+)(?=\s)", re.IGNORECASE)
# the second half of "X and Y" goes on with the first half's subject when it opens with a verb
# ... not "now" before a subject of its own ("I sold the Golf and now I cycle": no "I now I cycle")
_GOES_ON = re.compile(
    r"^(?:\w+ed|\w+ing|bought|got|took|went|began|became|found|made|now(?!\s+(?:i|we|he|she|they|my|our)\b))\b",
    re.IGNORECASE,
)


def _roots(text: str) -> set[str]:
    """Content-word roots, without the "they" of the memory's own third person ("they're", "they've")."""
    return rules.roots(text, shortest=1) - {"they"}


def without_old(sentence: str, old_text: str) -> str:
    """The pieces of `sentence` that do not speak of the old value only: a piece naming a word of
    the old memory that no other piece uses, together with a word of the past ("done", "no longer",
    "changed my mind about", "quitté"), is dropped."""
    parts = _UPDATE_CUT.split(sentence.strip())
    pieces, cuts = parts[::2], ["", *parts[1::2]]  # cuts[i] comes before pieces[i]
    if len(pieces) < 2:
        return sentence
    old = _roots(old_text)
    kept: list[str] = []
    subject = ""  # of a dropped piece, for the verb after its "and" ("... and started at ...")
    for i, piece in enumerate(pieces):
        others = set().union(*(_roots(p) for j, p in enumerate(pieces) if j != i))
        old_only = (_roots(piece) & old) - others
        if old_only and _PAST.search(lexicon.NOT_CHANGE.sub(" ", piece)):
            found = _SUBJECT.match(piece)
            and_after = i + 1 < len(pieces) and cuts[i + 1].strip().lower() == "and"
            subject = found.group(0) + " " if found and and_after else ""
            kept.append("")
            continue
        if subject and _GOES_ON.match(piece):
            piece = subject + piece
        subject = ""
        kept.append((cuts[i] if kept and kept[-1] else " ") + piece)
    if all(kept):
        return sentence
    result = "".join(kept).strip().rstrip(",;:")
    new_words = rules.content_words(result) - rules.content_words(old_text)
    enough = len(new_words) >= 2 or (bool(new_words) and len(rules.content_words(result)) >= 2)
    return result if enough else sentence  # too little left: the user's whole sentence
