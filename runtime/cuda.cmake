# The NCCL communicator and the mgpu* wrappers that MLIR's gpu-to-llvm
# lowering calls. Included from CMakeLists.txt when MOERT_ENABLE_CUDA is ON;
# without a CUDA toolkit (or NCCL) the parts are skipped, not an error.

if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "moert: CUDA toolkit not found; building without NCCL and mgpu* wrappers")
  return()
endif()

find_path(MOERT_NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(MOERT_NCCL_LIBRARY nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64
        ${CUDAToolkit_LIBRARY_ROOT}/lib)
if(NOT MOERT_NCCL_INCLUDE_DIR OR NOT MOERT_NCCL_LIBRARY)
  message(STATUS "moert: NCCL not found next to CUDA ${CUDAToolkit_VERSION}; building without NCCL and mgpu* wrappers")
  return()
endif()

# The driver (libcuda.so.1) exists only on machines with a GPU driver; the
# wrappers look its functions up through cudart at run time rather than
# linking it, so libmoert still loads on machines without one.
target_sources(moert PRIVATE lib/CudaRuntimeWrappers.cpp)
target_include_directories(moert PRIVATE ${MOERT_NCCL_INCLUDE_DIR})
target_link_libraries(moert PRIVATE CUDA::cudart)
target_compile_definitions(moert PRIVATE MOERT_HAVE_CUDA)

# NCCL bootstraps (ranks, unique id) and agrees on collectives over MPI.
if(NOT MOERT_ENABLE_MPI)
  message(STATUS "moert: CUDA ${CUDAToolkit_VERSION} found, but the NCCL communicator needs MOERT_ENABLE_MPI; building without it")
  return()
endif()
target_sources(moert PRIVATE lib/NCCLCommunicator.cpp)
target_link_libraries(moert PRIVATE ${MOERT_NCCL_LIBRARY})
target_compile_definitions(moert PRIVATE MOERT_HAVE_NCCL)
message(STATUS "moert: NCCL communicator and mgpu* wrappers enabled (CUDA ${CUDAToolkit_VERSION}, ${MOERT_NCCL_LIBRARY})")

# Collective checks for a machine with a GPU (see gpu/run_gpu_check.sh).
add_executable(moert-gpu-check gpu/gpu_check.cpp)
target_include_directories(moert-gpu-check PRIVATE lib)
target_link_libraries(moert-gpu-check PRIVATE moert CUDA::cudart)
