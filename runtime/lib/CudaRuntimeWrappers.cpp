//===- CudaRuntimeWrappers.cpp - mgpu* calls of MLIR's gpu-to-llvm ---------===//
//
// The host side of compiled GPU code: MLIR's gpu-to-llvm lowering (and the
// gpu.binary translation) call these `mgpu*` functions, implemented here on
// the CUDA driver API. Compiled code has no error path, so a failed call
// prints the CUDA error name and the call, then ends the process.
//
// The driver is not linked: libcuda.so.1 exists only where a GPU driver is
// installed, and every program linking libmoert (MPI-only runs included)
// would fail to load without it. Driver functions are looked up through
// cudart (cudaGetDriverEntryPointByVersion) on first use instead.
//
// Work runs in the primary context of the default device: the one given to
// mgpuSetDefaultDevice, else whatever context is current on the calling
// thread (the NCCL backend's cudaSetDevice makes its GPU's current), else
// device 0. Primary contexts are shared with cudart and NCCL and are kept
// for the life of the process.
//
//===----------------------------------------------------------------------===//
#include <cuda.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

// Each name expands (through cuda.h's macros) to the versioned function the
// headers declare, so decltype gives the matching prototype.
#define MOERT_DRIVER_FUNCTIONS(X)                                              \
  X(cuInit)                                                                    \
  X(cuGetErrorName)                                                            \
  X(cuDeviceGet)                                                               \
  X(cuDevicePrimaryCtxRetain)                                                  \
  X(cuCtxGetCurrent)                                                           \
  X(cuCtxSetCurrent)                                                           \
  X(cuModuleLoadData)                                                          \
  X(cuModuleLoadDataEx)                                                        \
  X(cuModuleUnload)                                                            \
  X(cuModuleGetFunction)                                                       \
  X(cuFuncSetAttribute)                                                        \
  X(cuLaunchKernel)                                                            \
  X(cuStreamCreate)                                                            \
  X(cuStreamSynchronize)                                                       \
  X(cuStreamIsCapturing)                                                       \
  X(cuStreamDestroy)                                                           \
  X(cuStreamWaitEvent)                                                         \
  X(cuEventCreate)                                                             \
  X(cuEventDestroy)                                                            \
  X(cuEventSynchronize)                                                        \
  X(cuEventRecord)                                                             \
  X(cuMemAlloc)                                                                \
  X(cuMemAllocManaged)                                                         \
  X(cuMemFree)                                                                 \
  X(cuMemcpyAsync)                                                             \
  X(cuMemsetD32Async)                                                          \
  X(cuMemsetD16Async)                                                          \
  X(cuMemsetD8Async)

/// Driver entry points, resolved once.
struct Driver {
#define MOERT_DRIVER_MEMBER(name) decltype(&name) name##_ = nullptr;
  MOERT_DRIVER_FUNCTIONS(MOERT_DRIVER_MEMBER)
#undef MOERT_DRIVER_MEMBER
};

