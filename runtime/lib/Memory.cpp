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
#include <cstring>
#include <vector>
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

/// MLIR's unranked memref: the rank and a pointer to a ranked descriptor
/// {allocated, aligned, offset, sizes[rank], strides[rank]}.
struct UnrankedMemref {
  int64_t rank;
  void *descriptor;
};

/// Strided copy that memref.copy lowers to when a side is not contiguous
/// (e.g. writing a chunk's rows into the layer's output).
void memrefCopy(int64_t elementSize, UnrankedMemref *src, UnrankedMemref *dst) {
  struct View {
    char *base;
    const int64_t *sizes, *strides;
  };
  auto view = [&](UnrankedMemref *m) {
    auto *d = static_cast<char *>(m->descriptor);
    char *aligned = *reinterpret_cast<char **>(d + sizeof(void *));
    int64_t offset = *reinterpret_cast<int64_t *>(d + 2 * sizeof(void *));
    auto *sizes = reinterpret_cast<const int64_t *>(d + 2 * sizeof(void *) + 8);
    return View{aligned + offset * elementSize, sizes, sizes + m->rank};
  };
  View from = view(src), to = view(dst);
  int64_t rank = src->rank, count = 1;
  for (int64_t d = 0; d < rank; ++d)
    count *= from.sizes[d];
  std::vector<int64_t> index(rank, 0);
  for (int64_t n = 0; n < count; ++n) {
    int64_t a = 0, b = 0;
    for (int64_t d = 0; d < rank; ++d) {
      a += index[d] * from.strides[d];
      b += index[d] * to.strides[d];
    }
    std::memcpy(to.base + b * elementSize, from.base + a * elementSize, elementSize);
    for (int64_t d = rank - 1; d >= 0 && ++index[d] == from.sizes[d]; --d)
      index[d] = 0;
  }
}

void moert_free(void *p) { _mlir_memref_to_llvm_free(p); }
int64_t moert_heap_live_bytes(void) { return live.load(); }
int64_t moert_heap_peak_bytes(void) { return peak.load(); }
void moert_heap_reset_peak(void) { peak.store(live.load()); }

} // extern "C"
