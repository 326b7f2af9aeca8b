//===- FakeDevice.h - a test's handle on the fake libmoert_cuda -*- C++ -*-===//
//
// The fake device memory of FakeDeviceCopies.cpp, reached through the same
// library the runtime opened ($MOERT_CUDA_LIBRARY): allocations, the test's
// own copies (which first run the work enqueued on the stream, as a test on
// a GPU synchronises before it reads), and copies enqueued on the stream.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_UNITTESTS_FAKEDEVICE_H
#define MOERT_UNITTESTS_FAKEDEVICE_H

#include <dlfcn.h>

#include <cstddef>
#include <vector>

namespace moert::test {

struct FakeDevice {
  explicit FakeDevice(const char *path) : library(path ? dlopen(path, RTLD_NOW) : nullptr) {}

  template <typename F> F get(const char *name) const {
    return library ? reinterpret_cast<F>(dlsym(library, name)) : nullptr;
  }
  bool loaded() const { return alloc && copy && produceOnStream; }

  /// A device copy of `host`.
  template <typename T> T *upload(const std::vector<T> &host) const {
    auto *d = static_cast<T *>(alloc(host.size() * sizeof(T)));
    copy(d, host.data(), host.size() * sizeof(T));
    return d;
  }
  /// A device buffer filled on `stream` by work not yet run (as the layer's
  /// kernels fill their buffers before a runtime call).
  template <typename T> T *produce(const std::vector<T> &host, void *stream) const {
    auto *d = static_cast<T *>(alloc(host.size() * sizeof(T)));
    produceOnStream(d, host.data(), host.size() * sizeof(T), stream);
    return d;
  }
  template <typename T> std::vector<T> download(const T *d, size_t n) const {
    std::vector<T> host(n);
    copy(host.data(), d, n * sizeof(T));
    return host;
  }

  void *library;
  void *(*alloc)(size_t) = get<void *(*)(size_t)>("fake_device_alloc");
  void (*copy)(void *, const void *,
               size_t) = get<void (*)(void *, const void *, size_t)>("fake_device_copy");
  void (*produceOnStream)(void *, const void *, size_t, void *) =
      get<void (*)(void *, const void *, size_t, void *)>("fake_device_produce");
};

} // namespace moert::test

#endif // MOERT_UNITTESTS_FAKEDEVICE_H
