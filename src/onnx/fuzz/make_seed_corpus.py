#!/usr/bin/python3
"""Writes the ONNX import fuzzer's seed corpus: small models, one file each.

seed_*.onnx are valid models of ops the importer supports; the replay test
(corpus_replay_test.cc) requires each to import with the default options.
refused_*.onnx are valid models the importer must refuse with an error (ops
not supported yet, symbolic dimensions, opsets out of range): the fuzzer
mutates them towards the importer's error paths and towards new ops.

Run with Debian's python3-onnx:  /usr/bin/python3 make_seed_corpus.py
It rewrites the seed_ and refused_ files in corpus/ and leaves the others
(inputs the fuzzer found) alone. The output is deterministic.
"""

import pathlib

import numpy as np
from onnx import TensorProto, checker, helper, numpy_helper

CORPUS = pathlib.Path(__file__).resolve().parent / "corpus"
rng = np.random.RandomState(5)


def weights(name, *dims, raw=True):
    """A float initializer; raw_data or float_data, as exporters write both."""
    values = rng.uniform(-1, 1, dims).astype(np.float32)
    if raw:
        return numpy_helper.from_array(values, name)
    return helper.make_tensor(name, TensorProto.FLOAT, dims, values.flatten().tolist())


def ints(name, values):
    return numpy_helper.from_array(np.array(values, dtype=np.int64), name)


def image(name, *dims):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, list(dims))


def output(name, rank):
    """A graph output of known rank: the checker wants a shape, the importer infers it."""
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, [None] * rank)


