# The NCCL communicator and the mgpu* wrappers that MLIR's gpu-to-llvm
# lowering calls. Included from CMakeLists.txt when MOERT_ENABLE_CUDA is ON;
# without a CUDA toolkit the parts are skipped, not an error; without NCCL
# (or MPI) only the wrappers are built.

if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
  set(CUDAToolkit_ROOT /usr/local/cuda)
endif()
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND)
  message(STATUS "moert: CUDA toolkit not found; building without NCCL and mgpu* wrappers")
  return()
endif()

# libmoert_cuda: the mgpu* wrappers and the NCCL communicator, in a library
# of their own so that libmoert itself needs neither cudart nor NCCL: a
# process that only runs CPU layers never loads them (loading our
# libnccl.so.2 first would make PyTorch's own NCCL fail to load), and
# libmoert opens this library when the nccl backend is asked for.
# The driver (libcuda.so.1) exists only on machines with a GPU driver; the
# wrappers look its functions up through cudart at run time rather than
# linking it, so the library still loads on machines without one.
add_library(moert_cuda SHARED lib/CudaRuntimeWrappers.cpp)
target_include_directories(moert_cuda PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/lib)
target_link_libraries(moert_cuda PRIVATE moert CUDA::cudart)
target_compile_options(moert_cuda PRIVATE -fexceptions)
set_target_properties(moert_cuda PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/lib
  BUILD_RPATH "$ORIGIN" INSTALL_RPATH "$ORIGIN")
# libmoert opens it for the NCCL backend and for GPU layers' staged copies.
target_compile_definitions(moert PRIVATE MOERT_HAVE_CUDA_LIBRARY)
target_link_libraries(moert PRIVATE ${CMAKE_DL_LIBS})

find_path(MOERT_NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ${CUDAToolkit_LIBRARY_ROOT}/include)
find_library(MOERT_NCCL_LIBRARY nccl
  HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib64
        ${CUDAToolkit_LIBRARY_ROOT}/lib)
if(NOT MOERT_NCCL_INCLUDE_DIR OR NOT MOERT_NCCL_LIBRARY)
  message(STATUS "moert: NCCL not found next to CUDA ${CUDAToolkit_VERSION}; building the mgpu* wrappers without the NCCL communicator")
  return()
endif()

# NCCL bootstraps (ranks, unique id) and agrees on collectives over MPI.
if(NOT MOERT_ENABLE_MPI)
  message(STATUS "moert: CUDA ${CUDAToolkit_VERSION} found, but the NCCL communicator needs MOERT_ENABLE_MPI; building without it")
  return()
endif()
target_sources(moert_cuda PRIVATE lib/NCCLCommunicator.cpp lib/NCCLWatchdog.cpp)
target_include_directories(moert_cuda PRIVATE ${MOERT_NCCL_INCLUDE_DIR})
target_link_libraries(moert_cuda PRIVATE ${MOERT_NCCL_LIBRARY} MPI::MPI_CXX)
target_compile_definitions(moert PRIVATE MOERT_HAVE_NCCL_LIBRARY)
set(MOERT_NCCL_COMMUNICATOR ON) # unittests: the nccl backend on a fake GPU
message(STATUS "moert: NCCL communicator and mgpu* wrappers in libmoert_cuda (CUDA ${CUDAToolkit_VERSION}, ${MOERT_NCCL_LIBRARY})")

# Collective checks for a machine with a GPU (see gpu/run_gpu_check.sh).
add_executable(moert-gpu-check gpu/gpu_check.cpp)
target_include_directories(moert-gpu-check PRIVATE lib)
target_link_libraries(moert-gpu-check PRIVATE moert moert_cuda CUDA::cudart)
