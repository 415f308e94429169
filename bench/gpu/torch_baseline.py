#!/usr/bin/env python3
"""PyTorch's own answers to a memory cap, for the device check (bench/gpu/check.sh).

Trains torchvision's ResNet-50 (or ResNet-18) on synthetic data for a few
steps (SGD with momentum 0.9, lr 0.01, cross-entropy, as `spillway train`
does) with one of PyTorch's memory options, and prints one JSON object:

  plain        autograd keeps every activation on the device
  checkpoint   torch.utils.checkpoint over the stages (stem, layer1..4):
               each stage's activations are recomputed in the backward pass
  save_on_cpu  torch.autograd.graph.save_on_cpu(pin_memory=True): every saved
               activation goes to pinned host memory and comes back
  both         the two together

On CUDA, --memory-cap limits PyTorch's caching allocator with
torch.cuda.set_per_process_memory_fraction; it does not count the CUDA
context or the libraries' handles, which `spillway train` does not have in
its arena either (check.sh reports the driver's figure for both). A run
that runs out of memory is reported as such ("oom": true), not as an error.
On the CPU (the check's dry run) there is no cap: the figures only show that
the script works.

  torch_baseline.py --mode plain|checkpoint|save_on_cpu|both [--model resnet50]
                    [--image 224] [--batch 8] [--classes 1000] [--steps 4]
                    [--device cuda|cpu] [--memory-cap BYTES] [--threads 2]
"""
import argparse
import json
import statistics
import sys
import time


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", required=True,
                        choices=["plain", "checkpoint", "save_on_cpu", "both"])
    parser.add_argument("--model", default="resnet50", choices=["resnet18", "resnet50"])
    parser.add_argument("--image", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--classes", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=4, help="steps, the first not counted")
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--memory-cap", type=int, default=0,
                        help="bytes PyTorch's allocator may use on the device (0: no cap)")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (the dry run)")
    options = parser.parse_args()
    if options.steps < 2:
        sys.exit("torch_baseline.py: --steps must be at least 2 (the first is not counted)")

    try:
        import torch
        import torch.utils.checkpoint
        import torchvision
    except ImportError as error:
        print(json.dumps({"mode": options.mode, "skipped": f"no PyTorch here: {error}"}))
        return

    torch.manual_seed(0)
    torch.set_num_threads(options.threads)
    device = torch.device(options.device)
    result = {"mode": options.mode, "device": options.device, "torch": torch.__version__,
              "model": options.model, "image": options.image, "batch": options.batch,
              "memory_cap_bytes": options.memory_cap or None, "oom": False}
    if options.device == "cuda":
        if not torch.cuda.is_available():
            print(json.dumps({**result, "skipped": "no CUDA device for PyTorch"}))
            return
        if options.memory_cap:
            total = torch.cuda.get_device_properties(device).total_memory
            torch.cuda.set_per_process_memory_fraction(min(1.0, options.memory_cap / total), device)
        result["gpu"] = torch.cuda.get_device_name(device)

    model = getattr(torchvision.models, options.model)(num_classes=options.classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    stem = torch.nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
    stages = [stem, model.layer1, model.layer2, model.layer3, model.layer4]
    checkpointed = options.mode in ("checkpoint", "both")
    on_cpu = options.mode in ("save_on_cpu", "both")

    def forward(images):
        x = images
        for stage in stages:
            if checkpointed:
                x = torch.utils.checkpoint.checkpoint(stage, x, use_reentrant=False)
            else:
                x = stage(x)
        return model.fc(torch.flatten(model.avgpool(x), 1))

    generator = torch.Generator().manual_seed(0)
    images = torch.randn(options.batch, 3, options.image, options.image, generator=generator)
    labels = torch.randint(0, options.classes, (options.batch,), generator=generator)
    images, labels = images.to(device), labels.to(device)

    def synchronize():
        if options.device == "cuda":
            torch.cuda.synchronize(device)

    seconds = []
    try:
        for _ in range(options.steps):
            synchronize()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            if on_cpu:
                with torch.autograd.graph.save_on_cpu(pin_memory=options.device == "cuda"):
                    loss = torch.nn.functional.cross_entropy(forward(images), labels)
            else:
                loss = torch.nn.functional.cross_entropy(forward(images), labels)
            loss.backward()
            optimizer.step()
            synchronize()
            seconds.append(time.perf_counter() - start)
    except torch.cuda.OutOfMemoryError as error:
        result["oom"] = True
        result["error"] = str(error).splitlines()[0]
    if seconds[1:]:
        result["step_s"] = statistics.median(seconds[1:])
        result["loss"] = float(loss)
    if options.device == "cuda":
        result["max_allocated_bytes"] = torch.cuda.max_memory_allocated(device)
        result["max_reserved_bytes"] = torch.cuda.max_memory_reserved(device)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
