"""A BERT sentence encoder written with numpy, step by step as transformers' BertModel and
sentence-transformers' Pooling(mean) + Normalize compute it: the reference the ONNX graph of
memwright.embeddings.bert is checked against. Slow and plain on purpose."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from memwright.embeddings.bert import BertConfig


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * g + b


def _gelu(x: np.ndarray) -> np.ndarray:
    erf = np.vectorize(math.erf, otypes=[np.float64])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def encode(weights: Mapping[str, np.ndarray], config: BertConfig, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """[batch, tokens] ids and mask -> [batch, hidden] unit vectors, in float64."""
    w = {k: np.asarray(v, np.float64) for k, v in weights.items() if v.dtype != np.int64}

    def linear(x: np.ndarray, prefix: str) -> np.ndarray:
        return x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]

    def norm(x: np.ndarray, prefix: str) -> np.ndarray:
        return _layer_norm(x, w[f"{prefix}.weight"], w[f"{prefix}.bias"], config.layer_norm_eps)

    batch, tokens = ids.shape
    x = (
        w["embeddings.word_embeddings.weight"][ids]
        + w["embeddings.position_embeddings.weight"][:tokens]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = norm(x, "embeddings.LayerNorm")
    bias = (1.0 - mask[:, None, None, :]) * -10000.0
    d = config.hidden // config.heads
    for i in range(config.layers):
        p = f"encoder.layer.{i}"

        def split(t: np.ndarray) -> np.ndarray:
            return t.reshape(batch, tokens, config.heads, d).transpose(0, 2, 1, 3)

        q, k, v = (split(linear(x, f"{p}.attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(d) + bias
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        probs = scores / scores.sum(-1, keepdims=True)
        context = (probs @ v).transpose(0, 2, 1, 3).reshape(batch, tokens, config.hidden)
        x = norm(linear(context, f"{p}.attention.output.dense") + x, f"{p}.attention.output.LayerNorm")
        inner = _gelu(linear(x, f"{p}.intermediate.dense"))
        x = norm(linear(inner, f"{p}.output.dense") + x, f"{p}.output.LayerNorm")
    m = mask[:, :, None].astype(np.float64)
    mean = (x * m).sum(1) / np.maximum(m.sum(1), 1e-9)
    return mean / np.maximum(np.linalg.norm(mean, axis=-1, keepdims=True), 1e-12)
