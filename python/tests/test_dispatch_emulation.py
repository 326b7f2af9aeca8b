"""The GPU dispatch kernels (DispatchGPU.cpp: the fused bookkeeping kernel up
to 2048 choices, the three above, the copy) executed on the CPU by
interpreting the lowered function's IR, blocks in lockstep with a race
detector, against the documented layout bit for bit:
test/Integration/GPU/dispatch_emulation.py. Also the interpreter's own
semantics (kernel_emulator.py) on small hand-written kernels."""
import subprocess
import sys

import numpy as np
import pytest

from moec.toolchain import ROOT, build_dir

# Pure Python (the kernel emulator): not run in the sanitizer tier (utils/sanitize.sh).
pytestmark = pytest.mark.emulation

SCRIPTS = ROOT / "test" / "Integration" / "GPU"
sys.path.insert(0, str(SCRIPTS))
import kernel_emulator as emulator  # noqa: E402

def run_script(*args):
    return subprocess.run([sys.executable, str(SCRIPTS / "dispatch_emulation.py"),
                           "--build", str(build_dir()), *args],
                          capture_output=True, text=True, timeout=600)


def test_dispatch_kernels_emulated_equal_the_reference():
    """Includes no tokens: the fused kernel, launched on one block whatever
    T, loaded ids[0, 0] of the empty ids until the load went under a branch."""
    done = run_script()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 failing cases of 21" in done.stdout


def test_ir_mutations_are_caught():
    """A dropped barrier or warp sync (the race detector), a divergent barrier,
    changed constants and predicates: every one fails its case."""
    done = run_script("--mutations")
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 of 12 mutations missed" in done.stdout


KERNEL = """
func.func @k(%masks: memref<64xi32>, %next: memref<64xi32>) {
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  gpu.launch blocks(%bx, %by, %bz) in (%gx = %c1, %gy = %c1, %gz = %c1)
      threads(%tx, %ty, %tz) in (%sx = %c64, %sy = %c1, %sz = %c1)
      workgroup(%s : memref<64xi32, #gpu.address_space<workgroup>>) {
    %c3 = arith.constant 3 : index
    %v = arith.remui %tx, %c3 : index
    %vi = arith.index_cast %v : index to i32
    %all = arith.constant -1 : i32
    %m = nvvm.match.sync any %all, %vi : i32 -> i32
    %p = math.ctpop %m : i32
    memref.store %m, %masks[%tx] : memref<64xi32>
    memref.store %p, %s[%tx] : memref<64xi32, #gpu.address_space<workgroup>>
    gpu.barrier
    %one = arith.constant 1 : index
    %c63 = arith.constant 63 : index
    %n0 = arith.addi %tx, %one : index
    %n = arith.andi %n0, %c63 : index
    %q = memref.load %s[%n] : memref<64xi32, #gpu.address_space<workgroup>>
    memref.store %q, %next[%tx] : memref<64xi32>
    gpu.terminator
  }
  return
}
"""


def run_kernel(source):
    """Prints `source` with moe-opt (the form the emulator reads) and runs
    it; returns the two output arrays."""
    text = subprocess.run([str(build_dir() / "bin" / "moe-opt")], input=source,
                          capture_output=True, text=True, check=True).stdout
    masks, following = np.zeros(64, np.int32), np.zeros(64, np.int32)
    emulator.run_function(text, "k", masks, following)
    return masks, following


def test_match_any_gives_each_lane_its_value_s_lanes():
    masks, following = run_kernel(KERNEL)
    lane = np.arange(64)
    want = [sum(1 << j for j in range(32) if (t - t % 32 + j) % 3 == t % 3) for t in lane]
    assert masks.view(np.uint32).tolist() == want
    popc = np.array([bin(w).count("1") for w in want])
    assert following.tolist() == popc[(lane + 1) % 64].tolist()


def test_a_missing_barrier_is_a_race():
    with pytest.raises(emulator.KernelError, match="race on workgroup"):
        run_kernel(KERNEL.replace("    gpu.barrier\n", ""))


def test_a_barrier_some_threads_skip_raises():
    divergent = KERNEL.replace("    gpu.barrier\n", """    %c5 = arith.constant 5 : index
    %few = arith.cmpi ult, %tx, %c5 : index
    scf.if %few {
      gpu.barrier
    }
""")
    with pytest.raises(emulator.KernelError, match="reached by 5 of 64 threads"):
        run_kernel(divergent)


def test_reading_unwritten_workgroup_memory_raises():
    with pytest.raises(emulator.KernelError, match="where nothing was written"):
        run_kernel("\n".join(line for line in KERNEL.splitlines()
                              if "memref.store %p" not in line))


def test_a_warp_sync_does_not_order_two_warps():
    """Lane 31 reads what lane 0 of the next warp wrote."""
    with pytest.raises(emulator.KernelError, match=r"race on workgroup %arg14\[32\]"):
        run_kernel(KERNEL.replace("    gpu.barrier\n", "    nvvm.bar.warp.sync %all : i32\n"))


@pytest.mark.parametrize("chunk", [64, emulator.CHUNK_THREADS])
def test_blocks_writing_one_element_race(monkeypatch, chunk):
    """Two blocks store to the same global elements: in one chunk of blocks
    the same store's lanes collide, in chunks of a block the detector sees
    block 1 write after block 0."""
    monkeypatch.setattr(emulator, "CHUNK_THREADS", chunk)
    two_blocks = KERNEL.replace("(%gx = %c1,", "(%gx = %c2,").replace(
        "  %c1 = arith.constant 1 : index\n",
        "  %c1 = arith.constant 1 : index\n  %c2 = arith.constant 2 : index\n")
    with pytest.raises(emulator.KernelError, match="lanes racing|thread 0 of block 1 writes"):
        run_kernel(two_blocks)
