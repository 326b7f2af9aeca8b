//===- HardeningTest.cpp - hostile calls, bad data, mismatched ranks ------===//
//
// Issue 9 (runtime hardening). Each test is named after the defect it
// covers; the C ABI's entries for compiled code end the process on failure,
// so those calls run in child processes (ChildProcess.h) and the test checks
// that each ended with status 1 and a message naming what was wrong: no
// crash, no hang.
//
//===----------------------------------------------------------------------===//
#include "ChildProcess.h"
#include "Collectives.h"
#include "ExpertParallel.h"
#include "LocalCommunicator.h"
#include "Placement.h"
#include "PlanCheck.h"
#include "moert/moert.h"

#include "gtest/gtest.h"

#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

using namespace moert;
using moert::test::Ending;
using moert::test::runInChild;
using moert::test::runInChildren;

namespace {

//===--------------------------------------------------------------------===//
// Fake communicators
//===--------------------------------------------------------------------===//

/// Rank 0 of `n` ranks whose peers answer the descriptor exchange with a
/// copy of this rank's descriptor, edited per peer: enough to drive the
/// agreement step. Data collectives are never reached in these tests.
class FakePeers final : public Communicator {
public:
  using Edit = std::function<void(int peer, CollectiveDescriptor &)>;
  FakePeers(int n, Edit edit) : n(n), edit(std::move(edit)) {}
  int rank() const override { return 0; }
  int size() const override { return n; }
  const char *backend() const override { return "fake"; }
  Status exchangeDescriptors(const CollectiveDescriptor &mine,
                             std::vector<CollectiveDescriptor> &all,
                             std::vector<int> &missing, Clock::time_point) override {
    all.assign(n, mine);
    for (int p = 1; p < n; ++p)
      edit(p, all[p]);
    missing.clear();
    return std::nullopt;
  }
  Status allToAllV(const void *, const int64_t *, void *, const int64_t *,
                   Clock::time_point) override {
    return std::string("data collective reached");
  }
  Status allReduce(int64_t *, int64_t, ReduceOp, Clock::time_point) override {
    return std::string("data collective reached");
  }
  Status allGather(const void *, int64_t, void *, Clock::time_point) override {
    return std::string("data collective reached");
  }
  Status barrier(Clock::time_point) override { return std::string("data collective reached"); }

private:
  int n;
  Edit edit;
};

/// One rank that delivers what it sends to itself, then lets the test
/// corrupt the received bytes of its `call`-th all-to-all (0-based).
class Corrupting final : public Communicator {
public:
  using Corrupt = std::function<void(int call, uint8_t *recv, int64_t bytes)>;
  explicit Corrupting(Corrupt corrupt) : corrupt(std::move(corrupt)) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const char *backend() const override { return "corrupting"; }
  Status exchangeDescriptors(const CollectiveDescriptor &mine,
                             std::vector<CollectiveDescriptor> &all,
                             std::vector<int> &missing, Clock::time_point) override {
    all.assign(1, mine);
    missing.clear();
    return std::nullopt;
  }
  Status allToAllV(const void *send, const int64_t *sendBytes, void *recv,
                   const int64_t *recvBytes, Clock::time_point) override {
    if (sendBytes[0] != recvBytes[0])
      return std::string("size mismatch");
    if (sendBytes[0])
      std::memcpy(recv, send, size_t(sendBytes[0]));
    corrupt(calls++, static_cast<uint8_t *>(recv), recvBytes[0]);
    return std::nullopt;
  }
  Status allReduce(int64_t *, int64_t, ReduceOp, Clock::time_point) override {
    return std::nullopt;
  }
  Status allGather(const void *send, int64_t bytes, void *recv,
                   Clock::time_point) override {
    if (bytes)
      std::memcpy(recv, send, size_t(bytes));
    return std::nullopt;
  }
  Status barrier(Clock::time_point) override { return std::nullopt; }

private:
  Corrupt corrupt;
  int calls = 0;
};

//===--------------------------------------------------------------------===//
// A small valid dispatch: T tokens, H = 4, top-1, E experts over the ranks
//===--------------------------------------------------------------------===//

struct Call {
  std::vector<float> x;
  std::vector<int32_t> ids, expertRank;
  std::vector<float> weights;
  DispatchInput in;
  std::vector<float> rx, rw;
  std::vector<int32_t> rid;
  int64_t rows = 0, handle = -1;

  Call(int64_t tokens, int64_t experts, int ranks, int64_t hidden = 4) {
    x.assign(tokens * hidden, 1.0f);
    ids.resize(tokens);
    weights.assign(tokens, 1.0f);
    expertRank.resize(experts);
    for (int64_t t = 0; t < tokens; ++t)
      ids[t] = int32_t(t % experts);
    for (int64_t e = 0; e < experts; ++e)
      expertRank[e] = int32_t(e / (experts / ranks));
    in.x = reinterpret_cast<const uint8_t *>(x.data());
    in.tokens = tokens;
    in.hidden = hidden;
    in.xRowStride = hidden;
    in.expertIds = ids.data();
    in.weights = weights.data();
    in.topK = 1;
    in.expertRank = expertRank.data();
    in.experts = experts;
    in.capacity = tokens * ranks;
  }
  Status run(ExpertParallel &ep) {
    return ep.dispatch(
        in,
        [&](int64_t n) {
          rx.assign(n * in.hidden, 0.0f);
          rid.assign(n * in.topK, 0);
          rw.assign(n * in.topK, 0.0f);
          return DispatchOutput{reinterpret_cast<uint8_t *>(rx.data()), rid.data(),
                                rw.data()};
        },
        rows, handle);
  }
};

bool contains(const std::string &text, const std::string &part) {
  return text.find(part) != std::string::npos;
}

//===--------------------------------------------------------------------===//
// The C ABI, as compiled code calls it, on the local backend
//===--------------------------------------------------------------------===//

void ensureLocal() {
  if (moert_size() == 0) {
    ASSERT_EQ(moert_init("local", 2000), 0) << moert_last_error();
  }
}

moert_memref2d memref2(void *p, int64_t rows, int64_t cols) {
  return moert_memref2d{p, p, 0, {rows, cols}, {cols, 1}};
}
moert_memref1d memref1(void *p, int64_t n) { return moert_memref1d{p, p, 0, {n}, {1}}; }

/// Buffers and descriptors of a valid call: T = 2 tokens, H = 4, top-1, two
/// experts on the one rank; a test edits one thing and calls.
struct CCall {
  float x[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  int32_t ids[2] = {0, 1};
  float weights[2] = {1, 1};
  int32_t expertRank[2] = {0, 0};
  int32_t physToLog[2] = {0, 1};
  float share[2] = {1, 1};
  int64_t plan[MOERT_DISPATCH_PLAN_FIELDS_MAX + 1] = {2, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  moert_memref2d xm = memref2(x, 2, 4), im = memref2(ids, 2, 1), wm = memref2(weights, 2, 1);
  moert_memref1d rm = memref1(expertRank, 2), pm = memref1(physToLog, 2),
                 sm = memref1(share, 2), planm = memref1(plan, MOERT_DISPATCH_PLAN_FIELDS);
  moert_dispatch_result result{};
  moert_dispatch_fp8_result fp8{};
  moert_dispatch_result *out = &result;

  void dispatch() {
    _mlir_ciface_moert_ep_dispatch_f32(out, &xm, &im, &wm, &rm, &planm);
  }
  void placed() {
    _mlir_ciface_moert_ep_dispatch_placed_f32(out, &xm, &im, &wm, &pm, &sm, &planm);
  }
};

/// Runs `edit` + the call in a child: it must end with status 1 and print
/// `moert: rank 0: error: ...` containing `expected`.
struct Hostile {
  std::string name, expected;
  std::function<void()> body;
};

void expectEachFailsByName(const std::vector<Hostile> &cases) {
  std::vector<std::function<void()>> bodies;
  for (const Hostile &c : cases)
    bodies.push_back([&c] {
      ensureLocal();
      c.body();
    });
  std::vector<Ending> endings = runInChildren(bodies);
  for (size_t i = 0; i < cases.size(); ++i) {
    const Ending &e = endings[i];
    EXPECT_TRUE(e.exited && e.code == 1) << cases[i].name << ": " << e.describe();
    EXPECT_TRUE(contains(e.stderrText, "moert: rank 0: error: "))
        << cases[i].name << ": " << e.describe();
    EXPECT_TRUE(contains(e.stderrText, cases[i].expected))
        << cases[i].name << ": expected '" << cases[i].expected << "' in "
        << e.describe();
  }
}

DispatchShape smallShape() {
  DispatchShape s;
  s.tokens = 4;
  s.hidden = 64;
  s.topK = 2;
  s.elementBytes = 4;
  s.mapLength = 8;
  s.ranks = 2;
  return s;
}
} // namespace

//===--------------------------------------------------------------------===//
// Defect 1: whatever ids and counts arrive, nothing is read or written out
// of bounds; every rank fails naming the tensor, index and value.
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect1_GarbageExpertIdsFailNamingTensorIndexAndValue) {
  // What a NaN score can make of an id: huge, negative, INT_MIN.
  for (int32_t bad : {120, -1, INT32_MIN, INT32_MAX}) {
    Collectives coll(createLocalCommunicator(), std::chrono::milliseconds(1000));
    ExpertParallel ep(coll);
    Call call(3, 16, 1);
    call.ids[2] = bad;
    Status e = call.run(ep);
    ASSERT_TRUE(e) << bad;
    EXPECT_EQ(*e, "rank 0: dispatch: expert_ids[2,0] = " + std::to_string(bad) +
                      " is not an expert of the 16 (ids 0 to 15)");
    EXPECT_TRUE(call.rx.empty()); // nothing allocated, nothing written
    EXPECT_EQ(coll.counters().collectives.count("dispatch.payload"), 0u);
  }
}

TEST(Hardening, Defect1_CorruptReceivedCountsFailBeforeAnyPayload) {
  Collectives coll(std::make_unique<Corrupting>([](int call, uint8_t *recv, int64_t bytes) {
                     if (call == 0 && bytes == 8) { // dispatch.counts
                       int64_t bad = -5;
                       std::memcpy(recv, &bad, 8);
                     }
                   }),
                   std::chrono::milliseconds(1000));
  ExpertParallel ep(coll);
  Call call(2, 2, 1);
  Status e = call.run(ep);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "rank 0: dispatch: rank 0 announced -5 rows for rank 0 (the rows so far: 0)");
  EXPECT_TRUE(call.rx.empty());
}

