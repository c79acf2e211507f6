"""Pasted material, quotations, code and role-play are not the user speaking (agent/material.py):
nothing in them becomes a memory, while the user's own words beside them still do."""

from __future__ import annotations

import pytest
from memwright.agent.material import frame, is_request, own_words, typed_like_a_search, works_on_this

from tests.unit.test_rules_policy import remember


@pytest.mark.parametrize(
    ("text", "own"),
    [
        ("Proofread this: I am a motivated engineer who never misses a deadline.", "Proofread this:"),
        ("Translate into French: I don't eat pork, I prefer chicken.", "Translate into French:"),
        ('Fix the grammar in "me and him always goes to the gym on mondays"', "Fix the grammar in …"),
        ("Why does this fail?\n```python\n# always use tabs\nx = 1\n```", "Why does this fail?"),
        (
            "Summarize this\nThe committee met on Tuesday. I think the budget is too small and I never agreed to "
            "the hiring freeze. We will meet again in May to review the numbers and decide on the plan.",
            "Summarize this",
        ),
        # the user's own words stay: a short quotation, a colon that introduces no material
        ('also don\'t start with "Great question"', 'also don\'t start with "Great question"'),
        ("One more thing: always use metric units.", "One more thing: always use metric units."),
        # a rule before the colon: what follows is how, not material ("Write this way" is a request)
        ("Write this way from now on: short, no fluff.", "Write this way from now on: short, no fluff."),
        (
            "Quick question: I'm vegetarian, what protein is good?",
            "Quick question: I'm vegetarian, what protein is good?",
        ),
        ("We meet at 10:30, I hate mornings.", "We meet at 10:30, I hate mornings."),
        # after a request, a long quotation is handed over
        ('Can you proofread this? "I prefer working in small teams, they move fast."', "Can you proofread this? …"),
        (
            'Can you check my grammar? I wrote this for my essay: "I am living in Berlin since five years."',
            "Can you check my grammar? I wrote this for my essay: …",
        ),
        (
            'Help me polish my friend\'s bio. Her current version reads "I am a certified yoga teacher in Austin"',
            "Help me polish my friend's bio. Her current version reads …",
        ),
        # a line in single quotes, after a request in another language, is handed over; inside a
        # line a single quote is an apostrophe
        (
            "Kun je deze zinnen naar het Nederlands vertalen? Het is voor een kaartje dat mijn opa in zijn "
            "portemonnee wil hebben als hij op reis gaat:\n\n'I am allergic to penicillin. I have a pacemaker.'",
            "Kun je deze zinnen naar het Nederlands vertalen? Het is voor een kaartje dat mijn opa in zijn "
            "portemonnee wil hebben als hij op reis gaat:\n\n…",
        ),
        ("I'm allergic to penicillin.\n'tis the season, so ideas for my mum's gift?", None),
        # ... not a line that only opens and ends with apostrophes
        ("Any protein snack ideas?\n'Cause I'm lactose intolerant and I'm always snackin'", None),
        # a long quotation right after a request, when the message opened with something else
        (
            "It's for a workshop handout. Can you proofread this one? \"I prefer working in small teams "
            'where everyone owns there part."',
            "It's for a workshop handout. Can you proofread this one? …",
        ),
        ("I'm vegetarian. Don't suggest meat, it's not for me.", None),
        # "all my clients" is no rule: what follows the colon is still handed over
        (
            "Translate this into French for all my clients: I am allergic to peanuts and I live in Boston.",
            "Translate this into French for all my clients:",
        ),
        # a passage in single quotes after a colon, with the request after it, is handed over
        (
            "My cousin wrote the listing for his flat. Here it is: 'Bright studio near the park, I'm a non-smoker "
            "and it shows. Ideal for students.' Make it sound less desperate.",
            "My cousin wrote the listing for his flat. Here it is:… Make it sound less desperate.",
        ),
        # ... not a short one of the user's own, and not one no request is near
        ("My motto: 'never on a Sunday.' I've kept it for years.", None),
        # inch marks are no quotation
        ('Compare my 15" MacBook Pro and my 24" iMac.', 'Compare my 15" MacBook Pro and my 24" iMac.'),
        # a quotation outside a request is the user's own complaint, kept whole
        (
            'It\'s "realistic" they say. And no "have you considered your options" talk.',
            'It\'s "realistic" they say. And no "have you considered your options" talk.',
        ),
    ],
)
def test_own_words_leave_out_what_the_user_hands_over(text: str, own: str | None) -> None:
    assert own_words(text) == (text if own is None else own)


