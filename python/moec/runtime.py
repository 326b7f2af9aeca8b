"""ctypes access to libmoert, the runtime compiled multi-rank layers call."""
import ctypes
import json
import os
import sys
import time

from .toolchain import build_dir


class Runtime:
    """Starts the runtime on a backend; one per process."""

    def __init__(self, backend="mpi", timeout_ms=0):
        # RTLD_GLOBAL: MPI's plugins and the compiled layer resolve against it.
        self.lib = ctypes.CDLL(str(build_dir() / "lib" / "libmoert.so"), mode=ctypes.RTLD_GLOBAL)
        self.lib.moert_init.argtypes = [ctypes.c_char_p, ctypes.c_int64]
        self.lib.moert_last_error.restype = ctypes.c_char_p
        self.lib.moert_counters_json.argtypes = [ctypes.c_char_p, ctypes.c_int64]
        self.lib.moert_counters_json.restype = ctypes.c_int64
        if self.lib.moert_init(backend.encode(), timeout_ms) != 0:
            raise RuntimeError(self.lib.moert_last_error().decode())
        self.rank = self.lib.moert_rank()
        self.size = self.lib.moert_size()

    def counters(self):
        length = self.lib.moert_counters_json(None, 0)
        buffer = ctypes.create_string_buffer(length + 1)
        self.lib.moert_counters_json(buffer, length + 1)
        return json.loads(buffer.value.decode())

    def heap_live(self):
        """Bytes that compiled layers hold now (their measured heap)."""
        self.lib.moert_heap_live_bytes.restype = ctypes.c_int64
        return self.lib.moert_heap_live_bytes()

    def heap_peak(self):
        self.lib.moert_heap_peak_bytes.restype = ctypes.c_int64
        return self.lib.moert_heap_peak_bytes()

    def reset_heap_peak(self):
        self.lib.moert_heap_reset_peak()

    def reset_counters(self):
        self.lib.moert_counters_reset()

    def barrier(self, name="host.barrier"):
        if self.lib.moert_barrier(name.encode()) != 0:
            raise RuntimeError(self.lib.moert_last_error().decode())

    def exit_failed(self, message):
        """Reports `message` as the runtime's own fatal errors do and ends the process.

        Like the runtime's fatal path it skips MPI_Finalize: a rank that
        finalizes and exits non-zero while its peers exit without finalizing
        can leave mpirun hanging (seen in CI; open-mpi/ompi#3380). The pause
        lets the peers' reports reach mpirun before it ends the job.
        """
        print(f"moert: rank {self.rank}: error: {message}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        time.sleep(0.5)
        os._exit(1)

    def finalize(self):
        self.lib.moert_finalize()