TEST(Hardening, Defect1_CorruptReceivedIdsNeverReachTheExperts) {
  // Decode layout (no counts): the first all-to-all is the payload. Row 0's
  // first local id sits after x (H f32 values).
  const int64_t hidden = 4;
  Collectives coll(std::make_unique<Corrupting>([&](int call, uint8_t *recv, int64_t) {
                     if (call == 0) {
                       int16_t bad = 77;
                       std::memcpy(recv + hidden * 4, &bad, 2);
                     }
                   }),
                   std::chrono::milliseconds(1000));
  ExpertParallel ep(coll);
  Call call(2, 2, 1, hidden);
  call.in.slots = 2;
  Status e = call.run(ep);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "rank 0: dispatch: received row 0 names local expert 77 (choice 0), "
                "outside [-1, 2): the ranks' expert maps disagree");
  EXPECT_EQ(call.handle, -1); // no dispatch in flight: combine cannot run
}

TEST(Hardening, Defect1_GarbageIdsThroughTheCInterfaceEndEveryRankCleanly) {
  expectEachFailsByName({
      {"id 120", "expert_ids[1,0] = 120 is not an expert of the 2",
       [] {
         CCall c;
         c.ids[1] = 120;
         c.dispatch();
       }},
      {"id INT_MIN", "expert_ids[0,0] = -2147483648 is not an expert of the 2",
       [] {
         CCall c;
         c.ids[0] = INT32_MIN;
         c.dispatch();
       }},
      {"placed id 9", "expert_ids[0,0] = 9 is not an expert of the 2",
       [] {
         CCall c;
         c.ids[0] = 9;
         c.placed();
       }},
  });
}

//===--------------------------------------------------------------------===//
// Defect 2: ranks running different layers fail at the first collective
// naming the field and every rank's value (never a truncation or a hang).
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect2_LayerSignatureMismatchNamesFieldAndRanks) {
  struct Case {
    CallSignature::Field field;
    int64_t peerValue;
    std::string expected;
  };
  const Case cases[] = {
      {CallSignature::Hidden, 32, "hidden size: ranks 0, 2 have 4, rank 1 has 32"},
      {CallSignature::TopK, 2, "top-k: ranks 0, 2 have 1, rank 1 has 2"},
      {CallSignature::Dtype, 2, "dtype: ranks 0, 2 have f32, rank 1 has bf16"},
      {CallSignature::Ep, 4, "ep (the plan's ranks): ranks 0, 2 have 0, rank 1 has 4"},
      {CallSignature::Quantization, 1,
       "quantization: ranks 0, 2 have none, rank 1 has fp8g128"},
  };
  for (const Case &c : cases) {
    Collectives coll(std::make_unique<FakePeers>(3,
                                                 [&](int peer, CollectiveDescriptor &d) {
                                                   if (peer == 1)
                                                     d.signature.values[c.field] =
                                                         c.peerValue;
                                                 }),
                     std::chrono::milliseconds(1000));
    ExpertParallel ep(coll);
    Call call(3, 3, 3);
    Status e = call.run(ep);
    ASSERT_TRUE(e);
    EXPECT_TRUE(contains(*e, "ranks disagree on the layer they run (at collective "
                             "'dispatch.counts' (#0, 0 elements)): "))
        << *e;
    EXPECT_TRUE(contains(*e, c.expected)) << *e;
    EXPECT_FALSE(contains(*e, "data collective reached")) << *e;
    EXPECT_TRUE(call.rx.empty());
  }
}

TEST(Hardening, Defect2_DifferentPlansDisagreeOnTheHash) {
  // A peer whose plan differs only in capacity: the plan hash names it.
  PlanFields mine, theirs;
  mine.capacity = 8;
  theirs.capacity = 9;
  EXPECT_NE(planHash(mine), planHash(theirs));
  PlanFields ten = mine;
  ten.count = 10;
  EXPECT_NE(planHash(mine), planHash(ten)); // 9 vs 10 fields differ too
  Collectives coll(std::make_unique<FakePeers>(2,
                                               [&](int, CollectiveDescriptor &d) {
                                                 d.signature.values[CallSignature::PlanHash] ^= 1;
                                               }),
                   std::chrono::milliseconds(1000));
  ExpertParallel ep(coll);
  Call call(2, 2, 2);
  call.in.slots = 2; // decode: the payload is the first collective
  Status e = call.run(ep);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "at collective 'dispatch.payload'")) << *e;
  EXPECT_TRUE(contains(*e, "plan hash: rank 0 has 0x")) << *e;
  EXPECT_TRUE(contains(*e, "a different phase argument, prefill or decode")) << *e;
}

TEST(Hardening, Defect2_LayersWithMatchingCollectivesDisagreeOnTheFingerprint) {
  // Libraries built from different configs whose collectives match (another
  // intermediate size, say): the plans differ only in the layer's
  // fingerprint, which is its own field of the agreement, not the hash's.
  PlanFields mine;
  mine.capacity = 8;
  mine.count = MOERT_DISPATCH_PLAN_FIELDS_MAX;
  mine.layer = 0x1234;
  PlanFields theirs = mine;
  theirs.layer = 0x5678;
  EXPECT_EQ(planHash(mine), planHash(theirs));
  PlanFields eleven = mine;
  eleven.count = MOERT_PLAN_LAYER;
  eleven.layer = 0;
  EXPECT_NE(planHash(mine), planHash(eleven)); // a plan without one differs
  int64_t values[MOERT_DISPATCH_PLAN_FIELDS_MAX] = {8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x1234};
  PlanFields read;
  ASSERT_FALSE(readPlan(values, MOERT_DISPATCH_PLAN_FIELDS_MAX, read));
  EXPECT_EQ(read.layer, 0x1234);
  EXPECT_EQ(planHash(read), planHash(mine));

  Collectives coll(std::make_unique<FakePeers>(2,
                                               [&](int, CollectiveDescriptor &d) {
                                                 d.signature.values[CallSignature::Layer] = 0x5678;
                                               }),
                   std::chrono::milliseconds(1000));
  ExpertParallel ep(coll);
  Call call(2, 2, 2);
  call.in.planFieldCount = MOERT_DISPATCH_PLAN_FIELDS_MAX;
  call.in.planLayer = 0x1234;
  Status e = call.run(ep);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "ranks disagree on the layer they run (at collective "
                           "'dispatch.counts' (#0, 0 elements)): layer (the compiled layer's "
                           "fingerprint: libraries built from different configs or options): "
                           "rank 0 has 0x1234, rank 1 has 0x5678"))
      << *e;
  EXPECT_FALSE(contains(*e, "plan hash")) << *e;
}

