"""Trained weights back to ONNX, checked by another evaluator: a small network
(convolutions, batch norm, pooling, a dense layer) is written with the `onnx`
package, trained by Spillway, exported (`spillway export`), and evaluated by
onnxruntime; its output must be what `spillway forward --checkpoint` computes
from the checkpoint. An export of a checkpoint of another model must be a
one-line error.

Usage: onnxruntime_test.py SPILLWAY_BINARY VENV_DIR

onnxruntime and onnx come from PyPI, into a virtual environment at VENV_DIR
made with Debian's interpreter (which refuses `pip install` outside one) and
kept there for later runs; they are a reference evaluator for this test only.
Exits with 77 (CTest's skip code here) and the reason when they cannot be
installed (no network, no python3-venv).
"""

import os
import subprocess
import sys
import tempfile

SKIP = 77
PACKAGES = ["onnxruntime", "onnx", "numpy"]


def in_venv(venv):
    """Re-runs this script inside the environment, making it first if needed."""
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.path.exists(python):
        made = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if made.returncode != 0:
            print(f"SKIPPED: cannot make a virtual environment (python3-venv): {made.stderr.strip()}")
            sys.exit(SKIP)
    check = subprocess.run([python, "-c", "import onnxruntime, onnx, numpy"], capture_output=True)
    if check.returncode != 0:
        installed = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *PACKAGES],
            capture_output=True, text=True)
        if installed.returncode != 0:
            lines = installed.stderr.strip().splitlines() or ["no output"]
            print(f"SKIPPED: pip could not install {', '.join(PACKAGES)}: {lines[-1]}")
            sys.exit(SKIP)
    os.execv(python, [python, *sys.argv])


def spillway(binary, *args):
    done = subprocess.run([binary, *args], capture_output=True, text=True)
    return done.returncode, done.stdout + done.stderr


def build_model(path, classes):
    """x[N,3,16,16] -> conv(8) -> bn -> relu -> conv(8, stride 2) -> relu ->
    global average pool -> flatten -> dense(classes): NCHW, as frameworks export."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)

    def init(name, shape, scale=0.3):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)

    initializers = [
        init("conv1.weight", (8, 3, 3, 3)), init("conv1.bias", (8,), 0.1),
        numpy_helper.from_array(np.ones(8, np.float32), "bn1.weight"),
        numpy_helper.from_array(np.zeros(8, np.float32), "bn1.bias"),
        init("bn1.running_mean", (8,), 0.1),
        numpy_helper.from_array(np.full(8, 1.5, np.float32), "bn1.running_var"),
        init("conv2.weight", (8, 8, 3, 3)), init("conv2.bias", (8,), 0.1),
        init("fc.weight", (classes, 8)), init("fc.bias", (classes,), 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv1.weight", "conv1.bias"], ["c1"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn1.weight", "bn1.bias",
                                                "bn1.running_mean", "bn1.running_var"], ["b1"]),
        helper.make_node("Relu", ["b1"], ["r1"]),
        helper.make_node("Conv", ["r1", "conv2.weight", "conv2.bias"], ["c2"],
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "small", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", classes])], initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, path)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    binary, venv = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    in_venv(venv)
    import numpy as np
    import onnx
    import onnxruntime
    from onnx import numpy_helper

    classes = 4
    with tempfile.TemporaryDirectory(prefix="onnxruntime_test.") as work:
        model = os.path.join(work, "small.onnx")
        build_model(model, classes)
        shape = ["--input-shape", "x=4x3x16x16"]
        code, out = spillway(binary, "train", "--onnx", model, "--loss", "cross-entropy", *shape,
                             "--steps", "5", "--lr", "0.1", "--save", f"{work}/run.ckpt")
        assert code == 0, out
        trained = os.path.join(work, "trained.onnx")
        code, out = spillway(binary, "export", "--onnx", model, "--loss", "cross-entropy", *shape,
                             "--checkpoint", f"{work}/run.ckpt", "--out", trained)
        assert code == 0, out
        before = {t.name: numpy_helper.to_array(t) for t in onnx.load(model).graph.initializer}
        after = {t.name: numpy_helper.to_array(t) for t in onnx.load(trained).graph.initializer}
        assert before.keys() == after.keys()
        changed = [n for n in before if not np.array_equal(before[n], after[n])]
        # Every trained tensor moved; the inference-mode batch norm's running
        # statistics are read, not updated.
        assert sorted(changed) == sorted(n for n in before if "running" not in n), changed

        x = np.random.default_rng(1).standard_normal((2, 3, 16, 16)).astype(np.float32)
        np.save(f"{work}/x.npy", x)
        code, out = spillway(binary, "forward", "--onnx", model, "--input-shape", "x=2x3x16x16",
                             "--checkpoint", f"{work}/run.ckpt", "--input", f"x={work}/x.npy",
                             "--output-dir", f"{work}/out")
        assert code == 0, out
        ours = np.load(f"{work}/out/logits.npy")
        session = onnxruntime.InferenceSession(trained, providers=["CPUExecutionProvider"])
        theirs = session.run(["logits"], {"x": x})[0]
        scale = float(np.abs(theirs).max())
        error = float(np.abs(ours - theirs).max())
        print(f"onnxruntime {onnxruntime.__version__}: max |error| {error:.3g} "
              f"over outputs of scale {scale:.3g}")
        assert error <= 1e-5 * max(scale, 1.0), (error, scale)

        # A checkpoint of another model is a one-line error, and writes nothing.
        other = os.path.join(work, "other.ckpt")
        code, out = spillway(binary, "train", "--model", "resnet18", "--image", "32", "--steps", "1",
                             "--save", other)
        assert code == 0, out
        code, out = spillway(binary, "export", "--onnx", model, "--loss", "cross-entropy", *shape,
                             "--checkpoint", other, "--out", f"{work}/wrong.onnx")
        assert code == 2 and "saved from another model" in out and out.count("\n") == 1, out
        assert not os.path.exists(f"{work}/wrong.onnx")
    print("ok: the exported model evaluates in onnxruntime as Spillway computes it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
