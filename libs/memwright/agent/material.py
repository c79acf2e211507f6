"""What in a message is the user speaking, and what is material handed over to be worked on.

Chat requests carry text that is not the user's own statement: a draft to proofread ("Proofread
this: I am a motivated engineer ..."), a sentence to translate, a pasted review, a code block with
its comments, a quoted line, a role-play or a story set up in the first person. Read as the user's
words, such text becomes false memories ("User is a motivated engineer"). The default policy reads
only `own_words(text)` and nothing at all from a message that `frame(text)` names. Both are
structural (fences, quotes, a colon after a request about a text, a frame at the start): the word
lists they use are `material_cues`, `roleplay_frames`, `writing_frames`, `assistant_roles`,
`praise_nouns`, `praise_openers` and `request_verbs` in data/words.toml.
"""

from __future__ import annotations

import re

from memwright.agent.lexicon import alternatives, word_pattern

_CUE = word_pattern("material_cues")
_ROLEPLAY = word_pattern("roleplay_frames")
_WRITING = word_pattern("writing_frames")
_REQUEST = word_pattern("request_verbs", anchored=True)
_SEARCH_OPENER = word_pattern("search_openers", anchored=True)
_DELIVERABLE = re.compile(word_pattern("deliverables").pattern + r"\W*$", re.I)
SEARCH_WORDS = 8  # a sentence typed like a search is this short
_ROLE = re.compile(r"^you are (?:now )?an? (?:[\w'-]+ ){0,4}?" + word_pattern("assistant_roles").pattern, re.I)
# a scene cast in one sentence, the assistant as someone and the user as someone else: "You're a grumpy
# innkeeper in a fantasy town, I'm Sir Aldric, a knight ...", "Let's do a bit: you're a pirate tavern
# keeper and I'm a customer who hates rum." (not praise: "You're a lifesaver, I'm a nurse btw")
_CAST = re.compile(
    r"^(?:[^.!?:\n]{0,40}:\s*)?(?P<role>(?i:you(?:'re| are|'ll be| will be| play)\s+(?:a|an|the)\s+)"
    # praise ends the role ("a freaking lifesaver,"); a wizard in a tower is a role
    rf"(?!(?i:(?:[\w'-]+\s+){{0,3}}(?:{alternatives('praise_nouns')})(?:\s+(?:today|honestly|lol))?\s*(?:[,;!]|\sand\b)))"
    rf"(?!(?i:(?:{alternatives('praise_openers')})\b))"
    r"[^.!?\n]{1,80}?)(?:,|;|\s(?i:and))\s+(?i:i(?:'m| am|'ll be| will be| play)\s+)(?:(?i:a|an|the)\s|[A-Z])"
)
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.S)
_INDENTED = re.compile(r"^(?: {4,}|\t).*$", re.M)
# paired left to right; not inch marks ('I'm 6'2" and my wife is 5'4"', 'my 15" MacBook and my 24" iMac');
# single quotes only around whole lines that end a sentence inside them (elsewhere they are
# apostrophes: "I'm", "'Cause I'm always snackin'", "my in-laws'")
QUOTES = re.compile(
    r'(?<!\d)"[^"\n]*"|“[^”]*”|„[^“”]*[“”]|«[^»]*»|「[^」]*」|『[^』]*』'
    r"|(?<![^\n])[ \t]*['\u2018][^\n]*[.!?]['\u2019][ \t]*(?![^\n])"
    # single quotes after a colon, to the quote that closes a sentence or the message: "Here it is:
    # 'Sunny 2 bed unit ... Min 3 nights.' Make it ..." (an apostrophe sits inside a word: "isn't")
    r"|(?<=:)[ \t]*['\u2018](?:[^\n'\u2019]|['\u2019](?=\w))+['\u2019](?!\w)"
)
QUOTE_WORDS = 5  # a quotation this long is material; a short one stays ('don't start with "Great question"')
_OPENING = re.compile(
    r"^(?:please\s+|ok(?:ay)?[,\s]+|hey[,\s]+|hi[,\s]+|so[,\s]+|now[,\s]+|"
    r"(?:can|could|would|will) you\s+(?:please\s+)?|i'd like you to\s+|i want you to\s+|let's\s+)*",
    re.I,
)
_SENTENCE_END = re.compile(r"[.!?]\s")
FROM_NOW_ON = r"from now on|from here on|going forward|moving forward|henceforth"  # a rule's words (rules._STANDING)
_FROM_NOW_ON = re.compile(rf"\b(?:{FROM_NOW_ON})\b", re.I)
_ASIDE = re.compile(r"^(?:also|and also|oh and|by the way|btw|for the record|ps|p\.s\.)\b", re.I)