TEST(Hardening, Defect2_SignatureComparedOnlyWhereEveryCarrierHasIt) {
  // A peer at a host collective (no signature) is a plain disagreement on
  // the collective, not on the layer.
  Collectives coll(std::make_unique<FakePeers>(2,
                                               [](int, CollectiveDescriptor &d) {
                                                 d.signature = CallSignature();
                                                 std::strcpy(d.name, "host.barrier");
                                               }),
                   std::chrono::milliseconds(1000));
  ExpertParallel ep(coll);
  Call call(2, 2, 2);
  Status e = call.run(ep);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "ranks disagree on collective #0")) << *e;
}

TEST(Hardening, Defect8_CombinePartialMustMatchItsDispatch) {
  ensureLocal();
  Ending e = runInChild([] {
    CCall c;
    c.dispatch();
    // Partial with the wrong hidden size: named, every rank fails.
    std::vector<float> partial(c.result.x.sizes[0] * 8);
    moert_memref2d pm = memref2(partial.data(), c.result.x.sizes[0], 8);
    moert_memref2d y;
    _mlir_ciface_moert_ep_combine_f32(&y, &pm, c.result.handle);
  });
  EXPECT_TRUE(e.exited && e.code == 1) << e.describe();
  EXPECT_TRUE(contains(e.stderrText,
                       "combine: partial has hidden size 8 but the dispatch (handle 0) had 4"))
      << e.describe();
}

// A layer built for 2 ranks run on 3: the rank count is named, not the
// experts that do not divide over 3 ranks (which follows from it).
TEST(Hardening, RankCountMismatchIsNamedFirst) {
  DispatchSizes sizes;
  PlanFields plan;
  plan.ranks = 2;
  DispatchShape shape = smallShape();
  shape.mapLength = 16;
  shape.ranks = 3;
  Status e = checkDispatchPlan(plan, shape, sizes);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "dispatch: the layer was planned for 2 expert-parallel ranks but runs on 3");
}

//===--------------------------------------------------------------------===//
// Defect 3: a huge plan is an error naming the field, before allocating.
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect3_HugePlanIsAnErrorNotBadAlloc) {
  DispatchSizes sizes;
  PlanFields plan;
  plan.capacity = 8;
  plan.sendBytes = int64_t(1) << 50;
  Status e = checkDispatchPlan(plan, smallShape(), sizes);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "dispatch: plan field send_bytes = 1125899906842624 is over the "
                "runtime's limit of 2^40 bytes");
  plan.sendBytes = 0;
  plan.capacity = int64_t(1) << 50;
  e = checkDispatchPlan(plan, smallShape(), sizes);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "dispatch: plan field capacity = 1125899906842624 is over the runtime's "
                "limit of 2^47 rows");
  // Within the field limits, but the derived receive workspace is not.
  plan.capacity = int64_t(1) << 40;
  e = checkDispatchPlan(plan, smallShape(), sizes);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "workspace 'dispatch.recv' derived from the plan (1099511627776 "
                           "rows x 268 bytes) is over the runtime's limit of 2^40 bytes"))
      << *e;

  expectEachFailsByName({
      {"send_bytes 2^62", "plan field send_bytes = 4611686018427387904 is over",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_SEND_BYTES] = int64_t(1) << 62;
         c.dispatch();
       }},
      {"capacity INT64_MAX", "plan field capacity = 9223372036854775807 is over",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_CAPACITY] = INT64_MAX;
         c.dispatch();
       }},
      {"recv workspace derived", "workspace 'dispatch.recv' derived from the plan",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_CAPACITY] = int64_t(1) << 45;
         c.dispatch();
       }},
  });
}

//===--------------------------------------------------------------------===//
// Defect 4: products of sizes are checked, never wrap.
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect4_CapacityProductsNeverWrap) {
  DispatchSizes sizes;
  DispatchShape shape = smallShape();
  shape.hidden = limits::kMaxHidden;
  shape.topK = limits::kMaxTopK;
  shape.mapLength = 1024;
  PlanFields plan;
  // capacity x row bytes would wrap int64 without the check.
  plan.capacity = limits::kMaxCapacity;
  Status e = checkDispatchPlan(plan, shape, sizes);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "workspace 'dispatch.recv' derived from the plan (140737488355328 "
                           "rows x 4200448 bytes) is over"))
      << *e;
  // maxTokens x fan-out x row bytes, likewise.
  plan.capacity = 1;
  plan.maxTokens = limits::kMaxTokens;
  e = checkDispatchPlan(plan, shape, sizes);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "(4294967296 rows x 4200448 bytes) is over")) << *e;
  // Decode: ranks x slots rows.
  plan.maxTokens = 0;
  plan.slots = limits::kMaxTokens;
  shape.ranks = limits::kMaxRanks;
  shape.mapLength = limits::kMaxRanks;
  e = checkDispatchPlan(plan, shape, sizes);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "(140737488355328 rows x")) << *e;
  // The checked helpers themselves.
  int64_t out = 0;
  EXPECT_FALSE(checkedMul(INT64_MAX / 2 + 1, 2, out));
  EXPECT_FALSE(checkedAdd(INT64_MAX, 1, out));
  EXPECT_TRUE(checkedMul(int64_t(1) << 31, int64_t(1) << 31, out));
  EXPECT_EQ(out, int64_t(1) << 62);
}

TEST(Hardening, Defect4_DescriptorExtentsNeverWrap) {
  float x[8];
  moert_memref2d m = memref2(x, 2, 4);
  m.offset = INT64_MAX - 4;
  Status e = checkMemref(&m, "dispatch", "x", 4);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "dispatch: memref 'x' [2, 4] at offset 9223372036854775803 ends past what "
                "int64 addresses");
  m = memref2(x, int64_t(1) << 40, int64_t(1) << 40);
  m.strides[0] = int64_t(1) << 40;
  e = checkMemref(&m, "dispatch", "x", 4);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "has more elements than int64 holds")) << *e;
}

//===--------------------------------------------------------------------===//
// Defect 5: $MOERT_TIMEOUT_MS parsed strictly and clamped.
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect5_TimeoutIsParsedStrictlyAndClamped) {
  if (moert_size() != 0)
    moert_finalize();
  struct Case {
    const char *value;
    const char *error; // null: accepted
  };
  const Case cases[] = {
      {"10000000000000", nullptr}, // clamped to one day, a healthy run
      {"99999999999999999999999999", nullptr},
      {"2500", nullptr},
      {"abc", "moert_init: MOERT_TIMEOUT_MS='abc' is not a timeout (a number of "
              "milliseconds, digits only, 1 to 86400000)"},
      {"12ms", "MOERT_TIMEOUT_MS='12ms' is not a timeout"},
      {"-5", "MOERT_TIMEOUT_MS='-5' is not a timeout"},
      {" 5", "MOERT_TIMEOUT_MS=' 5' is not a timeout"},
      {"1e9", "MOERT_TIMEOUT_MS='1e9' is not a timeout"},
      {"0", "MOERT_TIMEOUT_MS=0 is not a timeout"},
      {"", "MOERT_TIMEOUT_MS is empty"},
  };
  for (const Case &c : cases) {
    setenv("MOERT_TIMEOUT_MS", c.value, 1);
    int rc = moert_init("local", 0);
    if (c.error) {
      EXPECT_NE(rc, 0) << c.value;
      EXPECT_TRUE(contains(moert_last_error(), c.error))
          << c.value << ": " << moert_last_error();
    } else {
      EXPECT_EQ(rc, 0) << c.value << ": " << moert_last_error();
      EXPECT_EQ(moert_barrier("host.timeout"), 0) << moert_last_error();
      moert_finalize();
    }
  }
  unsetenv("MOERT_TIMEOUT_MS");
  // The clamp itself: a deadline of now + the limit cannot overflow.
  Collectives huge(createLocalCommunicator(), std::chrono::milliseconds(10000000000000));
  EXPECT_EQ(huge.timeout().count(), limits::kMaxTimeoutMs);
  Collectives tiny(createLocalCommunicator(), std::chrono::milliseconds(-7));
  EXPECT_EQ(tiny.timeout().count(), 1);
  // moert_init's argument is clamped the same way.
  ASSERT_EQ(moert_init("local", 10000000000000), 0) << moert_last_error();
  EXPECT_EQ(moert_barrier("host.timeout"), 0) << moert_last_error();
  moert_finalize();
}

