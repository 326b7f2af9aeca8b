//===- FaultInjectionTest.cpp - bad_alloc at every allocation of an entry -===//
//
// Issue 9, defect 6: no exception may leave the C interface. This binary
// replaces the global operator new (libmoert's allocations resolve to it)
// with one that throws std::bad_alloc at the N-th allocation after being
// armed, once. Each entry is run with N = 0, 1, ... up to the number of
// allocations it makes: entries that return a status must return an error
// naming themselves (or succeed); entries for compiled code must end the
// process with status 1 and an "out of memory" message, never a crash or
// std::terminate.
//
//===----------------------------------------------------------------------===//
#include "ChildProcess.h"
#include "moert/moert.h"

#include "gtest/gtest.h"

#include <atomic>
#include <cstdlib>
#include <new>
#include <string>

// The replacement below pairs malloc with free on purpose.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif

namespace {
std::atomic<long> countdown{-1}; ///< allocations until the failure; -1: off
std::atomic<bool> fired{false};

void arm(long n) {
  fired = false;
  countdown = n;
}
void disarm() { countdown = -1; }
} // namespace

void *operator new(size_t n) {
  if (countdown.load() >= 0 && countdown.fetch_sub(1) == 0) {
    fired = true;
    throw std::bad_alloc();
  }
  void *p = std::malloc(n ? n : 1);
  if (!p)
    throw std::bad_alloc();
  return p;
}
void *operator new[](size_t n) { return operator new(n); }
// The nothrow forms too (the runtime's workspaces use them), so that every
// allocation pairs with the free below, sanitizers included.
void *operator new(size_t n, const std::nothrow_t &) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void *operator new[](size_t n, const std::nothrow_t &) noexcept {
  try {
    return operator new(n);
  } catch (...) {
    return nullptr;
  }
}
void operator delete(void *p) noexcept { std::free(p); }
void operator delete[](void *p) noexcept { std::free(p); }
void operator delete(void *p, size_t) noexcept { std::free(p); }
void operator delete[](void *p, size_t) noexcept { std::free(p); }

namespace {
bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

void ensureLocal() {
  if (moert_size() == 0) {
    ASSERT_EQ(moert_init("local", 2000), 0) << moert_last_error();
  }
}

/// Allocations `call` makes when nothing fails.
long allocationsOf(const std::function<void()> &call) {
  const long lots = 1L << 40;
  arm(lots);
  call();
  long used = lots - countdown.load();
  disarm();
  return used;
}

/// An entry that returns a status, failed at each of its allocations.
void sweepStatusEntry(const char *entry, const std::function<int()> &call,
                      const std::function<void()> &after = [] {}) {
  long used = allocationsOf([&] {
    call();
    after();
  });
  ASSERT_GT(used, 0) << entry << " allocates nothing: the sweep tests nothing";
  int named = 0;
  for (long n = 0; n <= used; ++n) {
    arm(n);
    int rc = call();
    bool failed = fired;
    disarm();
    if (failed && rc != 0) {
      EXPECT_TRUE(contains(moert_last_error(), "out of memory"))
          << entry << " failing at allocation " << n << ": " << moert_last_error();
      named += contains(moert_last_error(), entry);
    }
    after();
  }
  EXPECT_GT(named, 0) << entry << ": no error named the entry";
}

moert_memref2d memref2(void *p, int64_t rows, int64_t cols) {
  return moert_memref2d{p, p, 0, {rows, cols}, {cols, 1}};
}
moert_memref1d memref1(void *p, int64_t n) { return moert_memref1d{p, p, 0, {n}, {1}}; }

/// A dispatch and its combine on the local runtime, as compiled code calls
/// them (16 tokens, H = 32, top-2 of 4 experts, FP8 on the wire).
void dispatchAndCombine() {
  float x[16 * 32];
  int32_t ids[16 * 2];
  float weights[16 * 2];
  int32_t expertRank[4] = {0, 0, 0, 0};
  for (int i = 0; i < 16 * 32; ++i)
    x[i] = float(i % 7) - 3.0f;
  for (int i = 0; i < 32; ++i) {
    ids[i] = i % 4;
    weights[i] = 0.5f;
  }
  int64_t plan[MOERT_DISPATCH_PLAN_FIELDS] = {32, 16, 0, 2, 1, 0, 0, 0, 0};
  moert_memref2d xm = memref2(x, 16, 32), im = memref2(ids, 16, 2), wm = memref2(weights, 16, 2);
  moert_memref1d rm = memref1(expertRank, 4), pm = memref1(plan, MOERT_DISPATCH_PLAN_FIELDS);
  moert_dispatch_result d;
  _mlir_ciface_moert_ep_dispatch_f32(&d, &xm, &im, &wm, &rm, &pm);
  moert_memref2d y;
  _mlir_ciface_moert_ep_combine_f32(&y, &d.x, d.handle);
  std::free(d.x.allocated);
  std::free(d.local_ids.allocated);
  std::free(d.weights.allocated);
  std::free(y.allocated);
}
} // namespace