def frame(text: str) -> tuple[str, bool] | None:
    """The frame a message opens with and whether it is a role-play (which holds for the rest of
    the conversation), or None: ("act as", True), ("write a short story", False)."""
    head = _OPENING.sub("", text.strip(), count=1)
    for pattern, roleplay in ((_ROLEPLAY, True), (_WRITING, False)):
        match = pattern.match(head) or pattern.match(text.strip())
        if match:
            return match.group(0).lower(), roleplay
    cast = _CAST.match(head)
    if cast:
        return cast.group("role").lower().rstrip(",; "), True
    role = _ROLE.match(head)
    return (role.group(0).lower(), False) if role else None


PASTED_WORDS = 25  # after a request's first line, this much text is pasted material, not a remark


def _introduces_material(request: str) -> bool:
    """Whether the words before a colon (or a line break) ask for work on a text: a request
    ("Proofread this", "Summarize the following ...") that names one; not "I prefer this format"."""
    last = _SENTENCE_END.split(request)[-1]  # only the sentence the colon ends
    if not (is_request(last) and _CUE.search(last) and len(last.split()) <= 25):
        return False
    return not _FROM_NOW_ON.search(last)  # a rule and what it asks for: "Write this way from now on: short."


# what introduces a quotation of the user's own: "My motto: '...'", "Keep this in mind going forward: '...'"
_OWN_RULE_BEFORE = re.compile(
    r"(?:\b(?:my|our)\s+(?:[\w-]+\s+)?(?:rule|motto|order|policy|mantra|principle)|\bin mind(?: going forward)?|"
    r"\bremember this|\bnote this|\bfor the future)\W*$",
    re.I,
)


def own_words(text: str) -> str:
    """The message without code, the material a request introduces, and long quotations in a
    request, right after one, or in another language (whose requests these patterns cannot read)
    (a quotation the user complains about stays: 'stop saying "as an AI model I ..."')."""
    from memwright.agent import phrasing  # phrasing imports this module

    s = _FENCE.sub(" ", text)
    if "\n" in s:
        s = _INDENTED.sub(" ", s)
    anywhere = is_request(_SENTENCE_END.split(s.strip(), maxsplit=1)[0]) or not phrasing.is_english(s)

    def handed_over(quote: re.Match[str]) -> str:
        before = _SENTENCE_END.split(s[: quote.start()].strip())[-1]
        if _OWN_RULE_BEFORE.search(before):
            return quote.group(0)  # "My motto: 'never work on a Sunday.' Plan my week.": the user's own words
        after = _SENTENCE_END.split(s[quote.end() :].strip(), maxsplit=1)[0]  # "'...' Make it sound warmer."
        asked = anywhere or is_request(before) or is_request(after)
        return "…" if asked and len(quote.group(0).split()) >= QUOTE_WORDS else quote.group(0)

    s = QUOTES.sub(handed_over, s)
    for match in re.finditer(r":(?!\d|//)", s):
        if _introduces_material(s[: match.start()]):
            # a paragraph after the material that opens as an aside is the user again ("...\n\nAlso,
            # always use British spelling for me.")
            after = [p.strip() for p in re.split(r"\n\s*\n", s[match.end() :])[1:]]
            return "\n".join([s[: match.start() + 1].strip(), *(p for p in after if _ASIDE.match(p))])
    first, newline, rest = s.partition("\n")
    if newline and len(rest.split()) >= PASTED_WORDS and _introduces_material(first):
        return first.strip()
    return s.strip()


# after a request verb (and "me" or "us") these make it a manner of writing ("Write in UK English",
# "Quiz me with multiple choice"), not a request
_MANNER = re.compile(
    r"(?:\s+(?:me|us)(?=\s+(?:in|like|with|without|using|as)\b))?\s+(?:in|like|with|without|using|as|more|less|shorter|longer|briefly|simply|plainly|clearly|formally|"
    r"informally|concisely|everything|all|every|your|always|only|never)\b",
    re.I,
)


# words that make a few words a rule or a fact about the user, not a search: "No pork in any
# recipes.", "Simple language, no jargon.", "I'm on a keto plan."
_NOT_A_SEARCH = re.compile(
    r"\b(?:i|i'm|im|i've|i'd|my|me|we|our|us|no|not|never|always|only|any|every|all|don't|dont|ever)\b|,",
    re.I,
)


def typed_like_a_search(sentence: str) -> bool:
    """A few words as one would type them into a search box: "best app for budgeting", "full body
    routine" (data/words.toml `search_openers`, `deliverables`), with none of the words of a rule
    or of the user."""
    s = sentence.strip()
    return (
        len(s.split()) <= SEARCH_WORDS
        and bool(_SEARCH_OPENER.match(s) or _DELIVERABLE.search(s))
        and not _NOT_A_SEARCH.search(s)
    )


def _request_verb(sentence: str) -> tuple[str, re.Match[str] | None]:
    """The sentence without its opening ("please", "can you"), and the request verb it opens with."""
    head = _OPENING.sub("", sentence.strip(), count=1)
    return head, _REQUEST.match(head)


