"""The tools' output files and moe-eplb's table, checked from outside.

Outputs are replaced all or nothing, but what is at the output path decides
how (include/moe/Support/OutputFile.h): a symbolic link is written through,
a FIFO or device is written into and never replaced. moe-eplb's numbers are
recomputed here from the trace and the written phy2log.
"""
import json
import os
import stat
import subprocess
import threading

import numpy as np
import pytest

from moec.toolchain import tool

EXAMPLE = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "qwen3-moe-tiny",
                       "config.json")


def eplb(*args, check=True):
    done = subprocess.run([tool("moe-eplb"), *map(str, args)], capture_output=True, text=True)
    if check:
        assert done.returncode == 0, done.stderr
    return done


def write_trace(path, loads):
    path.write_text(json.dumps(np.asarray(loads).tolist()))
    return path


def device_ratios(phy2log, load, devices):
    """peak / average of each device's load, replicas splitting evenly."""
    phy2log = np.asarray(phy2log)
    replicas = np.bincount(phy2log, minlength=len(load))
    per_slot = np.asarray(load, dtype=float)[phy2log] / replicas[phy2log]
    device = per_slot.reshape(devices, -1).sum(axis=1)
    return device.max() / device.mean()


def read_from_fifo(path, into):
    with open(path) as fifo:
        into.append(fifo.read())


def test_moe_eplb_writes_through_a_link_and_into_a_fifo(tmp_path):
    trace = write_trace(tmp_path / "loads.json", [[7, 1, 3, 2, 9, 4, 1, 5]])
    target = tmp_path / "v3.json"
    target.write_text("old")
    link = tmp_path / "current.json"
    link.symlink_to(target.name)
    eplb(trace, "--slots", 8, "--devices", 4, "-o", link)
    assert link.is_symlink() and os.readlink(link) == target.name
    assert json.loads(target.read_text())["devices"] == 4

    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=read_from_fifo, args=(fifo, received), daemon=True)
    reader.start()
    eplb(trace, "--slots", 8, "--devices", 4, "-o", fifo)
    reader.join(timeout=60)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert json.loads(received[0])["slots"] == 8


def test_moe_eplb_to_stdout_keeps_the_json_alone(tmp_path):
    trace = write_trace(tmp_path / "loads.json", [[7, 1, 3, 2, 9, 4, 1, 5]])
    done = eplb(trace, "--slots", 8, "--devices", 4, "-o", "-")
    assert json.loads(done.stdout)["experts"] == 8
    assert "layers where the plan is worse than deepseek" in done.stderr


def test_moe_compile_writes_through_a_link_and_into_a_fifo(tmp_path):
    target = tmp_path / "layer-v2.so"
    target.write_text("old")
    link = tmp_path / "layer.so"
    link.symlink_to(target.name)
    done = subprocess.run([tool("moe-compile"), "--config", EXAMPLE, "-o", str(link)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert link.is_symlink() and target.read_bytes()[:4] == b"\x7fELF"
    assert not list(tmp_path.glob("*.tmp-*"))

    fifo = tmp_path / "layer.mlir"
    os.mkfifo(fifo)
    received = []
    reader = threading.Thread(target=read_from_fifo, args=(fifo, received), daemon=True)
    reader.start()
    done = subprocess.run([tool("moe-compile"), "--config", EXAMPLE, "--emit=mlir", "-o",
                           str(fifo)], capture_output=True, text=True)
    reader.join(timeout=60)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert "moe.layer" in received[0]


def test_moe_eplb_robust_worst_is_no_worse_than_next_on_its_own_criterion(tmp_path):
    # Three windows of drifting loads: whatever `worst` keeps, its worst window is at
    # most that of the default plan for the next window (one of its candidates).
    rng = np.random.default_rng(5)
    base = rng.pareto(1.2, size=(6, 32)) + 0.1
    windows = [base * rng.lognormal(0, 0.5, size=base.shape) for _ in range(3)]
    trace = write_trace(tmp_path / "windows.json", np.round(np.array(windows) * 100))
    worst_of = {}
    for kind in ("next", "worst"):
        out = tmp_path / f"{kind}.json"
        eplb(trace, "--slots", 40, "--devices", 8, f"--robust={kind}", "-o", out)
        layers = json.loads(out.read_text())["layers"]
        worst_of[kind] = [max(device_ratios(layer["phy2log"], w[l], 8)
                              for w in np.round(np.array(windows) * 100))
                          for l, layer in enumerate(layers)]
    assert all(w <= n * (1 + 1e-9) for w, n in zip(worst_of["worst"], worst_of["next"]))


def test_moe_eplb_planned_column_is_the_plan_a_redeploy_runs(tmp_path):
    rng = np.random.default_rng(3)
    old = write_trace(tmp_path / "old.json", np.round(rng.pareto(1.1, size=(3, 24)) * 100 + 1))
    new = np.round(rng.pareto(1.1, size=(3, 24)) * 100 + 1)
    new_trace = write_trace(tmp_path / "new.json", new)
    current = tmp_path / "current.json"
    eplb(old, "--slots", 32, "--devices", 8, "-o", current)
    out = tmp_path / "next.json"
    table = eplb(new_trace, "--slots", 32, "--devices", 8, "--current", current,
                 "--redeploy-threshold", 0, "-o", out).stdout
    rows = [line.split() for line in table.splitlines() if line.split()[:1] in (["0"], ["1"], ["2"])]
    layers = json.loads(out.read_text())["layers"]
    assert len(rows) == 3
    for row, layer in zip(rows, layers):
        assert layer["redeploy"]["redeploy"]
        recomputed = device_ratios(layer["phy2log"], new[layer["layer"]], 8)
        assert float(row[3]) == pytest.approx(recomputed, abs=6e-5)


def test_moe_eplb_refuses_a_current_plan_for_another_configuration(tmp_path):
    trace = write_trace(tmp_path / "loads.json", [[7, 1, 3, 2, 9, 4, 1, 5]] * 2)
    plan = tmp_path / "plan.json"
    eplb(trace, "--slots", 10, "--devices", 5, "-o", plan)
    done = eplb(trace, "--slots", 10, "--devices", 2, "--current", plan, check=False)
    assert done.returncode == 1
    assert "$.devices: the placement is for 5 devices, --devices is 2" in done.stderr

    edited = json.loads(plan.read_text())
    edited["layers"].reverse()
    plan.write_text(json.dumps(edited))
    done = eplb(trace, "--slots", 10, "--devices", 5, "--current", plan, check=False)
    assert "$.layers[0].layer: expected 0" in done.stderr

    edited["layers"].reverse()
    edited["layers"][1]["log2phy"][0].reverse()
    edited["layers"][1]["log2phy"][1] = edited["layers"][1]["log2phy"][0]
    plan.write_text(json.dumps(edited))
    done = eplb(trace, "--slots", 10, "--devices", 5, "--current", plan, check=False)
    assert "$.layers[1].log2phy: does not list the slots of each expert in phy2log" in done.stderr
