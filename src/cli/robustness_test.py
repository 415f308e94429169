#!/usr/bin/env python3
"""The command line's promise, checked on a few hundred bad inputs.

For every case below the real `spillway` binary must exit with code 2, print
exactly one line on stderr that names the offending value (the case's
expected text), print nothing on stdout, and leave no file behind in its
working directory (every output path a case gives points there). A generous
timeout catches hangs only; it is not a speed test.

Usage: robustness_test.py SPILLWAY_BINARY
       robustness_test.py --list      (the cases, one per line)
"""

import concurrent.futures
import json
import os
import re
import shlex
import struct
import subprocess
import sys
import tempfile

TIMEOUT_S = 120


def npy_bytes(dtype_descr, shape, payload, version=1):
    """A .npy file: magic, version, header (padded to 64 bytes), payload."""
    header = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (
        dtype_descr, "(" + "".join(f"{d}, " for d in shape) + ")")
    length_bytes = 2 if version == 1 else 4
    total = 6 + 2 + length_bytes + len(header) + 1
    header += " " * ((64 - total % 64) % 64) + "\n"
    length = struct.pack("<H" if version == 1 else "<I", len(header))
    return b"\x93NUMPY" + bytes([version, 0]) + length + header.encode() + payload


PROFILE = {
    "name": "test-gpu",
    "device_memory_bytes": 17179869184,
    "reserved_bytes": 1073741824,
    "fp32_flops": 15.7e12,
    "tf32_flops": 15.7e12,
    "fp16_flops": 125e12,
    "compute_efficiency": 0.6,
    "memory_bandwidth": 900e9,
    "memory_efficiency": 0.8,
    "launch_overhead_s": 5e-6,
    "d2h_bandwidth": 12e9,
    "h2d_bandwidth": 12e9,
    "d2h_latency_s": 10e-6,
    "h2d_latency_s": 10e-6,
    "copy_engines": 2,
}


def profile_with(**changes):
    profile = dict(PROFILE)
    for key, value in changes.items():
        if value is None:
            del profile[key]
        else:
            profile[key] = value
    return json.dumps(profile)


def node_link(nodes, links):
    """A node-link graph file: nodes as (id, duration or None, size), links as (source, target)."""
    return json.dumps({
        "directed": True, "graph": {},
        "nodes": [dict({"id": i, "size": size}, **({} if t is None else {"duration": t}))
                  for i, t, size in nodes],
        "links": [{"source": a, "target": b} for a, b in links]}).encode()


