//===- runtime_plan_fuzzer.cpp - fuzzes the runtime's dispatch checks -----===//
//
// Bytes -> a dispatch plan (9 to 12 i64 fields) and call shapes -> the
// runtime's checks (runtime/lib/PlanCheck.cpp), both the pure one
// (checkDispatchPlan: fields and shapes) and the one over memref
// descriptors as compiled code passes them (checkDispatchArgs: sizes,
// strides, offsets, null pointers). Nothing may crash or overflow (the
// target runs under ASan and UBSan), and what the checks accept must be
// consistent: every derived size within the stated limits and equal to the
// product it stands for. The descriptors' data pointers point at a few
// bytes, or are null: the checks must never read a tensor's data.
//
// Input layout: the bytes are read as a stream of "values", each a mode
// byte followed by what it needs: small numbers, boundaries (0, 1, -1,
// powers of two near the limits, INT64_MIN/MAX) or 8 raw bytes, so that
// both the common and the edge cases are a few mutations apart.
//
//===----------------------------------------------------------------------===//
#include "PlanCheck.h"

#include <cstdint>
#include <cstring>

using namespace moert;

namespace {
struct Stream {
  const uint8_t *data;
  size_t size;
  size_t at = 0;

  uint8_t byte() { return at < size ? data[at++] : 0; }
  int64_t raw() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= uint64_t(byte()) << (8 * i);
    return int64_t(v);
  }
  /// A value: mostly small, often a boundary, sometimes anything.
  int64_t value() {
    static const int64_t kEdges[] = {0,
                                     1,
                                     -1,
                                     2,
                                     4,
                                     8,
                                     32,
                                     128,
                                     1000,
                                     32767,
                                     32768,
                                     INT32_MAX,
                                     int64_t(1) << 16,
                                     (int64_t(1) << 20) + 1,
                                     int64_t(1) << 20,
                                     int64_t(1) << 31,
                                     (int64_t(1) << 31) + 1,
                                     int64_t(1) << 40,
                                     (int64_t(1) << 40) + 1,
                                     int64_t(1) << 47,
                                     (int64_t(1) << 47) + 1,
                                     int64_t(1) << 62,
                                     INT64_MAX,
                                     INT64_MAX - 1,
                                     INT64_MIN,
                                     INT64_MIN + 1};
    const uint8_t mode = byte();
    switch (mode % 4) {
    case 0:
    case 1:
      return int64_t(mode >> 2) - 4; // -4 .. 59
    case 2:
      return kEdges[(mode >> 2) % (sizeof(kEdges) / sizeof(kEdges[0]))];
    default:
      return raw();
    }
  }
};

[[noreturn]] void broken() { __builtin_trap(); }

void require(bool ok) {
  if (!ok)
    broken();
}

/// a x b == c, computed exactly.
bool productIs(int64_t a, int64_t b, int64_t c) {
  return __int128(a) * __int128(b) == __int128(c);
}

