"""The default policy's word lists (data/words.toml) as whole-word, case-insensitive patterns.

Lists are data, not code: what each list is for is said in the TOML file beside it.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

WORDS: dict[str, Any] = tomllib.loads((Path(__file__).parent / "data" / "words.toml").read_text())


def alternatives(name: str) -> str:
    """One list as a regex alternation, longest first (so "muchas gracias" wins over "gracias")."""
    return "|".join(sorted((re.escape(w) for w in WORDS[name]), key=len, reverse=True))


def word_pattern(name: str, anchored: bool = False, case: bool = False) -> re.Pattern[str]:
    """One list as a pattern; `anchored`: only at the start of the text; `case`: as written."""
    flags = 0 if case else re.IGNORECASE
    return re.compile(("^" if anchored else r"\b") + "(?:" + alternatives(name) + r")\b", flags)


CHANGE = word_pattern("change")  # something changed: a close memory is updated, not added to
CHANGE_LOWER_CASE = word_pattern("change_lower_case", case=True)  # ... in other languages, not in names
NOT_CHANGE = word_pattern("not_change")  # "from now on": a new standing rule, not a change
ENDED = word_pattern("ended")  # what a memory holds came to an end: its replacement follows
PAST = word_pattern("past")  # a clause of an update that speaks of the old value
OLD_VALUE = word_pattern("old_value")  # a value the user had before ("my old flat"): no slot filled now
TEMPORARY = word_pattern("temporary")  # for a while only ("for the weekend"): no slot filled now
SLOT_WORDS = word_pattern("slot_words")  # words of a slot itself, not of its value ("time", "phone")
ON_HAND = word_pattern("on_hand")  # what is in the kitchen today: the stuff of the task at hand
# "Muchas gracias, muy amable.", "muito bem, obrigado": nothing but thanks and "ok", an answer to the assistant
ONLY_ACKNOWLEDGES = re.compile(rf"^(?:\W*(?:{alternatives('acknowledgements')})\b)+\W*$", re.IGNORECASE)
UNSURE = word_pattern("unsure")  # musing and doubt: no preference, no fact
HEDGED = word_pattern("hedged")  # maybe, some day: changes no memory
OUTSIDERS = word_pattern("outsiders", anchored=True)  # about someone outside the household
_PEOPLE = "|".join(
    sorted(
        {re.escape(w) for w in WORDS["people"]} | {re.escape(w.split(" ", 1)[1]) for w in WORDS["outsiders"]},
        key=len,
        reverse=True,
    )
)
# "my wife switched to oat milk", "she gave up coffee", "my boss moved to Teams" (and, in a memory's
# words, "User's son ..."): about someone else (`people` and the `outsiders`), so it changes no memory
# of the user, unless the user is in it too (rules._about_someone_else)
SOMEONE_ELSE = re.compile(rf"^(?:(?:my|our|user's|their)\s+(?:{_PEOPLE})\b|(?:he|she)\b)", re.IGNORECASE)
# "My wife loves orchids and old film songs": what someone else enjoys (a gift, a plan for them), not
# the user's taste; their needs stay the household's ("my husband uses a wheelchair", "my son is allergic")
THEIR_TASTE = re.compile(
    rf"^(?:my|our)\s+(?:{_PEOPLE})\s+(?:really\s+|absolutely\s+|just\s+)?"
    rf"(?:{alternatives('their_taste')})\b",
    re.IGNORECASE,
)
INSTRUCTION = word_pattern("instruction_verbs", anchored=True)  # "Keep recipes short.": to the assistant
REPLIES = word_pattern("replies")  # the assistant's replies in general
REQUEST_FRAME = word_pattern("request_frames", anchored=True)  # "I would like to know ...": a request
RESTATED = word_pattern("restated")  # said before: held like a weak signal, not remembered at once


def says_changed(text: str) -> bool:
    """Whether the text says something changed (a change word, not inside "from now on")."""
    text = NOT_CHANGE.sub(" ", text)
    if not _PERMITTED_AGAIN.search(text):
        text = _AGAIN.sub(" ", text)  # "craving pizza again" changes nothing
    text = _ACTUALLY_INSIDE.sub(" ", text)  # "files I actually own"; "Actually, I ..." does
    text = without_next_task_now(text)  # "Now a function that reads those CSVs"; "now I mostly cook vegan" does
    return CHANGE.search(text) is not None or CHANGE_LOWER_CASE.search(text) is not None


# "you can joke around with me again", "go ahead and talk spoilers again": a permission given again
_AGAIN = re.compile(r"\bagain\b", re.I)
_ACTUALLY_INSIDE = re.compile(r"(?<=\w )actually\b", re.I)
# a sentence's opening "now" that moves on to the next task ("Now a function that ...", "Now do the
# same for Go"), not to a new state or rule ("Now, always use metric.", "Now living in Denver.")
_NOW_NEXT = re.compile(
    r"^\W*now\b(?=,?\s+(?:(?:a|an|another|one more)\s+(?:[\w-]+\s+){0,2}?(?:function|script|query|class|method|"
    r"test|tests|version|program|regex|component|endpoint|page|paragraph|draft)|the same|same|do|write|make|give|"
    r"show|try|add|let's|lets|can you|could you)\b)",
    re.I,
)
# ... unless the sentence says it is a standing rule or a new state after all
_STANDS = re.compile(
    r"\b(?:from (?:now|here) on|going forward|always|never|since|anymore|these days|what i(?:'d like| want| need))\b",
    re.I,
)


def without_next_task_now(text: str) -> str:
    """The text without its opening "now" when that "now" moves on to the next task (_NOW_NEXT) and
    nothing in the text says it stands: that "now" is no change word."""
    return _NOW_NEXT.sub(" ", text) if _STANDS.search(text) is None else text


_PERMITTED_AGAIN = re.compile(r"\b(?:you can|you may|feel free|go ahead|start|resume)\b[^.!?]*\bagain\b", re.I)
