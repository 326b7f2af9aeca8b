//===- Memory.cpp - the heap of compiled layers, measured -----------------===//
//
// Compiled code allocates through MLIR's generic allocation functions
// (finalize-memref-to-llvm{use-generic-functions}); the runtime provides them
// so that every buffer a layer allocates is counted: live bytes and the
// high-water mark, which the chunk planner's budget is checked against.
// Pointers not allocated here (e.g. runtime results made with malloc) are
// recognised and passed to free().
//
//===----------------------------------------------------------------------===//
#include "moert/moert.h"

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

namespace {
std::mutex mutex;
std::unordered_map<void *, int64_t> sizes; // live tracked allocations
std::atomic<int64_t> live{0}, peak{0};

void *track(void *p, int64_t bytes) {
  if (!p)
    return p;
  std::lock_guard<std::mutex> lock(mutex);
  sizes.emplace(p, bytes);
  int64_t now = live += bytes;
  int64_t high = peak.load();
  while (now > high && !peak.compare_exchange_weak(high, now)) {
  }
  return p;
}
} // namespace

extern "C" {

void *_mlir_memref_to_llvm_alloc(size_t size) {
  return track(std::malloc(size ? size : 1), int64_t(size));
}

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) {
  size_t rounded = (size + alignment - 1) / alignment * alignment;
  return track(std::aligned_alloc(alignment, rounded ? rounded : alignment),
               int64_t(size));
}

void _mlir_memref_to_llvm_free(void *p) {
  if (!p)
    return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(p);
    if (it != sizes.end()) {
      live -= it->second;
      sizes.erase(it);
    }
  }
  std::free(p);
}

void moert_free(void *p) { _mlir_memref_to_llvm_free(p); }
int64_t moert_heap_live_bytes(void) { return live.load(); }
int64_t moert_heap_peak_bytes(void) { return peak.load(); }
void moert_heap_reset_peak(void) { peak.store(live.load()); }

} // extern "C"