//===--------------------------------------------------------------------===//
// Defect 7: messages blame the right thing.
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect7_StrayPhysToLogValueIsNamed) {
  std::vector<int32_t> physToLog(16);
  std::vector<float> share(16, 1.0f);
  for (int p = 0; p < 16; ++p)
    physToLog[p] = p;
  physToLog[0] = 1000;
  Placement placement;
  // Inferred expert count (a 9-field plan).
  Status e = Placement::fromReplicas(physToLog.data(), share.data(), 16, 2, 0, placement);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "placement: phys_to_log[0] = 1000 is not an expert of the 16 "
                           "(0 to 15)"))
      << *e;
  // With redundancy (20 slots, 16 experts): still the stray value, not
  // "expert 16 has no replica".
  std::vector<int32_t> redundant = {1000, 1, 2, 3, 4, 5, 6, 7, 8, 9,
                                    10,   11, 12, 13, 14, 15, 0, 1, 2, 3};
  std::vector<float> share20(20, 1.0f);
  e = Placement::fromReplicas(redundant.data(), share20.data(), 20, 2, 0, placement);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "phys_to_log[0] = 1000 is not an expert of the 16")) << *e;
  // The plan's expert count, when given, is used as is.
  redundant[0] = 17;
  e = Placement::fromReplicas(redundant.data(), share20.data(), 20, 2, 16, placement);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "placement: phys_to_log[0] = 17 is not an expert of the 16 (0 to 15)");
  // A negative value, and an expert whose only replica has share 0.
  redundant[0] = -3;
  e = Placement::fromReplicas(redundant.data(), share20.data(), 20, 2, 16, placement);
  ASSERT_TRUE(e);
  EXPECT_TRUE(contains(*e, "phys_to_log[0] = -3 is not an expert of the 16")) << *e;
  share[15] = 0.0f;
  physToLog[0] = 0;
  e = Placement::fromReplicas(physToLog.data(), share.data(), 16, 2, 0, placement);
  ASSERT_TRUE(e);
  EXPECT_EQ(*e, "placement: expert 15 has no replica with a positive share");
  // Through the C interface, with and without the plan's expert count.
  expectEachFailsByName({
      {"phys_to_log[0] = 1000", "placement: phys_to_log[0] = 1000 is not an expert of the 2",
       [] {
         CCall c;
         c.physToLog[0] = 1000;
         c.placed();
       }},
      {"plan experts", "placement: phys_to_log[1] = 1 is not an expert of the 1 (0 to 0)",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_EXPERTS] = 1;
         c.planm.sizes[0] = MOERT_PLAN_EXPERTS + 1;
         c.placed();
       }},
      {"share NaN", "placement: replica_share[1] = nan is not a finite share >= 0",
       [] {
         CCall c;
         c.share[1] = NAN;
         c.placed();
       }},
  });
}

//===--------------------------------------------------------------------===//
// Defect 8: every C ABI entry checks what it is given.
//===--------------------------------------------------------------------===//

TEST(Hardening, Defect8_HostileDispatchCallsFailByName) {
  expectEachFailsByName({
      {"null result", "moert_ep_dispatch_f32: the result is a null pointer",
       [] {
         CCall c;
         c.out = nullptr;
         c.dispatch();
       }},
      {"null x", "dispatch: memref 'x' is a null descriptor",
       [] {
         CCall c;
         _mlir_ciface_moert_ep_dispatch_f32(&c.result, nullptr, &c.im, &c.wm, &c.rm, &c.planm);
       }},
      {"negative rows", "dispatch: memref 'x' has size -1 in dimension 0",
       [] {
         CCall c;
         c.xm.sizes[0] = -1;
         c.dispatch();
       }},
      {"strided x", "dispatch: memref 'x' [2, 4] has strides [8, 1]; the runtime needs it "
                    "dense row-major",
       [] {
         CCall c;
         c.xm.strides[0] = 8;
         c.dispatch();
       }},
      {"row stride", "dispatch: memref 'expert_ids' [2, 1] has strides [2, 1]",
       [] {
         CCall c;
         c.im.strides[0] = 2; // rows 2 apart but 1 column
         c.dispatch();
       }},
      {"null data", "dispatch: memref 'expert_weights' [2, 1] has a null data pointer",
       [] {
         CCall c;
         c.wm.aligned = nullptr;
         c.dispatch();
       }},
      {"negative offset", "dispatch: memref 'x' has offset -3",
       [] {
         CCall c;
         c.xm.offset = -3;
         c.dispatch();
       }},
      {"shapes disagree", "dispatch: x [T, H], expert_ids [T, k] and expert_weights [T, k] "
                          "disagree: x [2, 4], expert_ids [1, 1], expert_weights [2, 1]",
       [] {
         CCall c;
         c.im.sizes[0] = 1;
         c.dispatch();
       }},
      {"zero hidden", "dispatch: hidden size (x's columns) = 0 is below the minimum 1",
       [] {
         CCall c;
         c.xm.sizes[1] = 0;
         c.xm.strides[0] = 0;
         c.dispatch();
       }},
      {"top-k 0", "dispatch: top-k (expert_ids' columns) = 0 is below the minimum 1",
       [] {
         CCall c;
         c.im.sizes[1] = c.wm.sizes[1] = 0;
         c.im.strides[0] = c.wm.strides[0] = 0;
         c.dispatch();
       }},
      {"null plan", "dispatch: memref 'plan' is a null descriptor",
       [] {
         CCall c;
         _mlir_ciface_moert_ep_dispatch_f32(&c.result, &c.xm, &c.im, &c.wm, &c.rm, nullptr);
       }},
      {"short plan", "dispatch: the plan must be a dense i64[9] (or i64[10] with the expert "
                     "count, i64[11] with the replica selection, i64[12] with the layer's "
                     "fingerprint), got i64[8]",
       [] {
         CCall c;
         c.planm.sizes[0] = 8;
         c.dispatch();
       }},
      {"strided plan", "memref 'plan' [9] has strides [2]",
       [] {
         CCall c;
         c.planm.strides[0] = 2;
         c.dispatch();
       }},
      {"negative capacity", "dispatch: plan field capacity = -1 is negative",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_CAPACITY] = -1;
         c.dispatch();
       }},
      {"negative max_tokens", "plan field max_tokens = -9 is negative",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_MAX_TOKENS] = -9;
         c.dispatch();
       }},
      {"huge slots", "plan field slots = 4611686018427387904 is over the runtime's limit of "
                     "2^31 rows",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_SLOTS] = int64_t(1) << 62;
         c.dispatch();
       }},
      {"quantization 7", "plan names unknown quantization 7",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 7;
         c.dispatch();
       }},
      {"ranks -2", "plan field ranks = -2 is negative",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_RANKS] = -2;
         c.dispatch();
       }},
      {"planned for 4 ranks", "the layer was planned for 4 expert-parallel ranks but runs on 1",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_RANKS] = 4;
         c.dispatch();
       }},
      {"negative combine_bytes", "plan field combine_bytes = -1 is negative",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_COMBINE_BYTES] = -1;
         c.dispatch();
       }},
      {"plan experts vs map", "plan field experts = 3 but expert_rank has 2 entries",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_EXPERTS] = 3;
         c.planm.sizes[0] = MOERT_PLAN_EXPERTS + 1;
         c.dispatch();
       }},
      {"replica selection value",
       "dispatch: plan field replica_selection = 2 (expected 0 static shares or 1 per batch)",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_REPLICA_SELECTION] = 2;
         c.planm.sizes[0] = MOERT_DISPATCH_PLAN_FIELDS_MAX;
         c.placed();
       }},
      {"replica selection without a placement",
       "dispatch: plan field replica_selection = 1 (per batch) needs a placement",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_EXPERTS] = 0;
         c.plan[MOERT_PLAN_REPLICA_SELECTION] = 1;
         c.planm.sizes[0] = MOERT_DISPATCH_PLAN_FIELDS_MAX;
         c.dispatch();
       }},
      {"plan of 13 fields", "dispatch: the plan must be a dense i64[9]",
       [] {
         CCall c;
         c.planm.sizes[0] = MOERT_DISPATCH_PLAN_FIELDS_MAX + 1;
         c.dispatch();
       }},
      {"expert_rank value", "dispatch: expert_rank[1] = 5 is not a rank in [0, 1)",
       [] {
         CCall c;
         c.expertRank[1] = 5;
         c.dispatch();
       }},
      {"empty expert_rank", "dispatch: expert_rank's length = 0 is below the minimum 1",
       [] {
         CCall c;
         c.rm.sizes[0] = 0;
         c.dispatch();
       }},
      {"tokens over max_tokens", "dispatch: 2 tokens but the plan allows at most 1 per rank",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_MAX_TOKENS] = 1;
         c.dispatch();
       }},
      {"send workspace too small", "workspace 'dispatch.send': 44 bytes requested but the "
                                   "plan sized it for 8",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_SEND_BYTES] = 8;
         c.dispatch();
       }},
      {"fp8 codes without quantization",
       "dispatch: FP8 codes asked for, but the plan has no quantization",
       [] {
         CCall c;
         _mlir_ciface_moert_ep_dispatch_fp8_f32(&c.fp8, &c.xm, &c.im, &c.wm, &c.rm, &c.planm);
       }},
      {"fp8 hidden 4", "dispatch: hidden size 4 is not a multiple of the group size 32 of FP8 "
                       "scheme fp8g32ue8m0",
       [] {
         CCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 2;
         _mlir_ciface_moert_ep_dispatch_fp8_f32(&c.fp8, &c.xm, &c.im, &c.wm, &c.rm, &c.planm);
       }},
      {"null phys_to_log", "dispatch: memref 'phys_to_log' is a null descriptor",
       [] {
         CCall c;
         _mlir_ciface_moert_ep_dispatch_placed_f32(&c.result, &c.xm, &c.im, &c.wm, nullptr,
                                                   &c.sm, &c.planm);
       }},
      {"placement lengths", "dispatch: phys_to_log has 2 entries but replica_share has 1",
       [] {
         CCall c;
         c.sm.sizes[0] = 1;
         c.placed();
       }},
      {"bf16 placed null share", "dispatch: memref 'replica_share' is a null descriptor",
       [] {
         CCall c;
         _mlir_ciface_moert_ep_dispatch_placed_bf16(&c.result, &c.xm, &c.im, &c.wm, &c.pm,
                                                    nullptr, &c.planm);
       }},
  });
}