def make_fixtures(root):
    """Bad input files, by name; the cases refer to them as {name}."""
    files = {
        "garbage.onnx": b"this is not a protobuf \xff\xfe",
        "empty.onnx": b"",
        "text.onnx": b"ir_version: 8\n",
        "empty.json": b"",
        "not_json.json": b"{name: 'x'}",
        "deep.json": b"[" * 100000 + b"]" * 100000,
        "overflow.json": profile_with(fp32_flops="@@1e400@@").replace(
            '"@@1e400@@"', "1e400").encode(),
        "duplicate.json": (profile_with()[:-1] + ', "copy_engines": 3}').encode(),
        "reserve.json": profile_with(reserved_bytes=2 * 17179869184).encode(),
        "negative.json": profile_with(memory_bandwidth=-1).encode(),
        "wrong_type.json": profile_with(fp32_flops="fast").encode(),
        "missing.json": profile_with(fp32_flops=None).encode(),
        "unknown_field.json": profile_with(warp_size=32).encode(),
        "efficiency.json": profile_with(compute_efficiency=1.5).encode(),
        "engines.json": profile_with(copy_engines=0).encode(),
        "list.json": b"[1, 2, 3]",
        "nan.json": profile_with(fp32_flops="@@NaN@@").replace('"@@NaN@@"', "NaN").encode(),
        "garbage.ckpt": b"SPILLWAY? no, just text\n" * 10,
        "empty.ckpt": b"",
        "garbage.npy": b"\x93NUMPY but not really",
        "empty.npy": b"",
        "f16.npy": npy_bytes("<f2", (1, 3, 32, 32), bytes(2 * 3 * 32 * 32)),
        "fortran.npy": npy_bytes("<f4", (2, 2), bytes(16)).replace(
            b"'fortran_order': False", b"'fortran_order': True "),
        "truncated.npy": npy_bytes("<f4", (1, 3, 32, 32), bytes(100)),
        "wrong_shape.npy": npy_bytes("<f4", (1, 3, 16, 16), bytes(4 * 3 * 16 * 16)),
        "big_endian.npy": npy_bytes(">f4", (1, 3, 32, 32), bytes(4 * 3 * 32 * 32)),
        "huge_shape.npy": npy_bytes("<f4", (4294967296, 4294967296, 4294967296), b""),
        "notes.txt": b"a text file\n",
        # Node-link graphs (--graph).
        "graph_cycle.json": node_link([("a", 1, 8), ("b", 1, 8)], [("a", "b"), ("b", "a")]),
        "graph_dangling.json": node_link([("a", 1, 8)], [("a", "zz")]),
        "graph_duplicate.json": node_link([("a", 1, 8), ("a", 1, 8)], []),
        "graph_negative.json": node_link([("a", 1, -8)], []),
        "graph_no_duration.json": node_link([("a", None, 8)], []),
        "graph_ok.json": node_link([("a", 1e-3, 1 << 20), ("b", 1e-3, 1 << 20)], [("a", "b")]),
    }
    for name, content in files.items():
        with open(os.path.join(root, name), "wb") as f:
            f.write(content)
    for name in ("a_directory", "empty_images", "data_with_text"):
        os.mkdir(os.path.join(root, name))
    for class_name in ("cats", "dogs"):
        os.mkdir(os.path.join(root, "data_with_text", class_name))
        with open(os.path.join(root, "data_with_text", class_name, "x.png"), "wb") as f:
            f.write(b"not a png")
    paths = {name: os.path.join(root, name) for name in list(files) + [
        "a_directory", "empty_images", "data_with_text"]}
    paths["missing"] = os.path.join(root, "no_such_file")
    paths["missing_dir"] = os.path.join(root, "no_such_dir", "out.json")
    return paths


# (arguments, text the error must contain). Arguments are split like a shell
# would; {name} is a fixture path.
CASES = []


def case(args, expected):
    CASES.append((args, expected))


# Every positive-integer model option, each with the same bad values.
POSITIVE_INTEGERS = ["--batch", "--image", "--height", "--width", "--classes", "--in-channels",
                     "--base-width", "--depth", "--layers", "--heads", "--d-model", "--seq-len",
                     "--vocab"]
for flag in POSITIVE_INTEGERS:
    for value in ["0", "-3", "abc", "1.5", "99999999999999999999", "nan", "''"]:
        shown = value.strip("'")
        case(f"inspect --model resnet50 {flag} {value}", f"{flag} must be a positive integer, got '{shown}'")

# The same flags through the other commands share the check; one each.
for command in ["plan", "compare", "train", "forward"]:
    case(f"{command} --model resnet18 --batch 0", "--batch must be a positive integer, got '0'")
    case(f"{command} --model resnet18 --image x", "--image must be a positive integer, got 'x'")
    case(f"{command} --model resnet18 --bach 2", "'--bach'; did you mean '--batch'")
    case(f"{command} --model resnet18 --layers 3", "--layers does not apply to resnet18")
    case(f"{command} --model resnet51", "unknown model 'resnet51'")
    sources = "--model, --onnx and --graph" if command in ("plan", "compare") else "--model and --onnx"
    case(f"{command}", f"give exactly one of {sources}")
    case(f"{command} --model resnet18 --onnx {{garbage.onnx}} --loss cross-entropy",
         f"give exactly one of {sources}")
    case(f"{command} --model ''", "--model")
    case(f"{command} --model resnet18 --seed -1", "--seed must be a non-negative integer, got '-1'")