def test_work_on_the_text_at_hand() -> None:
    assert works_on_this("Rewrite this for my bio.")
    assert works_on_this("Can you please translate these for my grandma?")
    assert not works_on_this("Write this way from now on.")
    assert not works_on_this("This is for my bio.")
    assert not works_on_this("Write a bio for me.")


def test_frames_and_requests() -> None:
    assert frame("I want you to act as a Linux terminal. I will type commands.") == ("act as", True)
    assert frame("Let's play a game. You are a detective.") == ("let's play a", True)
    assert frame("Write a short story about a girl who hates rain.") == ("write a short story", False)
    assert frame("You keep adding disclaimers. Cut it out.") is None
    assert frame("You are a support agent for a bank. Always answer politely.") == ("you are a support agent", False)
    assert frame("You are a lifesaver! I'm vegan, by the way.") is None
    assert frame("I act as treasurer for my club.") is None
    # a scene cast in one sentence, the assistant as someone and the user as someone else
    assert frame("You're a grumpy innkeeper in a fantasy town, I'm Sir Aldric, a knight.") == (
        "you're a grumpy innkeeper in a fantasy town",
        True,
    )
    assert frame("Let's do a bit: you're a pirate tavern keeper and I'm a customer who hates rum.") == (
        "you're a pirate tavern keeper",
        True,
    )
    assert frame("You're a wizard in a crumbling tower, I'm an apprentice.") == (
        "you're a wizard in a crumbling tower",
        True,
    )
    for praise in (
        "You're a lifesaver, I'm a nurse btw.",
        "You're the expert, I'm a beginner, go slow.",
        "You're an absolute freaking lifesaver, I'm a nurse.",
        "Quick note: you're a bit too verbose, I'm a busy person.",
        "You're a great coach, I'm ADHD so keep steps short.",
    ):
        assert frame(praise) is None, praise
    for ordinary in ("Roleplay is not my thing.", "Let's play it safe today.", "Pretend I didn't ask that."):
        assert frame(ordinary) is None, ordinary
    assert is_request("List five pros and cons of electric cars.")
    assert is_request("Can you give me the Go version?")
    assert not is_request("Tables, not prose, for comparisons.")


@pytest.mark.parametrize(
    "message",
    [
        "Please proofread this: I am a highly motivated engineer and I always meet my deadlines.",
        "Translate into German: I don't drink coffee, I prefer green tea.",
        "Why does this loop never end?\n```python\n# always use tabs here\nwhile True:\n    pass\n```",
        "Act as a Linux terminal. I will type commands and you will reply with the output.",
        "Write a short story about a girl who hates the rain. She always carries an umbrella.",
        "Write SQL to find the top 5 customers by revenue. Use CTEs, not subqueries.",
        "List five pros and cons of electric cars.",
        "Give me ten names for a bakery. Keep them short and catchy.",
    ],
)
async def test_nothing_is_remembered_from_material_a_frame_or_a_task_instruction(message: str) -> None:
    memories, working = await remember([message], [message])
    assert memories == []
    # a request may be held (the same request in other words in another conversation graduates),
    # never the material it brought
    held = " ".join(h.statement for h in working.hypotheses).lower()
    assert not any(word in held for word in ("motivated", "coffee", "tabs", "umbrella", "terminal"))


async def test_a_role_play_holds_for_the_rest_of_the_window_a_writing_frame_does_not() -> None:
    memories, _ = await remember(["Let's play a game. You are a detective.", "I never leave my house on Sundays."])
    assert memories == []
    memories, _ = await remember(["Write a poem about autumn.", "Always answer in metric units."])
    assert [m.text for m in memories] == ["Always answer in metric units."]


async def test_the_users_own_preference_beside_material_is_remembered() -> None:
    memories, _ = await remember(
        ["I never want exclamation marks in anything you write for me. Proofread this: I am thrilled to apply!"]
    )
    assert len(memories) == 1 and "exclamation" in memories[0].text and "thrilled" not in memories[0].text


async def test_nothing_of_a_scene_cast_in_one_sentence_is_remembered() -> None:
    memories, _ = await remember(
        [
            "You're a grumpy innkeeper in a fantasy town, I'm Sir Aldric, a knight who's sworn off meat.",
            "I'll have a room for the night, and I never ride horses.",
        ]
    )
    assert memories == []
    memories, _ = await remember(["You're a lifesaver, I'm a vegetarian so that recipe is perfect."])
    assert any("vegetarian" in m.text for m in memories), [m.text for m in memories]
    # a remark on the assistant silences nothing that follows
    memories, _ = await remember(
        ["Quick note: you're a bit too verbose, I'm a busy person.", "I'm allergic to peanuts, never suggest them."]
    )
    assert any("peanut" in m.text for m in memories), [m.text for m in memories]