TEST(Hardening, Defect8_HostileCombineTpAndAgreeCallsFailByName) {
  expectEachFailsByName({
      {"handle 99", "combine: handle 99 does not name a dispatch in flight",
       [] {
         float p[8];
         moert_memref2d pm = memref2(p, 2, 4), y;
         _mlir_ciface_moert_ep_combine_f32(&y, &pm, 99);
       }},
      {"null partial", "combine: memref 'partial' is a null descriptor",
       [] {
         moert_memref2d y;
         _mlir_ciface_moert_ep_combine_f32(&y, nullptr, 0);
       }},
      {"wrong rows", "combine: partial has 5 rows but dispatch delivered 2",
       [] {
         CCall c;
         c.dispatch();
         std::vector<float> p(5 * 4);
         moert_memref2d pm = memref2(p.data(), 5, 4), y;
         _mlir_ciface_moert_ep_combine_f32(&y, &pm, c.result.handle);
       }},
      {"bf16 combine of f32 dispatch",
       "combine: partial is bf16 but the dispatch (handle 0) was f32",
       [] {
         CCall c;
         c.dispatch();
         std::vector<uint16_t> p(2 * 4);
         moert_memref2d pm = memref2(p.data(), 2, 4), y;
         _mlir_ciface_moert_ep_combine_bf16(&y, &pm, c.result.handle);
       }},
      {"null combine result", "moert_ep_combine_f32: the result is a null pointer",
       [] {
         float p[8];
         moert_memref2d pm = memref2(p, 2, 4);
         _mlir_ciface_moert_ep_combine_f32(nullptr, &pm, 0);
       }},
      {"tp 0", "tp gather: tp = 0 does not divide the 1 ranks",
       [] {
         float s[8];
         moert_memref2d sm = memref2(s, 2, 4), y;
         _mlir_ciface_moert_tp_gather_f32(&y, &sm, 2, 0);
       }},
      {"tp negative tokens", "tp gather: -4 tokens of hidden size 4 are outside",
       [] {
         float s[8];
         moert_memref2d sm = memref2(s, 2, 4), y;
         _mlir_ciface_moert_tp_gather_f32(&y, &sm, -4, 1);
       }},
      {"tp slice rows", "tp gather: rank 0 computed 2 rows but its share is 3",
       [] {
         float s[8];
         moert_memref2d sm = memref2(s, 2, 4), y;
         _mlir_ciface_moert_tp_gather_bf16(&y, &sm, 3, 1);
       }},
      {"tp null slice", "tp gather: memref 'slice' is a null descriptor",
       [] {
         moert_memref2d y;
         _mlir_ciface_moert_tp_gather_f32(&y, nullptr, 3, 1);
       }},
      {"agree purpose", "agree_max: unknown purpose 9", [] { moert_agree_max(1, 9); }},
      {"agree negative", "agree_max: negative count -1", [] { moert_agree_max(-1, 0); }},
  });
}

/// A dispatch into host buffers of `rows` rows (hidden 4, top-1), and its
/// combine into `y`.
struct IntoCall : CCall {
  int64_t rows = 2;
  std::vector<float> rx = std::vector<float>(size_t(rows) * 4, -7.0f);
  std::vector<int32_t> rids = std::vector<int32_t>(size_t(rows), 9);
  std::vector<float> rw = std::vector<float>(size_t(rows), -7.0f);
  moert_memref2d rxm = memref2(rx.data(), rows, 4), ridm = memref2(rids.data(), rows, 1),
                 rwm = memref2(rw.data(), rows, 1);
  int64_t handle = -1;

  void dispatchInto() {
    handle = _mlir_ciface_moert_ep_dispatch_into_f32(&xm, &im, &wm, &rm, &planm, &rxm, &ridm,
                                                     &rwm, nullptr);
  }
};

TEST(Hardening, IntoBuffersCheckShapesAndHandles) {
  expectEachFailsByName({
      {"received rows", "moert_ep_dispatch_into_f32: received is [3, 4], the plan receives [2, 4]",
       [] {
         IntoCall c;
         c.rxm.sizes[0] = 3;
         c.dispatchInto();
       }},
      {"null local ids", "dispatch: memref 'local_ids' is a null descriptor",
       [] {
         IntoCall c;
         _mlir_ciface_moert_ep_dispatch_into_f32(&c.xm, &c.im, &c.wm, &c.rm, &c.planm, &c.rxm,
                                                 nullptr, &c.rwm, nullptr);
       }},
      {"combine of a returning dispatch",
       "moert_ep_combine_into_f32: handle 0 is not a dispatch into buffers awaiting its combine",
       [] {
         IntoCall c;
         c.dispatch();
         float y[8];
         moert_memref2d ym = memref2(y, 2, 4);
         _mlir_ciface_moert_ep_combine_into_f32(&c.result.x, c.result.handle, &ym, nullptr);
       }},
      {"short partial", "moert_ep_combine_into_f32: partial has 1 rows, 2 were received",
       [] {
         IntoCall c;
         c.dispatchInto();
         float y[8];
         moert_memref2d ym = memref2(y, 2, 4), pm = memref2(c.rx.data(), 1, 4);
         _mlir_ciface_moert_ep_combine_into_f32(&pm, c.handle, &ym, nullptr);
       }},
      {"y rows", "moert_ep_combine_into_f32: y is [3, 4], the tokens are [2, 4]",
       [] {
         IntoCall c;
         c.dispatchInto();
         float y[12];
         moert_memref2d ym = memref2(y, 3, 4);
         _mlir_ciface_moert_ep_combine_into_f32(&c.rxm, c.handle, &ym, nullptr);
       }},
  });
}

