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

#include "Fatal.h"

#include <atomic>
#include <cstring>
#include <vector>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

namespace {
std::mutex mutex;
struct Block {
  int64_t bytes;    // what the layer asked for
  size_t alignment; // 0: malloc
  size_t rounded;   // what was allocated
};
std::unordered_map<void *, Block> sizes; // live tracked allocations
std::atomic<int64_t> live{0}, peak{0};

// Freed large blocks, kept for the next call of the layer, which asks for the
// same sizes: without them every call pays the kernel for fresh zeroed pages
// (a quarter of a prefill call's time). At most `cacheLimit()` bytes.
constexpr size_t kCachedMin = size_t(1) << 20;
std::unordered_multimap<size_t, std::pair<void *, size_t>> cache; // rounded -> (p, alignment)
size_t cachedBytes = 0;

size_t cacheLimit() {
  static const size_t limit = [] {
    const char *text = std::getenv("MOERT_ALLOC_CACHE_BYTES");
    if (!text || !*text)
      return size_t(4) << 30;
    char *end = nullptr;
    unsigned long long value = std::strtoull(text, &end, 10);
    return *end ? size_t(4) << 30 : size_t(value);
  }();
  return limit;
}

/// A cached block of `rounded` bytes with `alignment`, or null.
void *reuse(size_t rounded, size_t alignment) {
  if (rounded < kCachedMin)
    return nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  auto [first, last] = cache.equal_range(rounded);
  for (auto it = first; it != last; ++it)
    if (it->second.second == alignment) {
      void *p = it->second.first;
      cache.erase(it);
      cachedBytes -= rounded;
      return p;
    }
  return nullptr;
}

/// Compiled code does not check what it gets: a failed allocation ends the
/// process with a message (every rank told) instead of a null dereference.
void *track(void *p, size_t size, size_t alignment, size_t rounded, const char *entry) {
  if (!p)
    moert::fatal("memory", std::string(entry) + ": cannot allocate " +
                               std::to_string(size) + " bytes (out of memory)");
  int64_t bytes = int64_t(size);
  std::lock_guard<std::mutex> lock(mutex);
  try {
    sizes.emplace(p, Block{bytes, alignment, rounded});
  } catch (...) {
    moert::fatal("memory", std::string(entry) + ": out of memory for its bookkeeping");
  }
  int64_t now = live += bytes;
  int64_t high = peak.load();
  while (now > high && !peak.compare_exchange_weak(high, now)) {
  }
  return p;
}
} // namespace

extern "C" {

void *_mlir_memref_to_llvm_alloc(size_t size) try {
  if (size > size_t(INT64_MAX))
    moert::fatal("memory", "_mlir_memref_to_llvm_alloc: " + std::to_string(size) +
                               " bytes do not fit int64");
  size_t rounded = size ? size : 1;
  void *p = reuse(rounded, 0);
  return track(p ? p : std::malloc(rounded), size, 0, rounded,
               "_mlir_memref_to_llvm_alloc");
} catch (...) {
  moert::fatalOutOfMemory("_mlir_memref_to_llvm_alloc");
}

void *_mlir_memref_to_llvm_aligned_alloc(size_t alignment, size_t size) try {
  // aligned_alloc wants a power-of-two alignment (at least a pointer's) and
  // a multiple of it; both are checked, and the rounding for overflow.
  if (alignment < sizeof(void *))
    alignment = sizeof(void *);
  size_t rounded = 0;
  if ((alignment & (alignment - 1)) != 0 || size > size_t(INT64_MAX) ||
      __builtin_add_overflow(size, alignment - 1, &rounded))
    moert::fatal("memory", "_mlir_memref_to_llvm_aligned_alloc: " + std::to_string(size) +
                               " bytes aligned to " + std::to_string(alignment) +
                               " cannot be allocated");
  rounded = rounded / alignment * alignment;
  if (!rounded)
    rounded = alignment;
  void *p = reuse(rounded, alignment);
  return track(p ? p : std::aligned_alloc(alignment, rounded), size, alignment, rounded,
               "_mlir_memref_to_llvm_aligned_alloc");
} catch (...) {
  moert::fatalOutOfMemory("_mlir_memref_to_llvm_aligned_alloc");
}

void _mlir_memref_to_llvm_free(void *p) {
  if (!p)
    return;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto it = sizes.find(p);
    if (it != sizes.end()) {
      Block block = it->second;
      live -= block.bytes;
      sizes.erase(it);
      if (block.rounded >= kCachedMin && cachedBytes + block.rounded <= cacheLimit()) {
        try {
          cache.emplace(block.rounded, std::make_pair(p, block.alignment));
          cachedBytes += block.rounded;
          return;
        } catch (...) {
          // No room for the bookkeeping: free the block instead.
        }
      }
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

} // extern "C"

namespace {
void copyStrided(int64_t elementSize, UnrankedMemref *src, UnrankedMemref *dst) {
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
  if (!src || !dst || !src->descriptor || !dst->descriptor || elementSize <= 0 ||
      src->rank < 0 || src->rank != dst->rank)
    moert::fatal("memory", "memrefCopy: null or mismatched memrefs (ranks " +
                               std::to_string(src ? src->rank : -1) + " and " +
                               std::to_string(dst ? dst->rank : -1) + ")");
  View from = view(src), to = view(dst);
  int64_t rank = src->rank, count = 1;
  for (int64_t d = 0; d < rank; ++d) {
    if (from.sizes[d] != to.sizes[d] || from.sizes[d] < 0 ||
        __builtin_mul_overflow(count, from.sizes[d], &count))
      moert::fatal("memory", "memrefCopy: source and destination disagree on dimension " +
                                 std::to_string(d) + " (" + std::to_string(from.sizes[d]) +
                                 " and " + std::to_string(to.sizes[d]) + ")");
  }
  if (count == 0)
    return;
  std::vector<int64_t> index(size_t(rank), 0);
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
} // namespace

extern "C" {

/// Strided copy that memref.copy lowers to when a side is not contiguous
/// (e.g. writing a chunk's rows into the layer's output). Shapes are
/// checked; no exception leaves it.
void memrefCopy(int64_t elementSize, UnrankedMemref *src, UnrankedMemref *dst) {
  try {
    copyStrided(elementSize, src, dst);
  } catch (...) {
    moert::fatalOutOfMemory("memrefCopy");
  }
}

void moert_free(void *p) { _mlir_memref_to_llvm_free(p); }
int64_t moert_heap_live_bytes(void) { return live.load(); }
int64_t moert_heap_peak_bytes(void) { return peak.load(); }
void moert_heap_reset_peak(void) { peak.store(live.load()); }

} // extern "C"
