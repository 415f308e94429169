"""The Python module against the command line: every call, its errors, and
bitwise-equal training. Run by ctest (python_module) with PYTHONPATH on the
build tree's python/ folder and SPILLWAY_BINARY naming the CLI."""

import json
import os
import signal
import subprocess
import sys
import threading

import numpy as np
import pytest

import spillway

BINARY = os.environ.get("SPILLWAY_BINARY", "spillway")
# A ResNet-18 whose activations outweigh its parameters: at 7 MiB, below the
# 9.5 MiB `none` needs on the CPU profile, every policy that fits spills or
# recomputes; planned for the default profile, a V100, whose arena also holds
# the kernels' workspace (1.5 MiB here: `none` needs 11 MiB), at 9 MiB.
SMALL = dict(model="resnet18", image=128, batch=8, base_width=8, classes=4)
SMALL_FLAGS = ["--model", "resnet18", "--image", "128", "--batch", "8", "--base-width", "8",
               "--classes", "4"]
BUDGET = "7MiB"
PLAN_BUDGET = "9MiB"


def cli(*args):
    """Runs the CLI; returns (exit code, stdout, stderr)."""
    done = subprocess.run([BINARY, *args], capture_output=True, text=True, check=False)
    return done.returncode, done.stdout, done.stderr