TEST(Hardening, Fp8IntoBuffersCheckCodesAndScales) {
  expectEachFailsByName({
      {"codes without quantization",
       "dispatch: FP8 codes asked for, but the plan has no quantization",
       [] {
         IntoCall c;
         int8_t codes[8];
         float scales[2];
         moert_memref2d cm = memref2(codes, 2, 4), sm = memref2(scales, 2, 1);
         _mlir_ciface_moert_ep_dispatch_fp8_into_f32(&c.xm, &c.im, &c.wm, &c.rm, &c.planm, &cm, &sm,
                                                     &c.ridm, &c.rwm, nullptr);
       }},
      {"scales columns",
       "moert_ep_dispatch_fp8_into_f32: received_scales is [2, 2], the plan receives [2, 1]",
       [] {
         IntoCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 2; // UE8M0 scales per 32
         std::vector<float> x(2 * 32, 1.0f);
         int8_t codes[64];
         float scales[4];
         moert_memref2d xm = memref2(x.data(), 2, 32), cm = memref2(codes, 2, 32),
                        sm = memref2(scales, 2, 2);
         _mlir_ciface_moert_ep_dispatch_fp8_into_f32(&xm, &c.im, &c.wm, &c.rm, &c.planm, &cm, &sm,
                                                     &c.ridm, &c.rwm, nullptr);
       }},
      {"null scales", "dispatch: memref 'received_scales' is a null descriptor",
       [] {
         IntoCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 2;
         std::vector<float> x(2 * 32, 1.0f);
         int8_t codes[64];
         moert_memref2d xm = memref2(x.data(), 2, 32), cm = memref2(codes, 2, 32);
         moert_memref2d *scales = nullptr;
         _mlir_ciface_moert_ep_dispatch_fp8_into_f32(&xm, &c.im, &c.wm, &c.rm, &c.planm, &cm,
                                                     scales, &c.ridm, &c.rwm, nullptr);
       }},
  });
}

/// An all-gather dispatch (the decode layout: 2 slots) into host buffers.
struct GatherCall : IntoCall {
  GatherCall() {
    plan[MOERT_PLAN_MAX_TOKENS] = 2;
    plan[MOERT_PLAN_SLOTS] = 2;
  }
  void gather() {
    handle = _mlir_ciface_moert_ep_gather_into_f32(&xm, &im, &wm, &rm, &planm, &rxm, &ridm, &rwm,
                                                   nullptr);
  }
};

TEST(Hardening, AllGatherExchangeChecksShapesAndHandles) {
  expectEachFailsByName({
      {"gathered rows",
       "moert_ep_gather_into_f32: received is [3, 4], the exchange needs [2, 4] (ranks x slots "
       "rows)",
       [] {
         GatherCall c;
         c.rxm.sizes[0] = 3;
         c.gather();
       }},
      {"null gathered ids", "all-gather exchange: memref 'gathered_ids' is a null descriptor",
       [] {
         GatherCall c;
         _mlir_ciface_moert_ep_gather_into_f32(&c.xm, &c.im, &c.wm, &c.rm, &c.planm, &c.rxm,
                                               nullptr, &c.rwm, nullptr);
       }},
      {"id out of range", "dispatch: expert_ids[1,0] = 2 is not an expert of the 2",
       [] {
         GatherCall c;
         c.ids[1] = 2;
         c.gather();
       }},
      {"return of a packed dispatch",
       "moert_ep_return_into_f32: handle 0 is not an all-gather dispatch awaiting its combine",
       [] {
         GatherCall c;
         c.dispatchInto();
         _mlir_ciface_moert_ep_return_into_f32(&c.rxm, c.handle, &c.rxm, nullptr);
       }},
      {"combine of a gather",
       "moert_ep_combine_into_f32: handle -1 is not a dispatch into buffers awaiting its combine",
       [] {
         GatherCall c;
         c.gather();
         float y[8];
         moert_memref2d ym = memref2(y, 2, 4);
         _mlir_ciface_moert_ep_combine_into_f32(&c.rxm, c.handle, &ym, nullptr);
       }},
      {"return in another dtype",
       "moert_ep_return_into_bf16: the dispatch of handle -1 moved f32 rows",
       [] {
         GatherCall c;
         c.gather();
         _mlir_ciface_moert_ep_return_into_bf16(&c.rxm, c.handle, &c.rxm, nullptr);
       }},
      {"partial width", "moert_ep_return_into_f32: partial is [2, 3], the exchange needs [2, 4]",
       [] {
         GatherCall c;
         c.gather();
         float part[6];
         moert_memref2d pm = memref2(part, 2, 3);
         _mlir_ciface_moert_ep_return_into_f32(&pm, c.handle, &c.rxm, nullptr);
       }},
      {"returned rows", "moert_ep_return_into_f32: returned is [2, 3], the exchange needs [2, 4]",
       [] {
         GatherCall c;
         c.gather();
         float back[6];
         moert_memref2d bm = memref2(back, 2, 3);
         _mlir_ciface_moert_ep_return_into_f32(&c.rxm, c.handle, &bm, nullptr);
       }},
  });
}

/// The FP8 form (UE8M0, H = 32: one scale byte a row) into host buffers.
struct Fp8GatherCall : GatherCall {
  uint8_t codes[64] = {}, scales[2] = {}, rcodes[64] = {}, rscales[2] = {};
  moert_memref2d cm = memref2(codes, 2, 32), scm = memref2(scales, 2, 1);
  moert_memref2d rcm = memref2(rcodes, 2, 32), rscm = memref2(rscales, 2, 1);
  Fp8GatherCall() { plan[MOERT_PLAN_QUANTIZATION] = 2; }
  void gather() {
    handle = _mlir_ciface_moert_ep_gather_fp8_into_f32(&cm, &scm, &im, &wm, &rm, &planm, &rcm,
                                                       &rscm, &ridm, &rwm, nullptr);
  }
};

TEST(Hardening, PlacedAllGatherChecksThePlacement) {
  auto gatherPlaced = [](GatherCall &c) {
    _mlir_ciface_moert_ep_gather_placed_into_f32(&c.xm, &c.im, &c.wm, &c.pm, &c.sm, &c.planm,
                                                 &c.rxm, &c.ridm, &c.rwm, nullptr);
  };
  expectEachFailsByName({
      {"slot of no expert", "placement: phys_to_log[1] = -3 is not an expert",
       [&] {
         GatherCall c;
         c.physToLog[1] = -3;
         gatherPlaced(c);
       }},
      {"negative share", "placement: replica_share[0] = -1 is not a finite share >= 0",
       [&] {
         GatherCall c;
         c.share[0] = -1;
         gatherPlaced(c);
       }},
      {"id past the experts", "dispatch: expert_ids[1,0] = 2 is not an expert of the 2",
       [&] {
         GatherCall c;
         c.ids[1] = 2;
         gatherPlaced(c);
       }},
  });
}

TEST(Hardening, Fp8AllGatherChecksItsPlanAndScales) {
  expectEachFailsByName({
      {"fp8 rows, plan without quantization",
       "moert_ep_gather_fp8_into_f32: FP8 codes, but the plan has no quantization",
       [] {
         Fp8GatherCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 0;
         c.gather();
       }},
      {"plain rows, quantizing plan",
       "moert_ep_gather_into_f32: the plan quantizes to FP8; its rows go by "
       "moert_ep_gather_fp8_into_*",
       [] {
         GatherCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 2;
         std::vector<float> x(64), received(64);
         c.xm = memref2(x.data(), 2, 32);
         c.rxm = memref2(received.data(), 2, 32);
         c.gather();
       }},
      {"scales of another width",
       "moert_ep_gather_fp8_into_f32: scales is [2, 2], codes [2, 32] need [2, 1]",
       [] {
         Fp8GatherCall c;
         uint8_t wide[4] = {};
         c.scm = memref2(wide, 2, 2);
         c.gather();
       }},
      {"received scales rows",
       "moert_ep_gather_fp8_into_f32: received_scales is [1, 1], the exchange needs [2, 1]",
       [] {
         Fp8GatherCall c;
         c.rscm.sizes[0] = 1;
         c.gather();
       }},
  });
}

