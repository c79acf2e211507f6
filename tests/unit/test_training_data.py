"""The committed weights of the default policy's sentence head and update reader were trained on
today's labelled data and today's pattern-detector features. Changing rules.py or words.toml can
change what the heads are trained on without touching any weights; this says so in seconds, without
the local model (the integration test retrains and compares the weights themselves)."""

from __future__ import annotations

import numpy as np
from memwright.agent import train


def committed_digest(path: object) -> str:
    with np.load(path) as data:  # type: ignore[arg-type]
        return str(data["data_sha256"])


def test_the_sentence_head_was_trained_on_todays_sentences_and_features() -> None:
    digest = train.sentences_digest(train.labelled_sentences())
    assert committed_digest(train.HEAD_FILE) == digest, "the sentence head is stale: run `make train` and commit it"


def test_the_update_reader_was_trained_on_todays_pairs_and_features() -> None:
    digest = train.pairs_digest(train.labelled_pairs())
    assert committed_digest(train.REPLACE_FILE) == digest, "the update reader is stale: run `make train` and commit it"
