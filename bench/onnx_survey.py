"""Compatibility survey: exports torchvision models (random weights, opset 17,
training-mode export, dropout p=0, batch 2) and runs `spillway forward` on
each, comparing with PyTorch's train-mode output as
src/onnx/torchvision_test.py does.

Usage: /usr/bin/python3 bench/onnx_survey.py build/release/src/cli/spillway
           [--models a,b] [--workdir DIR] [--out DIR]
Each model is exported in a child process (killed after EXPORT_LIMIT s); the
forward pass is killed after FORWARD_LIMIT s. Writes table.md and results.json
into --out (default: the current directory). It takes a few minutes and a few
GB of disk in --workdir; it is run by hand, not by CI. docs/onnx.md has the
last table.
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys
import time
import warnings

BATCH = 2
CNN_IMAGE = 64
VIT_IMAGE = 224
EXPORT_LIMIT = 300
FORWARD_LIMIT = 300

MODELS = [
    "resnet18", "resnet50", "vgg11_bn", "mobilenet_v2", "mobilenet_v3_small",
    "efficientnet_b0", "densenet121", "regnet_y_400mf", "convnext_tiny", "vit_b_16",
    "fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large",
]
SEGMENTATION = {"fcn_resnet50", "deeplabv3_mobilenet_v3_large", "lraspp_mobilenet_v3_large"}


def build(name):
    import torch
    import torchvision

    class OutTensor(torch.nn.Module):
        """Segmentation models return {'out': logits, ...}; export wants a tensor."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)["out"]

    if name in SEGMENTATION:
        constructor = getattr(torchvision.models.segmentation, name)
        kwargs = dict(weights=None, weights_backbone=None)
        if name != "lraspp_mobilenet_v3_large":
            kwargs["aux_loss"] = False
        return OutTensor(constructor(**kwargs))
    return getattr(torchvision.models, name)(weights=None)


def export_one(name, workdir):
    """Child process: export, compute PyTorch's output, save everything."""
    import numpy as np
    import torch
    import torchvision
    torch.set_num_threads(2)
    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    model = build(name)
    for module in model.modules():
        # Dropout p=0 (the node is still exported) keeps outputs comparable;
        # StochasticDepth's bernoulli_ cannot be exported in training mode at
        # all, and with p=0 torchvision skips it (the identity).
        if isinstance(module, (torch.nn.Dropout, torchvision.ops.StochasticDepth)):
            module.p = 0.0
    # Parameters that torchvision initializes to one constant (batch and
    # layer norm scales 1 and biases 0, ViT's zero classifier head, ConvNeXt's
    # layer_scale 1e-6) would make the comparison blind: a zero head gives
    # all-zero logits on both sides, a 1e-6 layer scale hides every block.
    # Give them spread so that each one shows in the output.
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for p in model.parameters():
            if p.numel() > 0 and bool((p == p.flatten()[0]).all()):
                p.add_(torch.randn(p.shape, generator=generator) * 0.1)
    model.train()
    # VGG's AdaptiveAvgPool2d((7, 7)) exports only when 7 divides the
    # feature map (PyTorch's limit), so VGG needs 224 as ViT does.
    image = VIT_IMAGE if name.startswith(("vit", "vgg")) else CNN_IMAGE
    x = torch.rand(BATCH, 3, image, image, generator=torch.Generator().manual_seed(1)) * 2 - 1
    path = os.path.join(workdir, f"{name}.onnx")
    meta = {"image": image, "parameters": sum(p.numel() for p in model.parameters())}
    start = time.monotonic()
    try:
        torch.onnx.export(
            model, x, path, input_names=["input"], output_names=["output"],
            opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False)
        meta["exported"] = True
    except Exception as error:  # recorded, not raised
        meta["exported"] = False
        meta["export_error"] = f"{type(error).__name__}: {error}"[:2000]
    meta["export_s"] = time.monotonic() - start
    if meta["exported"]:
        meta["onnx_bytes"] = os.path.getsize(path)
        import onnx
        ops = collections.Counter(n.op_type for n in onnx.load(path).graph.node)
        meta["onnx_ops"] = dict(sorted(ops.items()))
        # Train-mode forward on the same x (batch statistics, dropout p=0).
        start = time.monotonic()
        with torch.no_grad():
            expected = model(x).numpy()
        meta["torch_forward_s"] = time.monotonic() - start
        np.save(os.path.join(workdir, f"{name}.expected.npy"), expected)
        np.save(os.path.join(workdir, f"{name}.input.npy"), x.numpy())
    with open(os.path.join(workdir, f"{name}.meta.json"), "w") as f:
        json.dump(meta, f)


NODE_LINE = re.compile(r"^\s*node '(?P<name>[^']*)' \((?P<op>[^,]+), opset \d+\): (?P<reason>.*)$")


def summarize_unsupported(text):
    """Groups 'node NAME (Op, opset N): reason' lines by (op, reason)."""
    groups = collections.Counter()
    examples = {}
    for line in text.splitlines():
        m = NODE_LINE.match(line)
        if m:
            key = (m["op"], m["reason"])
            groups[key] += 1
            examples.setdefault(key, m["name"])
    return [{"op": op, "reason": reason, "count": count, "example": examples[(op, reason)]}
            for (op, reason), count in groups.most_common()]