/// Same shape as CApi.cpp's die(): the pause lets other ranks print theirs.
[[noreturn]] void die(const std::string &message) {
  std::fprintf(stderr, "moert: error: %s\n", message.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::_Exit(1);
}

const Driver &driver() {
  static const Driver table = [] {
    Driver d;
    cudaDriverEntryPointQueryResult found;
#define MOERT_DRIVER_LOOKUP(name)                                              \
  if (cudaError_t rc = cudaGetDriverEntryPointByVersion(                       \
          #name, reinterpret_cast<void **>(&d.name##_), CUDA_VERSION,          \
          cudaEnableDefault, &found))                                          \
    die(std::string("looking up " #name " in the CUDA driver failed: ") +      \
        cudaGetErrorName(rc));                                                 \
  if (found != cudaDriverEntryPointSuccess || !d.name##_)                      \
    die("the CUDA driver has no " #name);
    MOERT_DRIVER_FUNCTIONS(MOERT_DRIVER_LOOKUP)
#undef MOERT_DRIVER_LOOKUP
    return d;
  }();
  return table;
}

/// Dies unless `result` is CUDA_SUCCESS, naming the error and the call.
void check(CUresult result, const char *call) {
  if (result == CUDA_SUCCESS)
    return;
  const char *name = nullptr;
  if (driver().cuGetErrorName_(result, &name) != CUDA_SUCCESS || !name)
    name = "unknown CUDA error";
  die(std::string(call) + " failed: " + name + " (" + std::to_string(result) +
      ")");
}

#define CU(function, ...) check(driver().function##_(__VA_ARGS__), #function)

std::atomic<int32_t> defaultDevice{-1};

/// Makes the default device's primary context current on this thread.
void useContext() {
  static std::once_flag initialized;
  std::call_once(initialized, [] { CU(cuInit, 0); });
  int32_t device = defaultDevice.load();
  if (device < 0) {
    CUcontext current = nullptr;
    CU(cuCtxGetCurrent, &current);
    if (current)
      return;
    device = 0;
  }
  // Retain is reference counted, so remember each device's context once.
  static std::mutex mutex;
  static CUcontext contexts[64] = {};
  if (device >= 64)
    die("mgpu: device " + std::to_string(device) + " is out of range");
  CUcontext context;
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!contexts[device]) {
      CUdevice handle;
      CU(cuDeviceGet, &handle, device);
      CU(cuDevicePrimaryCtxRetain, &contexts[device], handle);
    }
    context = contexts[device];
  }
  CU(cuCtxSetCurrent, context);
}

/// Runs an entry's body; an exception (out of memory while building a
/// message, std::system_error from call_once) ends the process like every
/// other failure here, naming the entry, instead of unwinding into C.
template <typename F> auto guarded(const char *entry, F body) -> decltype(body()) {
  try {
    return body();
  } catch (const std::exception &e) {
    std::fprintf(stderr, "moert: error: %s: %s\n", entry, e.what());
  } catch (...) {
    std::fprintf(stderr, "moert: error: %s: unknown exception\n", entry);
  }
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::_Exit(1);
}

CUstream asStream(void *stream) { return static_cast<CUstream>(stream); }

/// A stream's side stream (moe-gpu-side-stream) and the events that order
/// them; made on first use, kept for the life of the process.
struct SideStream {
  CUstream stream = nullptr;
  CUevent forked = nullptr, joined = nullptr;
};

/// The side stream of `stream` in the current context. Two threads on one
/// stream share it: an event recorded again by the other thread only makes
/// a wait longer, never shorter, as both record on the same streams.
SideStream &sideOf(void *stream) {
  static std::mutex mutex;
  static std::map<std::pair<CUcontext, void *>, SideStream> sides;
  useContext();
  CUcontext context = nullptr;
  CU(cuCtxGetCurrent, &context);
  std::lock_guard<std::mutex> lock(mutex);
  SideStream &side = sides[{context, stream}];
  if (!side.stream) {
    CU(cuStreamCreate, &side.stream, CU_STREAM_NON_BLOCKING);
    CU(cuEventCreate, &side.forked, CU_EVENT_DISABLE_TIMING);
    CU(cuEventCreate, &side.joined, CU_EVENT_DISABLE_TIMING);
  }
  return side;
}
CUdeviceptr asDevicePtr(void *pointer) {
  return reinterpret_cast<CUdeviceptr>(pointer);
}
} // namespace

extern "C" {

/// Loads a cubin or fatbin; `size` is not needed by the driver.
void *mgpuModuleLoad(void *data, size_t /*size*/) {
  return guarded("mgpuModuleLoad", [&] {
    useContext();
    CUmodule module = nullptr;
    CU(cuModuleLoadData, &module, data);
    return module;
  });
}

/// JIT-compiles NUL-terminated PTX at `optLevel` (0-4).
void *mgpuModuleLoadJIT(void *data, int optLevel) {
  return guarded("mgpuModuleLoadJIT", [&] {
    useContext();
    CUmodule module = nullptr;
    CUjit_option options[] = {CU_JIT_OPTIMIZATION_LEVEL};
    void *values[] = {reinterpret_cast<void *>(intptr_t(optLevel))};
    CU(cuModuleLoadDataEx, &module, data, 1, options, values);
    return module;
  });
}

/// Runs from a library's destructors, possibly after the driver has shut
/// down at process exit (it then unloaded every module itself).
void mgpuModuleUnload(void *module) {
  return guarded("mgpuModuleUnload", [&] {
    CUcontext current = nullptr;
    if (driver().cuCtxGetCurrent_(&current) == CUDA_ERROR_DEINITIALIZED)
      return;
    useContext();
    CUresult result = driver().cuModuleUnload_(static_cast<CUmodule>(module));
    if (result != CUDA_ERROR_DEINITIALIZED)
      check(result, "cuModuleUnload");
  });
}

void *mgpuModuleGetFunction(void *module, const char *name) {
  return guarded("mgpuModuleGetFunction", [&] {
    useContext();
    CUfunction function = nullptr;
    CU(cuModuleGetFunction, &function, static_cast<CUmodule>(module), name);
    return function;
  });
}

/// `params` holds one pointer per kernel argument (`paramsCount` of them).
void mgpuLaunchKernel(void *function, int64_t gridX, int64_t gridY,
                      int64_t gridZ, int64_t blockX, int64_t blockY,
                      int64_t blockZ, int32_t smem, void *stream,
                      void **params, void **extra, size_t /*paramsCount*/) {
  return guarded("mgpuLaunchKernel", [&] {
    // A loop nest over no elements (no tokens, an expert-free slice) is no
    // launch; the driver would reject a zero-sized grid.
    if (gridX == 0 || gridY == 0 || gridZ == 0)
      return;
    if (gridX > 0x7fffffff || gridY > 65535 || gridZ > 65535)
      die("mgpuLaunchKernel: grid " + std::to_string(gridX) + " x " +
          std::to_string(gridY) + " x " + std::to_string(gridZ) +
          " exceeds the device's limits (2^31-1 x 65535 x 65535)");
    useContext();
    auto kernel = static_cast<CUfunction>(function);
    // Above 48 KiB, dynamic shared memory must be opted into per kernel.
    if (smem > 48 * 1024)
      CU(cuFuncSetAttribute, kernel,
         CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, smem);
    CU(cuLaunchKernel, kernel, unsigned(gridX), unsigned(gridY), unsigned(gridZ),
       unsigned(blockX), unsigned(blockY), unsigned(blockZ), unsigned(smem),
       asStream(stream), params, extra);
  });
}

void *mgpuStreamCreate() {
  return guarded("mgpuStreamCreate", [&] {
    useContext();
    CUstream stream = nullptr;
    CU(cuStreamCreate, &stream, CU_STREAM_NON_BLOCKING);
    return stream;
  });
}

void mgpuStreamSynchronize(void *stream) {
  return guarded("mgpuStreamSynchronize", [&] {
    useContext();
    CU(cuStreamSynchronize, asStream(stream));
  });
}

/// Whether `stream` is being captured into a CUDA graph (the runtime then
/// refuses to wait for it or to copy host memory on it).
int moertGpuStreamIsCapturing(void *stream) {
  return guarded("moertGpuStreamIsCapturing", [&] {
    useContext();
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    CU(cuStreamIsCapturing, asStream(stream), &status);
    return status != CU_STREAM_CAPTURE_STATUS_NONE ? 1 : 0;
  });
}

void mgpuStreamDestroy(void *stream) {
  return guarded("mgpuStreamDestroy", [&] {
    useContext();
    CU(cuStreamDestroy, asStream(stream));
  });
}

void mgpuStreamWaitEvent(void *stream, void *event) {
  return guarded("mgpuStreamWaitEvent", [&] {
    useContext();
    CU(cuStreamWaitEvent, asStream(stream), static_cast<CUevent>(event), 0);
  });
}

void *mgpuEventCreate() {
  return guarded("mgpuEventCreate", [&] {
    useContext();
    CUevent event = nullptr;
    CU(cuEventCreate, &event, CU_EVENT_DISABLE_TIMING);
    return event;
  });
}

void mgpuEventDestroy(void *event) {
  return guarded("mgpuEventDestroy", [&] {
    useContext();
    CU(cuEventDestroy, static_cast<CUevent>(event));
  });
}

void mgpuEventSynchronize(void *event) {
  return guarded("mgpuEventSynchronize", [&] {
    useContext();
    CU(cuEventSynchronize, static_cast<CUevent>(event));
  });
}

void mgpuEventRecord(void *event, void *stream) {
  return guarded("mgpuEventRecord", [&] {
    useContext();
    CU(cuEventRecord, static_cast<CUevent>(event), asStream(stream));
  });
}

/// Device memory, or managed memory visible to the host when `isHostShared`.
void *mgpuMemAlloc(uint64_t size, void * /*stream*/, bool isHostShared) {
  return guarded("mgpuMemAlloc", [&]() -> void * {
    useContext();
    if (size == 0)
      return nullptr;
    CUdeviceptr pointer = 0;
    if (isHostShared)
      CU(cuMemAllocManaged, &pointer, size, CU_MEM_ATTACH_GLOBAL);
    else
      CU(cuMemAlloc, &pointer, size);
    return reinterpret_cast<void *>(pointer);
  });
}

void mgpuMemFree(void *pointer, void * /*stream*/) {
  return guarded("mgpuMemFree", [&] {
    useContext();
    if (pointer)
      CU(cuMemFree, asDevicePtr(pointer));
  });
}

/// Copies `size` bytes; unified addressing tells host from device.
void mgpuMemcpy(void *dst, void *src, size_t size, void *stream) {
  return guarded("mgpuMemcpy", [&] {
    useContext();
    CU(cuMemcpyAsync, asDevicePtr(dst), asDevicePtr(src), size, asStream(stream));
  });
}

/// Sets `count` 32-bit elements.
void mgpuMemset32(void *dst, unsigned int value, size_t count, void *stream) {
  return guarded("mgpuMemset32", [&] {
    useContext();
    CU(cuMemsetD32Async, asDevicePtr(dst), value, count, asStream(stream));
  });
}

/// Sets `count` 16-bit elements.
void mgpuMemset16(void *dst, unsigned short value, size_t count, void *stream) {
  return guarded("mgpuMemset16", [&] {
    useContext();
    CU(cuMemsetD16Async, asDevicePtr(dst), value, count, asStream(stream));
  });
}

/// Sets `count` bytes (the staging's unaligned ends: a copy from a host
/// value would be captured into a CUDA graph with the value's address).
void moertGpuMemset8(void *dst, unsigned char value, size_t count, void *stream) {
  return guarded("moertGpuMemset8", [&] {
    useContext();
    CU(cuMemsetD8Async, asDevicePtr(dst), value, count, asStream(stream));
  });
}

/// Makes `device` the one later calls use (before any other mgpu call).
void mgpuSetDefaultDevice(int32_t device) { defaultDevice.store(device); }

/// The side stream of `stream` (null: the legacy default stream), made
/// once: an entry's second stream (moe-gpu-side-stream).
void *moertGpuSideStream(void *stream) {
  return guarded("moertGpuSideStream", [&] { return static_cast<void *>(sideOf(stream).stream); });
}

/// The side stream's next work waits for what `stream` holds so far.
void moertGpuForkSide(void *stream) {
  return guarded("moertGpuForkSide", [&] {
    SideStream &side = sideOf(stream);
    CU(cuEventRecord, side.forked, asStream(stream));
    CU(cuStreamWaitEvent, side.stream, side.forked, 0);
  });
}

/// `stream`'s next work waits for what its side stream holds so far.
void moertGpuJoinSide(void *stream) {
  return guarded("moertGpuJoinSide", [&] {
    SideStream &side = sideOf(stream);
    CU(cuEventRecord, side.joined, side.stream);
    CU(cuStreamWaitEvent, asStream(stream), side.joined, 0);
  });
}

} // extern "C"