TEST(Hardening, IntoBuffersHoldTheReceivedRowsThenMasked) {
  ensureLocal();
  Ending e = runInChild([] {
    // Capacity 4: two rows arrive, two are masked.
    IntoCall c;
    c.plan[MOERT_PLAN_CAPACITY] = 4;
    c.rows = 4;
    c.rx.assign(16, -7.0f);
    c.rids.assign(4, 9);
    c.rw.assign(4, -7.0f);
    c.rxm = memref2(c.rx.data(), 4, 4);
    c.ridm = memref2(c.rids.data(), 4, 1);
    c.rwm = memref2(c.rw.data(), 4, 1);
    c.dispatchInto();
    for (int i = 0; i < 8; ++i)
      if (c.rx[size_t(i)] != c.x[i])
        std::_Exit(3);
    for (int i = 8; i < 16; ++i)
      if (c.rx[size_t(i)] != 0.0f)
        std::_Exit(4);
    if (c.rids[0] != 0 || c.rids[1] != 1 || c.rids[2] != -1 || c.rids[3] != -1 ||
        c.rw[0] != 1.0f || c.rw[1] != 1.0f || c.rw[2] != 0.0f || c.rw[3] != 0.0f)
      std::_Exit(5);
    // Each token's row comes back once (one rank): y = the partial rows.
    for (float &v : c.rx)
      v *= 2.0f;
    float y[8] = {};
    moert_memref2d ym = memref2(y, 2, 4);
    _mlir_ciface_moert_ep_combine_into_f32(&c.rxm, c.handle, &ym, nullptr);
    for (int i = 0; i < 8; ++i)
      if (y[i] != 2.0f * c.x[i])
        std::_Exit(6);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

/// Replicas chosen per batch in the all-gather exchange: the gathered ids
/// are slots; a masked choice (-1) stays -1 and is not counted.
TEST(Hardening, PerBatchAllGatherSendsSlotsAndSkipsMaskedChoices) {
  ensureLocal();
  Ending e = runInChild([] {
    GatherCall c;
    int32_t physToLog[3] = {0, 1, 1}; // expert 1 on slots 1 and 2
    float share[3] = {1, 1, 1};       // not read
    c.pm = memref1(physToLog, 3);
    c.sm = memref1(share, 3);
    c.plan[MOERT_PLAN_EXPERTS] = 2;
    c.plan[MOERT_PLAN_REPLICA_SELECTION] = 1;
    c.planm = memref1(c.plan, MOERT_PLAN_REPLICA_SELECTION + 1);
    c.ids[0] = 1;
    c.ids[1] = -1;
    _mlir_ciface_moert_ep_gather_placed_into_f32(&c.xm, &c.im, &c.wm, &c.pm, &c.sm, &c.planm,
                                                 &c.rxm, &c.ridm, &c.rwm, nullptr);
    if (c.rids[0] != 1 || c.rids[1] != -1) // the first replica while the loads tie
      std::_Exit(3);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

/// A dispatch packed by the layer on one rank: 3 rows of which offsets
/// send the first 2, k = 1 (route rows of 2), capacity 2.
struct PackedCall : CCall {
  float rows[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  float route[6] = {0, 0.5f, 0, 0.25f, 0, 0};
  int32_t offsets[2] = {0, 2};
  float rx[8] = {-7, -7, -7, -7, -7, -7, -7, -7};
  float rroute[4] = {3, 3, 3, 3};
  moert_memref2d rowsm = memref2(rows, 3, 4), routem = memref2(route, 3, 2),
                 rxm = memref2(rx, 2, 4), rroutem = memref2(rroute, 2, 2);
  moert_memref1d om = memref1(offsets, 2);
  int64_t handle = 0;
  void send() {
    handle = _mlir_ciface_moert_ep_send_packed_into_f32(&rowsm, &routem, &om, &rm, &planm, &rxm,
                                                        &rroutem, nullptr);
  }
};

TEST(Hardening, PackedExchangeChecksOffsetsShapesAndHandles) {
  expectEachFailsByName({
      {"offsets not from 0",
       "moert_ep_send_packed_into_f32: offsets[0] = 1, offsets[1] = 2: the blocks must start at "
       "0, not shrink, and end within the 3 rows",
       [] {
         PackedCall c;
         c.offsets[0] = 1;
         c.send();
       }},
      {"offsets past the rows", "offsets[0] = 0, offsets[1] = 4: the blocks must start at 0",
       [] {
         PackedCall c;
         c.offsets[1] = 4;
         c.send();
       }},
      {"over the capacity", "rank 0 would receive 3 rows but the plan's capacity is 2 rows",
       [] {
         PackedCall c;
         c.offsets[1] = 3;
         c.send();
       }},
      {"received rows",
       "moert_ep_send_packed_into_f32: received is [1, 4], the exchange needs [2, 4] (the "
       "plan's capacity)",
       [] {
         PackedCall c;
         c.rxm.sizes[0] = 1;
         c.send();
       }},
      {"odd route rows", "route rows of 3 values (2k: k targets, k weights)",
       [] {
         PackedCall c;
         c.routem = memref2(c.route, 2, 3);
         c.send();
       }},
      {"decode plan", "the packed dispatch needs the prefill layout (plan slots 2)",
       [] {
         PackedCall c;
         c.plan[MOERT_PLAN_SLOTS] = 2;
         c.send();
       }},
      {"FP8 plan, plain rows",
       "moert_ep_send_packed_into_f32: the plan quantizes to FP8; its rows go by "
       "moert_ep_send_packed_*fp8_into_*",
       [] {
         PackedCall c;
         c.plan[MOERT_PLAN_QUANTIZATION] = 1;
         c.send();
       }},
      {"slots without per-batch selection",
       "moert_ep_select_slots_into: the plan does not choose replicas per batch "
       "(replica_selection 0)",
       [] {
         PackedCall c;
         int32_t slots[2];
         moert_memref2d sm = memref2(slots, 2, 1);
         _mlir_ciface_moert_ep_select_slots_into(&c.im, &c.pm, &c.planm, &sm, nullptr);
       }},
      {"slots of another shape",
       "moert_ep_select_slots_into: slots is [1, 1], the exchange needs [2, 1] (one a choice)",
       [] {
         PackedCall c;
         c.plan[MOERT_PLAN_EXPERTS] = 2;
         c.plan[MOERT_PLAN_REPLICA_SELECTION] = 1;
         c.planm = memref1(c.plan, MOERT_PLAN_REPLICA_SELECTION + 1);
         int32_t slots[1];
         moert_memref2d sm = memref2(slots, 1, 1);
         _mlir_ciface_moert_ep_select_slots_into(&c.im, &c.pm, &c.planm, &sm, nullptr);
       }},
      {"null offsets", "packed exchange: memref 'offsets' is a null descriptor",
       [] {
         PackedCall c;
         _mlir_ciface_moert_ep_send_packed_into_f32(&c.rowsm, &c.routem, nullptr, &c.rm, &c.planm,
                                                    &c.rxm, &c.rroutem, nullptr);
       }},
      {"return of another handle",
       "moert_ep_return_packed_into_f32: handle -99 is not a packed dispatch awaiting its return",
       [] {
         PackedCall c;
         c.send();
         float back[12];
         moert_memref2d backm = memref2(back, 3, 4);
         _mlir_ciface_moert_ep_return_packed_into_f32(&c.rxm, -99, &backm, nullptr);
       }},
      {"returned rows",
       "moert_ep_return_packed_into_f32: returned is [2, 4], the exchange needs [3, 4] (the rows "
       "the dispatch sent)",
       [] {
         PackedCall c;
         c.send();
         float back[8];
         moert_memref2d backm = memref2(back, 2, 4);
         _mlir_ciface_moert_ep_return_packed_into_f32(&c.rxm, c.handle, &backm, nullptr);
       }},
  });
}

/// On one rank the packed exchange hands the sent rows back to itself: the
/// first offsets[1] rows arrive, the route rows past them are all ones,
/// and the return puts the partial rows back in the send order.
TEST(Hardening, PackedExchangeOnOneRankRoundTrips) {
  ensureLocal();
  Ending e = runInChild([] {
    PackedCall c;
    c.offsets[1] = 1; // one row sent, one masked
    c.send();
    if (c.rx[0] != 1 || c.rx[3] != 4 || c.rx[4] != -7 || c.rroute[1] != 0.5f)
      std::_Exit(3);
    uint32_t bits;
    std::memcpy(&bits, &c.rroute[2], 4);
    if (bits != 0xffffffffu)
      std::_Exit(4);
    float partial[8] = {10, 20, 30, 40, 50, 60, 70, 80}, back[12] = {};
    moert_memref2d pm = memref2(partial, 2, 4), bm = memref2(back, 3, 4);
    _mlir_ciface_moert_ep_return_packed_into_f32(&pm, c.handle, &bm, nullptr);
    if (back[0] != 10 || back[3] != 40 || back[4] != 0)
      std::_Exit(5);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

/// Replicas chosen per batch for the layer's packing, on one rank: every
/// choice's slot is one of its expert's, a masked choice stays -1.
TEST(Hardening, SelectSlotsGivesEachChoiceASlotOfItsExpert) {
  ensureLocal();
  Ending e = runInChild([] {
    CCall c;
    int32_t physToLog[3] = {0, 1, 1}; // expert 1 on slots 1 and 2
    c.pm = memref1(physToLog, 3);
    c.plan[MOERT_PLAN_EXPERTS] = 2;
    c.plan[MOERT_PLAN_REPLICA_SELECTION] = 1;
    c.planm = memref1(c.plan, MOERT_PLAN_REPLICA_SELECTION + 1);
    c.ids[0] = 1;
    c.ids[1] = -1;
    int32_t slots[2] = {7, 7};
    moert_memref2d sm = memref2(slots, 2, 1);
    _mlir_ciface_moert_ep_select_slots_into(&c.im, &c.pm, &c.planm, &sm, nullptr);
    if ((slots[0] != 1 && slots[0] != 2) || slots[1] != -1)
      std::_Exit(3);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

TEST(Hardening, Defect8_HostileHostCallsReturnErrors) {
  ensureLocal();
  int64_t v[2] = {1, 2};
  EXPECT_EQ(moert_allreduce_i64(nullptr, v, 2, 0), 1);
  EXPECT_TRUE(contains(moert_last_error(), "moert_allreduce_i64: the collective's name is a "
                                           "null pointer"))
      << moert_last_error();
  EXPECT_EQ(moert_allreduce_i64("t", v, -1, 0), 1);
  EXPECT_TRUE(contains(moert_last_error(), "collective 't': -1 values are outside"))
      << moert_last_error();
  EXPECT_EQ(moert_allreduce_i64("t", nullptr, 2, 0), 1);
  EXPECT_TRUE(contains(moert_last_error(), "values is a null pointer")) << moert_last_error();
  EXPECT_EQ(moert_allreduce_i64("t", v, 2, 7), 1);
  EXPECT_TRUE(contains(moert_last_error(), "op 7 is not 0 (sum) or 1 (max)"))
      << moert_last_error();
  EXPECT_EQ(moert_allreduce_i64(std::string(60, 'n').c_str(), v, 2, 0), 1);
  EXPECT_TRUE(contains(moert_last_error(), "must have 1 to 47 characters"))
      << moert_last_error();
  EXPECT_EQ(moert_allgather("g", v, -8, v), 1);
  EXPECT_TRUE(contains(moert_last_error(), "-8 bytes per rank")) << moert_last_error();
  EXPECT_EQ(moert_allgather("g", nullptr, 8, v), 1);
  EXPECT_TRUE(contains(moert_last_error(), "a null buffer")) << moert_last_error();
  EXPECT_EQ(moert_allgather("g", v, INT64_MAX, v), 1);
  EXPECT_EQ(moert_barrier(""), 1);
  EXPECT_EQ(moert_barrier("ok"), 0) << moert_last_error();
  EXPECT_EQ(moert_counters_json(nullptr, 5), moert_counters_json(nullptr, 0));
  char small[4];
  EXPECT_GT(moert_counters_json(small, -3), 0);
  EXPECT_GT(moert_counters_json(small, sizeof(small)), 3);
  EXPECT_EQ(std::strlen(small), 3u);
  // The FP8 hooks.
  float x[32];
  uint8_t q[32], s[1];
  EXPECT_EQ(moert_quantize_row(2, x, -32, q, s), 1);
  EXPECT_TRUE(contains(moert_last_error(), "moert_quantize_row: n = -32 is outside"))
      << moert_last_error();
  EXPECT_EQ(moert_dequantize_row(2, q, s, 32, nullptr), 1);
  EXPECT_TRUE(contains(moert_last_error(), "moert_dequantize_row: null buffer"))
      << moert_last_error();
  EXPECT_EQ(moert_quantize_row(2, nullptr, 0, nullptr, nullptr), 0); // nothing to do
  moert_finalize();
  EXPECT_EQ(moert_barrier("after"), 1);
  EXPECT_TRUE(contains(moert_last_error(), "moert_barrier: the runtime is not initialized"))
      << moert_last_error();
  EXPECT_EQ(moert_counters_json(nullptr, 0), -1);
}

TEST(Hardening, Defect8_UninitializedRuntimeIsNamed) {
  Ending e = runInChild([] {
    if (moert_size() != 0)
      moert_finalize();
    CCall c;
    c.dispatch();
  });
  EXPECT_TRUE(e.exited && e.code == 1) << e.describe();
  EXPECT_TRUE(contains(e.stderrText, "moert_ep_dispatch_f32: the runtime is not initialized"))
      << e.describe();
}

TEST(Hardening, Defect8_ValidCallsStillWork) {
  ensureLocal();
  Ending e = runInChild([] {
    CCall c;
    c.dispatch();
    if (c.result.x.sizes[0] != 2)
      std::_Exit(3);
    moert_memref2d y;
    _mlir_ciface_moert_ep_combine_f32(&y, &c.result.x, c.result.handle);
    // A plan with the expert count, and the placed entry.
    CCall d;
    d.planm.sizes[0] = MOERT_DISPATCH_PLAN_FIELDS_MAX;
    d.placed();
    if (d.result.x.sizes[0] != 2)
      std::_Exit(4);
    float s[8] = {};
    moert_memref2d sm = memref2(s, 2, 4);
    _mlir_ciface_moert_tp_gather_f32(&y, &sm, 2, 1);
    if (moert_agree_max(3, 1) != 3)
      std::_Exit(5);
  });
  EXPECT_TRUE(e.exited && e.code == 0) << e.describe();
}

TEST(Hardening, PlanCheckAcceptsWhatTheCompilerEmits) {
  DispatchSizes sizes;
  PlanFields plan;
  plan.capacity = 16;
  plan.maxTokens = 8;
  plan.ranks = 2;
  ASSERT_FALSE(checkDispatchPlan(plan, smallShape(), sizes));
  EXPECT_EQ(sizes.rowBytes, 64 * 4 + 2 * 6);
  EXPECT_EQ(sizes.sendBytes, 8 * 2 * sizes.rowBytes);
  EXPECT_EQ(sizes.recvBytes, 16 * sizes.rowBytes);
  EXPECT_EQ(sizes.combineBytes, 8 * 2 * 64 * 4);
  plan.quantization = 1;
  DispatchShape shape = smallShape();
  shape.hidden = 256;
  shape.keepCodes = true;
  ASSERT_FALSE(checkDispatchPlan(plan, shape, sizes));
  EXPECT_EQ(sizes.wireXBytes, 256 + 2 * 4);
  EXPECT_EQ(sizes.expertRowBytes, 256 + 2 * 4);
  EXPECT_EQ(sizes.resultRowBytes, 256);
}