# Model options that do not apply, and combinations that cannot be.
case("inspect --model gpt2 --image 64", "--image does not apply to gpt2")
case("inspect --model gpt2 --classes 10", "--classes does not apply to gpt2")
case("inspect --model resnet50 --vocab 100", "--vocab does not apply to resnet50")
case("inspect --model resnet50 --heads 4", "--heads does not apply to resnet50")
case("inspect --model resnet50 --depth 3", "--depth does not apply to resnet50")
case("inspect --model resnet50 --backbone resnet101", "--backbone does not apply to resnet50")
case("inspect --model resnet50 --dropout 0.2", "--dropout does not apply to resnet50")
case("inspect --model unet --backbone resnet101", "--backbone does not apply to unet")
case("inspect --model vgg16 --base-width 32", "--base-width does not apply to vgg16")
case("inspect --model deeplabv3plus --depth 2", "--depth does not apply to deeplabv3plus")
case("inspect --model resnet50 --image 224 --height 100", "--image")
case("inspect --model resnet50 --input-shape x=1x3x8x8", "--input-shape, --loss and --freeze go with --onnx")
case("inspect --model resnet50 --freeze conv", "--input-shape, --loss and --freeze go with --onnx")
case("inspect --model resnet50 --loss mse", "--loss: mse not in {cross-entropy}")
case("inspect --model deeplabv3plus --backbone resnet18", "resnet18")
case("inspect --model vgg16 --dropout 1", "--dropout must be a number in [0, 1), got '1'")
case("inspect --model vgg16 --dropout -0.5", "--dropout must be a number in [0, 1), got '-0.5'")
case("inspect --model vgg16 --dropout nan", "--dropout must be a number in [0, 1), got 'nan'")
case("inspect --model vgg16 --dropout inf", "--dropout must be a number in [0, 1), got 'inf'")
case("inspect --model vgg16 --dropout half", "--dropout must be a number in [0, 1), got 'half'")
case("inspect --model resnet50 --seed 18446744073709551616", "--seed must be a non-negative integer")
case("inspect --model resnet50 --optimizer lamb", "lamb")
case("inspect --model vgg16 --image 16", "too small")
case("inspect --model unet --image 100", "unet")
case("inspect --model gpt2 --heads 5", "n_head")
case("inspect --model resnet50 --image 100000000", "add up to more than 8 EiB, over the 4.00 PiB")
case("inspect --model resnet50 --image 8000 --batch 2000000000000", "64-bit")
case("inspect --model gpt2 --vocab 4000000000000 --d-model 4000008", "64-bit")

# Commands and options that do not exist.
case("frobnicate", "unknown command 'frobnicate'")
case("plna --model resnet18", "unknown command 'plna' (did you mean 'plan'?)")
case("tarin", "unknown command 'tarin' (did you mean 'train'?)")
case("models extra", "extra")
case("models --bogus", "'--bogus'")
case("hardware --bogus", "'--bogus'")
case("inspect --model resnet50 --jsno", "'--jsno'; did you mean '--json'")
case("plan --model resnet18 --polcy swap", "'--polcy'; did you mean '--policy'")
case("train --model resnet18 --step 2", "'--step'; did you mean '--steps'")
case("forward --model resnet18 --ouput-dir x", "'--ouput-dir'; did you mean '--output-dir'")
case("compare --model resnet18 --budgte 1GiB", "'--budgte'; did you mean '--budget'")

