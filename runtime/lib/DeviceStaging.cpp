//===- DeviceStaging.cpp - a GPU layer's buffers, staged through host -----===//
#include "DeviceStaging.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#ifdef MOERT_HAVE_CUDA_LIBRARY
#include <dlfcn.h>
#endif

using namespace moert;

#ifdef MOERT_HAVE_CUDA_LIBRARY
/// libmoert_cuda.so beside this library (already loaded where a GPU layer
/// runs: the layer links it; dlopen then returns that copy), or the one
/// $MOERT_CUDA_LIBRARY names (tests stand a fake one in for it).
void *moert::openCudaLibrary(Status &error) {
  if (const char *path = getenv("MOERT_CUDA_LIBRARY")) {
    void *library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!library) {
      const char *why = dlerror();
      error = std::string("needs $MOERT_CUDA_LIBRARY=") + path + ": " +
              (why ? why : "cannot open it");
    }
    return library;
  }
  Dl_info self;
  if (!dladdr(reinterpret_cast<void *>(&openCudaLibrary), &self) || !self.dli_fname) {
    error = "cannot find where libmoert is loaded from";
    return nullptr;
  }
  std::string path = self.dli_fname;
  path = path.substr(0, path.find_last_of('/') + 1) + "libmoert_cuda.so";
  void *library = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!library) {
    const char *why = dlerror();
    error = "needs " + path + ": " + (why ? why : "cannot open it");
  }
  return library;
}
#endif

Status DeviceStaging::open(void *stream, DeviceStaging &out) {
  out = DeviceStaging();
  if (!stream)
    return std::nullopt;
#ifdef MOERT_HAVE_CUDA_LIBRARY
  // Looked up once per process (the library stays loaded).
  static DeviceStaging found;
  static Status problem = [] () -> Status {
    Status error;
    void *library = openCudaLibrary(error);
    if (!library)
      return "device buffers " + *error;
    found.memcpyOnStream =
        reinterpret_cast<decltype(found.memcpyOnStream)>(dlsym(library, "mgpuMemcpy"));
    found.synchronize = reinterpret_cast<decltype(found.synchronize)>(
        dlsym(library, "mgpuStreamSynchronize"));
    found.memset32 =
        reinterpret_cast<decltype(found.memset32)>(dlsym(library, "mgpuMemset32"));
    found.memset8 = reinterpret_cast<decltype(found.memset8)>(dlsym(library, "moertGpuMemset8"));
    found.isCapturing =
        reinterpret_cast<decltype(found.isCapturing)>(dlsym(library, "moertGpuStreamIsCapturing"));
    if (!found.memcpyOnStream || !found.synchronize || !found.memset32 || !found.memset8 ||
        !found.isCapturing)
      return std::string("libmoert_cuda.so lacks mgpuMemcpy, mgpuStreamSynchronize, "
                         "mgpuMemset32, moertGpuMemset8 or moertGpuStreamIsCapturing");
    return std::nullopt;
  }();
  if (problem)
    return problem;
  out = found;
  out.stream = stream;
  return std::nullopt;
#else
  return std::string("device buffers (a non-null stream) need libmoert built with "
                     "CUDA; this one was built without it");
#endif
}

void DeviceStaging::copy(void *dst, const void *src, int64_t bytes) const {
  if (bytes <= 0)
    return;
  if (stream)
    memcpyOnStream(dst, const_cast<void *>(src), size_t(bytes), stream);
  else
    std::memmove(dst, src, size_t(bytes));
}

void DeviceStaging::fill(void *dst, uint8_t byte, int64_t bytes) const {
  if (bytes <= 0)
    return;
  if (!stream) {
    std::memset(dst, byte, size_t(bytes));
    return;
  }
  // Words where aligned (cuMemsetD32Async needs a 4-byte aligned start; a
  // bf16 row count times an odd H is 2 bytes off), bytes at the ends.
  auto *at = static_cast<uint8_t *>(dst);
  const int64_t head = std::min<int64_t>((4 - reinterpret_cast<uintptr_t>(at) % 4) % 4, bytes);
  const int64_t words = (bytes - head) / 4, tail = (bytes - head) % 4;
  if (head)
    memset8(at, byte, size_t(head), stream);
  if (words)
    memset32(at + head, 0x01010101u * byte, size_t(words), stream);
  if (tail)
    memset8(at + head + 4 * words, byte, size_t(tail), stream);
}

void DeviceStaging::wait() const {
  if (stream)
    synchronize(stream);
}