/// What checkDispatchPlan accepted must be consistent.
void checkAccepted(const PlanFields &plan, const DispatchShape &shape,
                   const DispatchSizes &s) {
  using namespace limits;
  require(shape.elementBytes == 4 || shape.elementBytes == 2);
  require(shape.ranks >= 1 && shape.ranks <= kMaxRanks);
  require(shape.tokens >= 0 && shape.tokens <= kMaxTokens);
  require(shape.hidden >= 1 && shape.hidden <= kMaxHidden);
  require(shape.topK >= 1 && shape.topK <= kMaxTopK);
  require(shape.mapLength >= 1 && shape.mapLength <= kMaxExperts);
  require(shape.mapLength % shape.ranks == 0);
  require(s.expertsPerRank == shape.mapLength / shape.ranks &&
          s.expertsPerRank <= kMaxExpertsPerRank);
  require(plan.quantization >= 0 && plan.quantization <= 2);
  require(!shape.keepCodes || plan.quantization != 0);
  require(plan.ranks == 0 || plan.ranks == shape.ranks);
  require(plan.replicaSelection == 0 || (plan.replicaSelection == 1 && shape.placed));
  const int64_t limit = plan.slots ? plan.slots : plan.maxTokens;
  require(!limit || shape.tokens <= limit);
  const int64_t group = plan.quantization == 1 ? 128 : plan.quantization == 2 ? 32 : 0;
  require(!group || shape.hidden % group == 0);

  require(productIs(shape.hidden, shape.elementBytes, s.xBytes));
  require(s.routeBytes == shape.topK * 6);
  require(s.rowBytes == s.wireXBytes + s.routeBytes && s.rowBytes > 0);
  if (group)
    require(s.wireXBytes ==
            shape.hidden + (plan.quantization == 1 ? shape.hidden / 128 * 4 : shape.hidden / 32));
  else
    require(s.wireXBytes == s.xBytes);
  const int64_t sizes[] = {s.sendBytes, s.recvBytes, s.expertRowsBytes, s.combineBytes};
  for (int64_t bytes : sizes)
    require(bytes >= 0 && bytes <= kMaxWorkspaceBytes);
  // A derived workspace is exactly rows x bytes per row.
  if (!plan.sendBytes)
    require(productIs(s.plannedSendRows, s.rowBytes, s.sendBytes));
  if (!plan.recvBytes)
    require(productIs(s.plannedRecvRows, s.rowBytes, s.recvBytes));
  if (!plan.expertRowsBytes)
    require(productIs(s.plannedRecvRows, s.expertRowBytes, s.expertRowsBytes));
  if (!plan.combineBytes)
    require(productIs(s.plannedSendRows, s.xBytes, s.combineBytes));
  if (plan.slots)
    require(productIs(shape.ranks, plan.slots, s.plannedSendRows) &&
            s.plannedRecvRows == s.plannedSendRows);
  else
    require(s.plannedRecvRows == plan.capacity);
}