# Budgets, hardware and planner options: plan and compare. (A budget no plan
# fits is not among them: plan and compare report it as their result, exit 0;
# train refuses it, below.)
for command in ["plan", "compare"]:
    base = f"{command} --model resnet18"
    for budget in ["lots", "150%", "0", "-5", "1.5", "nan", "inf", "1e400", "0%", "12parsecs",
                   "-1GiB", "1.5.3GiB", "%", "GiB"]:
        case(f"{base} --budget {budget}", f"'{budget}'")
    case(f"{base} --budget ''", "--budget")
    for hardware in ["tpu", "v100"]:
        case(f"{base} --hardware {hardware}", f"'{hardware}'")
    case(f"{base} --hardware ''", "--hardware")
    case(f"{base} --math-mode fp64", "fp64")
    case(f"{base} --backward-order sideways", "sideways")
    case(f"{base} --backward-order each --bound", "--bound bounds the plans of one backward order")
    for value in ["0", "-1", "nan", "inf", "soon"]:
        case(f"{base} --time-limit {value}", f"--time-limit must be a positive number, got '{value}'")
    for value in ["-1", "many", "1.5"]:
        case(f"{base} --max-evaluations {value}", f"--max-evaluations must be a non-negative integer, got '{value}'")
        case(f"{base} --refine-passes {value}", f"--refine-passes must be a non-negative integer, got '{value}'")
    for value in ["-1", "2000", "all"]:
        case(f"{base} --plan-threads {value}", f"--plan-threads must be an integer from 0 to 1024, got '{value}'")

case("plan --model resnet18 --policy greedy", "greedy")
case("plan --model resnet18 --policy ''", "--policy")

# A sweep's budgets, shares and points (its other options are plan's).
base = "sweep --model resnet18"
for budget in ["lots", "150%", "0", "-5", "nan", "1e400", "0%", "GiB"]:
    case(f"{base} --budgets {budget}", f"--budgets '{budget}'")
case(f"{base} --budgets 1GiB,1GiB", "the sweep has the budget 1.00 GiB twice")
for share in ["0%", "120%", "30", "nan%", "inf%", "-5%", "%", "lots"]:
    case(f"{base} --from {share}", f"--from '{share}'")
    case(f"{base} --to {share}", f"--to '{share}'")
for value in ["0", "-1", "1001", "many"]:
    case(f"{base} --points {value}", f"--points must be an integer from 1 to 1000, got '{value}'")
case(f"{base} --from 60% --to 50%", "--from 60% is above --to 50%")
case(f"{base} --budgets 1GiB --from 30%", "excludes")
case(f"{base} --policy optimal", "--policy")
case(f"{base} --policy swap,greedy", "greedy")
case(f"{base} --policy hybrid,hybrid", "--policy names hybrid twice")
case(f"{base} --plot /nonexistent/dir/p.svg", "/nonexistent/dir/p.svg")

# Hardware profiles: a file is checked like a built-in one.
for name, expected in [
    ("missing", "no_such_file"),
    ("a_directory", "is a directory"),
    ("empty.json", "empty.json"),
    ("not_json.json", "not valid JSON"),
    ("deep.json", "nested deeper than 64 levels"),
    ("overflow.json", "field 'fp32_flops': the number 1e400 does not fit a double"),
    ("duplicate.json", "field 'copy_engines': the key is given twice"),
    ("reserve.json", "reserved_bytes"),
    ("negative.json", "memory_bandwidth"),
    ("wrong_type.json", "field 'fp32_flops' must be a number"),
    ("missing.json", "fp32_flops"),
    ("unknown_field.json", "warp_size"),
    ("efficiency.json", "compute_efficiency"),
    ("engines.json", "copy_engines"),
    ("list.json", "list.json"),
    ("nan.json", "'\"fp32_flops\": N'"),
]:
    case(f"hardware {{{name}}}", expected)
    case(f"plan --model resnet18 --hardware {{{name}}}", expected)
case("hardware tpu", "'tpu'")
case("hardware v100", "v100-16g-nvlink2, v100-16g-pcie3")
case("hardware /dev/zero", "is a device, not a file")

