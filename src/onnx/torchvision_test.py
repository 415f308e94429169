"""Exports torchvision's ResNet-50 and DeepLabV3 with PyTorch and checks that
Spillway imports them with PyTorch's parameter count and computes PyTorch's
forward output. Then the round trip: ResNet-18 exported, trained by Spillway,
exported back (`spillway export`) and loaded into PyTorch by name computes what
Spillway computes with the trained weights.

Usage: torchvision_test.py SPILLWAY_BINARY [--models resnet50,deeplabv3] [--no-round-trip]

Run with Debian's python3 (python3-torch, python3-torchvision, python3-onnx).
Exits with 77 (CTest's skip code here) and the reason when they are missing.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

SKIP = 77

try:
    import numpy as np
    import onnx
    import onnx.numpy_helper
    import torch
    import torchvision
except ImportError as error:
    print(f"SKIPPED: {error.name} is not installed: install python3-torch, "
          "python3-torchvision and python3-onnx to run this test")
    sys.exit(SKIP)

BATCH = 2  # training-mode batch norm needs more than one value per channel
IMAGE = 64


class OutTensor(torch.nn.Module):
    """DeepLabV3 returns {'out': logits}; ONNX export wants a tensor."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(x)["out"]


def build(name):
    if name == "resnet50":
        return torchvision.models.resnet50(weights=None)
    if name == "deeplabv3":
        return OutTensor(torchvision.models.segmentation.deeplabv3_resnet50(
            weights=None, weights_backbone=None, aux_loss=False))
    raise ValueError(name)


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited with {result.returncode}:\n"
                           f"{result.stdout}{result.stderr}")
    return result.stdout


def check(name, spillway, workdir):
    torch.manual_seed(0)
    model = build(name)
    # Training mode keeps batch norm a training-mode node (normalizing with
    # the batch's statistics), which Spillway imports as such. Dropout (in
    # DeepLabV3's head) would then draw a mask from PyTorch's generator, which
    # Spillway's dropout cannot reproduce: p = 0 makes both the identity, so
    # the outputs are comparable and the node is still exported.
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
    x = torch.rand(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(1)) * 2 - 1

    path = os.path.join(workdir, f"{name}.onnx")
    start = time.monotonic()
    torch.onnx.export(
        model, x, path, input_names=["input"], output_names=["output"],
        opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False)
    export_s = time.monotonic() - start
    with torch.no_grad():
        expected = model(x).numpy()
    parameters = sum(p.numel() for p in model.parameters())

    input_path = os.path.join(workdir, "input.npy")
    np.save(input_path, x.numpy())
    output_dir = os.path.join(workdir, name)
    forward = json.loads(run([spillway, "forward", "--onnx", path, "--input",
                              f"input={input_path}", "--output-dir", output_dir, "--json"]))
    imported = forward["parameters"]

    output = forward["outputs"][0]
    got = np.load(output["file"])
    if got.shape != expected.shape:
        raise AssertionError(f"{name}: output shape {got.shape}, PyTorch's {expected.shape}")
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    scale = np.abs(expected).max()
    max_error = error.max()
    # fp32 tolerance: both sides sum thousands of products per output in a
    # different order (oneDNN's blocked convolutions vs PyTorch's), and each
    # of ResNet-50's ~50 batch norms renormalizes, so rounding errors of a few
    # ulp per layer accumulate to ~1e-5..1e-4 of the output's scale. An import
    # mistake (a wrong layout, a missed layer, wrong attributes) gives errors
    # of the order of the scale itself.
    tolerance = 1e-3 * scale
    print(f"{name}: parameters {imported} (PyTorch {parameters}); output "
          f"{list(got.shape)}, max |error| {max_error:.3g}, relative to the output's "
          f"largest magnitude {scale:.3g}: {max_error / scale:.3g} (tolerance 1e-3); "
          f"export {export_s:.1f} s, Spillway forward {forward['seconds']:.1f} s")
    if imported != parameters:
        raise AssertionError(f"{name}: Spillway imports {imported} parameters, "
                             f"PyTorch has {parameters}")
    if not max_error <= tolerance:
        raise AssertionError(f"{name}: max |error| {max_error:.3g} > tolerance {tolerance:.3g}")


