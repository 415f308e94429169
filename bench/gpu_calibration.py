#!/usr/bin/python3
"""Fits the GPU presets' efficiency per math mode to published training
throughput, and checks each fit on another published workload.

For each (preset, math mode) with a published ResNet-50 training throughput,
the efficiency of that mode (`compute_efficiency` for fp32, `tf32_efficiency`,
`fp16_efficiency`) is bisected until the simulator's `none` step for ResNet-50
at the published batch size gives the published images per second; the
check rows then predict another published workload with the fitted value.
Prints the table docs/hardware.md shows. The figures and their sources are
in FIGURES below and in docs/hardware.md.

Usage: PYTHONPATH=build/ci/python bench/gpu_calibration.py
"""

import json
import os
import tempfile

import spillway

# (preset, math mode, role, model, batch, published img/s, source)
# Sources (docs/hardware.md cites each in full):
#   DLE-PT: NVIDIA DeepLearningExamples, PyTorch ConvNets READMEs (NGC 21.03), 1 GPU, real data
#   Lambda-PT: lambdal/deeplearning-benchmark PyTorch results (DLE scripts), synthetic data
#   Lambda-TF: lambda-tensorflow-benchmark logs (tf_cnn_benchmarks), synthetic data
#   pycls: facebookresearch/pycls MODEL_ZOO.md, 100-epoch ImageNet training hours on 8 V100s,
#     batch 32 per GPU, divided out to img/s per GPU (our arithmetic; includes evaluation)
FIGURES = [
    ("v100-16g-nvlink2", "fp32", "fit", "resnet50", 112, 367, "DLE-PT, V100 SXM2 16 GB"),
    ("v100-16g-nvlink2", "fp32", "check", "resnet50", 32, 365, "pycls, V100 16 GB (ours: h to img/s)"),
    ("v100-16g-nvlink2", "fp32", "check", "resnet101", 32, 218, "pycls, V100 16 GB (ours: h to img/s)"),
    ("v100-16g-nvlink2", "fp32", "check", "resnet152", 32, 152, "pycls, V100 16 GB (ours: h to img/s)"),
    ("v100-16g-nvlink2", "fp32", "check", "resnet152", 96, 167, "Lambda-TF, V100 SXM3 32 GB"),
    ("v100-16g-nvlink2", "fp16", "fit", "resnet50", 256, 1200, "DLE-PT AMP, V100 SXM2 16 GB"),
    ("v100-16g-nvlink2", "fp16", "check", "resnet152", 192, 518, "Lambda-TF fp16, V100 SXM3 32 GB"),
    ("a100-40g-pcie4", "tf32", "fit", "resnet50", 224, 953, "Lambda-TF, A100 PCIe 40 GB"),
    ("a100-40g-pcie4", "tf32", "check", "resnet152", 112, 390, "Lambda-TF, A100 PCIe 40 GB"),
    ("a100-40g-pcie4", "tf32", "check", "resnet50", 256, 938, "DLE-PT, A100 SXM4 80 GB"),
    ("a100-40g-pcie4", "fp16", "fit", "resnet50", 448, 2075, "Lambda-TF fp16, A100 PCIe 40 GB"),
    ("a100-40g-pcie4", "fp16", "check", "resnet152", 200, 886, "Lambda-TF fp16, A100 PCIe 40 GB"),
    ("a100-40g-pcie4", "fp16", "check", "resnet50", 256, 2470, "DLE-PT AMP, A100 SXM4 80 GB"),
    ("h100-80g-pcie5", "tf32", "fit", "resnet50", 640, 1197, "Lambda-PT, H100 PCIe 80 GB"),
    ("h100-80g-pcie5", "fp16", "fit", "resnet50", 1280, 1866, "Lambda-PT AMP, H100 PCIe 80 GB"),
    ("h200-141g-pcie5", "tf32", "fit", "resnet50", 1280, 2259, "Lambda-PT, H200 SXM 141 GB"),
    ("h200-141g-pcie5", "fp16", "fit", "resnet50", 2560, 3080, "Lambda-PT AMP, H200 SXM 141 GB"),
]
FIELD = {"fp32": "compute_efficiency", "tf32": "tf32_efficiency", "fp16": "fp16_efficiency"}


def throughput(profile, mode, model, batch, work):
    path = os.path.join(work, "profile.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(profile, f)
    result = spillway.plan(spillway.Workload(model=model, batch=batch), hardware=path,
                           math_mode=mode, policy="none", budget="100000GiB", progress=False)
    return batch / result.step_time_s


def with_efficiency(preset, mode, value):
    profile = spillway.hardware(preset)
    profile[FIELD[mode]] = value
    return profile


def fit(preset, mode, model, batch, published, work):
    """The efficiency giving the published throughput, or the bound it hits."""
    low, high = 0.05, 1.0
    if throughput(with_efficiency(preset, mode, high), mode, model, batch, work) < published:
        return high, "at most 1: the prediction stays below the figure"
    if throughput(with_efficiency(preset, mode, low), mode, model, batch, work) > published:
        return low, "at least 0.05: the prediction stays above the figure"
    for _ in range(30):
        middle = (low + high) / 2
        if throughput(with_efficiency(preset, mode, middle), mode, model, batch, work) < published:
            low = middle
        else:
            high = middle
    return round((low + high) / 2, 3), ""


def main():
    fitted = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu_calibration.") as work:
        for preset, mode, role, model, batch, published, source in FIGURES:
            current = spillway.hardware(preset)
            before = throughput(current, mode, model, batch, work)
            if role == "fit":
                value, note = fit(preset, mode, model, batch, published, work)
                fitted[(preset, mode)] = value
            else:
                value, note = fitted[(preset, mode)], ""
            after = throughput(with_efficiency(preset, mode, value), mode, model, batch, work)
            rows.append((preset, mode, role, model, batch, published, source, before, value,
                         after, note))
    print("| preset | mode | role | workload | published (img/s) | source | preset's "
          "prediction | efficiency | prediction with it | error |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (preset, mode, role, model, batch, published, source, before, value, after,
         note) in rows:
        print(f"| {preset} | {mode} | {role} | {model}, batch {batch} | {published} | {source} | "
              f"{before:.0f} ({before / published - 1:+.0%}) | {value}{' (' + note + ')' if note else ''} | "
              f"{after:.0f} | {after / published - 1:+.1%} |")


if __name__ == "__main__":
    main()