def model(name, nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, name, inputs, outputs, list(initializers))
    m = helper.make_model(graph, producer_name="make_seed_corpus",
                          opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    checker.check_model(m)
    return m


N = helper.make_node


def seeds():
    """Models of supported ops, each importing with the default options."""
    yield "seed_conv_bn_relu_pool_linear", model(
        "stem",
        [N("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
         N("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["n"], epsilon=1e-3),
         N("Relu", ["n"], ["r"]),
         N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
         N("GlobalAveragePool", ["p"], ["gap"]),
         N("Flatten", ["gap"], ["f"]),
         N("Gemm", ["f", "fc_w", "fc_b"], ["y"], transB=1)],
        [image("x", 1, 3, 8, 8)], [output("y", 2)],
        [weights("w", 4, 3, 3, 3), weights("b", 4, raw=False), weights("g", 4),
         weights("beta", 4), weights("mean", 4), weights("var", 4), weights("fc_w", 5, 4),
         weights("fc_b", 5)])
    yield "seed_conv_grouped_strided_dilated_avgpool", model(
        "grouped",
        [N("Conv", ["x", "w"], ["c"], group=2, strides=[2, 2], dilations=[2, 2],
           pads=[2, 1, 2, 1]),
         N("AveragePool", ["c"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
           count_include_pad=1)],
        [image("x", 2, 4, 9, 9)], [output("y", 4)], [weights("w", 6, 2, 3, 3)], opset=11)
    yield "seed_conv_valid_pad_maxpool_strides", model(
        "valid",
        [N("Conv", ["x", "w", "b"], ["c"], auto_pad="VALID", kernel_shape=[1, 3]),
         N("MaxPool", ["c"], ["y"], kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 0])],
        [image("x", 1, 2, 5, 7)], [output("y", 4)], [weights("w", 3, 2, 1, 3), weights("b", 3)],
        opset=17)
    yield "seed_bn_training_opset14", model(
        "bn14",
        [N("BatchNormalization", ["x", "g", "beta", "mean", "var"], ["y", "rm", "rv"],
           training_mode=1, momentum=0.8)],
        [image("x", 2, 3, 4, 4)], [output("y", 4), output("rm", 1), output("rv", 1)],
        [weights("g", 3), weights("beta", 3), weights("mean", 3), weights("var", 3)], opset=14)
    yield "seed_bn_training_opset12_2d", model(
        "bn12",
        [N("BatchNormalization", ["x", "g", "beta", "mean", "var"], ["y", "rm", "rv", "sm", "sv"])],
        [image("x", 4, 3)], [output("y", 2), output("rm", 1), output("rv", 1)],
        [weights("g", 3), weights("beta", 3), weights("mean", 3), weights("var", 3)], opset=12)
    yield "seed_residual_add_mul_concat", model(
        "residual",
        [N("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         N("Relu", ["c"], ["r"]),
         N("Add", ["x", "r"], ["a"]),
         N("Constant", [], ["half"], value_float=0.5),
         N("Mul", ["a", "half"], ["m"]),
         N("Mul", ["m", "x"], ["mx"]),
         N("Concat", ["mx", "r"], ["y"], axis=1)],
        [image("x", 1, 2, 4, 4)], [output("y", 4)], [weights("w", 2, 2, 3, 3)])
    yield "seed_reshape_folded_shape_opset11", model(
        "fold11",
        [N("GlobalAveragePool", ["x"], ["gap"]),
         N("Shape", ["gap"], ["s"]),
         N("Constant", [], ["zero"], value=ints("zero_value", 0)),
         N("Gather", ["s", "zero"], ["n"], axis=0),
         N("Unsqueeze", ["n"], ["n1"], axes=[0]),
         N("Constant", [], ["rest"], value=ints("rest_value", [-1])),
         N("Concat", ["n1", "rest"], ["target"], axis=0),
         N("Cast", ["target"], ["target64"], to=TensorProto.INT64),
         N("Reshape", ["gap", "target64"], ["y"])],
        [image("x", 3, 5, 4, 4)], [output("y", 2)], opset=11)
    yield "seed_reshape_folded_shape_opset15", model(
        "fold15",
        [N("GlobalAveragePool", ["x"], ["gap"]),
         N("Shape", ["gap"], ["s"], start=0, end=1),
         N("Constant", [], ["axes"], value_ints=[0]),
         N("Gather", ["s", "idx"], ["n"]),
         N("Unsqueeze", ["n", "axes"], ["n1"]),
         N("Concat", ["n1", "rest"], ["target"], axis=0),
         N("Reshape", ["gap", "target"], ["y"])],
        [image("x", 2, 6, 3, 3)], [output("y", 2)],
        [ints("idx", 0), ints("rest", [6])], opset=15)
    yield "seed_reshape_constant_shape", model(
        "reshape",
        [N("Constant", [], ["shape"], value=ints("shape_value", [0, 2, 3])),
         N("Reshape", ["x", "shape"], ["y"])],
        [image("x", 4, 6)], [output("y", 3)])
    yield "seed_matmul_add_softmax", model(
        "softmax13",
        [N("MatMul", ["x", "w"], ["m"]),
         N("Add", ["m", "b"], ["a"]),
         N("Softmax", ["a"], ["y"], axis=-1)],
        [image("x", 2, 6)], [output("y", 2)], [weights("w", 6, 4), weights("b", 4)])
    yield "seed_gemm_transposed_scaled_logsoftmax_opset11", model(
        "gemm11",
        [N("Gemm", ["x", "w", "c"], ["g"], transA=1, alpha=0.5),
         N("LogSoftmax", ["g"], ["y"], axis=1)],
        [image("x", 6, 2)], [output("y", 2)], [weights("w", 6, 3), weights("c", 2, 3)],
        opset=11)
    yield "seed_logsoftmax_nchw_channels", model(
        "channels",
        [N("LogSoftmax", ["x"], ["y"], axis=1)],
        [image("x", 1, 3, 2, 2)], [output("y", 4)])
    yield "seed_dropout_opset11_training", model(
        "dropout11",
        [N("Dropout", ["x"], ["d"], ratio=0.25),
         N("Relu", ["d"], ["y"])],
        [image("x", 2, 8)], [output("y", 2)], opset=11)
    yield "seed_dropout_opset13_inputs", model(
        "dropout13",
        [N("Dropout", ["x", "ratio", "training"], ["d"]),
         N("Dropout", ["d"], ["e"]),
         N("Identity", ["e"], ["y"])],
        [image("x", 1, 4, 3, 3)], [output("y", 4)],
        [numpy_helper.from_array(np.array(0.1, dtype=np.float32), "ratio"),
         numpy_helper.from_array(np.array(True), "training")])
    yield "seed_initializers_listed_as_inputs", model(
        "ir3",
        [N("Gemm", ["x", "w", "b"], ["y"], transB=1)],
        [image("x", 3, 4), image("w", 2, 4), image("b", 2)], [output("y", 2)],
        [weights("w", 2, 4, raw=False), weights("b", 2, raw=False)], opset=11)
    yield "seed_int64_input_cast_identity", model(
        "cast",
        [N("Cast", ["x"], ["c"], to=TensorProto.FLOAT),
         N("Identity", ["c"], ["y"]),
         N("Identity", ["ids"], ["ids_out"])],
        [image("x", 2, 3), helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
        [output("y", 2), helper.make_tensor_value_info("ids_out", TensorProto.INT64, [None])])
    yield "seed_constant_tensor_as_data", model(
        "const",
        [N("Constant", [], ["k"], value=weights("k_value", 1, 3, 1, 1)),
         N("Constant", [], ["v"], value_floats=[1.0, 2.0, 3.0]),
         N("Add", ["x", "x"], ["a"]),
         N("Mul", ["v", "v"], ["y"]),
         N("Concat", ["a", "a"], ["z"], axis=-1)],
        [image("x", 1, 3, 2, 2)], [output("y", 1), output("z", 4)])


def refused():
    """Valid models the importer refuses: its error paths and ops it may take later."""
    x = [image("x", 1, 4, 6, 6)]
    yield "refused_activations", model(
        "activations",
        [N("Sigmoid", ["x"], ["s"]), N("Tanh", ["s"], ["t"]),
         N("LeakyRelu", ["t"], ["l"], alpha=0.1), N("Erf", ["l"], ["y"])],
        x, [output("y", 4)])
    yield "refused_sub_div_transpose", model(
        "arith",
        [N("Sub", ["x", "x"], ["s"]), N("Div", ["s", "x"], ["d"]),
         N("Transpose", ["d"], ["y"], perm=[0, 2, 3, 1])],
        x, [output("y", 4)])
    yield "refused_split_slice_concat", model(
        "split",
        [N("Split", ["x", "sizes"], ["a", "b"], axis=1),
         N("Slice", ["a", "starts", "ends", "axes"], ["s"]),
         N("Concat", ["s", "b"], ["y"], axis=1)],
        x, [output("y", 4)],
        [ints("sizes", [2, 2]), ints("starts", [1]), ints("ends", [5]), ints("axes", [2])])
    yield "refused_resize_upsample", model(
        "resize",
        [N("Resize", ["x", "", "scales"], ["y"], mode="linear")],
        x, [output("y", 4)],
        [numpy_helper.from_array(np.array([1, 1, 2, 2], dtype=np.float32), "scales")])
    yield "refused_layernorm_opset17", model(
        "layernorm",
        [N("LayerNormalization", ["x", "g", "b"], ["y"], axis=-1, epsilon=1e-5)],
        [image("x", 2, 5, 8)], [output("y", 3)], [weights("g", 8), weights("b", 8)], opset=17)
    yield "refused_squeeze_constant_of_shape", model(
        "squeeze",
        [N("Shape", ["x"], ["s"]), N("ConstantOfShape", ["s"], ["c"]),
         N("Squeeze", ["c", "axes"], ["y"])],
        [image("x", 1, 3, 1, 1)], [output("y", 2)], [ints("axes", [2, 3])])
    yield "refused_broadcast_over_4d", model(
        "broadcast",
        [N("Add", ["x", "bias"], ["y"])],
        x, [output("y", 4)], [weights("bias", 4, 1, 1)])
    yield "refused_symbolic_batch", model(
        "symbolic",
        [N("Relu", ["x"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 4, 4])],
        [output("y", 4)])
    yield "refused_opset10", model(
        "old", [N("Relu", ["x"], ["y"])], x, [output("y", 4)], opset=10)
    yield "refused_opset18", model(
        "new", [N("Relu", ["x"], ["y"])], x, [output("y", 4)], opset=18)
    yield "refused_ceil_mode_pool", model(
        "ceil", [N("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], ceil_mode=1)],
        x, [output("y", 4)])


def main():
    CORPUS.mkdir(exist_ok=True)
    for old in list(CORPUS.glob("seed_*")) + list(CORPUS.glob("refused_*")):
        old.unlink()
    for name, m in list(seeds()) + list(refused()):
        (CORPUS / f"{name}.onnx").write_bytes(m.SerializeToString())


if __name__ == "__main__":
    main()
