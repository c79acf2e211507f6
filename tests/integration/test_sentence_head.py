"""Retraining the default policy's sentence classifiers (MiniLM and foreign), update reader and
slot reader reproduces the committed weights (`python -m memwright.agent.train`, deterministic from the
labelled data in the repo). No services, but it embeds some 7,000 texts with the local models:
seconds to a minute on 2 cores."""

from __future__ import annotations

import numpy as np
from memwright.agent import train
from memwright.agent.classify import SentenceHead
from memwright.agent.replace import ReplaceHead
from memwright.agent.slots import SLOT_FILE, SlotHead
from memwright.embeddings import local


def test_retraining_reproduces_the_committed_weights() -> None:
    head, _, digest = train.train(local.shared())
    committed = SentenceHead.load()
    with np.load(train.HEAD_FILE) as data:
        assert str(data["data_sha256"]) == digest
    assert train.same_weights(head, committed), float(np.abs(head.w - committed.w).max())


def test_retraining_the_update_reader_reproduces_the_committed_weights() -> None:
    reader, _, digest = train.train_replace(local.shared())
    committed = ReplaceHead.load()
    with np.load(train.REPLACE_FILE) as data:
        assert str(data["data_sha256"]) == digest
    assert train.same_weights(reader, committed)


def test_retraining_the_slot_reader_reproduces_the_committed_weights() -> None:
    reader, _, digest = train.train_slots(local.shared())
    committed = SlotHead.load()
    with np.load(SLOT_FILE) as data:
        assert str(data["data_sha256"]) == digest
    assert committed.labels == reader.labels and train.same_weights(reader, committed)


def test_retraining_the_foreign_head_reproduces_the_committed_weights() -> None:
    from memwright.embeddings import multilingual

    head = train.train_foreign(multilingual.shared())
    committed = SentenceHead.load(train.FOREIGN_HEAD_FILE, train.FOREIGN_FEATURES)
    assert train.same_weights(head, committed), float(np.abs(head.w - committed.w).max())
