//===- DeviceStaging.cpp - a GPU layer's buffers, staged through host -----===//
#include "DeviceStaging.h"

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
  Status error;
  void *library = openCudaLibrary(error);
  if (!library)
    return "device buffers " + *error;
  out.memcpyOnStream = reinterpret_cast<decltype(out.memcpyOnStream)>(
      dlsym(library, "mgpuMemcpy"));
  out.synchronize =
      reinterpret_cast<decltype(out.synchronize)>(dlsym(library, "mgpuStreamSynchronize"));
  if (!out.memcpyOnStream || !out.synchronize)
    return std::string("libmoert_cuda.so has no mgpuMemcpy or mgpuStreamSynchronize");
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

void DeviceStaging::wait() const {
  if (stream)
    synchronize(stream);
}