# Output files: checked before planning, none left behind.
case("plan --model resnet18 --trace {a_directory}", "it is a directory")
case("plan --model resnet18 --trace {missing_dir}", "no_such_dir")
case("plan --model resnet18 --memory-plot {missing_dir}", "no_such_dir")
case("plan --model resnet18 --dump-program {missing_dir}", "no_such_dir")
case("plan --model resnet18 --trace ok.json --memory-plot {missing_dir}", "no_such_dir")
case("plan --model resnet18 --trace ok.json --dump-program {a_directory}", "it is a directory")
case("plan --model resnet18 --trace ''", "--trace")
case("plan --model resnet18 --memory-plot ''", "--memory-plot")

# Training.
train = "train --model resnet18 --image 32 --steps 2"
for value in ["0", "-1", "x", "1.5"]:
    case(f"{train} --steps {value}", f"--steps must be a positive integer, got '{value}'")
    case(f"{train} --log-every {value}", f"--log-every must be a positive integer, got '{value}'")
for value in ["0", "-1", "nan", "inf", "fast"]:
    case(f"{train} --lr {value}", f"--lr must be a positive number, got '{value}'")
for value in ["1", "-0.1", "nan", "2"]:
    case(f"{train} --momentum {value}", f"--momentum must be a number in [0, 1), got '{value}'")
for value in ["-1", "nan", "inf"]:
    case(f"{train} --weight-decay {value}", f"--weight-decay must be a non-negative number, got '{value}'")
for value in ["-1", "x"]:
    case(f"{train} --save-every {value}", f"--save-every must be a non-negative integer, got '{value}'")
for value in ["0", "2000", "many"]:
    case(f"{train} --threads {value}", f"--threads must be an integer from 1 to 1024, got '{value}'")
case(f"{train} --optimizer lamb", "lamb")
case(f"{train} --policy greedy", "greedy")
case(f"{train} --backend gpu", "gpu")
case(f"{train} --math-mode bf16", "bf16")
case(f"{train} --math-mode tf32", "the cpu backend computes in fp32 only")
case(f"{train} --budget 1KiB", "cannot fit the step in a budget of 1.00 KiB")
case(f"{train} --budget lots", "'lots'")
case(f"{train} --hardware tpu", "'tpu'")
case(f"{train} --data {{missing}}", "no_such_file")
case(f"{train} --data {{notes.txt}}", "notes.txt")
case(f"{train} --data {{empty_images}}", "empty_images")
case(f"{train} --data {{data_with_text}}", "x.png")
case(f"{train} --data ''", "--data")
case(f"{train} --save {{a_directory}}", "it is a directory")
case(f"{train} --save {{missing_dir}}", "no_such_dir")
case(f"{train} --save ''", "--save")
case(f"{train} --resume {{missing}}", "no_such_file")
case(f"{train} --resume {{a_directory}}", "is a directory")
case(f"{train} --resume {{garbage.ckpt}}", "garbage.ckpt")
case(f"{train} --resume {{empty.ckpt}}", "empty.ckpt")
case(f"{train} --resume /dev/zero", "is a device, not a file")
case(f"{train} --resume ''", "--resume")
case("train --model resnet18 --image 60000 --batch 8", "of host memory but this machine has")
case("train --model resnet50 --image 5000 --batch 2 --policy none --budget 1PiB",
     "but this machine has")

# ONNX files.
for command in ["inspect", "plan", "train --loss cross-entropy", "forward"]:
    case(f"{command} --onnx {{missing}}", "no_such_file")
    case(f"{command} --onnx {{a_directory}}", "is a directory")
    case(f"{command} --onnx {{garbage.onnx}}", "garbage.onnx")
    case(f"{command} --onnx {{empty.onnx}}", "empty.onnx")
    case(f"{command} --onnx /dev/zero", "is a device, not a file")
