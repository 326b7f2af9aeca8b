//===- DeviceStaging.h - a GPU layer's buffers, staged through host -*- C++ -*-===//
//
// The expert-parallel entries of GPU layers take device buffers and the
// layer's stream. With a host backend (MPI) the rows travel from host
// memory, so the entry copies its inputs to the host on that stream, waits
// for it, runs the host dispatch or combine, and copies the results back.
// The copies go through libmoert_cuda's mgpu* wrappers (the library the
// layer itself runs on), opened next to libmoert; a null stream means the
// buffers are host memory and a copy is a memcpy (CPU layers and tests).
// GPU layers pass the legacy default stream, null to CUDA, as
// CU_STREAM_LEGACY (0x1; moe-gpu-host-abi).
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_LIB_DEVICESTAGING_H
#define MOERT_LIB_DEVICESTAGING_H

#include "Communicator.h"

#include <cstdint>

namespace moert {

class DeviceStaging {
public:
  /// Copies on `stream`; null: host memory.
  static Status open(void *stream, DeviceStaging &out);

  bool onDevice() const { return stream != nullptr; }
  /// Enqueues a copy of `bytes` (either direction; unified addressing tells
  /// host from device). A host copy happens at once.
  void copy(void *dst, const void *src, int64_t bytes) const;
  /// Enqueues setting `bytes` at `dst` to `byte`.
  void fill(void *dst, uint8_t byte, int64_t bytes) const;
  /// Whether the stream is being captured into a CUDA graph.
  bool capturing() const { return stream && isCapturing(stream) != 0; }
  /// Waits for every copy enqueued so far (and the layer's kernels before
  /// them on the stream).
  void wait() const;

private:
  void *stream = nullptr;
  void (*memcpyOnStream)(void *, void *, size_t, void *) = nullptr;
  void (*synchronize)(void *) = nullptr;
  void (*memset32)(void *, unsigned, size_t, void *) = nullptr;
  void (*memset8)(void *, unsigned char, size_t, void *) = nullptr;
  int (*isCapturing)(void *) = nullptr;
};

#ifdef MOERT_HAVE_CUDA_LIBRARY
/// Opens libmoert_cuda.so from libmoert's own directory; null and `error`
/// set if it cannot.
void *openCudaLibrary(Status &error);
#endif

} // namespace moert

#endif // MOERT_LIB_DEVICESTAGING_H