def opens_with_request_verb(sentence: str) -> bool:
    """Whether a sentence opens as an instruction ("Respond only with yes or no.", "Write ...")."""
    return _request_verb(sentence)[1] is not None


_THIS = re.compile(r"\s*(?:this|these)\b(?! (?:way|kind|sort|type|style|tone)\b)", re.I)


def works_on_this(sentence: str) -> bool:
    """Whether a sentence asks for work on the text at hand: "Rewrite this for my bio.", "Shorten
    these for my CV." (not "Write this way from now on.")."""
    head, verb = _request_verb(sentence)
    return verb is not None and _THIS.match(head, verb.end()) is not None


_SURPRISE = re.compile(r"\?\s*\?$")
_WH_WORD = re.compile(r"\b(?:what|how|why|where|when|which|who)\b", re.I)
_I_SAY = re.compile(r"\b(?:i|i'm|im|i've|ive|me|my|we|we're)\b", re.I)


def ends_asking(text: str) -> bool:
    """Whether `text` ends in a question mark that asks: not the surprised "??" of a statement ("my
    partner got me into horror films and I love them now??"), one with no wh-word and the user in it."""
    s = text.strip().replace("\uff1f", "?")  # the full-width question mark of Chinese and Japanese
    # ... said of the user ("tips to stay awake past 3am without 4 coffees??", "dinner tonight??" ask)
    return s.endswith("?") and not (_SURPRISE.search(s) and not _WH_WORD.search(s) and _I_SAY.search(s))


# A question without its "?": a wh-word and an inverted auxiliary ("what settings should I use ...",
# "how long do I bake it ..."), or an auxiliary and then its subject ("does it work in 3.8"), after an
# opening "and", "so", "ok" or a topic and a colon ("python: what's the cleanest way ...").
_ASKING = re.compile(
    r"^(?:(?:but|and|so|ok|okay|oh|also|then)[\s,]+|[\w.+#-]+(?:\s+[\w.+#-]+){0,2}:\s*)?"
    r"(?:(?:whats|hows|wheres|whos)\b|(?:what|how|why|where|when|which|who)(?:'s|'re|"
    r"(?:\s+(?!(?:i|you|we|they|he|she)\b)[\w'-]+){0,2}\s+(?:is|are|was|were|do|does|did|can|could|should|would|"
    r"will)\b|\s+(?:to|much|many|long|far|about|often)\b)|(?:can|could|would|will|should|do|does|did|is|are)\s+"
    r"(?:you|i|we|it|they|he|she|there)\b)",
    re.I,
)


def asks(text: str) -> bool:
    """Whether a clause or sentence is a question, with its "?" (`ends_asking`) or without it."""
    s = text.strip()
    return ends_asking(s) or bool(
        _ASKING.match(s) or _ASKS_LAST.search(s) or _BEST_WAY.match(s) or _FOLLOW_UP.match(s) or _MY_QUESTION.match(s)
    )


# the question announced: "what I wanted to ask was how to ...", "my question is whether ..."
_MY_QUESTION = re.compile(
    r"^(?:(?:anyhow|anyway|so|but|and|ok|okay)[\s,]+)?(?:what i (?:wanted|want|meant|need|needed) to ask(?: you)?"
    r"|(?:my|the) (?:real |actual )?question)\s+(?:is|was)\b",
    re.I,
)


# the question word last, as a learner may put it: "'split shift' what is", "this word what means"
_ASKS_LAST = re.compile(r"\bwhat (?:is|means|mean|does (?:it|that|this) mean)\W*$", re.I)
# a follow-up to the answer: "and if i want paid and pending both", "ok and sunrise", "what about Go"
_FOLLOW_UP = re.compile(
    r"^(?:(?:ok|okay|and|so|but|hmm)[\s,]+)*(?:and if|what if|what about|how about)\b"
    r"|^(?:ok|okay)[\s,]+and(?:\s+(?!(?:i|i'm|im|my|we|me)\b)\S+){1,3}\W*$",
    re.I,
)
# a question typed as its noun phrase: "cheapest way to send money home from Rotterdam"
_BEST_WAY = re.compile(
    r"^(?:the\s+)?(?:best|cheapest|fastest|quickest|easiest|simplest|safest|right|proper)\s+(?:way|place|time)\s+to\b"
    r"(?![^?,]*\b(?:is|are|'s)\b)",  # not "best way to contact me is email"
    re.I,
)


def is_request(sentence: str) -> bool:
    """Whether a sentence asks the assistant for something: a question, or an opening verb of
    request ("List five pros and cons ...", "Can you give me ..."), not a manner of writing ("Write
    in UK English.")."""
    if ends_asking(sentence):
        return True
    head, verb = _request_verb(sentence)
    return verb is not None and not _MANNER.match(head, verb.end())


def asks_for_something(sentence: str) -> bool:
    """A request, or a few words typed like a search."""
    return is_request(sentence) or typed_like_a_search(sentence)
