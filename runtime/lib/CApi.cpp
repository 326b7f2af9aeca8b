//===- CApi.cpp - the C ABI: one runtime per process ----------------------===//
#include "moert/moert.h"

#include "Collectives.h"
#include "ExpertParallel.h"
#include "LocalCommunicator.h"
#include "TensorParallel.h"
#ifdef MOERT_HAVE_MPI
#include "MPICommunicator.h"
#endif
#ifdef MOERT_HAVE_NCCL
#include "NCCLCommunicator.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

using namespace moert;

namespace {
struct Runtime {
  std::unique_ptr<Collectives> collectives;
  std::unique_ptr<ExpertParallel> expertParallel;
};
Runtime runtime;
std::string lastError;

int failWith(const std::string &message) {
  lastError = message;
  return 1;
}

int check(const Status &status) { return status ? failWith(*status) : 0; }

/// Compiled code cannot take an error back: report and end the process.
/// The pause lets the other ranks, which see the same failure, print theirs
/// before the launcher tears the job down.
[[noreturn]] void die(const std::string &message) {
  int rank = runtime.collectives ? runtime.collectives->rank() : -1;
  std::fprintf(stderr, "moert: rank %d: error: %s\n", rank, message.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  std::_Exit(1);
}

Collectives &collectivesOrDie() {
  if (!runtime.collectives)
    die("the runtime is not initialized (call moert_init first)");
  return *runtime.collectives;
}

void *allocate(int64_t bytes) { return std::malloc(bytes > 0 ? bytes : 1); }

moert_memref2d makeMemref(void *data, int64_t rows, int64_t cols) {
  moert_memref2d m;
  m.allocated = m.aligned = data;
  m.offset = 0;
  m.sizes[0] = rows;
  m.sizes[1] = cols;
  m.strides[0] = cols;
  m.strides[1] = 1;
  return m;
}

/// Compiled code hands over identity-layout memrefs; anything else is a bug
/// in the lowering, reported by name.
void requireDense(const moert_memref2d *m, const char *name) {
  if (m->strides[1] != 1 || (m->sizes[0] > 1 && m->strides[0] != m->sizes[1]))
    die(std::string("memref '") + name + "' is not dense row-major");
}

/// Where a dispatch's results go; `scales` only when the experts take FP8
/// codes.
struct DispatchResults {
  moert_memref2d *x, *scales, *localIds, *weights;
  int64_t *handle;
};
DispatchResults resultsOf(moert_dispatch_result *r) {
  return {&r->x, nullptr, &r->local_ids, &r->weights, &r->handle};
}
DispatchResults resultsOf(moert_dispatch_fp8_result *r) {
  return {&r->codes, &r->scales, &r->local_ids, &r->weights, &r->handle};
}

/// `expertRank` or else `physToLog` with `replicaShare` maps experts to ranks.
void dispatch(DispatchResults result, moert_memref2d *x,
              moert_memref2d *ids, moert_memref2d *weights,
              moert_memref1d *expertRank, moert_memref1d *physToLog,
              moert_memref1d *replicaShare, moert_memref1d *plan,
              int64_t elementBytes) {
  collectivesOrDie();
  if (plan->sizes[0] != MOERT_DISPATCH_PLAN_FIELDS || plan->strides[0] != 1)
    die("dispatch: the plan must be a dense i64[" +
        std::to_string(MOERT_DISPATCH_PLAN_FIELDS) + "]");
  const int64_t *fields = static_cast<const int64_t *>(plan->aligned) + plan->offset;
  const int64_t scheme = fields[MOERT_PLAN_QUANTIZATION];
  if (scheme < 0 || scheme > int64_t(QuantScheme::Fp8Group32Ue8m0))
    die("dispatch: plan names unknown quantization " + std::to_string(scheme));
  requireDense(x, "x");
  requireDense(ids, "expert_ids");
  requireDense(weights, "expert_weights");
  if (expertRank && expertRank->strides[0] != 1)
    die("memref 'expert_rank' is not dense");
  if (physToLog && (physToLog->strides[0] != 1 || replicaShare->strides[0] != 1 ||
                    physToLog->sizes[0] != replicaShare->sizes[0]))
    die("dispatch: phys_to_log and replica_share must be dense and of one length");
  if (ids->sizes[0] != x->sizes[0] || weights->sizes[0] != x->sizes[0] ||
      weights->sizes[1] != ids->sizes[1])
    die("dispatch: x, expert_ids and expert_weights disagree on shapes");
  DispatchInput in;
  in.x = static_cast<const uint8_t *>(x->aligned) + x->offset * elementBytes;
  in.tokens = x->sizes[0];
  in.hidden = x->sizes[1];
  in.xRowStride = x->sizes[1];
  in.elementBytes = elementBytes;
  in.expertIds = static_cast<const int32_t *>(ids->aligned) + ids->offset;
  in.weights = static_cast<const float *>(weights->aligned) + weights->offset;
  in.topK = ids->sizes[1];
  if (expertRank) {
    in.expertRank = static_cast<const int32_t *>(expertRank->aligned) + expertRank->offset;
    in.experts = expertRank->sizes[0];
  } else {
    in.physToLog = static_cast<const int32_t *>(physToLog->aligned) + physToLog->offset;
    in.replicaShare = static_cast<const float *>(replicaShare->aligned) + replicaShare->offset;
    in.physicalExperts = physToLog->sizes[0];
  }
  in.capacity = fields[MOERT_PLAN_CAPACITY];
  in.maxTokens = fields[MOERT_PLAN_MAX_TOKENS];
  in.slots = fields[MOERT_PLAN_SLOTS];
  in.ranks = fields[MOERT_PLAN_RANKS];
  in.sendBytes = fields[MOERT_PLAN_SEND_BYTES];
  in.recvBytes = fields[MOERT_PLAN_RECV_BYTES];
  in.expertRowsBytes = fields[MOERT_PLAN_EXPERT_ROWS_BYTES];
  in.combineBytes = fields[MOERT_PLAN_COMBINE_BYTES];
  in.quant = QuantScheme(scheme);
  in.keepCodes = result.scales != nullptr;
  if (in.keepCodes && in.quant == QuantScheme::None)
    die("dispatch: FP8 codes asked for, but the plan has no quantization");
  const int64_t k = in.topK, h = in.hidden;
  int64_t rows = 0, handle = 0;
  Status status = runtime.expertParallel->dispatch(
      in,
      [&](int64_t n) {
        DispatchOutput out;
        *result.x = makeMemref(allocate(n * h * (in.keepCodes ? 1 : elementBytes)), n, h);
        *result.localIds = makeMemref(allocate(n * k * 4), n, k);
        *result.weights = makeMemref(allocate(n * k * 4), n, k);
        out.x = static_cast<uint8_t *>(result.x->aligned);
        out.localIds = static_cast<int32_t *>(result.localIds->aligned);
        out.weights = static_cast<float *>(result.weights->aligned);
        if (in.keepCodes) {
          const int64_t groups = h / quantGroupSize(in.quant);
          *result.scales = makeMemref(allocate(n * groups * 4), n, groups);
          out.scales = static_cast<float *>(result.scales->aligned);
        }
        return out;
      },
      rows, handle);
  if (status)
    die(*status);
  *result.handle = handle;
}

void combine(moert_memref2d *result, moert_memref2d *partial, int64_t handle,
             int64_t elementBytes) {
  collectivesOrDie();
  requireDense(partial, "partial");
  int64_t tokens = runtime.expertParallel->tokensOf(handle);
  if (tokens < 0)
    die("combine: handle " + std::to_string(handle) + " is not in flight");
  int64_t hidden = partial->sizes[1];
  *result = makeMemref(allocate(tokens * hidden * elementBytes), tokens, hidden);
  Status status = runtime.expertParallel->combine(
      handle,
      static_cast<const uint8_t *>(partial->aligned) + partial->offset * elementBytes,
      partial->sizes[0], static_cast<uint8_t *>(result->aligned), tokens);
  if (status)
    die(*status);
}
} // namespace

extern "C" {

int moert_init(const char *backend, int64_t timeoutMs) {
  if (runtime.collectives)
    return failWith("moert_init: already initialized");
  if (timeoutMs <= 0) {
    const char *env = std::getenv("MOERT_TIMEOUT_MS");
    timeoutMs = env ? std::atoll(env) : 30000;
    if (timeoutMs <= 0)
      return failWith("MOERT_TIMEOUT_MS must be a positive number of milliseconds");
  }
  std::unique_ptr<Communicator> comm;
  Status error;
  std::string name = backend ? backend : "";
  if (name == "local") {
    comm = createLocalCommunicator();
  } else if (name == "mpi") {
#ifdef MOERT_HAVE_MPI
    comm = createMPICommunicator(error);
#else
    error = "this runtime was built without MPI";
#endif
  } else if (name == "nccl") {
#ifdef MOERT_HAVE_NCCL
    comm = createNCCLCommunicator(error);
#else
    error = "this runtime was built without NCCL";
#endif
  } else {
    error = "unknown backend '" + name + "' (expected mpi, nccl or local)";
  }
  if (!comm)
    return failWith("moert_init: " + error.value_or("no communicator"));
  runtime.collectives = std::make_unique<Collectives>(
      std::move(comm), std::chrono::milliseconds(timeoutMs));
  runtime.expertParallel = std::make_unique<ExpertParallel>(*runtime.collectives);
  return 0;
}

int moert_finalize(void) {
  runtime.expertParallel.reset();
  runtime.collectives.reset();
  return 0;
}

int moert_rank(void) { return runtime.collectives ? runtime.collectives->rank() : -1; }
int moert_size(void) { return runtime.collectives ? runtime.collectives->size() : 0; }
const char *moert_last_error(void) { return lastError.c_str(); }

int64_t moert_counters_json(char *buffer, int64_t capacity) {
  if (!runtime.collectives)
    return -1;
  Collectives &c = *runtime.collectives;
  std::string json = c.counters().toJson(c.rank(), c.size(), c.backend());
  if (buffer && capacity > 0) {
    size_t n = std::min<size_t>(json.size(), size_t(capacity - 1));
    std::memcpy(buffer, json.data(), n);
    buffer[n] = '\0';
  }
  return int64_t(json.size());
}

void moert_counters_reset(void) {
  if (runtime.collectives)
    runtime.collectives->counters().reset();
}

int moert_allreduce_i64(const char *name, int64_t *values, int64_t count, int op) {
  if (!runtime.collectives)
    return failWith("the runtime is not initialized");
  return check(runtime.collectives->allReduce(
      name, values, count, op == 1 ? ReduceOp::Max : ReduceOp::Sum));
}

int moert_allgather(const char *name, const void *send, int64_t bytes, void *recv) {
  if (!runtime.collectives)
    return failWith("the runtime is not initialized");
  return check(runtime.collectives->allGather(name, send, bytes, recv));
}

int moert_barrier(const char *name) {
  if (!runtime.collectives)
    return failWith("the runtime is not initialized");
  return check(runtime.collectives->barrier(name));
}

int64_t moert_agree_max(int64_t local, int64_t purpose) {
  Collectives &coll = collectivesOrDie();
  if (purpose != MOERT_AGREE_CHUNKS && purpose != MOERT_AGREE_PHASE_TOKENS)
    die("agree_max: unknown purpose " + std::to_string(purpose));
  const bool chunks = purpose == MOERT_AGREE_CHUNKS;
  int64_t most = local;
  if (Status e = coll.allReduce(chunks ? "chunks.count" : "phase.tokens", &most, 1,
                                ReduceOp::Max))
    die(*e);
  if (chunks) {
    coll.counters().totals["chunk_loops"] += 1;
    coll.counters().totals["chunks_run"] += most;
  }
  return most;
}

void _mlir_ciface_moert_ep_dispatch_f32(moert_dispatch_result *result,
                                        moert_memref2d *x, moert_memref2d *ids,
                                        moert_memref2d *weights,
                                        moert_memref1d *expertRank,
                                        moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, expertRank, nullptr, nullptr, plan, 4);
}
void _mlir_ciface_moert_ep_dispatch_bf16(moert_dispatch_result *result,
                                         moert_memref2d *x, moert_memref2d *ids,
                                         moert_memref2d *weights,
                                         moert_memref1d *expertRank,
                                         moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, expertRank, nullptr, nullptr, plan, 2);
}
void _mlir_ciface_moert_ep_dispatch_placed_f32(
    moert_dispatch_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *physToLog,
    moert_memref1d *replicaShare, moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, nullptr, physToLog, replicaShare, plan, 4);
}
void _mlir_ciface_moert_ep_dispatch_placed_bf16(
    moert_dispatch_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *physToLog,
    moert_memref1d *replicaShare, moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, nullptr, physToLog, replicaShare, plan, 2);
}