TEST(FaultInjection, Defect6_HostEntriesTurnBadAllocIntoErrors) {
  ensureLocal();
  int64_t v[3] = {1, 2, 3};
  sweepStatusEntry("moert_allreduce_i64",
                   [&] { return moert_allreduce_i64("fault.sum", v, 3, 0); });
  sweepStatusEntry("moert_allgather",
                   [&] { return moert_allgather("fault.gather", v, 8, v + 1); });
  sweepStatusEntry("moert_barrier", [] { return moert_barrier("fault.barrier"); });
  sweepStatusEntry("moert_counters_json",
                   [] { return moert_counters_json(nullptr, 0) < 0 ? 1 : 0; });
  float x[32] = {1}, back[32];
  uint8_t q[32], s[1];
  // The FP8 hooks allocate only for messages: make one.
  sweepStatusEntry("moert_quantize_row",
                   [&] { return moert_quantize_row(2, x, 31, q, s); });
  EXPECT_EQ(moert_dequantize_row(2, q, s, 32, back), 0);
  moert_finalize();
  sweepStatusEntry(
      "moert_init", [] { return moert_init("local", 1000); }, [] { moert_finalize(); });
}

/// Children, one per allocation of `call` (measured after a warm-up run,
/// whose state the children inherit): each fails that allocation and must
/// end with status 1 and an out-of-memory message. A child whose call
/// returns exits 2 if the failure fired (swallowed), 0 if it did not.
void sweepFatalEntry(const char *what, const std::function<void()> &call) {
  call(); // warm-up: workspaces, counters and handles exist from now on
  const long used = allocationsOf(call);
  ASSERT_GT(used, 3) << what;
  std::vector<std::function<void()>> bodies;
  for (long n = 0; n < used; ++n)
    bodies.push_back([n, &call] {
      arm(n);
      call();
      bool failed = fired;
      disarm();
      std::_Exit(failed ? 2 : 0);
    });
  std::vector<moert::test::Ending> endings = moert::test::runInChildren(bodies);
  for (long n = 0; n < used; ++n) {
    const moert::test::Ending &e = endings[n];
    EXPECT_TRUE(e.exited && e.code == 1) << what << ", allocation " << n << ": "
                                         << e.describe();
    EXPECT_TRUE(contains(e.stderrText, "moert: rank 0: error: ") &&
                contains(e.stderrText, "out of memory"))
        << what << ", allocation " << n << ": " << e.describe();
  }
}

TEST(FaultInjection, Defect6_CompiledEntriesEndWithAMessageNotAnException) {
  ensureLocal();
  sweepFatalEntry("dispatch and combine", dispatchAndCombine);
  // The agreement step and the tensor-parallel gather, likewise.
  float slice[4 * 8] = {};
  moert_memref2d sm = memref2(slice, 4, 8);
  auto gather = [&] {
    moert_memref2d y;
    _mlir_ciface_moert_tp_gather_f32(&y, &sm, 4, 1);
    std::free(y.allocated);
    moert_agree_max(4, MOERT_AGREE_CHUNKS);
  };
  sweepFatalEntry("tp gather and agree_max", gather);
}
