//===- FakeDeviceCopies.cpp - libmoert_cuda's copies, on protected pages ---===//
//
// Stands in for libmoert_cuda.so in StagingTest ($MOERT_CUDA_LIBRARY), and
// with FakeNccl.cpp in the nccl backend's checks (nccl_check.cpp): its
// "device" memory is pages that nobody may touch (PROT_NONE) except these
// copies and fills, so a runtime that read or wrote a device buffer directly
// instead of staging it crashes the test. Copies, fills and waits must name
// the test's stream and are counted. Copies and fills run when the stream
// is waited for (or the test reads device memory), as on a GPU, so a
// runtime that read a staged buffer before waiting reads stale bytes; a
// host source is read when the copy is enqueued, as the driver reads
// pageable memory.
//
//===----------------------------------------------------------------------===//
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

namespace {
struct Region {
  uintptr_t begin;
  size_t length;
};
std::vector<Region> regions;
int copies = 0, waits = 0;
void *expectedStream = nullptr;
/// The stream's work, in order; an item returns false while it cannot end
/// yet (a collective waiting for its peers), and is called again.
std::deque<std::function<bool()>> pending;

/// The fake device allocation holding [p, p + n), or null if it is host memory.
const Region *deviceRegion(const void *p, size_t n) {
  for (const Region &r : regions)
    if (uintptr_t(p) >= r.begin && uintptr_t(p) + n <= r.begin + r.length)
      return &r;
  return nullptr;
}
void setAccess(const Region *r, int protection) {
  if (r && mprotect(reinterpret_cast<void *>(r->begin), r->length, protection) != 0)
    std::abort();
}
/// Copies with the device side(s) opened for the copy only.
void copy(void *dst, const void *src, size_t n) {
  if (n == 0) // memmove's pointers must not be null, even for no bytes
    return;
  const Region *to = deviceRegion(dst, n), *from = deviceRegion(src, n);
  setAccess(from, PROT_READ);
  setAccess(to, PROT_READ | PROT_WRITE);
  std::memmove(dst, src, n);
  setAccess(from, PROT_NONE);
  setAccess(to, PROT_NONE);
}
/// Runs the stream's work as far as it can; true when none is left.
bool progress() {
  while (!pending.empty()) {
    if (!pending.front()())
      return false;
    pending.pop_front();
  }
  return true;
}
void runPending() {
  while (!progress())
    std::this_thread::sleep_for(std::chrono::microseconds(20));
}
/// Enqueues a copy on the stream; a host source is read now.
void enqueueCopy(void *dst, const void *src, size_t n) {
  if (deviceRegion(src, n)) {
    pending.push_back([=] {
      copy(dst, src, n);
      return true;
    });
    return;
  }
  std::vector<char> bytes(static_cast<const char *>(src), static_cast<const char *>(src) + n);
  pending.push_back([=] {
    copy(dst, bytes.data(), n);
    return true;
  });
}
} // namespace

/// Enqueues `work` on the test's stream (FakeNccl.cpp's collectives and
/// events there); false for another stream, whose work runs at once.
bool fakeDeviceEnqueue(void *stream, std::function<bool()> work) {
  if (stream != expectedStream)
    return false;
  pending.push_back(std::move(work));
  return true;
}

extern "C" {
/// `bytes` of fake device memory on pages of their own.
void *fake_device_alloc(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  const size_t length = bytes ? (bytes + page - 1) / page * page : page;
  void *p = mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    return nullptr;
  regions.push_back({uintptr_t(p), length});
  return p;
}
/// The test's own access, not counted: after the stream's work, as a test
/// on a GPU would synchronise first.
void fake_device_copy(void *dst, const void *src, size_t n) {
  runPending();
  copy(dst, src, n);
}
/// The test's work on the stream (as a layer's kernels fill a buffer
/// before a runtime call), not counted.
void fake_device_produce(void *dst, const void *src, size_t n, void *stream) {
  if (stream != expectedStream || !deviceRegion(dst, n))
    std::abort();
  enqueueCopy(dst, src, n);
}
/// A copy now, whatever the stream holds: FakeNccl.cpp's work on its own
/// stream, which does not wait for the layer's.
void fake_device_copy_now(void *dst, const void *src, size_t n) { copy(dst, src, n); }
/// Whether the work on `stream` is done, running what can run (a query).
int fake_device_idle(void *stream) { return stream != expectedStream || progress(); }
/// How many items of the stream's work have not run (none is run here).
int fake_device_pending() { return int(pending.size()); }
/// Whether [p, p + n) lies in one fake device allocation.
int fake_device_holds(const void *p, size_t n) { return deviceRegion(p, n) != nullptr; }
void fake_device_expect_stream(void *stream) { expectedStream = stream; }
int fake_device_copies() { return copies; }
int fake_device_waits() { return waits; }

// The entries of libmoert_cuda that the staging uses.
/// $FAKE_CUDA_CAPTURING=1: every stream is being captured (as FakeNccl.cpp's
/// cudaStreamIsCapturing says).
int moertGpuStreamIsCapturing(void *) {
  const char *capturing = std::getenv("FAKE_CUDA_CAPTURING");
  return capturing && std::strcmp(capturing, "1") == 0;
}
void mgpuMemcpy(void *dst, void *src, size_t n, void *stream) {
  if (stream != expectedStream || (!deviceRegion(dst, n) && !deviceRegion(src, n)))
    std::abort(); // another stream, or a copy between host buffers
  // A stream being captured into a CUDA graph ($FAKE_CUDA_CAPTURING, as
  // FakeNccl.cpp's cudaStreamIsCapturing reports) would record a host
  // source's address, which every replay reads long after the call.
  if (!deviceRegion(src, n) && moertGpuStreamIsCapturing(stream)) {
    std::fprintf(stderr, "fake device: a copy from host memory on a stream being captured\n");
    std::abort();
  }
  ++copies;
  enqueueCopy(dst, src, n);
}
void mgpuMemset32(void *dst, unsigned value, size_t count, void *stream) {
  // cuMemsetD32Async fails on a destination that is not 4-byte aligned.
  if (stream != expectedStream || !deviceRegion(dst, 4 * count) ||
      reinterpret_cast<uintptr_t>(dst) % 4 != 0)
    std::abort();
  ++copies;
  std::vector<unsigned> words(count, value);
  enqueueCopy(dst, words.data(), 4 * count);
}
void moertGpuMemset8(void *dst, unsigned char value, size_t count, void *stream) {
  if (stream != expectedStream || !deviceRegion(dst, count))
    std::abort();
  ++copies;
  std::vector<unsigned char> bytes(count, value);
  enqueueCopy(dst, bytes.data(), count);
}
void mgpuStreamSynchronize(void *stream) {
  if (stream != expectedStream)
    std::abort();
  if (moertGpuStreamIsCapturing(stream)) { // CUDA refuses it, ending the capture
    std::fprintf(stderr, "fake device: a wait for a stream being captured\n");
    std::abort();
  }
  ++waits;
  runPending();
}
}