// FP8 codes and f32 scales for the experts (plan quantization 1 or 2).
void _mlir_ciface_moert_ep_dispatch_fp8_f32(moert_dispatch_fp8_result *result,
                                            moert_memref2d *x, moert_memref2d *ids,
                                            moert_memref2d *weights,
                                            moert_memref1d *expertRank,
                                            moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, expertRank, nullptr, nullptr, plan, 4);
}
void _mlir_ciface_moert_ep_dispatch_fp8_bf16(moert_dispatch_fp8_result *result,
                                             moert_memref2d *x, moert_memref2d *ids,
                                             moert_memref2d *weights,
                                             moert_memref1d *expertRank,
                                             moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, expertRank, nullptr, nullptr, plan, 2);
}
void _mlir_ciface_moert_ep_dispatch_placed_fp8_f32(
    moert_dispatch_fp8_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *physToLog,
    moert_memref1d *replicaShare, moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, nullptr, physToLog, replicaShare, plan, 4);
}
void _mlir_ciface_moert_ep_dispatch_placed_fp8_bf16(
    moert_dispatch_fp8_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *physToLog,
    moert_memref1d *replicaShare, moert_memref1d *plan) {
  dispatch(resultsOf(result), x, ids, weights, nullptr, physToLog, replicaShare, plan, 2);
}
void _mlir_ciface_moert_ep_combine_f32(moert_memref2d *result,
                                       moert_memref2d *partial, int64_t handle) {
  combine(result, partial, handle, 4);
}
void _mlir_ciface_moert_ep_combine_bf16(moert_memref2d *result,
                                        moert_memref2d *partial, int64_t handle) {
  combine(result, partial, handle, 2);
}