void fillMemref(Stream &in, int64_t *sizes, int64_t *strides, int64_t &offset, int rank) {
  for (int d = 0; d < rank; ++d)
    sizes[d] = in.value();
  // Mostly dense, so that the checks behind the stride check run.
  const uint8_t layout = in.byte();
  if (layout % 4 != 0) {
    strides[rank - 1] = 1;
    if (rank == 2)
      strides[0] = sizes[1];
  } else {
    for (int d = 0; d < rank; ++d)
      strides[d] = in.value();
  }
  offset = (layout & 0x10) ? in.value() : 0;
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  Stream in{data, size};

  // 1. The pure check: fields and shapes.
  int64_t values[MOERT_DISPATCH_PLAN_FIELDS_MAX];
  for (int64_t &v : values)
    v = in.value();
  const int64_t count = MOERT_DISPATCH_PLAN_FIELDS + in.byte() % 4;
  PlanFields plan;
  if (readPlan(values, count, plan))
    broken(); // 9 to 12 fields are all plans
  (void)planHash(plan);
  PlanFields ignored;
  if (!readPlan(values, in.byte() % 12 == 3 ? 8 : 13, ignored))
    broken(); // any other count is not
  DispatchShape shape;
  shape.tokens = in.value();
  shape.hidden = in.value();
  shape.topK = in.value();
  shape.elementBytes = (in.byte() & 1) ? 2 : 4;
  shape.mapLength = in.value();
  const uint8_t flags = in.byte();
  shape.placed = flags & 1;
  shape.keepCodes = flags & 2;
  shape.ranks = (flags & 4) ? in.value() : int64_t(in.byte() % 9);
  DispatchSizes sizes;
  if (!checkDispatchPlan(plan, shape, sizes))
    checkAccepted(plan, shape, sizes);

  // 2. The descriptors, as compiled code passes them. Data pointers point
  // at one byte or are null: the checks must not read a tensor. The plan's
  // values live in `storage` at an offset the buffer covers.
  static uint8_t dummy[1];
  moert_memref2d x{}, ids{}, weights{};
  moert_memref1d map{}, share{}, planRef{};
  fillMemref(in, x.sizes, x.strides, x.offset, 2);
  fillMemref(in, ids.sizes, ids.strides, ids.offset, 2);
  fillMemref(in, weights.sizes, weights.strides, weights.offset, 2);
  fillMemref(in, map.sizes, map.strides, map.offset, 1);
  fillMemref(in, share.sizes, share.strides, share.offset, 1);
  const uint8_t nulls = in.byte();
  moert_memref2d *twos[] = {&x, &ids, &weights};
  moert_memref1d *ones[] = {&map, &share};
  for (int i = 0; i < 3; ++i)
    twos[i]->aligned = twos[i]->allocated = (nulls & (1 << i)) ? nullptr : dummy;
  for (int i = 0; i < 2; ++i)
    ones[i]->aligned = ones[i]->allocated = (nulls & (8 << i)) ? nullptr : dummy;
  int64_t storage[32];
  for (int64_t &v : storage)
    v = 0;
  const uint8_t planShape = in.byte();
  // offset + MOERT_DISPATCH_PLAN_FIELDS_MAX (12) <= 32
  planRef.offset = planShape % (33 - MOERT_DISPATCH_PLAN_FIELDS_MAX);
  planRef.sizes[0] = (planShape & 0x80) ? in.value() : 9 + (planShape >> 5) % 4;
  planRef.strides[0] = (planShape & 0x40) ? in.value() : 1;
  for (int64_t i = 0; i < MOERT_DISPATCH_PLAN_FIELDS_MAX; ++i)
    storage[planRef.offset + i] = values[i];
  planRef.aligned = planRef.allocated = (nulls & 0x20) ? nullptr : storage;
  if (planRef.sizes[0] > MOERT_DISPATCH_PLAN_FIELDS_MAX && planRef.aligned)
    planRef.aligned = planRef.allocated = dummy; // never read: the count is wrong

  DispatchArgs args;
  args.x = (nulls & 0x40) ? nullptr : &x;
  args.ids = &ids;
  args.weights = &weights;
  args.placed = flags & 8;
  if (args.placed) {
    args.physToLog = (nulls & 0x80) ? nullptr : &map;
    args.replicaShare = &share;
  } else {
    args.expertRank = (nulls & 0x80) ? nullptr : &map;
  }
  args.plan = &planRef;
  args.elementBytes = (flags & 16) ? 2 : (flags & 32) ? 3 : 4; // 3: never valid
  args.keepCodes = flags & 64;
  args.ranks = shape.ranks;
  DispatchCheck checked;
  if (!checkDispatchArgs(args, checked)) {
    // Accepted: the descriptors are what the shapes say, and every extent
    // fits int64.
    require(args.elementBytes == 2 || args.elementBytes == 4);
    require(checked.shape.tokens == x.sizes[0] && checked.shape.hidden == x.sizes[1]);
    require(ids.sizes[0] == x.sizes[0] && weights.sizes[0] == x.sizes[0] &&
            weights.sizes[1] == ids.sizes[1] && checked.shape.topK == ids.sizes[1]);
    require(checked.shape.mapLength == map.sizes[0]);
    require(!args.placed || share.sizes[0] == map.sizes[0]);
    require(planRef.sizes[0] >= 9 && planRef.sizes[0] <= MOERT_DISPATCH_PLAN_FIELDS_MAX);
    require(std::memcmp(&checked.plan.capacity, &storage[planRef.offset], 8) == 0);
    const moert_memref2d *all2[] = {&x, &ids, &weights};
    const int64_t bytes2[] = {args.elementBytes, 4, 4};
    for (int i = 0; i < 3; ++i) {
      const moert_memref2d *m = all2[i];
      const __int128 elements = __int128(m->sizes[0]) * m->sizes[1];
      require(m->offset >= 0 && m->sizes[0] >= 0 && m->sizes[1] >= 0);
      require((__int128(m->offset) + elements) * bytes2[i] <= INT64_MAX);
      require(elements == 0 || m->aligned);
    }
    checkAccepted(checked.plan, checked.shape, checked.sizes);
  }
  return 0;
}