def cli_json(*args):
    code, out, err = cli(*args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_lists_models_and_hardware():
    models = {m["name"]: m for m in spillway.models()}
    assert "resnet50" in models and "gpt2" in models
    assert "layers" in models["gpt2"]["options"]  # keywords: flags without dashes
    assert "base_width" in models["resnet50"]["options"]
    presets = spillway.hardware_presets()
    assert "v100-16g-nvlink2" in presets and "cpu" in presets
    assert spillway.hardware("v100-16g-nvlink2")["name"] == "v100-16g-nvlink2"


def test_plan_gives_what_the_cli_gives():
    result = spillway.plan(spillway.Workload(**SMALL), budget=PLAN_BUDGET, progress=False)
    expected = cli_json("plan", *SMALL_FLAGS, "--budget", PLAN_BUDGET)
    mine = result.to_dict()
    for key in ("policy", "feasible", "budget_bytes", "arena_bytes", "step_time_s",
                "none_step_time_s", "d2h_bytes", "h2d_bytes", "evaluations", "start"):
        assert mine[key] == expected[key], key
    assert result.step_time_s == expected["step_time_s"]
    assert result.feasible and result.arena_bytes <= result.budget_bytes
    assert "hybrid" in repr(result)


def test_the_backward_order_is_chosen_like_the_cli_chooses_it():
    for order in ("auto", "memory-aware", "topological"):
        result = spillway.plan(spillway.Workload(**SMALL), budget=PLAN_BUDGET, policy="swap",
                               backward_order=order, progress=False)
        expected = cli_json("plan", *SMALL_FLAGS, "--budget", PLAN_BUDGET, "--policy", "swap",
                            "--backward-order", order)
        assert result.backward_order == expected["backward_order"], order
        assert result.arena_bytes == expected["arena_bytes"], order
        if order != "auto":
            assert result.backward_order == order
    with pytest.raises(ValueError, match="backward_order must be"):
        spillway.plan(spillway.Workload(**SMALL), backward_order="sideways", progress=False)
    # "each": hybrid plans in every order and keeps the fastest, as the CLI does.
    each = spillway.plan(spillway.Workload(**SMALL), budget=PLAN_BUDGET, policy="hybrid",
                         backward_order="each", progress=False)
    expected = cli_json("plan", *SMALL_FLAGS, "--budget", PLAN_BUDGET, "--policy", "hybrid",
                        "--backward-order", "each")
    assert each.backward_order == expected["backward_order"]
    assert each.step_time_s == expected["step_time_s"]
    assert each.evaluations == expected["evaluations"]


def test_fetch_once_plans_like_the_cli_flag():
    # Below the floor of plans that fetch each tensor once, only fetching
    # twice fits: the keyword and the flag agree on both sides of it.
    big = dict(model="resnet50", image=3000)
    flags = ["--model", "resnet50", "--image", "3000", "--hardware", "v100-16g-nvlink2",
             "--budget", "1.95GiB"]
    for fetch_once in (False, True):
        result = spillway.plan(spillway.Workload(**big), budget="1.95GiB", fetch_once=fetch_once,
                               progress=False)
        expected = cli_json("plan", *flags, *(["--fetch-once"] if fetch_once else []))
        assert result.feasible == expected["feasible"] == (not fetch_once)
        assert result.backward_order == expected["backward_order"]


def test_compare_gives_the_cli_rows():
    results = spillway.compare(spillway.Workload(**SMALL), budget=PLAN_BUDGET, progress=False)
    expected = cli_json("compare", *SMALL_FLAGS, "--budget", PLAN_BUDGET)
    assert [r.policy for r in results] == [row["policy"] for row in expected]
    assert [r.step_time_s for r in results] == [row["step_time_s"] for row in expected]
    no_link = spillway.compare(spillway.Workload(**SMALL), budget=PLAN_BUDGET, no_link=True,
                               progress=False)
    assert [r.policy for r in no_link] == ["none", "recompute"]
    assert not no_link[0].feasible  # none needs more than the budget


def test_sweep_gives_what_the_cli_gives(tmp_path):
    # A narrow ResNet-18 on the H200: plans fit from about 55% of its `none` arena.
    workload = dict(model="resnet18", image=224, batch=16, base_width=16)
    flags = ["--model", "resnet18", "--image", "224", "--batch", "16", "--base-width", "16",
             "--hardware", "h200-141g-pcie5"]
    swept = spillway.sweep(spillway.Workload(**workload), hardware="h200-141g-pcie5",
                           from_share="40%", points=4, progress=False)
    expected = cli_json("sweep", *flags, "--from", "40%", "--points", "4")
    mine = swept.to_dict()
    assert mine["workload"] == expected["workload"] == swept.workload
    assert [p["budget_bytes"] for p in mine["points"]] == \
        [p["budget_bytes"] for p in expected["points"]]
    assert [p["step_time_s"] for p in mine["points"]] == \
        [p["step_time_s"] for p in expected["points"]]
    points = swept.points
    assert [p.feasible for p in points] == [False, True, True, True]
    steps = [p.step_time_s for p in points if p.feasible]
    assert steps == sorted(steps, reverse=True)
    assert "Sweep hybrid: 4 budgets, 3 with a plan" in repr(swept)
    # Each point's plot is drawn against its own budget.
    points[1].write_memory_plot(str(tmp_path / "memory.svg"))
    assert f"budget {points[1].budget_bytes / 2**20:.1f} MiB" in \
        (tmp_path / "memory.svg").read_text()
    swept.write_plot(str(tmp_path / "sweep.svg"))
    assert "3 of 4 budgets have a plan" in (tmp_path / "sweep.svg").read_text()
    by_size = spillway.sweep(spillway.Workload(**workload), hardware="h200-141g-pcie5",
                             budgets=["90MiB", "70MiB"], progress=False)
    assert [p.budget_bytes for p in by_size.points] == [70 * 2**20, 90 * 2**20]
    # Several policies in one plot, as sweep --policy swap,hybrid --plot draws them.
    swap = spillway.sweep(spillway.Workload(**workload), policy="swap", hardware="h200-141g-pcie5",
                          budgets=["90MiB", "70MiB"], progress=False)
    spillway.write_sweep_plot(str(tmp_path / "both.svg"), [swap, by_size])
    code, _, err = cli("sweep", *flags, "--budgets", "90MiB,70MiB", "--policy", "swap,hybrid",
                       "--plot", str(tmp_path / "both_cli.svg"))
    assert code == 0, err
    assert (tmp_path / "both.svg").read_text() == (tmp_path / "both_cli.svg").read_text()
    other = spillway.sweep(spillway.Workload(model="resnet18", image=64), budgets=["1GiB"],
                           progress=False)
    with pytest.raises(spillway.Error, match="different workloads"):
        spillway.write_sweep_plot(str(tmp_path / "mixed.svg"), [swap, other])
    with pytest.raises(spillway.Error, match="a sweep is None"):
        spillway.write_sweep_plot(str(tmp_path / "none.svg"), [None, swap])
    with pytest.raises(spillway.Error, match="not both"):
        spillway.sweep(spillway.Workload(**workload), budgets=["1GiB"], points=3)
    with pytest.raises(spillway.Error, match="--from '120%'"):
        spillway.sweep(spillway.Workload(**workload), from_share="120%")


def test_writes_trace_plot_program_and_returns_the_memory_curve(tmp_path):
    result = spillway.plan(spillway.Workload(**SMALL), budget=PLAN_BUDGET, policy="swap",
                           progress=False)
    result.write_trace(str(tmp_path / "trace.json"))
    result.write_memory_plot(str(tmp_path / "memory.svg"))
    result.write_program(str(tmp_path / "program.txt"))
    assert json.loads((tmp_path / "trace.json").read_text())["traceEvents"]
    assert (tmp_path / "memory.svg").read_text().startswith("<svg")
    assert "arena" in (tmp_path / "program.txt").read_text()
    seconds, allocated = result.memory_curve()
    assert seconds.dtype == np.float64 and allocated.dtype == np.int64
    assert len(seconds) == len(allocated) > 0
    assert np.all(np.diff(seconds) >= 0)
    assert allocated.max() <= result.arena_bytes
    assert seconds[-1] <= result.step_time_s


def test_errors_carry_the_cli_message():
    code, _, err = cli("plan", "--model", "resnet18", "--layers", "3")
    assert code == 2
    with pytest.raises(spillway.Error) as raised:
        spillway.plan(spillway.Workload(model="resnet18", layers=3), progress=False)
    assert err.strip() == "spillway: error: " + str(raised.value)
    with pytest.raises(spillway.Error, match="no-such-gpu"):
        spillway.plan(spillway.Workload(**SMALL), hardware="no-such-gpu", progress=False)
    with pytest.raises(spillway.Error, match="unknown policy|policy"):
        spillway.plan(spillway.Workload(**SMALL), policy="magic", progress=False)
    with pytest.raises(TypeError, match="unexpected keyword 'colour'"):
        spillway.Workload(model="resnet18", colour="red")
    with pytest.raises(ValueError, match="batch must be a positive integer"):
        spillway.Workload(model="resnet18", batch=0)
    with pytest.raises(ValueError, match="dropout"):
        spillway.Workload(model="vgg16", dropout=1.5)


def test_an_infeasible_plan_says_so_and_has_nothing_to_write(tmp_path):
    result = spillway.plan(spillway.Workload(**SMALL), budget="1MiB", progress=False)
    assert not result.feasible
    assert result.smallest_arena_bytes > 1 << 20
    with pytest.raises(spillway.Error, match="no plan that fits"):
        result.write_trace(str(tmp_path / "trace.json"))
    assert not (tmp_path / "trace.json").exists()
    with pytest.raises(AttributeError):
        _ = result.no_such_field


def test_train_is_bitwise_the_cli_train(tmp_path):
    expected = cli_json("train", *SMALL_FLAGS, "--steps", "3", "--budget", BUDGET)
    run = spillway.train(spillway.Workload(**SMALL), steps=3, budget=BUDGET)
    assert run.checksum == expected["checksum"]
    assert list(run.losses) == expected["losses"]
    assert run.policy == expected["policy"] == "hybrid"
    assert run.kernels == expected["kernels"] and run.kernels.startswith("oneDNN ")
    # Two steps, a checkpoint, one more step resumed from it: the same state.
    checkpoint = str(tmp_path / "run.ckpt")
    first = spillway.train(spillway.Workload(**SMALL), steps=2, budget=BUDGET, save=checkpoint)
    assert first.checkpoint == checkpoint and os.path.exists(checkpoint)
    resumed = spillway.train(spillway.Workload(**SMALL), steps=1, budget=BUDGET,
                             resume=checkpoint)
    assert resumed.first_step == 3
    assert resumed.checksum == run.checksum


def test_train_writes_the_last_step_beside_its_prediction(tmp_path):
    trace = tmp_path / "step.json"
    run = spillway.train(spillway.Workload(**SMALL), steps=2, budget=BUDGET, trace=str(trace))
    with open(trace) as f:
        events = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in events["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {1: "measured: hybrid on cpu, step 2", 2: "simulated: hybrid on cpu"}
    measured, simulated = events["otherData"]["processes"]
    # The plan spills at this budget: both timelines copy the same bytes.
    assert measured["d2h_bytes"] == simulated["d2h_bytes"] == run.bytes_to_host_per_step > 0
    with pytest.raises(spillway.Error, match="trace"):
        spillway.train(spillway.Workload(**SMALL), steps=1, trace="/nonexistent/step.json")


def test_train_returns_parameters_and_buffers():
    run = spillway.train(spillway.Workload(**SMALL), steps=1)
    again = spillway.train(spillway.Workload(**SMALL), steps=1)
    parameters = run.parameters()
    assert parameters and all(a.dtype == np.float32 for a in parameters.values())
    assert parameters.keys() == again.parameters().keys()
    for name, array in parameters.items():
        assert np.array_equal(array, again.parameters()[name]), name
    assert run.buffers()  # batch-norm running statistics
    assert len(run.losses) == 1 and np.isfinite(run.losses[0])


def batch_of(step, batch=8, image=128, classes=4):
    rng = np.random.default_rng(step)
    samples = rng.standard_normal((batch, image, image, 3), dtype=np.float32)
    labels = rng.integers(0, classes, size=batch).astype(np.int64)
    return samples, labels


def test_train_from_arrays_and_from_a_callable():
    samples = np.concatenate([batch_of(0)[0], batch_of(1)[0]])
    labels = np.concatenate([batch_of(0)[1], batch_of(1)[1]])
    from_arrays = spillway.train(spillway.Workload(**SMALL), steps=2, data=(samples, labels))
    from_callable = spillway.train(spillway.Workload(**SMALL), steps=2, data=batch_of)
    assert from_arrays.data == "arrays given from Python"
    assert from_callable.data == "a Python callable"
    assert from_arrays.checksum == from_callable.checksum
    assert from_arrays.checksum != spillway.train(spillway.Workload(**SMALL), steps=2).checksum


def test_bad_data_is_a_one_line_error():
    with pytest.raises(spillway.Error, match=r"samples must be a float32 array of shape \[8,128,128,3\]"):
        spillway.train(spillway.Workload(**SMALL), steps=1,
                       data=lambda step: (np.zeros((8, 3, 128, 128), np.float32), batch_of(step)[1]))

    def failing(step):
        raise RuntimeError("disk on fire")

    with pytest.raises(spillway.Error, match="the data callable raised at step 0: .*disk on fire"):
        spillway.train(spillway.Workload(**SMALL), steps=1, data=failing)
    with pytest.raises(spillway.Error, match="--save-every needs --save"):
        spillway.train(spillway.Workload(**SMALL), steps=1, save_every=1)


def interrupt_soon(seconds=0.5):
    timer = threading.Timer(seconds, os.kill, (os.getpid(), signal.SIGINT))
    timer.start()
    return timer


def test_ctrl_c_stops_planning_and_training():
    timer = interrupt_soon()
    with pytest.raises(KeyboardInterrupt, match="planning interrupted"):
        # Seconds of planning: the signal arrives while it plans.
        spillway.plan(spillway.Workload(model="resnet50", image=8000), progress=False)
    timer.join()
    timer = interrupt_soon()
    with pytest.raises(KeyboardInterrupt, match="training interrupted after step"):
        # `none` plans at once: the signal arrives while it trains.
        spillway.train(spillway.Workload(**SMALL), steps=100000, policy="none", budget="1GiB")
    timer.join()


def wait_policy_in_a_fresh_interpreter(environment_policy=None, preload_libgomp=False):
    """(spillway.WAIT_POLICY, OMP_WAIT_POLICY as libgomp will see it) in a new
    interpreter: the import's decision depends on what the process did first."""
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if environment_policy is not None:
        env["OMP_WAIT_POLICY"] = environment_policy
    script = ("import ctypes, os\n"
              + ("ctypes.CDLL('libgomp.so.1')\n" if preload_libgomp else "")
              + "import spillway\nprint(spillway.WAIT_POLICY)\n"
              + "print(os.environ.get('OMP_WAIT_POLICY', 'unset'))\n")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                          check=True)
    return tuple(done.stdout.strip().splitlines())


def test_import_sets_a_passive_wait_policy_only_when_it_still_can():
    assert wait_policy_in_a_fresh_interpreter() == ("PASSIVE (set by spillway)", "PASSIVE")
    assert wait_policy_in_a_fresh_interpreter("ACTIVE") == (
        "ACTIVE (from the environment)", "ACTIVE")
    # libgomp already loaded (as `import torch` first would): too late, left alone.
    assert wait_policy_in_a_fresh_interpreter(preload_libgomp=True) == (
        "libgomp's default (it was loaded before spillway)", "unset")


def tiny_onnx(path):
    """x[N,3,16,16] -> conv(4) -> relu -> global average pool -> dense(3)."""
    onnx = pytest.importorskip("onnx", reason="python3-onnx writes the test's model")
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = {"conv.weight": (4, 3, 3, 3), "conv.bias": (4,), "fc.weight": (3, 4), "fc.bias": (3,)}
    initializers = [numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32),
                                            name) for name, shape in weights.items()]
    nodes = [
        helper.make_node("Conv", ["x", "conv.weight", "conv.bias"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["p"]),
        helper.make_node("Flatten", ["p"], ["f"]),
        helper.make_node("Gemm", ["f", "fc.weight", "fc.bias"], ["logits"], transB=1),
    ]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 3])], initializers)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_export_writes_what_the_cli_writes(tmp_path):
    model = str(tmp_path / "tiny.onnx")
    tiny_onnx(model)
    workload = spillway.Workload(onnx=model, input_shape="x=4x3x16x16", loss="cross-entropy")
    checkpoint = str(tmp_path / "run.ckpt")
    spillway.train(workload, steps=2, save=checkpoint)
    summary = spillway.export(workload, checkpoint=checkpoint, out=str(tmp_path / "mine.onnx"))
    assert summary == {"tensors": 4, "elements": 4 * 27 + 4 + 12 + 3, "step": 2}
    code, _, err = cli("export", "--onnx", model, "--input-shape", "x=4x3x16x16", "--loss",
                       "cross-entropy", "--checkpoint", checkpoint, "--out",
                       str(tmp_path / "theirs.onnx"))
    assert code == 0, err
    assert (tmp_path / "mine.onnx").read_bytes() == (tmp_path / "theirs.onnx").read_bytes()
    with pytest.raises(spillway.Error, match="export needs --onnx"):
        spillway.export(spillway.Workload(**SMALL), checkpoint=checkpoint, out="x.onnx")