case("train --onnx {garbage.onnx}", "train --onnx needs --loss cross-entropy")
# Graphs with their own costs: planning only, and bad files named.
for command in ["plan", "compare"]:
    case(f"{command} --graph {{graph_cycle.json}}", "the graph has a cycle through node '")
    case(f"{command} --graph {{graph_dangling.json}}", "link 0: target 'zz' is not a node")
    case(f"{command} --graph {{graph_duplicate.json}}", "node 'a' appears twice")
    case(f"{command} --graph {{graph_negative.json}}", "node 'a': size 'size' must be a whole number of bytes >= 0, got -8")
    case(f"{command} --graph {{graph_no_duration.json}}", "node 'a': missing attribute 'duration'")
    case(f"{command} --graph {{not_json.json}}", "not_json.json")
    case(f"{command} --graph {{missing}}", "no_such_file")
    case(f"{command} --graph {{graph_ok.json}} --model resnet18", "give exactly one of --model, --onnx and --graph")
    case(f"{command} --graph {{graph_ok.json}} --batch 4", "--batch does not apply to --graph")
    case(f"{command} --graph {{graph_ok.json}} --optimizer adamw", "--optimizer does not apply to --graph")
    case(f"{command} --graph {{graph_ok.json}} --math-mode tf32", "--math-mode does not apply to --graph")
    case(f"{command} --graph {{graph_ok.json}} --graph-time-unit h", "--graph-time-unit")
    case(f"{command} --graph {{graph_ok.json}} --graph-size missing_attr", "node 'a': missing attribute 'missing_attr'")
    case(f"{command} --model resnet18 --graph-size x", "--graph-size applies to --graph only")
case("plan --graph {graph_ok.json} --no-link --policy swap --budget 1MiB", "swap spills to host memory, and the device has no host link")
case("plan --graph {graph_ok.json} --no-link --budget 1MiB", "hybrid spills to host memory, and the device has no host link")
for command in ["train", "forward"]:
    case(f"{command} --graph {{graph_ok.json}}", "--graph gives a graph to plan, not to run")
case("inspect --graph {graph_ok.json} --optimizer adamw", "--optimizer does not apply to --graph")
case("inspect --graph {graph_cycle.json}", "the graph has a cycle through node '")
# Measured costs: profile's options, and costs files that cannot be used.
case("profile --model resnet18", "--out is required")
case("profile --model resnet18 --out {a_directory}", "is a directory")
case("profile --model resnet18 --out x.json --repeats 0", "--repeats")
case("profile --model resnet18 --out x.json --backend reference", "profile runs on the CPU backend only")
for command in ["plan", "compare"]:
    case(f"{command} --model resnet18 --costs {{missing}}", "no_such_file")
    case(f"{command} --model resnet18 --costs {{not_json.json}}", "not_json.json")
    case(f"{command} --model resnet18 --costs {{list.json}}", "a costs file is a JSON object")
    case(f"{command} --model resnet18 --costs {{missing.json}}", "field 'format' is missing")
    case(f"{command} --graph {{graph_ok.json}} --costs {{missing.json}}", "--costs does not apply to --graph")
case("inspect --onnx {text.onnx}", "text.onnx")
case("inspect --onnx {garbage.onnx} --image 64", "--input-shape")
case("inspect --onnx {garbage.onnx} --classes 10", "--classes does not apply to an ONNX model")
case("inspect --onnx {garbage.onnx} --layers 10", "--layers does not apply to an ONNX model")
case("inspect --onnx ''", "--onnx")
case("inspect --onnx {garbage.onnx} --input-shape ''", "--input-shape")
case("inspect --onnx {garbage.onnx} --freeze ''", "--freeze")

# Forward's inputs and outputs.
forward = "forward --model resnet18 --image 32"
for name, expected in [
    ("missing", "no_such_file"),
    ("a_directory", "is a directory"),
    ("garbage.npy", "garbage.npy"),
    ("empty.npy", "empty.npy"),
    ("f16.npy", "f16.npy"),
    ("fortran.npy", "fortran.npy"),
    ("truncated.npy", "truncated.npy"),
    ("wrong_shape.npy", "wrong_shape.npy"),
    ("big_endian.npy", "big_endian.npy"),
    ("huge_shape.npy", "huge_shape.npy"),
    ("notes.txt", "notes.txt"),
]:
    case(f"{forward} --input images={{{name}}}", expected)