def round_trip(spillway, workdir):
    torch.manual_seed(0)
    model = torchvision.models.resnet18(num_classes=10).train()
    path = os.path.join(workdir, "resnet18.onnx")
    # Training mode without constant folding keeps the modules' parameter names.
    torch.onnx.export(model, torch.randn(1, 3, IMAGE, IMAGE), path, input_names=["input"],
                      output_names=["logits"], dynamic_axes={"input": {0: "batch"}},
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    shape = ["--loss", "cross-entropy", "--input-shape", f"input={BATCH}x3x{IMAGE}x{IMAGE}"]
    checkpoint = os.path.join(workdir, "run.ckpt")
    trained_path = os.path.join(workdir, "trained.onnx")
    run([spillway, "train", "--onnx", path, *shape, "--steps", "3", "--lr", "0.1",
         "--budget", "1GiB", "--max-evaluations", "20", "--save", checkpoint])
    run([spillway, "export", "--onnx", path, *shape, "--checkpoint", checkpoint,
         "--out", trained_path])

    trained = {t.name: torch.from_numpy(onnx.numpy_helper.to_array(t).copy())
               for t in onnx.load(trained_path).graph.initializer}
    state = model.state_dict()
    # num_batches_tracked is PyTorch's own counter, which the export drops.
    missing = [k for k in state if k not in trained and not k.endswith("num_batches_tracked")]
    if missing:
        raise AssertionError(f"round trip: the export lacks {missing[:5]}")
    changed = [k for k in trained if k in state and not torch.equal(trained[k], state[k])]
    if len(changed) < len(trained) // 2:
        raise AssertionError(f"round trip: training changed only {len(changed)} tensors")
    model.load_state_dict({k: trained.get(k, v) for k, v in state.items()})

    x = torch.rand(BATCH, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(2)) * 2 - 1
    with torch.no_grad():
        expected = model(x).numpy()
    input_path = os.path.join(workdir, "round_trip_input.npy")
    np.save(input_path, x.numpy())
    output_dir = os.path.join(workdir, "round_trip")
    forward = json.loads(run([spillway, "forward", "--onnx", trained_path, "--batch", str(BATCH),
                              "--input", f"input={input_path}", "--output-dir", output_dir,
                              "--json"]))
    got = np.load(forward["outputs"][0]["file"])
    scale = np.abs(expected).max()
    max_error = np.abs(got.astype(np.float64) - expected.astype(np.float64)).max()
    print(f"round trip: {len(changed)} of {len(trained)} tensors trained and loaded back into "
          f"PyTorch by name; its output against Spillway's on the trained file: max |error| "
          f"{max_error:.3g}, relative {max_error / scale:.3g} (tolerance 1e-3)")
    if not max_error <= 1e-3 * scale:
        raise AssertionError(f"round trip: max |error| {max_error:.3g} > {1e-3 * scale:.3g}")


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spillway")
    parser.add_argument("--models", default="resnet50,deeplabv3")
    parser.add_argument("--no-round-trip", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(2)
    # torch.onnx warns about every num_batches_tracked counter it drops.
    warnings.filterwarnings("ignore", category=UserWarning)
    failures = []
    with tempfile.TemporaryDirectory() as workdir:
        for name in args.models.split(","):
            try:
                check(name, args.spillway, workdir)
            except Exception as error:  # report every model, then fail
                print(f"FAILED {name}: {error}")
                failures.append(name)
        if not args.no_round_trip:
            try:
                round_trip(args.spillway, workdir)
            except Exception as error:
                print(f"FAILED round trip: {error}")
                failures.append("round trip")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