static int checkQuantHook(int scheme, const void *a, const void *b,
                          const void *c, int64_t n) {
  if (scheme != int(QuantScheme::Fp8Group128F32) &&
      scheme != int(QuantScheme::Fp8Group32Ue8m0))
    return failWith("unknown FP8 scheme " + std::to_string(scheme) +
                    " (expected 1 = fp8g128 or 2 = fp8g32ue8m0)");
  if (!a || !b || !c)
    return failWith("null buffer");
  return check(checkQuantShape(QuantScheme(scheme), n));
}

int moert_quantize_row(int scheme, const float *x, int64_t n, uint8_t *q,
                       uint8_t *scales) {
  if (checkQuantHook(scheme, x, q, scales, n))
    return 1;
  quantizeRow(QuantScheme(scheme), x, n, q, scales);
  return 0;
}

int moert_dequantize_row(int scheme, const uint8_t *q, const uint8_t *scales,
                         int64_t n, float *out) {
  if (checkQuantHook(scheme, q, scales, out, n))
    return 1;
  dequantizeRow(QuantScheme(scheme), q, scales, n, out);
  return 0;
}

static void tpGatherEntry(moert_memref2d *result, moert_memref2d *slice,
                          int64_t tokens, int64_t tp, int64_t elementBytes) {
  Collectives &coll = collectivesOrDie();
  requireDense(slice, "slice");
  int64_t hidden = slice->sizes[1];
  *result = makeMemref(allocate(tokens * hidden * elementBytes), tokens, hidden);
  if (Status e = tpGather(coll,
                          static_cast<const uint8_t *>(slice->aligned) +
                              slice->offset * elementBytes,
                          slice->sizes[0], hidden * elementBytes, tokens, tp,
                          static_cast<uint8_t *>(result->aligned)))
    die(*e);
}

void _mlir_ciface_moert_tp_gather_f32(moert_memref2d *result, moert_memref2d *slice,
                                      int64_t tokens, int64_t tp) {
  tpGatherEntry(result, slice, tokens, tp, 4);
}
void _mlir_ciface_moert_tp_gather_bf16(moert_memref2d *result, moert_memref2d *slice,
                                       int64_t tokens, int64_t tp) {
  tpGatherEntry(result, slice, tokens, tp, 2);
}

} // extern "C"