async def test_a_role_play_goes_on_in_the_next_window_of_its_conversation() -> None:
    from memwright.agent.rules import RulesPolicy

    from tests.fakes.agent import conversation, make_tools

    policy = RulesPolicy()
    first = conversation("c1", "Let's play a game. You are a detective and I am a suspect.")
    tools = make_tools(first)
    await policy.run(tools, first)
    later = conversation("c1", "I never leave my house on Sundays.", start=2)
    other = conversation("c2", "I never eat pork.", start=3)
    tools = make_tools(later + other, working=tools.working)
    await policy.run(tools, later + other)
    assert [m.text for m in tools.memories.values()] == ["User never eats pork."]


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        # a colon or a line break in the user's own words introduces no material
        ("I prefer this format: bullet points, no headings.", "bullet points"),
        ("Remember this: I'm allergic to shellfish.", "shellfish"),
        ("Check my spelling always\nI'm dyslexic so please be patient with typos.", "dyslexic"),
        # a quotation the user complains about stays in the memory
        ('Please stop saying "as an AI language model I cannot", it annoys me.', "language model"),
        # an aside beside a request for a piece of writing is the user's own
        ("Write a poem about spring. Also, for the record, my pronouns are they/them.", "they/them"),
    ],
)
async def test_the_users_own_words_around_colons_quotes_and_frames_are_kept(said: str, kept: str) -> None:
    memories, _ = await remember([said])
    assert any(kept in m.text for m in memories), [m.text for m in memories]


async def test_an_ordinary_message_that_mentions_role_play_silences_nothing() -> None:
    memories, _ = await remember(["Roleplay is not my thing, I prefer straight answers.", "I'm allergic to peanuts."])
    assert any("peanut" in m.text for m in memories)


async def test_a_request_to_forget_is_heard_inside_a_role_play() -> None:
    memories, _ = await remember(
        ["Always answer in metric units."],
        ["Act as a pirate for fun.", "Ok stop the game. Please forget that I want metric units."],
    )
    assert memories == []


async def test_an_aside_after_the_pasted_material_is_the_user_again() -> None:
    memories, _ = await remember(
        [
            "Proofread this: I am a motivated engineer.\n\nI never miss deadlines.\n\n"
            "Also, always use British spelling for me."
        ]
    )
    assert [m.text for m in memories] == ["Always use British spelling for them."]


@pytest.mark.parametrize(
    ("sentence", "asks"),
    [
        ("cheapest flights to Porto in May", True),
        ("ideas for a rainy Sunday with toddlers", True),
        ("upper body dumbbell routine", True),
        ("short wedding speech", True),
        ("Oxford comma, no exceptions.", False),
        ("Metric, not imperial.", False),
        ("Best to keep it short with me, I skim everything on my phone while commuting.", False),  # too long
        ("No pork in any recipes.", False),  # the words of a rule
        ("Simple language, no jargon.", False),
        ("I'm on a keto plan.", False),  # the user
    ],
)
def test_a_few_words_typed_like_a_search_are_a_request(sentence: str, asks: bool) -> None:
    assert typed_like_a_search(sentence) is asks


def test_a_search_shape_does_not_introduce_material() -> None:
    said = "Quick background for this: I'm a teacher in Ohio and I always want answers in metric."
    assert own_words(said) == said


async def test_a_search_typed_request_is_not_remembered() -> None:
    memories, _ = await remember(["upper body dumbbell routine"])
    assert memories == []


def test_a_game_the_user_asks_to_play_is_a_role_play_and_play_is_a_request() -> None:
    assert frame("Play a text adventure with me. I'm a thief in a desert city.") == ("play a text adventure", True)
    assert is_request("Play a round of twenty questions with my son.")


async def test_a_rule_that_quotes_a_phrase_keeps_the_phrase_as_said() -> None:
    """A quotation is not cut at its own sentence ends, and its "I" is the phrase's, not the user's
    (inch marks are no quotation: their "my" is the user's)."""
    memories, _ = await remember(
        ['I hate it when you start with "Great question! Let me help you with that" every time.']
    )
    assert [m.text for m in memories] == [
        'User hates it when you start with "Great question! Let me help you with that" every time.'
    ]
    memories, _ = await remember(['Never write "I hope you are well, I am reaching out" in my emails.'])
    assert [m.text for m in memories] == ['Never write "I hope you are well, I am reaching out" in their emails.']
    memories, _ = await remember(["I'm 6'2\" and my wife is 5'4\" so we always need a king-size bed."])
    assert "their wife" in memories[0].text, memories
