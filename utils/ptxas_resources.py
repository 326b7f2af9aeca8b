#!/usr/bin/env python3
"""Assembles every kernel of a lowered CUDA module with `ptxas -v` and checks
its resources: no spills, at most --max-registers registers per thread.

Reads IR with `gpu.binary` ops in PTX form (moe-cuda-pipeline, format=isa)
on stdin; prints one line per kernel; exits 1 if any kernel breaks a limit.
Usage: moe-opt layer.mlir --moe-cuda-pipeline=chip=sm_90a \
         | ptxas_resources.py --arch sm_90a [--ptxas PATH]
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

BINARY = re.compile(r'gpu\.binary @(\w+)\s.*?assembly = "((?:[^"\\]|\\.)*)"')


def unescape(text):
    """MLIR string escapes: \\XX (hex), \\\\, \\"."""
    return re.sub(r'\\([0-9A-Fa-f]{2}|\\|")',
                  lambda m: m.group(1) if m.group(1) in ('\\', '"') else chr(int(m.group(1), 16)),
                  text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="sm_90a")
    parser.add_argument("--max-registers", type=int, default=255)
    cuda = os.environ.get("CUDA_HOME", "/usr/local/cuda")
    parser.add_argument("--ptxas", default=os.path.join(cuda, "bin", "ptxas"))
    args = parser.parse_args()
    kernels = BINARY.findall(sys.stdin.read())
    if not kernels:
        print("error: no gpu.binary with PTX (assembly) in the input", file=sys.stderr)
        return 1
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, escaped in kernels:
            ptx = os.path.join(tmp, name + ".ptx")
            with open(ptx, "w") as f:
                f.write(unescape(escaped))
            run = subprocess.run([args.ptxas, "-v", f"-arch={args.arch}", ptx, "-o", os.devnull],
                                 capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{name}: ptxas failed: {run.stderr.strip()}")
                bad += 1
                continue
            registers = [int(r) for r in re.findall(r"Used (\d+) registers", run.stderr)]
            spills = [int(s) for s in re.findall(r"(\d+) bytes spill (?:stores|loads)", run.stderr)]
            if not registers:
                print(f"{name}: no register count in ptxas -v output: {run.stderr.strip()}")
                bad += 1
                continue
            ok = max(registers) <= args.max_registers and not any(spills)
            bad += not ok
            print(f"{name}: {max(registers)} registers, {max(spills, default=0)} bytes spilled"
                  f"{'' if ok else '  <-- over the limit'}")
    print(f"{len(kernels) - bad} of {len(kernels)} kernels within {args.max_registers} registers "
          f"and without spills ({args.arch})")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
