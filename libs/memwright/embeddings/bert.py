"""A BERT sentence encoder as an ONNX graph, built from a sentence-transformers checkpoint's
weights with the `onnx` package's helper API: no torch, no exporter, no download.

The graph takes `input_ids` and `attention_mask` (int64, [batch, tokens]) and returns
`embeddings` (float32, [batch, hidden]): the encoder's last hidden state, mean-pooled over the
real tokens and L2-normalised, as sentence-transformers' Transformer → Pooling(mean) →
Normalize modules compute it. Opset 17 (LayerNormalization); GELU is the exact erf form, a
pattern onnxruntime fuses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

GRAPH_VERSION = 2  # bump when the graph changes: it is part of the cached file's name
OPSET = 17


@dataclass(frozen=True)
class BertConfig:
    hidden: int
    heads: int
    layers: int
    intermediate: int
    max_positions: int
    layer_norm_eps: float

    @classmethod
    def from_hf(cls, config: Mapping[str, Any]) -> BertConfig:
        """From a Hugging Face `config.json` of a BertModel."""
        if config.get("model_type") != "bert" or config.get("hidden_act") != "gelu":
            raise ValueError(f"not a BERT checkpoint with exact GELU: {config.get('model_type')!r}")
        if config.get("position_embedding_type", "absolute") != "absolute":
            raise ValueError("only absolute position embeddings are supported")
        return cls(
            hidden=int(config["hidden_size"]),
            heads=int(config["num_attention_heads"]),
            layers=int(config["num_hidden_layers"]),
            intermediate=int(config["intermediate_size"]),
            max_positions=int(config["max_position_embeddings"]),
            layer_norm_eps=float(config["layer_norm_eps"]),
        )


def _weight(weights: Mapping[str, np.ndarray], name: str) -> np.ndarray:
    for key in (name, f"bert.{name}"):  # checkpoints saved from BertModel or from a task model
        if key in weights:
            return np.ascontiguousarray(weights[key], dtype=np.float32)
    raise KeyError(f"the checkpoint has no tensor {name!r}")


def build_onnx(weights: Mapping[str, np.ndarray], config: BertConfig) -> Any:
    """The encoder as an `onnx.ModelProto`; serialise it and hand the bytes to onnxruntime."""
    from onnx import TensorProto, helper, numpy_helper

    nodes: list[Any] = []
    inits: list[Any] = []
    h, heads = config.hidden, config.heads
    head_dim = h // heads

    def const(name: str, value: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(value, name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs: Any) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def linear(x: str, prefix: str) -> str:
        # torch's Linear stores [out, in]; MatMul wants [in, out]
        w = const(f"{prefix}.weight_t", np.ascontiguousarray(_weight(weights, f"{prefix}.weight").T))
        b = const(f"{prefix}.bias", _weight(weights, f"{prefix}.bias"))
        return node("Add", [node("MatMul", [x, w], f"{prefix}.matmul"), b], f"{prefix}.out")

    def layer_norm(x: str, prefix: str) -> str:
        g = const(f"{prefix}.weight", _weight(weights, f"{prefix}.weight"))
        b = const(f"{prefix}.bias", _weight(weights, f"{prefix}.bias"))
        return node("LayerNormalization", [x, g, b], f"{prefix}.out", axis=-1, epsilon=config.layer_norm_eps)

    # embeddings: word + position + token type 0 (a single sentence), then LayerNorm
    word = node(
        "Gather",
        [const("word_embeddings", _weight(weights, "embeddings.word_embeddings.weight")), "input_ids"],
        "emb.word",
    )
    shape = node("Shape", ["input_ids"], "emb.shape")
    length = node(
        "Slice", [shape, const("i1", np.array([1], np.int64)), const("i2", np.array([2], np.int64))], "emb.len"
    )
    zero = const("i0", np.array([0], np.int64))
    positions = const("position_embeddings", _weight(weights, "embeddings.position_embeddings.weight"))
    pos = node("Slice", [positions, zero, length, zero], "emb.pos")
    type0 = const("token_type0", _weight(weights, "embeddings.token_type_embeddings.weight")[0])
    summed = node("Add", [node("Add", [word, pos], "emb.word_pos"), type0], "emb.sum")
    x = layer_norm(summed, "embeddings.LayerNorm")

    # additive attention mask, [batch, 1, 1, tokens]: 0 for real tokens, -10000 for padding
    maskf = node("Cast", ["attention_mask"], "mask.float", to=TensorProto.FLOAT)
    inverted = node("Sub", [const("one", np.array(1.0, np.float32)), maskf], "mask.inverted")
    additive = node("Mul", [inverted, const("neg", np.array(-10000.0, np.float32))], "mask.additive")
    bias = node("Unsqueeze", [additive, const("axes12", np.array([1, 2], np.int64))], "mask.bias")

    split = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge = const("merge_heads", np.array([0, 0, h], np.int64))
    scale = const("scale", np.array(1.0 / math.sqrt(head_dim), np.float32))
    half = const("half", np.array(0.5, np.float32))
    sqrt2 = const("sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = "one"

    def heads_of(x: str, p: str, name: str, perm: list[int]) -> str:
        projected = linear(x, f"{p}.attention.self.{name}")
        split_out = node("Reshape", [projected, split], f"{p}.{name}.split")
        return node("Transpose", [split_out], f"{p}.{name}.heads", perm=perm)

    for i in range(config.layers):
        p = f"encoder.layer.{i}"

        q = heads_of(x, p, "query", [0, 2, 1, 3])  # [b, heads, t, d]
        k = heads_of(x, p, "key", [0, 2, 3, 1])  # [b, heads, d, t]
        v = heads_of(x, p, "value", [0, 2, 1, 3])
        scores = node("Mul", [node("MatMul", [q, k], f"{p}.qk"), scale], f"{p}.scaled")
        probs = node("Softmax", [node("Add", [scores, bias], f"{p}.masked")], f"{p}.probs", axis=-1)
        context = node("Transpose", [node("MatMul", [probs, v], f"{p}.ctx")], f"{p}.ctx_t", perm=[0, 2, 1, 3])
        merged = node("Reshape", [context, merge], f"{p}.ctx_merged")
        attended = linear(merged, f"{p}.attention.output.dense")
        x = layer_norm(node("Add", [attended, x], f"{p}.attn_residual"), f"{p}.attention.output.LayerNorm")

        inner = linear(x, f"{p}.intermediate.dense")
        # x * (1 + erf(x / sqrt 2)) * 0.5: the order transformers' exporters emit, which onnxruntime fuses
        erf = node("Erf", [node("Div", [inner, sqrt2], f"{p}.gelu.scaled")], f"{p}.gelu.erf")
        gelu = node(
            "Mul",
            [node("Mul", [inner, node("Add", [erf, one], f"{p}.gelu.erf1")], f"{p}.gelu.x_erf1"), half],
            f"{p}.gelu",
        )
        out = linear(gelu, f"{p}.output.dense")
        x = layer_norm(node("Add", [out, x], f"{p}.ffn_residual"), f"{p}.output.LayerNorm")

    # mean over real tokens (the count clamped at 1e-9), then x / max(|x|, 1e-12)
    weight = node("Unsqueeze", [maskf, const("axis_last", np.array([-1], np.int64))], "pool.weight")
    axis1 = const("axis1", np.array([1], np.int64))
    total = node("ReduceSum", [node("Mul", [x, weight], "pool.masked"), axis1], "pool.sum", keepdims=0)
    count = node("ReduceSum", [weight, axis1], "pool.count", keepdims=0)
    count = node("Max", [count, const("count_floor", np.array(1e-9, np.float32))], "pool.count_floor")
    mean = node("Div", [total, count], "pool.mean")
    norm = node("ReduceL2", [mean], "norm.l2", axes=[-1], keepdims=1)  # axes an attribute until opset 18
    norm = node("Max", [norm, const("norm_floor", np.array(1e-12, np.float32))], "norm.floor")
    node("Div", [mean, norm], "embeddings")

    graph = helper.make_graph(
        nodes,
        "sentence_encoder",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "tokens"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "tokens"]),
        ],
        [helper.make_tensor_value_info("embeddings", TensorProto.FLOAT, ["batch", h])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="memwright")
    model.ir_version = 8  # readable by every onnxruntime that runs opset 17
    return model