def survey_one(name, spillway, workdir, script):
    import numpy as np
    row = {"model": name}
    start = time.monotonic()
    try:
        child = subprocess.run([sys.executable, script, "--export-one", name, "--workdir", workdir],
                               capture_output=True, text=True, timeout=EXPORT_LIMIT)
    except subprocess.TimeoutExpired:
        row.update(exported=False, note=f"skipped: export exceeded {EXPORT_LIMIT} s")
        return row
    meta_path = os.path.join(workdir, f"{name}.meta.json")
    if child.returncode != 0 or not os.path.exists(meta_path):
        row.update(exported=False, note=f"export child exited {child.returncode}: "
                   f"{(child.stdout + child.stderr)[-1500:]}")
        return row
    with open(meta_path) as f:
        meta = json.load(f)
    row.update(meta)
    if not meta["exported"]:
        return row
    onnx_path = os.path.join(workdir, f"{name}.onnx")
    out_dir = os.path.join(workdir, f"{name}.out")
    command = [spillway, "forward", "--onnx", onnx_path,
               "--input", f"input={os.path.join(workdir, name + '.input.npy')}",
               "--output-dir", out_dir, "--json"]
    row["command"] = " ".join(command)
    start = time.monotonic()
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=FORWARD_LIMIT)
    except subprocess.TimeoutExpired:
        row.update(imported=None, note=f"spillway forward exceeded {FORWARD_LIMIT} s")
        return row
    row["spillway_wall_s"] = time.monotonic() - start
    row["returncode"] = result.returncode
    if result.returncode != 0:
        text = result.stdout + result.stderr
        row["imported"] = False
        row["error"] = text.strip()
        row["unsupported"] = summarize_unsupported(text)
        # A signal (negative code) or an unexpected exit is a crash, not a refusal.
        row["crash"] = result.returncode < 0 or result.returncode > 2
        return row
    row["imported"] = True
    forward = json.loads(result.stdout)
    row["spillway_parameters"] = forward["parameters"]
    row["spillway_forward_s"] = forward.get("seconds")
    expected = np.load(os.path.join(workdir, f"{name}.expected.npy"))
    got = np.load(forward["outputs"][0]["file"])
    row["shape"] = list(got.shape)
    row["torch_shape"] = list(expected.shape)
    if got.shape != expected.shape:
        row["note"] = "output shape differs"
        return row
    error = np.abs(got.astype(np.float64) - expected.astype(np.float64))
    scale = float(np.abs(expected).max())
    row["max_abs_error"] = float(error.max())
    row["max_abs_output"] = scale
    row["relative_error"] = float(error.max()) / scale if scale else float("nan")
    row["nan_in_output"] = bool(np.isnan(got).any())
    return row


def fmt_table(rows):
    lines = ["| model | image | exported | export s | imports | params (spillway / torch) | "
             "rel. error | spillway forward s | notes |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        exported = "yes" if r.get("exported") else "no"
        imported = {True: "yes", False: "no", None: "timeout"}.get(r.get("imported"), "-")
        if r.get("imported") is False and r.get("crash"):
            imported = f"CRASH (rc {r['returncode']})"
        params = "-"
        if "spillway_parameters" in r:
            mark = "=" if r["spillway_parameters"] == r["parameters"] else "MISMATCH"
            params = f"{r['spillway_parameters']:,} / {r['parameters']:,} ({mark})"
        elif "parameters" in r:
            params = f"- / {r['parameters']:,}"
        rel = f"{r['relative_error']:.2e}" if "relative_error" in r else "-"
        fwd = f"{r['spillway_forward_s']:.3f}" if r.get("spillway_forward_s") is not None else "-"
        notes = []
        if r.get("note"):
            notes.append(r["note"].replace("\n", " ")[:200])
        for u in r.get("unsupported", []):
            notes.append(f"{u['count']}x {u['op']}: {u['reason']}")
        if r.get("imported") is False and not r.get("unsupported"):
            notes.append(r.get("error", "").replace("\n", " ")[:300])
        if r.get("export_error"):
            notes.append(r["export_error"].replace("\n", " ")[:300])
        lines.append(f"| {r['model']} | {r.get('image', '-')} | {exported} | "
                     f"{r.get('export_s', 0):.1f} | {imported} | {params} | {rel} | {fwd} | "
                     f"{'; '.join(notes).replace('|', '/')} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("spillway", nargs="?")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--workdir", default="onnx_survey_work")
    parser.add_argument("--out", default=".")
    parser.add_argument("--export-one")
    args = parser.parse_args()
    os.makedirs(args.workdir, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    if args.export_one:
        export_one(args.export_one, args.workdir)
        return 0
    rows = []
    for name in args.models.split(","):
        start = time.monotonic()
        row = survey_one(name, os.path.abspath(args.spillway), args.workdir,
                         os.path.abspath(__file__))
        row["total_s"] = time.monotonic() - start
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if k not in ("onnx_ops", "error")}),
              flush=True)
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(rows, f, indent=1)
    table = fmt_table(rows)
    print(table)
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