case(f"{forward} --input images", "images")
case(f"{forward} --input =x.npy", "=x.npy")
case(f"{forward} --input bogus={{f16.npy}}", "bogus")
case(f"{forward} --input ''", "--input")
case(f"{forward} --input images=/dev/zero", "is a device, not a file")
case(f"{forward} --output-dir {{notes.txt}}", "notes.txt")
case(f"{forward} --output-dir ''", "--output-dir")
case(f"{forward} --threads 0", "--threads must be an integer from 1 to 1024, got '0'")
case(f"{forward} --backend gpu", "gpu")
case("forward --model resnet50 --image 60000", "of host memory but this machine has")


# Export: the trained values go back into the model they came from.
case("export --model resnet18 --checkpoint {garbage.ckpt} --out x.onnx", "export needs --onnx")
case("export --onnx {garbage.onnx} --checkpoint {garbage.ckpt}", "--out is required")
case("export --onnx {garbage.onnx} --out x.onnx", "--checkpoint is required")
case("export --onnx {garbage.onnx} --checkpoint {garbage.ckpt} --out x.onnx", "garbage.onnx")
case("export --onnx {garbage.onnx} --checkpoint {garbage.ckpt} --out {a_directory}",
     "it is a directory")
case("export --onnx {garbage.onnx} --checkpoint {garbage.ckpt} --out {missing_dir}",
     "no_such_dir")


def run_case(binary, fixtures, args, expected, work_root, index):
    command = [binary] + [re.sub(r"\{([\w.]+)\}", lambda m: fixtures[m.group(1)], part)
                          for part in shlex.split(args)]
    cwd = os.path.join(work_root, f"case{index:03d}")
    os.mkdir(cwd)
    problems = []
    try:
        run = subprocess.run(command, cwd=cwd, capture_output=True, timeout=TIMEOUT_S,
                             stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return [f"still running after {TIMEOUT_S} s"]
    stderr = run.stderr.decode(errors="replace")
    lines = stderr.splitlines()
    if run.returncode != 2:
        problems.append(f"exit code {run.returncode}, not 2")
    if len(lines) != 1:
        problems.append(f"{len(lines)} lines on stderr, not 1")
    if not stderr.startswith("spillway: error: "):
        problems.append("stderr does not start with 'spillway: error: '")
    if expected not in stderr:
        problems.append(f"stderr does not contain {expected!r}")
    if run.stdout:
        problems.append(f"stdout is not empty: {run.stdout[:200]!r}")
    left = sorted(os.listdir(cwd))
    if left:
        problems.append(f"left files behind: {left}")
    if problems:
        problems.append(f"stderr: {stderr.strip()[:400]!r}")
    return problems


def main():
    if sys.argv[1:] == ["--list"]:
        for args, expected in CASES:
            print(f"{args}\t{expected}")
        return 0
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="spillway-robustness-") as root:
        fixtures = make_fixtures(root)
        before = set(os.listdir(root))
        work_root = os.path.join(root, "cases")
        os.mkdir(work_root)
        failures = 0
        with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
            futures = [pool.submit(run_case, binary, fixtures, args, expected, work_root, i)
                       for i, (args, expected) in enumerate(CASES)]
            for (args, _), future in zip(CASES, futures):
                problems = future.result()
                if problems:
                    failures += 1
                    print(f"FAIL spillway {args}")
                    for problem in problems:
                        print(f"     {problem}")
        changed = set(os.listdir(root)) - before - {"cases"}
        if changed:
            print(f"FAIL files appeared beside the fixtures: {sorted(changed)}")
            failures += 1
        print(f"{len(CASES)} bad inputs, {len(CASES) - failures} handled as promised, "
              f"{failures} not")
        return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
