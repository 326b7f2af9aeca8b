"""Finds and runs the project's tools (moe-compile)."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def build_dir():
    return Path(os.environ.get("MOE_BUILD_DIR", ROOT / "build"))


def tool(name):
    """A tool of the build ($MOE_BUILD_DIR/bin, else the source tree's build/),
    else from PATH (an installed package has no source tree)."""
    path = build_dir() / "bin" / name
    if path.exists():
        return str(path)
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(f"{path} not found and no {name} on PATH: build the project "
                            "first (utils/setup.sh)")


def _host_cpu():
    """The CPU's model and features, as /proc/cpuinfo gives them ("" elsewhere)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return ""
    wanted = [line for line in lines if line.startswith(("model name", "flags"))]
    return hashlib.sha256("\n".join(wanted[:2]).encode()).hexdigest()


def _compile(command, inputs, outputs):
    """Runs the moe-compile `command`, which reads the files `inputs` and
    writes `outputs`. With $MOE_COMPILE_CACHE naming a directory (the tests
    set one per session), a compile identical to an earlier one (the same
    tool binary, arguments and input contents) copies that one's outputs
    instead: moe-compile's outputs do not depend on their names. The key
    holds this machine's CPU (for `--cpu host`); outputs are published by a
    rename, as moe-compile does."""
    cache = os.environ.get("MOE_COMPILE_CACHE")
    if not cache:
        subprocess.run(command, check=True)
        return
    key = hashlib.sha256()
    binary = Path(command[0]).resolve()
    stat = binary.stat()
    key.update(f"{binary}:{stat.st_mtime_ns}:{stat.st_size}:{_host_cpu()}".encode())
    named = {str(p): f"<{kind}{i}{Path(p).suffix}>" for kind, files in (("in", inputs),
                                                                        ("out", outputs))
             for i, p in enumerate(files)}
    for arg in command[1:]:
        key.update(b"\0" + named.get(arg, arg).encode())
    for path in inputs:
        key.update(b"\0" + Path(path).read_bytes())
    entry = Path(cache) / key.hexdigest()
    if entry.is_dir():
        for i, out in enumerate(outputs):
            staged = Path(out).with_name(f".{Path(out).name}.{os.getpid()}.tmp")
            shutil.copyfile(entry / str(i), staged)
            os.replace(staged, out)
        return
    subprocess.run(command, check=True)
    Path(cache).mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=cache))
    for i, out in enumerate(outputs):
        shutil.copyfile(out, staged / str(i))
    try:
        staged.rename(entry)
    except OSError:  # another process stored the same compile first
        shutil.rmtree(staged, ignore_errors=True)


def compile_config(config, out_dir, dtype="f32", name="moe_layer", ep=1,
                   max_tokens_per_rank=4096, chunk_budget_bytes=0, tp=1, tp_dedupe=True,
                   dispatch_quant="none", decode_max_tokens=0, physical_experts=0,
                   fp8_gemm=True, row_tile=1, cpu="host", packed_min_rows=None,
                   replica_selection="static", ep_into_buffers=False, ep_all_gather=False,
                   ep_pack_in_layer=False):
    """Compiles a config.json to a shared library; returns (library, plan)."""
    out_dir = Path(out_dir)
    stem = (f"{name}_{dtype}_ep{ep}_tp{tp}{'' if tp_dedupe else 'dup'}_{dispatch_quant}"
            + (f"_budget{chunk_budget_bytes}" if chunk_budget_bytes else "")
            + (f"_decode{decode_max_tokens}" if decode_max_tokens else "")
            + (f"_slots{physical_experts}" if physical_experts else "")
            + ("" if replica_selection == "static" else f"_{replica_selection}")
            + ("" if fp8_gemm else "_dequant")
            + (f"_tile{row_tile}" if row_tile != 1 else "")
            + ("" if cpu == "host" else f"_{cpu}")
            + ("" if packed_min_rows is None else f"_packed{packed_min_rows}")
            + ("_into" if ep_into_buffers else "")
            + ("_allgather" if ep_all_gather else "")
            + ("_packinlayer" if ep_pack_in_layer else ""))
    library = out_dir / f"{stem}.so"
    plan_path = out_dir / f"{stem}.plan.json"
    _compile([tool("moe-compile"), "--config", str(config), "--dtype", dtype,
              "--entry", name, "--ep", str(ep),
              "--max-tokens-per-rank", str(max_tokens_per_rank),
              "--chunk-budget-bytes", str(chunk_budget_bytes),
              "--tp", str(tp), "--dispatch-quant", dispatch_quant,
              "--decode-max-tokens", str(decode_max_tokens),
              "--physical-experts", str(physical_experts),
              f"--fp8-gemm={'true' if fp8_gemm else 'false'}",
              "--row-tile", str(row_tile), "--cpu", cpu,
              *([] if tp_dedupe else ["--no-tp-dedupe"]),
              *([] if replica_selection == "static"
                else ["--replica-selection", replica_selection]),
              *([] if packed_min_rows is None
                else ["--packed-min-rows", str(packed_min_rows)]),
              *(["--ep-into-buffers"] if ep_into_buffers else []),
              *(["--ep-all-gather"] if ep_all_gather else []),
              *(["--ep-pack-in-layer"] if ep_pack_in_layer else []),
              "--plan", str(plan_path), "-o", str(library)],
             [config], [library, plan_path])
    return library, json.loads(plan_path.read_text())


def compile_mlir(source, out_dir, stem, cpu=None, extra=()):
    """Compiles moe-dialect IR text to a shared library (for `cpu`, an LLVM
    CPU name; default the host; `extra`: more moe-compile options)."""
    out_dir = Path(out_dir)
    mlir = out_dir / f"{stem}.mlir"
    mlir.write_text(source)
    library = out_dir / f"{stem}.so"
    command = [tool("moe-compile"), str(mlir), "-o", str(library), *extra]
    if cpu:
        command += ["--cpu", cpu]
    _compile(command, [mlir], [library])
    return library
