//===- CApi.cpp - the C ABI: one runtime per process ----------------------===//
//
// Every extern "C" entry checks its arguments before it reads or writes
// through them (PlanCheck for the dispatch), and no exception leaves one:
// each body runs inside a guard that turns any exception into the entry's
// error path, naming the entry point.
//
//===----------------------------------------------------------------------===//
#include "moert/moert.h"

#include "AllGatherExchange.h"
#include "Collectives.h"
#include "DeviceStaging.h"
#include "ExpertParallel.h"
#include "Fatal.h"
#include "LocalCommunicator.h"
#include "Placement.h"
#include "PlanCheck.h"
#include "Quantize.h"
#include "TensorParallel.h"
#ifdef MOERT_HAVE_NCCL_LIBRARY
#include <dlfcn.h>
#endif
#ifdef MOERT_HAVE_MPI
#include "MPICommunicator.h"
#endif

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <thread>
#include <typeinfo>
#include <unordered_map>
#include <vector>

using namespace moert;

namespace {
#ifdef MOERT_HAVE_NCCL_LIBRARY
/// The NCCL backend lives in libmoert_cuda.so next to this library, opened
/// only when asked for: a process running CPU layers never loads cudart or
/// NCCL (a second libnccl.so.2 in a process breaks PyTorch's).
std::unique_ptr<Communicator> openNCCLCommunicator(Status &error) {
  void *library = openCudaLibrary(error);
  if (!library) {
    error = "the nccl backend " + *error;
    return nullptr;
  }
  using Create = Communicator *(*)(Status *);
  auto create = reinterpret_cast<Create>(dlsym(library, "moert_cuda_create_nccl_communicator"));
  if (!create) {
    error = "libmoert_cuda.so has no moert_cuda_create_nccl_communicator";
    return nullptr;
  }
  return std::unique_ptr<Communicator>(create(&error));
}
#endif

struct Runtime {
  std::unique_ptr<Collectives> collectives;
  std::unique_ptr<ExpertParallel> expertParallel;
  /// Rows each dispatch into static buffers received (by handle), which its
  /// combine reads of the buffer it is given.
  std::unordered_map<int64_t, int64_t> receivedRows;
  /// All-gather dispatches awaiting their combine, by handle (negative, so
  /// that no packed dispatch's handle names one).
  struct Gather {
    int64_t rows, hidden, elementBytes;
    CallSignature signature;
  };
  std::unordered_map<int64_t, Gather> pendingGathers;
  /// Dispatches packed by the layer awaiting their return, by handle
  /// (negative, numbered with the all-gathers').
  struct Packed {
    std::vector<int64_t> sent, received; ///< rows to and from each rank
    int64_t sendRows, capacity, hidden, elementBytes;
    CallSignature signature;
  };
  std::unordered_map<int64_t, Packed> pendingPacked;
  int64_t lastGatherHandle = 0;
};
Runtime runtime;
std::string lastError;

int failWith(const std::string &message) {
  try {
    lastError = message;
  } catch (...) {
    lastError.clear(); // no memory even for the message
  }
  return 1;
}

int check(const Status &status) { return status ? failWith(*status) : 0; }

/// Ends this process, and with MPI the whole job (abortMPIJob: a peer
/// that finalized could otherwise leave mpirun hanging), with status 1.
[[noreturn]] void endJob() {
#ifdef MOERT_HAVE_MPI
  abortMPIJob();
#endif
  std::_Exit(1);
}

/// Compiled code cannot take an error back: report and end the process.
/// The pause lets the other ranks, which see the same failure, print theirs
/// before the launcher tears the job down.
[[noreturn]] void die(const std::string &message) {
  int rank = runtime.collectives ? runtime.collectives->rank() : -1;
  std::fprintf(stderr, "moert: rank %d: error: %s\n", rank, message.c_str());
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  endJob();
}

/// What an exception says, for messages.
std::string describeException() {
  try {
    throw;
  } catch (const std::bad_alloc &e) {
    return std::string("out of memory (") + e.what() + ")";
  } catch (const std::exception &e) {
    return std::string("exception ") + typeid(e).name() + ": " + e.what();
  } catch (...) {
    return "unknown exception";
  }
}

/// Runs the body of an entry for compiled code; an exception fails every
/// rank with a message naming the entry.
template <typename F> void guardFatal(const char *entry, const char *collective, F body) {
  try {
    body();
  } catch (...) {
    std::string what;
    try {
      what = std::string(entry) + ": " + describeException();
    } catch (...) {
      fatalOutOfMemory(entry);
    }
    fatal(collective, what);
  }
}

/// Runs the body of an entry that returns a status; an exception becomes
/// that entry's error (moert_last_error).
template <typename R, typename F> R guardStatus(const char *entry, R onError, F body) {
  try {
    return body();
  } catch (...) {
    try {
      failWith(std::string(entry) + ": " + describeException());
    } catch (...) {
    }
    return onError;
  }
}

Collectives &collectivesOrDie(const char *entry) {
  if (!runtime.collectives)
    die(std::string(entry) + ": the runtime is not initialized (call moert_init first)");
  return *runtime.collectives;
}

/// malloc of `a x b x c` bytes (at least 1), or null if that overflows or
/// exceeds the runtime's limit.
void *allocate(int64_t a, int64_t b, int64_t c = 1) {
  int64_t bytes;
  if (a < 0 || b < 0 || c < 0 || !checkedMul(a, b, bytes) || !checkedMul(bytes, c, bytes) ||
      bytes > limits::kMaxWorkspaceBytes)
    return nullptr;
  return std::malloc(size_t(bytes > 0 ? bytes : 1));
}

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

/// Where a dispatch's results go; `scales` only when the experts take FP8
/// codes.
struct DispatchResults {
  moert_memref2d *x, *scales, *localIds, *weights;
  int64_t *handle;
};
DispatchResults resultsOf(moert_dispatch_result *r) {
  if (!r)
    return {};
  return {&r->x, nullptr, &r->local_ids, &r->weights, &r->handle};
}
DispatchResults resultsOf(moert_dispatch_fp8_result *r) {
  if (!r)
    return {};
  return {&r->codes, &r->scales, &r->local_ids, &r->weights, &r->handle};
}

/// A dispatch's arguments as PlanCheck takes them.
DispatchArgs dispatchArgs(bool keepCodes, bool placed, moert_memref2d *x, moert_memref2d *ids,
                          moert_memref2d *weights, moert_memref1d *expertRank,
                          moert_memref1d *physToLog, moert_memref1d *replicaShare,
                          moert_memref1d *plan, int64_t elementBytes) {
  DispatchArgs args;
  args.x = x;
  args.ids = ids;
  args.weights = weights;
  args.expertRank = expertRank;
  args.physToLog = physToLog;
  args.replicaShare = replicaShare;
  args.plan = plan;
  args.placed = placed;
  args.elementBytes = elementBytes;
  args.keepCodes = keepCodes;
  args.ranks = runtime.collectives->size();
  return args;
}

/// A dispatch's arguments checked (PlanCheck); a problem fails every rank.
DispatchCheck checkedDispatch(bool keepCodes, bool placed, moert_memref2d *x,
                              moert_memref2d *ids, moert_memref2d *weights,
                              moert_memref1d *expertRank, moert_memref1d *physToLog,
                              moert_memref1d *replicaShare, moert_memref1d *plan,
                              int64_t elementBytes) {
  DispatchCheck checked;
  if (Status e = checkDispatchArgs(dispatchArgs(keepCodes, placed, x, ids, weights, expertRank,
                                                physToLog, replicaShare, plan, elementBytes),
                                   checked))
    fatal("dispatch", *e);
  return checked;
}

/// `expertRank` or else `physToLog` with `replicaShare` maps experts to ranks.
void dispatch(const char *entry, DispatchResults result, bool keepCodes, bool placed,
              moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,
              moert_memref1d *expertRank, moert_memref1d *physToLog,
              moert_memref1d *replicaShare, moert_memref1d *plan,
              int64_t elementBytes) {
  collectivesOrDie(entry);
  if (!result.x)
    fatal("dispatch", std::string(entry) + ": the result is a null pointer");
  DispatchCheck checked = checkedDispatch(keepCodes, placed, x, ids, weights, expertRank,
                                          physToLog, replicaShare, plan, elementBytes);
  const DispatchSizes &sz = checked.sizes;
  const PlanFields &fields = checked.plan;

  DispatchInput in;
  in.x = static_cast<const uint8_t *>(x->aligned) + x->offset * elementBytes;
  in.tokens = x->sizes[0];
  in.hidden = x->sizes[1];
  in.xRowStride = x->sizes[1];
  in.elementBytes = elementBytes;
  in.expertIds = static_cast<const int32_t *>(ids->aligned) + ids->offset;
  in.weights = static_cast<const float *>(weights->aligned) + weights->offset;
  in.topK = ids->sizes[1];
  if (!placed) {
    in.expertRank = static_cast<const int32_t *>(expertRank->aligned) + expertRank->offset;
    in.experts = expertRank->sizes[0];
  } else {
    in.physToLog = static_cast<const int32_t *>(physToLog->aligned) + physToLog->offset;
    in.replicaShare = static_cast<const float *>(replicaShare->aligned) + replicaShare->offset;
    in.physicalExperts = physToLog->sizes[0];
  }
  in.capacity = fields.capacity;
  in.maxTokens = fields.maxTokens;
  in.slots = fields.slots;
  in.ranks = fields.ranks;
  in.sendBytes = fields.sendBytes;
  in.recvBytes = fields.recvBytes;
  in.expertRowsBytes = fields.expertRowsBytes;
  in.combineBytes = fields.combineBytes;
  in.planExperts = fields.experts;
  in.planFieldCount = fields.count;
  in.replicaSelection = fields.replicaSelection;
  in.planLayer = fields.layer;
  in.quant = QuantScheme(fields.quantization);
  in.keepCodes = keepCodes;
  const int64_t k = in.topK, h = in.hidden;
  int64_t rows = 0, handle = 0;
  Status status = runtime.expertParallel->dispatch(
      in,
      [&](int64_t n) {
        // Results for n rows (n <= the plan's receive rows); every product
        // is checked, and a failed allocation is reported by a null.
        DispatchOutput out;
        void *xs = allocate(n, sz.resultRowBytes);
        void *localIds = allocate(n, k, 4);
        void *ws = allocate(n, k, 4);
        void *scales = keepCodes ? allocate(n, sz.groups, 4) : nullptr;
        if (!xs || !localIds || !ws || (keepCodes && !scales)) {
          std::free(xs);
          std::free(localIds);
          std::free(ws);
          std::free(scales);
          return out;
        }
        *result.x = makeMemref(xs, n, h);
        *result.localIds = makeMemref(localIds, n, k);
        *result.weights = makeMemref(ws, n, k);
        out.x = static_cast<uint8_t *>(xs);
        out.localIds = static_cast<int32_t *>(localIds);
        out.weights = static_cast<float *>(ws);
        if (keepCodes) {
          *result.scales = makeMemref(scales, n, sz.groups);
          out.scales = static_cast<float *>(scales);
        }
        return out;
      },
      rows, handle);
  if (status)
    die(*status);
  *result.handle = handle;
}

void combine(const char *entry, moert_memref2d *result, moert_memref2d *partial,
             int64_t handle, int64_t elementBytes) {
  collectivesOrDie(entry);
  if (!result)
    fatal("combine.payload", std::string(entry) + ": the result is a null pointer");
  if (Status e = checkMemref(partial, "combine", "partial", elementBytes))
    fatal("combine.payload", *e);
  int64_t tokens = 0;
  const int64_t hidden = partial->sizes[1];
  if (Status e = runtime.expertParallel->checkCombine(handle, partial->sizes[0], hidden,
                                                      elementBytes, tokens))
    fatal("combine.payload", *e);
  void *y = allocate(tokens, hidden, elementBytes);
  if (!y)
    fatal("combine.payload", "combine: cannot allocate the result [" +
                                 std::to_string(tokens) + ", " + std::to_string(hidden) +
                                 "] (out of memory or over the runtime's limit)");
  Status status = runtime.expertParallel->combine(
      handle,
      static_cast<const uint8_t *>(partial->aligned) + partial->offset * elementBytes,
      partial->sizes[0], static_cast<uint8_t *>(y), tokens);
  if (status) {
    std::free(y);
    die(*status);
  }
  *result = makeMemref(y, tokens, hidden);
}

void tpGatherEntry(const char *entry, moert_memref2d *result, moert_memref2d *slice,
                   int64_t tokens, int64_t tp, int64_t elementBytes) {
  Collectives &coll = collectivesOrDie(entry);
  if (!result)
    fatal("tp.tokens", std::string(entry) + ": the result is a null pointer");
  if (Status e = checkMemref(slice, "tp gather", "slice", elementBytes))
    fatal("tp.tokens", *e);
  const int64_t hidden = slice->sizes[1];
  CallSignature signature;
  signature.set(CallSignature::Hidden, hidden);
  signature.set(CallSignature::Dtype, elementBytes);
  signature.set(CallSignature::Tp, tp);
  Collectives::SignatureScope scope(coll, signature);
  if (tokens < 0 || tokens > limits::kMaxTokens || hidden > limits::kMaxHidden)
    fatal("tp.tokens", "tp gather: " + std::to_string(tokens) + " tokens of hidden size " +
                           std::to_string(hidden) + " are outside the runtime's limits");
  void *out = allocate(tokens, hidden, elementBytes);
  if (!out)
    fatal("tp.tokens", "tp gather: cannot allocate the result [" + std::to_string(tokens) +
                           ", " + std::to_string(hidden) +
                           "] (out of memory or over the runtime's limit)");
  if (Status e = tpGather(coll,
                          static_cast<const uint8_t *>(slice->aligned) +
                              slice->offset * elementBytes,
                          slice->sizes[0], hidden * elementBytes, tokens, tp,
                          static_cast<uint8_t *>(out))) {
    std::free(out);
    die(*e);
  }
  *result = makeMemref(out, tokens, hidden);
}

/// A descriptor over host memory, with the rows and columns of `like`.
moert_memref2d hostView(std::vector<uint8_t> &storage, const moert_memref2d &like,
                        int64_t elementBytes) {
  storage.resize(size_t(like.sizes[0] * like.sizes[1] * elementBytes));
  return makeMemref(storage.data(), like.sizes[0], like.sizes[1]);
}
moert_memref1d hostView(std::vector<uint8_t> &storage, const moert_memref1d &like,
                        int64_t elementBytes) {
  storage.resize(size_t(like.sizes[0] * elementBytes));
  moert_memref1d m;
  m.allocated = m.aligned = storage.data();
  m.offset = 0;
  m.sizes[0] = like.sizes[0];
  m.strides[0] = 1;
  return m;
}
template <typename Memref>
const uint8_t *dataOf(const Memref &m, int64_t elementBytes) {
  return static_cast<const uint8_t *>(m.aligned) + m.offset * elementBytes;
}
template <typename Memref> int64_t bytesOf(const Memref &m, int64_t elementBytes) {
  int64_t n = elementBytes;
  for (int64_t size : m.sizes)
    n *= size;
  return n;
}

/// A copy in host memory of a caller's (device) buffer; the caller waits.
template <typename Memref>
Memref staged(const DeviceStaging &staging, std::vector<uint8_t> &storage,
              const Memref &m, int64_t elementBytes) {
  if (!staging.onDevice())
    return m;
  Memref host = hostView(storage, m, elementBytes);
  staging.copy(host.aligned, dataOf(m, elementBytes), bytesOf(m, elementBytes));
  return host;
}

/// `rows` rows at `src` to the first rows of `out`, and the rest of `out`
/// (of `capacity` rows) filled with the byte `fill` (0, or 0xff: -1 for
/// ids; the same bits in every element type).
void storeRows(const DeviceStaging &staging, const moert_memref2d &out, int64_t elementBytes,
               const void *src, int64_t rows, int64_t capacity, uint8_t fill) {
  const int64_t rowBytes = out.sizes[1] * elementBytes;
  uint8_t *dst = const_cast<uint8_t *>(dataOf(out, elementBytes));
  staging.copy(dst, src, rows * rowBytes);
  staging.fill(dst + rows * rowBytes, fill, (capacity - rows) * rowBytes);
  staging.wait(); // `src` may be freed on return
}

/// The dispatch of a GPU layer: results into the caller's buffers of the
/// plan's receive rows (the decode layout's ranks x slots, else the
/// capacity), rows past the received ones masked; returns the handle. With
/// `keepCodes` the received rows are the FP8 codes (`outX`, a byte each)
/// and their f32 scales (`outScales`), which the experts read as they are.
int64_t dispatchInto(const char *entry, bool placed, bool keepCodes, moert_memref2d *x,
                     moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *expertRank,
                     moert_memref1d *physToLog, moert_memref1d *replicaShare, moert_memref1d *plan,
                     moert_memref2d *outX, moert_memref2d *outScales, moert_memref2d *outIds,
                     moert_memref2d *outWeights, void *stream, int64_t elementBytes) {
  collectivesOrDie(entry);
  DispatchCheck checked = checkedDispatch(keepCodes, placed, x, ids, weights, expertRank, physToLog,
                                          replicaShare, plan, elementBytes);
  const int64_t rows = checked.sizes.plannedRecvRows, h = x->sizes[1], k = ids->sizes[1];
  const int64_t rowBytes = keepCodes ? 1 : elementBytes;
  struct Out {
    moert_memref2d *m;
    const char *name;
    int64_t cols, elementBytes;
  };
  std::vector<Out> outs = {{outX, keepCodes ? "received_codes" : "received", h, rowBytes},
                           {outIds, "local_ids", k, 4},
                           {outWeights, "local_weights", k, 4}};
  if (keepCodes)
    outs.push_back({outScales, "received_scales", checked.sizes.groups, 4});
  for (const Out &o : outs) {
    if (Status e = checkMemref(o.m, "dispatch", o.name, o.elementBytes))
      fatal("dispatch", *e);
    if (o.m->sizes[0] != rows || o.m->sizes[1] != o.cols)
      fatal("dispatch", std::string(entry) + ": " + o.name + " is [" +
                            std::to_string(o.m->sizes[0]) + ", " +
                            std::to_string(o.m->sizes[1]) + "], the plan receives [" +
                            std::to_string(rows) + ", " + std::to_string(o.cols) + "]");
  }
  DeviceStaging staging;
  if (Status e = DeviceStaging::open(stream, staging))
    fatal("dispatch", std::string(entry) + ": " + *e);
  std::vector<uint8_t> xs, idss, ws, ranks, maps, shares;
  moert_memref2d hx = staged(staging, xs, *x, elementBytes);
  moert_memref2d hids = staged(staging, idss, *ids, 4);
  moert_memref2d hw = staged(staging, ws, *weights, 4);
  moert_memref1d hrank, hmap, hshare;
  if (!placed) {
    hrank = staged(staging, ranks, *expertRank, 4);
  } else {
    hmap = staged(staging, maps, *physToLog, 4);
    hshare = staged(staging, shares, *replicaShare, 4);
  }
  staging.wait();
  moert_dispatch_fp8_result result{};
  DispatchResults results = resultsOf(&result);
  if (!keepCodes)
    results.scales = nullptr;
  dispatch(entry, results, keepCodes, placed, &hx, &hids, &hw, placed ? nullptr : &hrank,
           placed ? &hmap : nullptr, placed ? &hshare : nullptr, plan, elementBytes);
  const int64_t received = result.codes.sizes[0];
  if (received > rows) // the runtime bounds it by the plan; a defect if not
    fatal("combine.payload", std::string(entry) + ": received " + std::to_string(received) +
                                 " rows, more than the plan's " + std::to_string(rows));
  // Masked rows: x 0 (codes and scales 0, which dequantize to 0), ids -1.
  storeRows(staging, *outX, rowBytes, result.codes.aligned, received, rows, 0);
  if (keepCodes)
    storeRows(staging, *outScales, 4, result.scales.aligned, received, rows, 0);
  storeRows(staging, *outIds, 4, result.local_ids.aligned, received, rows, 0xff);
  storeRows(staging, *outWeights, 4, result.weights.aligned, received, rows, 0);
  for (moert_memref2d *m : {&result.codes, &result.scales, &result.local_ids, &result.weights})
    std::free(m->allocated);
  runtime.receivedRows[result.handle] = received;
  return result.handle;
}

/// The combine of a GPU layer: the first received rows of `partial` go back,
/// and this rank's tokens' sums land in `y`.
void combineInto(const char *entry, moert_memref2d *partial, int64_t handle,
                 moert_memref2d *y, void *stream, int64_t elementBytes) {
  collectivesOrDie(entry);
  if (Status e = checkMemref(partial, "combine", "partial", elementBytes))
    fatal("combine.payload", *e);
  if (Status e = checkMemref(y, "combine", "y", elementBytes))
    fatal("combine.payload", *e);
  auto found = runtime.receivedRows.find(handle);
  if (found == runtime.receivedRows.end())
    fatal("combine.payload", std::string(entry) + ": handle " + std::to_string(handle) +
                                 " is not a dispatch into buffers awaiting its combine");
  const int64_t received = found->second;
  runtime.receivedRows.erase(found);
  if (partial->sizes[0] < received)
    fatal("combine.payload", std::string(entry) + ": partial has " +
                                 std::to_string(partial->sizes[0]) + " rows, " +
                                 std::to_string(received) + " were received");
  int64_t tokens = 0;
  if (Status e = runtime.expertParallel->checkCombine(handle, received, partial->sizes[1],
                                                      elementBytes, tokens))
    fatal("combine.payload", *e);
  if (y->sizes[0] != tokens || y->sizes[1] != partial->sizes[1])
    fatal("combine.payload", std::string(entry) + ": y is [" + std::to_string(y->sizes[0]) +
                                 ", " + std::to_string(y->sizes[1]) + "], the tokens are [" +
                                 std::to_string(tokens) + ", " +
                                 std::to_string(partial->sizes[1]) + "]");
  DeviceStaging staging;
  if (Status e = DeviceStaging::open(stream, staging))
    fatal("combine.payload", std::string(entry) + ": " + *e);
  moert_memref2d used = *partial;
  used.sizes[0] = received;
  std::vector<uint8_t> storage;
  moert_memref2d host = staged(staging, storage, used, elementBytes);
  staging.wait();
  moert_memref2d sum{};
  combine(entry, &sum, &host, handle, elementBytes);
  storeRows(staging, *y, elementBytes, sum.aligned, sum.sizes[0], sum.sizes[0], 0);
  std::free(sum.allocated);
}

/// The tensor-parallel gather of a GPU layer: into the caller's `y[T, H]`.
void tpGatherInto(const char *entry, moert_memref2d *slice, int64_t tokens, int64_t tp,
                  moert_memref2d *y, void *stream, int64_t elementBytes) {
  collectivesOrDie(entry);
  if (Status e = checkMemref(y, "tp gather", "y", elementBytes))
    fatal("tp.tokens", *e);
  if (Status e = checkMemref(slice, "tp gather", "slice", elementBytes))
    fatal("tp.tokens", *e);
  if (y->sizes[0] != tokens || y->sizes[1] != slice->sizes[1])
    fatal("tp.tokens", std::string(entry) + ": y is [" + std::to_string(y->sizes[0]) + ", " +
                           std::to_string(y->sizes[1]) + "], the tokens are [" +
                           std::to_string(tokens) + ", " + std::to_string(slice->sizes[1]) +
                           "]");
  DeviceStaging staging;
  if (Status e = DeviceStaging::open(stream, staging))
    fatal("tp.tokens", std::string(entry) + ": " + *e);
  std::vector<uint8_t> storage;
  moert_memref2d host = staged(staging, storage, *slice, elementBytes);
  staging.wait();
  moert_memref2d full{};
  tpGatherEntry(entry, &full, &host, tokens, tp, elementBytes);
  storeRows(staging, *y, elementBytes, full.aligned, tokens, tokens, 0);
  std::free(full.allocated);
}

/// A buffer of the all-gather exchange: `rows` x `cols` elements.
void checkBlocks(const char *entry, const char *collective, const moert_memref2d *m,
                 const char *name, int64_t rows, int64_t cols, int64_t elementBytes) {
  if (Status e = checkMemref(m, "all-gather exchange", name, elementBytes))
    fatal(collective, *e);
  if (m->sizes[0] != rows || m->sizes[1] != cols)
    fatal(collective, std::string(entry) + ": " + name + " is [" + std::to_string(m->sizes[0]) +
                          ", " + std::to_string(m->sizes[1]) + "], the exchange needs [" +
                          std::to_string(rows) + ", " + std::to_string(cols) +
                          "] (ranks x slots rows)");
}

/// The staging of an all-gather exchange's buffers on `stream`; the nccl
/// backend takes device buffers only.
DeviceStaging exchangeStaging(const char *entry, const char *collective, void *stream) {
  DeviceStaging staging;
  if (Status e = DeviceStaging::open(stream, staging))
    fatal(collective, std::string(entry) + ": " + *e);
  if (std::strcmp(runtime.collectives->backend(), "nccl") == 0 && !staging.onDevice())
    fatal(collective,
          std::string(entry) + ": the nccl backend takes device buffers (a non-null stream)");
  return staging;
}

/// Ends the process, naming `hostReads`, when the layer's stream is being
/// captured into a CUDA graph: what the host reads would be read once, at
/// capture, and its wait for them is not allowed during a capture.
void refuseCapture(const DeviceStaging &staging, const char *entry, const char *collective,
                   const char *hostReads) {
  if (staging.capturing())
    fatal(collective, std::string(entry) +
                          ": the layer's stream is being captured into a CUDA graph, but this "
                          "exchange reads " +
                          hostReads +
                          " on the host (only the decode layout's all-gather exchange, without "
                          "per-batch replica selection, can be captured)");
}

/// How many of `slots` (-1: none) are slots of `rank`, `perRank` a rank.
int64_t choicesOfRank(const int32_t *slots, int64_t count, int rank, int64_t perRank) {
  int64_t here = 0;
  for (int64_t i = 0; i < count; ++i)
    here += slots[i] >= rank * perRank && slots[i] < (rank + 1) * perRank;
  return here;
}

/// The rows an all-gather dispatch moves: the layer's (`scales` null), or
/// the E4M3 codes and scales of the FP8 rows the layer quantized; `out*`
/// receive every rank's.
struct GatherRows {
  moert_memref2d *x = nullptr, *scales = nullptr, *out = nullptr, *outScales = nullptr;
};
/// Where the experts live: blocks by rank (`expertRank`), or a placement.
struct GatherMap {
  moert_memref1d *expertRank = nullptr, *physToLog = nullptr, *share = nullptr;
};

/// The all-gather dispatch (AllGatherExchange.h) into `out*[ranks*slots]`;
/// returns the handle for its combine. With the nccl backend the device
/// buffers travel as they are (the block is assembled in place in `out*`
/// and all-gathered after it on the layer's stream); with mpi device
/// buffers are staged through the host.
int64_t gatherInto(const char *entry, GatherRows rows, moert_memref2d *ids, moert_memref2d *weights,
                   GatherMap map, moert_memref1d *plan, moert_memref2d *outIds,
                   moert_memref2d *outWeights, void *stream, int64_t elementBytes) {
  Collectives &coll = collectivesOrDie(entry);
  PhaseTimer timer{coll.counters(), "dispatch"};
  const bool fp8 = rows.scales != nullptr, placed = map.physToLog != nullptr;
  DispatchArgs args = dispatchArgs(/*keepCodes=*/false, placed, rows.x, ids, weights,
                                   map.expertRank, map.physToLog, map.share, plan, elementBytes);
  args.xElementBytes = fp8 ? 1 : 0;
  DispatchCheck checked;
  if (Status e = checkDispatchArgs(args, checked))
    fatal("dispatch.payload", *e);
  const PlanFields &fields = checked.plan;
  if (fields.slots <= 0)
    fatal("dispatch.payload",
          std::string(entry) +
              ": the all-gather dispatch needs the decode layout (plan slots > 0)");
  if ((fields.quantization != 0) != fp8)
    fatal("dispatch.payload",
          std::string(entry) + (fp8 ? ": FP8 codes, but the plan has no quantization"
                                    : ": the plan quantizes to FP8; its rows go by "
                                      "moert_ep_gather_fp8_into_*, quantized by the layer"));
  const int64_t ranks = coll.size(), slots = fields.slots, all = ranks * slots;
  const int64_t t = rows.x->sizes[0], h = rows.x->sizes[1], k = ids->sizes[1];
  const int64_t xBytes = fp8 ? 1 : elementBytes;
  const int64_t scaleBytes = fields.quantization == 1 ? 4 : 1;
  const int64_t groups = fp8 ? h / quantGroupSize(QuantScheme(fields.quantization)) : 0;
  checkBlocks(entry, "dispatch.payload", rows.out, "received", all, h, xBytes);
  if (fp8) {
    if (Status e = checkMemref(rows.scales, "all-gather exchange", "scales", scaleBytes))
      fatal("dispatch.payload", *e);
    if (rows.scales->sizes[0] != t || rows.scales->sizes[1] != groups)
      fatal("dispatch.payload", std::string(entry) + ": scales is [" +
                                    std::to_string(rows.scales->sizes[0]) + ", " +
                                    std::to_string(rows.scales->sizes[1]) + "], codes [" +
                                    std::to_string(t) + ", " + std::to_string(h) + "] need [" +
                                    std::to_string(t) + ", " + std::to_string(groups) + "]");
    checkBlocks(entry, "dispatch.scales", rows.outScales, "received_scales", all, groups,
                scaleBytes);
  }
  checkBlocks(entry, "dispatch.payload", outIds, "gathered_ids", all, k, 4);
  checkBlocks(entry, "dispatch.payload", outWeights, "gathered_weights", all, k, 4);
  const DeviceStaging staging = exchangeStaging(entry, "dispatch.payload", stream);
  const bool nccl = std::strcmp(coll.backend(), "nccl") == 0;
  // nccl: each collective on the layer's stream after its block; their
  // timeout is kept without a host wait (StreamScope::wait).
  std::optional<Collectives::StreamScope> onLayer;
  if (nccl)
    onLayer.emplace(coll, stream, "dispatch.weights");
  // Static shares: the layer chooses the replicas. Per batch: this rank
  // sends each choice's slot instead of its expert, chosen here.
  const bool perBatch = fields.replicaSelection == 1;
  moert_memref1d *mapped = placed ? map.physToLog : map.expertRank;
  GatherCheck check{t, k, mapped->sizes[0], int(ranks), placed, fields.experts};
  // With nccl and no choice per batch, the host needs neither the ids nor
  // the map: they are checked once the stream passes them, without a host
  // wait (the watchdog ends the process on a problem). The layer's kernels
  // take only the ids of this rank's slots, so unchecked ids cannot make
  // them read out of bounds meanwhile.
  const bool deferred = nccl && !perBatch && coll.checksOnStream() && (!placed || check.experts);
  std::vector<uint8_t> idsHost, mapHost, shareHost;
  const int32_t *hostIds = nullptr;
  Placement placement;
  if (deferred) {
    std::vector<Communicator::DeviceSpan> spans = {{dataOf(*ids, 4), t * k * 4},
                                                   {dataOf(*mapped, 4), check.mapSize * 4}};
    if (placed)
      spans.push_back({dataOf(*map.share, 4), check.mapSize * 4});
    if (Status e = coll.checkOnStream("dispatch.payload", spans,
                                      [check](const std::vector<const void *> &host) {
                                        Placement unused;
                                        return check.problem(host, unused);
                                      }))
      fatal("dispatch.payload", *e);
  } else {
    refuseCapture(staging, entry, "dispatch.payload",
                  !nccl      ? "its buffers (the mpi backend stages them through the host)"
                  : perBatch ? "the ids, to choose each batch's replicas"
                             : "the ids (the placed plan does not state its experts)");
    moert_memref2d hids = staged(staging, idsHost, *ids, 4);
    moert_memref1d hmap = staged(staging, mapHost, *mapped, 4);
    moert_memref1d hshare = placed ? staged(staging, shareHost, *map.share, 4) : moert_memref1d{};
    staging.wait();
    hostIds = reinterpret_cast<const int32_t *>(dataOf(hids, 4));
    // Per batch the shares are the runtime's to choose, not checked.
    const void *share = placed && !perBatch ? dataOf(hshare, 4) : nullptr;
    if (Status e = check.problem({hostIds, dataOf(hmap, 4), share}, placement))
      fatal("dispatch.payload", *e);
  }
  CallSignature signature;
  signature.set(CallSignature::Hidden, h);
  signature.set(CallSignature::TopK, k);
  signature.set(CallSignature::Dtype, elementBytes);
  signature.set(CallSignature::Ep, fields.ranks);
  signature.set(CallSignature::Experts, !placed    ? check.mapSize
                                        : deferred ? check.experts
                                                   : placement.experts());
  signature.set(CallSignature::Entry, 4 | (placed ? 1 : 0)); // bit 2: the all-gather form
  setPlanSignature(signature, fields);
  Collectives::SignatureScope scope(coll, signature);
  std::vector<int32_t> slotIds;
  moert_memref2d slotIdsView{};
  if (perBatch) {
    std::optional<BatchSelection> selection;
    std::vector<int64_t> before;
    if (Status e =
            selectForBatch(coll, hostIds, t * k, placement, "dispatch.payload", selection, before))
      die(*e);
    slotIds.resize(size_t(t * k));
    SlotCursor cursor(placement, *selection, before);
    for (int64_t i = 0; i < t * k; ++i)
      slotIds[i] = hostIds[i] < 0 ? -1 : cursor.next(hostIds[i]);
    slotIdsView = makeMemref(slotIds.data(), t, k);
  }
  struct Part {
    const moert_memref2d *in, *out;
    const char *collective;
    int64_t elementSize, rowBytes;
    uint8_t fill; // every byte of the masked rows
  };
  std::vector<Part> parts = {{rows.x, rows.out, "dispatch.payload", xBytes, h * xBytes, 0}};
  if (fp8) // masked rows: codes and scales 0, which dequantize to 0
    parts.push_back(
        {rows.scales, rows.outScales, "dispatch.scales", scaleBytes, groups * scaleBytes, 0});
  parts.push_back({perBatch ? &slotIdsView : ids, outIds, "dispatch.ids", 4, k * 4, 0xff});
  parts.push_back({weights, outWeights, "dispatch.weights", 4, k * 4, 0});
  for (const Part &part : parts) {
    const uint8_t *src = dataOf(*part.in, part.elementSize);
    uint8_t *gathered = const_cast<uint8_t *>(dataOf(*part.out, part.elementSize));
    const int64_t blockBytes = slots * part.rowBytes;
    if (nccl) { // this rank's block in place, then an in-place all-gather after it
      uint8_t *mine = gathered + coll.rank() * blockBytes;
      staging.copy(mine, src, t * part.rowBytes);
      staging.fill(mine + t * part.rowBytes, part.fill, (slots - t) * part.rowBytes);
      if (Status e = coll.allGather(part.collective, mine, blockBytes, gathered))
        die(*e);
      continue;
    }
    std::vector<uint8_t> block(static_cast<size_t>(blockBytes)), storage;
    const DeviceStaging host;
    staging.copy(block.data(), src, t * part.rowBytes);
    staging.wait();
    host.fill(block.data() + t * part.rowBytes, part.fill, (slots - t) * part.rowBytes);
    uint8_t *into = gathered;
    if (staging.onDevice()) {
      storage.resize(size_t(all * part.rowBytes));
      into = storage.data();
    }
    if (Status e = coll.allGather(part.collective, block.data(), blockBytes, into))
      die(*e);
    if (perBatch && part.out == outIds) // every rank's slots, as they arrived
      coll.counters().totals["expert_choices_received"] += choicesOfRank(
          reinterpret_cast<const int32_t *>(into), all * k, coll.rank(), placement.slotsPerRank());
    if (staging.onDevice()) {
      staging.copy(gathered, into, all * part.rowBytes);
      staging.wait();
    }
  }
  if (onLayer)
    if (Status e = onLayer->wait())
      die(*e);
  coll.counters().totals["dispatch_calls_decode"] += 1; // the decode layout's exchange
  const int64_t handle = -++runtime.lastGatherHandle;
  runtime.pendingGathers[handle] = {all, h, elementBytes, signature};
  return handle;
}

/// The all-gather dispatch's combine: block r of `partial` to rank r, block
/// r of `recv` from rank r (the compiled code sums them).
void returnInto(const char *entry, moert_memref2d *partial, int64_t handle, moert_memref2d *recv,
                void *stream, int64_t elementBytes) {
  Collectives &coll = collectivesOrDie(entry);
  PhaseTimer timer{coll.counters(), "combine"};
  auto found = runtime.pendingGathers.find(handle);
  if (found == runtime.pendingGathers.end())
    fatal("combine.payload", std::string(entry) + ": handle " + std::to_string(handle) +
                                 " is not an all-gather dispatch awaiting its combine");
  const Runtime::Gather gather = found->second;
  runtime.pendingGathers.erase(found);
  const int64_t rows = gather.rows, h = gather.hidden;
  if (elementBytes != gather.elementBytes)
    fatal("combine.payload", std::string(entry) + ": the dispatch of handle " +
                                 std::to_string(handle) + " moved " +
                                 (gather.elementBytes == 2 ? "bf16" : "f32") + " rows");
  checkBlocks(entry, "combine.payload", partial, "partial", rows, h, elementBytes);
  checkBlocks(entry, "combine.payload", recv, "returned", rows, h, elementBytes);
  const DeviceStaging staging = exchangeStaging(entry, "combine.payload", stream);
  const bool nccl = std::strcmp(coll.backend(), "nccl") == 0;
  Collectives::SignatureScope scope(coll, gather.signature);
  const int64_t bytes = rows * h * elementBytes, blockBytes = bytes / coll.size();
  uint8_t *out = const_cast<uint8_t *>(dataOf(*recv, elementBytes));
  if (nccl || !staging.onDevice()) { // nccl: after the partial rows, on the layer's stream
    Collectives::StreamScope onLayer(coll, nccl ? stream : nullptr, "combine.payload");
    if (Status e = returnBlocks(coll, dataOf(*partial, elementBytes), blockBytes, out))
      die(*e);
    if (Status e = onLayer.wait())
      die(*e);
    return;
  }
  std::vector<uint8_t> sent, received(static_cast<size_t>(bytes));
  moert_memref2d host = staged(staging, sent, *partial, elementBytes);
  staging.wait();
  if (Status e = returnBlocks(coll, dataOf(host, elementBytes), blockBytes, received.data()))
    die(*e);
  staging.copy(out, received.data(), bytes);
  staging.wait();
}

/// A buffer of the packed exchange: `rows` x `cols` elements.
void checkShape(const char *entry, const char *collective, const moert_memref2d *m,
                const char *name, int64_t rows, int64_t cols, int64_t elementBytes,
                const char *why) {
  if (Status e = checkMemref(m, "packed exchange", name, elementBytes))
    fatal(collective, *e);
  if (m->sizes[0] != rows || m->sizes[1] != cols)
    fatal(collective, std::string(entry) + ": " + name + " is [" + std::to_string(m->sizes[0]) +
                          ", " + std::to_string(m->sizes[1]) + "], the exchange needs [" +
                          std::to_string(rows) + ", " + std::to_string(cols) + "] (" + why + ")");
}

/// The all-to-all of `parts` (rows grouped by rank, `sent[p]` of them to
/// rank p, `received[p]` from it, in rank order), each part with its own
/// row size; with nccl on the layer's stream (device buffers as they are),
/// with mpi staged through the host where the buffers are on the device.
struct ExchangePart {
  const uint8_t *send;
  uint8_t *recv;
  const char *collective;
  int64_t rowBytes;
};
void exchangeParts(Collectives &coll, const DeviceStaging &staging, void *stream,
                   const std::vector<ExchangePart> &parts, const std::vector<int64_t> &sent,
                   const std::vector<int64_t> &received) {
  const bool nccl = std::strcmp(coll.backend(), "nccl") == 0;
  int64_t sendRows = 0, recvRows = 0;
  for (size_t p = 0; p < sent.size(); ++p)
    sendRows += sent[p], recvRows += received[p]; // each within its buffer: checked
  std::optional<Collectives::StreamScope> onLayer;
  if (nccl || !staging.onDevice())
    onLayer.emplace(coll, nccl ? stream : nullptr, parts.back().collective);
  for (const ExchangePart &part : parts) {
    std::vector<int64_t> sendBytes(sent.size()), recvBytes(sent.size());
    for (size_t p = 0; p < sent.size(); ++p) {
      sendBytes[p] = sent[p] * part.rowBytes;
      recvBytes[p] = received[p] * part.rowBytes;
    }
    if (onLayer) {
      if (Status e = coll.allToAllV(part.collective, part.send, sendBytes.data(), part.recv,
                                    recvBytes.data()))
        die(*e);
      continue;
    }
    std::vector<uint8_t> out(size_t(sendRows * part.rowBytes)),
        in(size_t(recvRows * part.rowBytes));
    staging.copy(out.data(), part.send, sendRows * part.rowBytes);
    staging.wait();
    if (Status e = coll.allToAllV(part.collective, out.data(), sendBytes.data(), in.data(),
                                  recvBytes.data()))
      die(*e);
    staging.copy(part.recv, in.data(), recvRows * part.rowBytes);
    staging.wait();
  }
  if (onLayer)
    if (Status e = onLayer->wait())
      die(*e);
}

/// The prefill dispatch packed by the layer (pack-in-layer): rank p's rows
/// are `rows[offsets[p], offsets[p+1])` with their route rows (k targets,
/// then k weights; with FP8, codes and scales); every rank's rows for this
/// one land in `rows.out` (`rows.outScales`) and `outRoute` in rank order,
/// the route rows past them all ones (ids -1; the layer reads no weight
/// there) and the rows past them not written. The host waits for the
/// offsets and the map, and for the blocks against the timeout; returns
/// the handle for returnPackedInto.
int64_t sendPackedInto(const char *entry, GatherRows rows, moert_memref2d *route,
                       moert_memref1d *offsets, GatherMap map, moert_memref1d *plan,
                       moert_memref2d *outRoute, void *stream, int64_t elementBytes) {
  Collectives &coll = collectivesOrDie(entry);
  PhaseTimer timer{coll.counters(), "dispatch"};
  const bool placed = map.physToLog != nullptr, fp8 = rows.scales != nullptr;
  const int64_t xBytes = fp8 ? 1 : elementBytes;
  const char *first = "dispatch.counts";
  for (auto [m, name, bytes] :
       {std::tuple{rows.x, "rows", xBytes}, std::tuple{route, "route", int64_t(4)}})
    if (Status e = checkMemref(m, "packed exchange", name, bytes))
      fatal(first, *e);
  std::vector<std::tuple<moert_memref1d *, const char *, int64_t>> vectors = {
      {offsets, "offsets", 4}, {plan, "plan", 8}};
  if (placed)
    vectors.insert(vectors.end(),
                   {{map.physToLog, "phys_to_log", 4}, {map.share, "replica_share", 4}});
  else
    vectors.push_back({map.expertRank, "expert_rank", 4});
  for (auto [m, name, bytes] : vectors)
    if (Status e = checkMemref(m, "packed exchange", name, bytes))
      fatal(first, *e);
  PlanFields fields;
  if (Status e = readPlan(static_cast<const int64_t *>(plan->aligned) + plan->offset,
                          plan->sizes[0], fields))
    fatal(first, *e);
  const int64_t ranks = coll.size(), n = rows.x->sizes[0], h = rows.x->sizes[1];
  const int64_t width = route->sizes[1], k = width / 2, capacity = fields.capacity;
  if (fields.slots != 0 || (fields.ranks && fields.ranks != ranks))
    fatal(first,
          std::string(entry) + ": the packed dispatch needs the prefill layout (plan slots " +
              std::to_string(fields.slots) + ") and a plan for this group's " +
              std::to_string(ranks) + " ranks (plan ep " + std::to_string(fields.ranks) + ")");
  if ((fields.quantization != 0) != fp8)
    fatal(first, std::string(entry) + (fp8 ? ": FP8 codes, but the plan has no quantization"
                                           : ": the plan quantizes to FP8; its rows go by "
                                             "moert_ep_send_packed_*fp8_into_*"));
  if (width < 2 || width % 2 != 0 || k > limits::kMaxTopK || h > limits::kMaxHidden)
    fatal(first, std::string(entry) + ": route rows of " + std::to_string(width) +
                     " values (2k: k targets, k weights) and hidden size " + std::to_string(h) +
                     " are outside the limits");
  const int64_t group = fp8 ? quantGroupSize(QuantScheme(fields.quantization)) : 1;
  const int64_t scaleBytes = fields.quantization == 1 ? 4 : 1, groups = h / group;
  if (h % group != 0)
    fatal(first, std::string(entry) + ": hidden size " + std::to_string(h) +
                     " is not a multiple of the FP8 group of " + std::to_string(group));
  checkShape(entry, first, route, "route", n, width, 4, "a route row a row");
  checkShape(entry, first, rows.out, "received", capacity, h, xBytes, "the plan's capacity");
  if (fp8) {
    checkShape(entry, first, rows.scales, "scales", n, groups, scaleBytes, "a row's groups");
    checkShape(entry, first, rows.outScales, "received_scales", capacity, groups, scaleBytes,
               "the plan's capacity");
  }
  checkShape(entry, first, outRoute, "received_route", capacity, width, 4, "the plan's capacity");
  if (offsets->sizes[0] != ranks + 1)
    fatal(first, std::string(entry) + ": offsets has " + std::to_string(offsets->sizes[0]) +
                     " entries, the group's " + std::to_string(ranks) + " ranks need " +
                     std::to_string(ranks + 1));
  const DeviceStaging staging = exchangeStaging(entry, first, stream);
  refuseCapture(staging, entry, first, "the offsets of the packed rows");
  std::vector<uint8_t> offsetsHost, mapHost, shareHost;
  moert_memref1d hoffsets = staged(staging, offsetsHost, *offsets, 4);
  moert_memref1d hmap = staged(staging, mapHost, placed ? *map.physToLog : *map.expertRank, 4);
  moert_memref1d hshare = placed ? staged(staging, shareHost, *map.share, 4) : moert_memref1d{};
  staging.wait();
  const int32_t *at = reinterpret_cast<const int32_t *>(dataOf(hoffsets, 4));
  std::vector<int64_t> sent(static_cast<size_t>(ranks)), received(static_cast<size_t>(ranks));
  for (int64_t p = 0; p < ranks; ++p) {
    if (at[0] != 0 || at[p + 1] < at[p] || at[p + 1] > n)
      fatal(first, std::string(entry) + ": offsets[" + std::to_string(p) +
                       "] = " + std::to_string(at[p]) + ", offsets[" + std::to_string(p + 1) +
                       "] = " + std::to_string(at[p + 1]) +
                       ": the blocks must start at 0, not shrink, and end within the " +
                       std::to_string(n) + " rows");
    sent[p] = at[p + 1] - at[p];
  }
  GatherInput in; // the map only: no ids are read here
  in.topK = k;
  in.experts = hmap.sizes[0];
  if (placed) {
    Placement placement;
    if (Status e = Placement::fromReplicas(reinterpret_cast<const int32_t *>(dataOf(hmap, 4)),
                                           reinterpret_cast<const float *>(dataOf(hshare, 4)),
                                           hmap.sizes[0], int(ranks), fields.experts, placement))
      fatal(first, *e);
    in.experts = placement.experts();
  } else {
    in.expertRank = reinterpret_cast<const int32_t *>(dataOf(hmap, 4));
  }
  if (Status e = gatherProblem(in, int(ranks)))
    fatal(first, *e);
  CallSignature signature;
  signature.set(CallSignature::Hidden, h);
  signature.set(CallSignature::TopK, k);
  signature.set(CallSignature::Dtype, elementBytes);
  signature.set(CallSignature::Ep, fields.ranks);
  signature.set(CallSignature::Experts, in.experts);
  signature.set(CallSignature::Entry, 8 | (placed ? 1 : 0)); // bit 3: packed by the layer
  setPlanSignature(signature, fields);
  Collectives::SignatureScope scope(coll, signature);
  if (Status e = exchangeCounts(coll, sent.data(), received.data(), capacity))
    die(*e);
  int64_t arrived = 0;
  for (int64_t count : received)
    arrived += count; // at most the capacity: checked
  uint8_t *routeOut = const_cast<uint8_t *>(dataOf(*outRoute, 4));
  // The masked tail first: on the layer's stream before the blocks land
  // (they do not overlap), so that one wait covers both.
  staging.fill(routeOut + arrived * width * 4, 0xff, (capacity - arrived) * width * 4);
  std::vector<ExchangePart> parts = {{dataOf(*rows.x, xBytes),
                                      const_cast<uint8_t *>(dataOf(*rows.out, xBytes)),
                                      "dispatch.payload", h * xBytes}};
  if (fp8)
    parts.push_back({dataOf(*rows.scales, scaleBytes),
                     const_cast<uint8_t *>(dataOf(*rows.outScales, scaleBytes)), "dispatch.scales",
                     groups * scaleBytes});
  parts.push_back({dataOf(*route, 4), routeOut, "dispatch.route", width * 4});
  exchangeParts(coll, staging, stream, parts, sent, received);
  Counters &counters = coll.counters();
  if (!staging.onDevice()) { // the load of this rank's experts, where the host can see it
    const int32_t *ids = reinterpret_cast<const int32_t *>(routeOut);
    const int64_t perRank = in.experts / ranks;
    int64_t here = 0;
    for (int64_t r = 0; r < arrived; ++r)
      here +=
          choicesOfRank(ids + r * width, k, coll.rank(), placed ? hmap.sizes[0] / ranks : perRank);
    counters.totals["expert_choices_received"] += here;
  }
  counters.totals["dispatch_rows_sent"] += at[ranks];
  counters.totals["dispatch_payload_bytes_sent"] +=
      at[ranks] * (h * xBytes + (fp8 ? groups * scaleBytes : 0) + width * 4);
  counters.totals["dispatch_quantization"] = fields.quantization;
  counters.totals["dispatch_calls_prefill"] += 1;
  const int64_t handle = -++runtime.lastGatherHandle;
  runtime.pendingPacked[handle] = {sent, received, n, capacity, h, elementBytes, signature};
  return handle;
}

/// Replicas chosen per batch for a dispatch the layer packs: the ranks
/// all-gather their choices per expert and split the batch (selectForBatch,
/// as the runtime's own packing does), and this rank's choices' slots go
/// into `slots[T, k]` (-1 for a masked choice), which the layer packs by.
void selectSlotsInto(const char *entry, moert_memref2d *ids, moert_memref1d *physToLog,
                     moert_memref1d *plan, moert_memref2d *slots, void *stream) {
  Collectives &coll = collectivesOrDie(entry);
  PhaseTimer timer{coll.counters(), "dispatch"};
  const char *first = "dispatch.expert_counts";
  if (Status e = checkMemref(ids, "replica selection", "expert_ids", 4))
    fatal(first, *e);
  for (auto [m, name, bytes] :
       {std::tuple{physToLog, "phys_to_log", int64_t(4)}, std::tuple{plan, "plan", int64_t(8)}})
    if (Status e = checkMemref(m, "replica selection", name, bytes))
      fatal(first, *e);
  PlanFields fields;
  if (Status e = readPlan(static_cast<const int64_t *>(plan->aligned) + plan->offset,
                          plan->sizes[0], fields))
    fatal(first, *e);
  if (fields.replicaSelection != 1)
    fatal(first, std::string(entry) +
                     ": the plan does not choose replicas per batch "
                     "(replica_selection " +
                     std::to_string(fields.replicaSelection) + ")");
  const int64_t t = ids->sizes[0], k = ids->sizes[1], ranks = coll.size();
  checkShape(entry, first, slots, "slots", t, k, 4, "one a choice");
  const DeviceStaging staging = exchangeStaging(entry, first, stream);
  refuseCapture(staging, entry, first, "the ids, to choose each batch's replicas");
  std::vector<uint8_t> idsHost, mapHost;
  moert_memref2d hids = staged(staging, idsHost, *ids, 4);
  moert_memref1d hmap = staged(staging, mapHost, *physToLog, 4);
  staging.wait();
  Placement placement;
  if (Status e =
          Placement::fromReplicas(reinterpret_cast<const int32_t *>(dataOf(hmap, 4)), nullptr,
                                  hmap.sizes[0], int(ranks), fields.experts, placement))
    fatal(first, *e);
  GatherInput in;
  in.tokens = t;
  in.topK = k;
  in.expertIds = reinterpret_cast<const int32_t *>(dataOf(hids, 4));
  in.experts = placement.experts();
  if (Status e = gatherProblem(in, int(ranks)))
    fatal(first, *e);
  CallSignature signature;
  signature.set(CallSignature::TopK, k);
  signature.set(CallSignature::Ep, fields.ranks);
  signature.set(CallSignature::Experts, in.experts);
  signature.set(CallSignature::Entry, 8 | 1); // a placed dispatch packed by the layer
  setPlanSignature(signature, fields);
  Collectives::SignatureScope scope(coll, signature);
  std::optional<BatchSelection> selection;
  std::vector<int64_t> before;
  if (Status e = selectForBatch(coll, in.expertIds, t * k, placement, "dispatch.counts", selection,
                                before))
    die(*e);
  std::vector<int32_t> chosen(static_cast<size_t>(t * k));
  SlotCursor cursor(placement, *selection, before);
  for (int64_t i = 0; i < t * k; ++i)
    chosen[size_t(i)] = in.expertIds[i] < 0 ? -1 : cursor.next(in.expertIds[i]);
  staging.copy(const_cast<uint8_t *>(dataOf(*slots, 4)), chosen.data(), t * k * 4);
  staging.wait(); // `chosen` is freed on return
}

/// The packed dispatch's return: the first received rows of `partial` go
/// back to the ranks they came from, into `returned` in the send order.
void returnPackedInto(const char *entry, moert_memref2d *partial, int64_t handle,
                      moert_memref2d *returned, void *stream, int64_t elementBytes) {
  Collectives &coll = collectivesOrDie(entry);
  PhaseTimer timer{coll.counters(), "combine"};
  auto found = runtime.pendingPacked.find(handle);
  if (found == runtime.pendingPacked.end())
    fatal("combine.payload", std::string(entry) + ": handle " + std::to_string(handle) +
                                 " is not a packed dispatch awaiting its return");
  const Runtime::Packed packed = std::move(found->second);
  runtime.pendingPacked.erase(found);
  if (elementBytes != packed.elementBytes)
    fatal("combine.payload", std::string(entry) + ": the dispatch of handle " +
                                 std::to_string(handle) + " moved " +
                                 (packed.elementBytes == 2 ? "bf16" : "f32") + " rows");
  checkShape(entry, "combine.payload", partial, "partial", packed.capacity, packed.hidden,
             elementBytes, "the plan's capacity");
  checkShape(entry, "combine.payload", returned, "returned", packed.sendRows, packed.hidden,
             elementBytes, "the rows the dispatch sent");
  const DeviceStaging staging = exchangeStaging(entry, "combine.payload", stream);
  Collectives::SignatureScope scope(coll, packed.signature);
  exchangeParts(
      coll, staging, stream,
      {{dataOf(*partial, elementBytes), const_cast<uint8_t *>(dataOf(*returned, elementBytes)),
        "combine.payload", packed.hidden * elementBytes}},
      packed.received, packed.sent);
}

/// $MOERT_TIMEOUT_MS: digits only, at least 1; values over the limit (one
/// day) are clamped to it.
Status parseTimeout(const char *text, int64_t &ms) {
  std::string shown;
  for (const char *c = text; *c && shown.size() < 40; ++c)
    shown += (*c >= 0x20 && *c < 0x7f) ? *c : '?';
  if (text[0] && std::strlen(text) > 40)
    shown += "...";
  const std::string rule = " (a number of milliseconds, digits only, 1 to " +
                           std::to_string(limits::kMaxTimeoutMs) + ")";
  if (!*text)
    return "MOERT_TIMEOUT_MS is empty" + rule;
  ms = 0;
  for (const char *c = text; *c; ++c) {
    if (*c < '0' || *c > '9')
      return "MOERT_TIMEOUT_MS='" + shown + "' is not a timeout" + rule;
    if (ms <= limits::kMaxTimeoutMs) // saturates: longer digit strings clamp
      ms = ms * 10 + (*c - '0');
  }
  if (ms == 0)
    return "MOERT_TIMEOUT_MS=" + shown + " is not a timeout" + rule;
  ms = std::min(ms, limits::kMaxTimeoutMs);
  return std::nullopt;
}

/// A host collective's arguments; a bad one fails every rank together.
int hostCollective(const char *entry, const char *name,
                   const std::function<Status(Collectives &)> &call) {
  if (!runtime.collectives)
    return failWith(std::string(entry) + ": the runtime is not initialized");
  Collectives &coll = *runtime.collectives;
  if (Status e = Collectives::checkName(name))
    return check(coll.failTogether("host", std::string(entry) + ": " + *e));
  return check(call(coll));
}
} // namespace

[[noreturn]] void moert::fatalOutOfMemory(const char *entry) noexcept {
  int rank = runtime.collectives ? runtime.collectives->rank() : -1;
  std::fprintf(stderr, "moert: rank %d: error: %s: out of memory\n", rank, entry);
  std::fflush(stderr);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  endJob();
}

[[noreturn]] void moert::fatal(const char *collective, const std::string &message) {
  try {
    std::string report = message;
    if (runtime.collectives) {
      try {
        if (Status e = runtime.collectives->failTogether(collective, message))
          report = *e;
      } catch (...) {
      }
    }
    die(report);
  } catch (...) {
    fatalOutOfMemory(collective);
  }
}

extern "C" {

int moert_init(const char *backend, int64_t timeoutMs) {
  return guardStatus("moert_init", 1, [&]() -> int {
    if (runtime.collectives)
      return failWith("moert_init: already initialized");
    if (timeoutMs <= 0) {
      const char *env = std::getenv("MOERT_TIMEOUT_MS");
      timeoutMs = 30000;
      if (env)
        if (Status e = parseTimeout(env, timeoutMs))
          return failWith("moert_init: " + *e);
    }
    timeoutMs = std::min(timeoutMs, limits::kMaxTimeoutMs);
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
#ifdef MOERT_HAVE_NCCL_LIBRARY
      comm = openNCCLCommunicator(error);
#else
      error = "this runtime was built without NCCL";
#endif
    } else {
      error = "unknown backend '" + name + "' (expected mpi, nccl or local)";
    }
    if (!comm)
      return failWith("moert_init: " + error.value_or("no communicator"));
    auto collectives = std::make_unique<Collectives>(
        std::move(comm), std::chrono::milliseconds(timeoutMs));
    auto expertParallel = std::make_unique<ExpertParallel>(*collectives);
    runtime.collectives = std::move(collectives);
    runtime.expertParallel = std::move(expertParallel);
    return 0;
  });
}

int moert_finalize(void) {
  return guardStatus("moert_finalize", 1, [&] {
    runtime.expertParallel.reset();
    runtime.collectives.reset();
    runtime.receivedRows.clear();
    runtime.pendingGathers.clear();
    return 0;
  });
}

int moert_rank(void) { return runtime.collectives ? runtime.collectives->rank() : -1; }
int moert_size(void) { return runtime.collectives ? runtime.collectives->size() : 0; }
const char *moert_last_error(void) { return lastError.c_str(); }

int64_t moert_counters_json(char *buffer, int64_t capacity) {
  return guardStatus("moert_counters_json", int64_t(-1), [&]() -> int64_t {
    if (!runtime.collectives)
      return failWith("moert_counters_json: the runtime is not initialized"), -1;
    Collectives &c = *runtime.collectives;
    std::string json = c.counters().toJson(c.rank(), c.size(), c.backend());
    if (buffer && capacity > 0) {
      size_t n = std::min<size_t>(json.size(), size_t(capacity - 1));
      std::memcpy(buffer, json.data(), n);
      buffer[n] = '\0';
    }
    return int64_t(json.size());
  });
}

void moert_counters_reset(void) {
  guardStatus("moert_counters_reset", 1, [&] {
    if (runtime.collectives)
      runtime.collectives->counters().reset();
    return 0;
  });
}

int moert_allreduce_i64(const char *name, int64_t *values, int64_t count, int op) {
  return guardStatus("moert_allreduce_i64", 1, [&] {
    return hostCollective("moert_allreduce_i64", name, [&](Collectives &coll) -> Status {
      if (op != 0 && op != 1)
        return coll.failTogether(name, "moert_allreduce_i64: op " + std::to_string(op) +
                                           " is not 0 (sum) or 1 (max)");
      return coll.allReduce(name, values, count, op == 1 ? ReduceOp::Max : ReduceOp::Sum);
    });
  });
}

int moert_allgather(const char *name, const void *send, int64_t bytes, void *recv) {
  return guardStatus("moert_allgather", 1, [&] {
    return hostCollective("moert_allgather", name, [&](Collectives &coll) {
      return coll.allGather(name, send, bytes, recv);
    });
  });
}

int moert_barrier(const char *name) {
  return guardStatus("moert_barrier", 1, [&] {
    return hostCollective("moert_barrier", name,
                          [&](Collectives &coll) { return coll.barrier(name); });
  });
}

int64_t moert_agree_max(int64_t local, int64_t purpose) {
  int64_t most = local;
  guardFatal("moert_agree_max", "chunks.count", [&] {
    Collectives &coll = collectivesOrDie("moert_agree_max");
    if (purpose != MOERT_AGREE_CHUNKS && purpose != MOERT_AGREE_PHASE_TOKENS)
      fatal("chunks.count", "agree_max: unknown purpose " + std::to_string(purpose));
    const bool chunks = purpose == MOERT_AGREE_CHUNKS;
    if (local < 0)
      fatal(chunks ? "chunks.count" : "phase.tokens",
            "agree_max: negative count " + std::to_string(local));
    if (Status e = coll.allReduce(chunks ? "chunks.count" : "phase.tokens", &most, 1,
                                  ReduceOp::Max))
      die(*e);
    if (chunks) {
      coll.counters().totals["chunk_loops"] += 1;
      coll.counters().totals["chunks_run"] += most;
    }
  });
  return most;
}

#define MOERT_DISPATCH_ENTRY(NAME, RESULT, KEEP, BYTES)                              \
  void _mlir_ciface_##NAME(RESULT *result, moert_memref2d *x, moert_memref2d *ids,  \
                           moert_memref2d *weights, moert_memref1d *expertRank,      \
                           moert_memref1d *plan) {                                   \
    guardFatal(#NAME, "dispatch", [&] {                                              \
      dispatch(#NAME, resultsOf(result), KEEP, false, x, ids, weights, expertRank,   \
               nullptr, nullptr, plan, BYTES);                                       \
    });                                                                              \
  }
#define MOERT_PLACED_ENTRY(NAME, RESULT, KEEP, BYTES)                                \
  void _mlir_ciface_##NAME(RESULT *result, moert_memref2d *x, moert_memref2d *ids,  \
                           moert_memref2d *weights, moert_memref1d *physToLog,       \
                           moert_memref1d *replicaShare, moert_memref1d *plan) {     \
    guardFatal(#NAME, "dispatch", [&] {                                              \
      dispatch(#NAME, resultsOf(result), KEEP, true, x, ids, weights, nullptr,       \
               physToLog, replicaShare, plan, BYTES);                                \
    });                                                                              \
  }

MOERT_DISPATCH_ENTRY(moert_ep_dispatch_f32, moert_dispatch_result, false, 4)
MOERT_DISPATCH_ENTRY(moert_ep_dispatch_bf16, moert_dispatch_result, false, 2)
MOERT_PLACED_ENTRY(moert_ep_dispatch_placed_f32, moert_dispatch_result, false, 4)
MOERT_PLACED_ENTRY(moert_ep_dispatch_placed_bf16, moert_dispatch_result, false, 2)
// FP8 codes and f32 scales for the experts (plan quantization 1 or 2).
MOERT_DISPATCH_ENTRY(moert_ep_dispatch_fp8_f32, moert_dispatch_fp8_result, true, 4)
MOERT_DISPATCH_ENTRY(moert_ep_dispatch_fp8_bf16, moert_dispatch_fp8_result, true, 2)
MOERT_PLACED_ENTRY(moert_ep_dispatch_placed_fp8_f32, moert_dispatch_fp8_result, true, 4)
MOERT_PLACED_ENTRY(moert_ep_dispatch_placed_fp8_bf16, moert_dispatch_fp8_result, true, 2)

void _mlir_ciface_moert_ep_combine_f32(moert_memref2d *result,
                                       moert_memref2d *partial, int64_t handle) {
  guardFatal("moert_ep_combine_f32", "combine.payload",
             [&] { combine("moert_ep_combine_f32", result, partial, handle, 4); });
}
void _mlir_ciface_moert_ep_combine_bf16(moert_memref2d *result,
                                        moert_memref2d *partial, int64_t handle) {
  guardFatal("moert_ep_combine_bf16", "combine.payload",
             [&] { combine("moert_ep_combine_bf16", result, partial, handle, 2); });
}

#define MOERT_DISPATCH_INTO_ENTRY(NAME, BYTES)                                                     \
  int64_t _mlir_ciface_##NAME(moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,     \
                              moert_memref1d *expertRank, moert_memref1d *plan,                    \
                              moert_memref2d *received, moert_memref2d *localIds,                  \
                              moert_memref2d *localWeights, void *stream) {                        \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch", [&] {                                                            \
      handle = dispatchInto(#NAME, false, false, x, ids, weights, expertRank, nullptr, nullptr,    \
                            plan, received, nullptr, localIds, localWeights, stream, BYTES);       \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_PLACED_INTO_ENTRY(NAME, BYTES)                                                       \
  int64_t _mlir_ciface_##NAME(                                                                     \
      moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *physToLog,  \
      moert_memref1d *replicaShare, moert_memref1d *plan, moert_memref2d *received,                \
      moert_memref2d *localIds, moert_memref2d *localWeights, void *stream) {                      \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch", [&] {                                                            \
      handle = dispatchInto(#NAME, true, false, x, ids, weights, nullptr, physToLog, replicaShare, \
                            plan, received, nullptr, localIds, localWeights, stream, BYTES);       \
    });                                                                                            \
    return handle;                                                                                 \
  }
MOERT_DISPATCH_INTO_ENTRY(moert_ep_dispatch_into_f32, 4)
MOERT_DISPATCH_INTO_ENTRY(moert_ep_dispatch_into_bf16, 2)
MOERT_PLACED_INTO_ENTRY(moert_ep_dispatch_placed_into_f32, 4)
MOERT_PLACED_INTO_ENTRY(moert_ep_dispatch_placed_into_bf16, 2)

// The FP8 codes and f32 scales for the experts (plan quantization 1 or 2).
#define MOERT_DISPATCH_FP8_INTO_ENTRY(NAME, BYTES)                                                 \
  int64_t _mlir_ciface_##NAME(                                                                     \
      moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *expertRank, \
      moert_memref1d *plan, moert_memref2d *receivedCodes, moert_memref2d *receivedScales,         \
      moert_memref2d *localIds, moert_memref2d *localWeights, void *stream) {                      \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch", [&] {                                                            \
      handle =                                                                                     \
          dispatchInto(#NAME, false, true, x, ids, weights, expertRank, nullptr, nullptr, plan,    \
                       receivedCodes, receivedScales, localIds, localWeights, stream, BYTES);      \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_PLACED_FP8_INTO_ENTRY(NAME, BYTES)                                                   \
  int64_t _mlir_ciface_##NAME(moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,     \
                              moert_memref1d *physToLog, moert_memref1d *replicaShare,             \
                              moert_memref1d *plan, moert_memref2d *receivedCodes,                 \
                              moert_memref2d *receivedScales, moert_memref2d *localIds,            \
                              moert_memref2d *localWeights, void *stream) {                        \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch", [&] {                                                            \
      handle =                                                                                     \
          dispatchInto(#NAME, true, true, x, ids, weights, nullptr, physToLog, replicaShare, plan, \
                       receivedCodes, receivedScales, localIds, localWeights, stream, BYTES);      \
    });                                                                                            \
    return handle;                                                                                 \
  }
MOERT_DISPATCH_FP8_INTO_ENTRY(moert_ep_dispatch_fp8_into_f32, 4)
MOERT_DISPATCH_FP8_INTO_ENTRY(moert_ep_dispatch_fp8_into_bf16, 2)
MOERT_PLACED_FP8_INTO_ENTRY(moert_ep_dispatch_placed_fp8_into_f32, 4)
MOERT_PLACED_FP8_INTO_ENTRY(moert_ep_dispatch_placed_fp8_into_bf16, 2)

#define MOERT_GATHER_INTO_ENTRY(NAME, BYTES)                                                       \
  int64_t _mlir_ciface_##NAME(moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,     \
                              moert_memref1d *expertRank, moert_memref1d *plan,                    \
                              moert_memref2d *received, moert_memref2d *gatheredIds,               \
                              moert_memref2d *gatheredWeights, void *stream) {                     \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch.payload", [&] {                                                    \
      handle = gatherInto(#NAME, GatherRows{x, nullptr, received, nullptr}, ids, weights,          \
                          GatherMap{expertRank, nullptr, nullptr}, plan, gatheredIds,              \
                          gatheredWeights, stream, BYTES);                                         \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_GATHER_PLACED_INTO_ENTRY(NAME, BYTES)                                                \
  int64_t _mlir_ciface_##NAME(                                                                     \
      moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *physToLog,  \
      moert_memref1d *share, moert_memref1d *plan, moert_memref2d *received,                       \
      moert_memref2d *gatheredIds, moert_memref2d *gatheredWeights, void *stream) {                \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch.payload", [&] {                                                    \
      handle = gatherInto(#NAME, GatherRows{x, nullptr, received, nullptr}, ids, weights,          \
                          GatherMap{nullptr, physToLog, share}, plan, gatheredIds,                 \
                          gatheredWeights, stream, BYTES);                                         \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_GATHER_FP8_INTO_ENTRY(NAME, BYTES)                                                   \
  int64_t _mlir_ciface_##NAME(moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *ids,  \
                              moert_memref2d *weights, moert_memref1d *expertRank,                 \
                              moert_memref1d *plan, moert_memref2d *receivedCodes,                 \
                              moert_memref2d *receivedScales, moert_memref2d *gatheredIds,         \
                              moert_memref2d *gatheredWeights, void *stream) {                     \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch.payload", [&] {                                                    \
      handle = gatherInto(#NAME, GatherRows{codes, scales, receivedCodes, receivedScales}, ids,    \
                          weights, GatherMap{expertRank, nullptr, nullptr}, plan, gatheredIds,     \
                          gatheredWeights, stream, BYTES);                                         \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_GATHER_PLACED_FP8_INTO_ENTRY(NAME, BYTES)                                            \
  int64_t _mlir_ciface_##NAME(                                                                     \
      moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *ids, moert_memref2d *weights, \
      moert_memref1d *physToLog, moert_memref1d *share, moert_memref1d *plan,                      \
      moert_memref2d *receivedCodes, moert_memref2d *receivedScales, moert_memref2d *gatheredIds,  \
      moert_memref2d *gatheredWeights, void *stream) {                                             \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch.payload", [&] {                                                    \
      handle = gatherInto(#NAME, GatherRows{codes, scales, receivedCodes, receivedScales}, ids,    \
                          weights, GatherMap{nullptr, physToLog, share}, plan, gatheredIds,        \
                          gatheredWeights, stream, BYTES);                                         \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_RETURN_INTO_ENTRY(NAME, BYTES)                                                       \
  void _mlir_ciface_##NAME(moert_memref2d *partial, int64_t handle, moert_memref2d *returned,      \
                           void *stream) {                                                         \
    guardFatal(#NAME, "combine.payload",                                                           \
               [&] { returnInto(#NAME, partial, handle, returned, stream, BYTES); });              \
  }
#define MOERT_SEND_PACKED_INTO_ENTRY(NAME, BYTES, MAP_ARGS, MAP)                                   \
  int64_t _mlir_ciface_##NAME(moert_memref2d *rows, moert_memref2d *route,                         \
                              moert_memref1d *offsets, MAP_ARGS, moert_memref1d *plan,             \
                              moert_memref2d *received, moert_memref2d *receivedRoute,             \
                              void *stream) {                                                      \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch.counts", [&] {                                                     \
      handle = sendPackedInto(#NAME, GatherRows{rows, nullptr, received, nullptr}, route, offsets, \
                              MAP, plan, receivedRoute, stream, BYTES);                            \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_SEND_PACKED_FP8_INTO_ENTRY(NAME, BYTES, MAP_ARGS, MAP)                               \
  int64_t _mlir_ciface_##NAME(                                                                     \
      moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *route,                        \
      moert_memref1d *offsets, MAP_ARGS, moert_memref1d *plan, moert_memref2d *receivedCodes,      \
      moert_memref2d *receivedScales, moert_memref2d *receivedRoute, void *stream) {               \
    int64_t handle = 0;                                                                            \
    guardFatal(#NAME, "dispatch.counts", [&] {                                                     \
      handle = sendPackedInto(#NAME, GatherRows{codes, scales, receivedCodes, receivedScales},     \
                              route, offsets, MAP, plan, receivedRoute, stream, BYTES);            \
    });                                                                                            \
    return handle;                                                                                 \
  }
#define MOERT_RETURN_PACKED_INTO_ENTRY(NAME, BYTES)                                                \
  void _mlir_ciface_##NAME(moert_memref2d *partial, int64_t handle, moert_memref2d *returned,      \
                           void *stream) {                                                         \
    guardFatal(#NAME, "combine.payload",                                                           \
               [&] { returnPackedInto(#NAME, partial, handle, returned, stream, BYTES); });        \
  }
void _mlir_ciface_moert_ep_select_slots_into(moert_memref2d *ids, moert_memref1d *physToLog,
                                             moert_memref1d *plan, moert_memref2d *slots,
                                             void *stream) {
  guardFatal("moert_ep_select_slots_into", "dispatch.expert_counts", [&] {
    selectSlotsInto("moert_ep_select_slots_into", ids, physToLog, plan, slots, stream);
  });
}
#define MOERT_BY_RANK moert_memref1d *expertRank
#define MOERT_PLACED moert_memref1d *physToLog, moert_memref1d *share
MOERT_SEND_PACKED_INTO_ENTRY(moert_ep_send_packed_into_f32, 4, MOERT_BY_RANK,
                             (GatherMap{expertRank, nullptr, nullptr}))
MOERT_SEND_PACKED_INTO_ENTRY(moert_ep_send_packed_into_bf16, 2, MOERT_BY_RANK,
                             (GatherMap{expertRank, nullptr, nullptr}))
MOERT_SEND_PACKED_INTO_ENTRY(moert_ep_send_packed_placed_into_f32, 4, MOERT_PLACED,
                             (GatherMap{nullptr, physToLog, share}))
MOERT_SEND_PACKED_INTO_ENTRY(moert_ep_send_packed_placed_into_bf16, 2, MOERT_PLACED,
                             (GatherMap{nullptr, physToLog, share}))
MOERT_SEND_PACKED_FP8_INTO_ENTRY(moert_ep_send_packed_fp8_into_f32, 4, MOERT_BY_RANK,
                                 (GatherMap{expertRank, nullptr, nullptr}))
MOERT_SEND_PACKED_FP8_INTO_ENTRY(moert_ep_send_packed_fp8_into_bf16, 2, MOERT_BY_RANK,
                                 (GatherMap{expertRank, nullptr, nullptr}))
MOERT_SEND_PACKED_FP8_INTO_ENTRY(moert_ep_send_packed_placed_fp8_into_f32, 4, MOERT_PLACED,
                                 (GatherMap{nullptr, physToLog, share}))
MOERT_SEND_PACKED_FP8_INTO_ENTRY(moert_ep_send_packed_placed_fp8_into_bf16, 2, MOERT_PLACED,
                                 (GatherMap{nullptr, physToLog, share}))
MOERT_RETURN_PACKED_INTO_ENTRY(moert_ep_return_packed_into_f32, 4)
MOERT_RETURN_PACKED_INTO_ENTRY(moert_ep_return_packed_into_bf16, 2)
MOERT_GATHER_INTO_ENTRY(moert_ep_gather_into_f32, 4)
MOERT_GATHER_INTO_ENTRY(moert_ep_gather_into_bf16, 2)
MOERT_GATHER_FP8_INTO_ENTRY(moert_ep_gather_fp8_into_f32, 4)
MOERT_GATHER_FP8_INTO_ENTRY(moert_ep_gather_fp8_into_bf16, 2)
MOERT_GATHER_PLACED_INTO_ENTRY(moert_ep_gather_placed_into_f32, 4)
MOERT_GATHER_PLACED_INTO_ENTRY(moert_ep_gather_placed_into_bf16, 2)
MOERT_GATHER_PLACED_FP8_INTO_ENTRY(moert_ep_gather_placed_fp8_into_f32, 4)
MOERT_GATHER_PLACED_FP8_INTO_ENTRY(moert_ep_gather_placed_fp8_into_bf16, 2)
MOERT_RETURN_INTO_ENTRY(moert_ep_return_into_f32, 4)
MOERT_RETURN_INTO_ENTRY(moert_ep_return_into_bf16, 2)

void _mlir_ciface_moert_ep_combine_into_f32(moert_memref2d *partial, int64_t handle,
                                            moert_memref2d *y, void *stream) {
  guardFatal("moert_ep_combine_into_f32", "combine.payload", [&] {
    combineInto("moert_ep_combine_into_f32", partial, handle, y, stream, 4);
  });
}
void _mlir_ciface_moert_ep_combine_into_bf16(moert_memref2d *partial, int64_t handle,
                                             moert_memref2d *y, void *stream) {
  guardFatal("moert_ep_combine_into_bf16", "combine.payload", [&] {
    combineInto("moert_ep_combine_into_bf16", partial, handle, y, stream, 2);
  });
}

static int checkQuantHook(const char *entry, int scheme, const void *a, const void *b,
                          const void *c, int64_t n) {
  if (scheme != int(QuantScheme::Fp8Group128F32) &&
      scheme != int(QuantScheme::Fp8Group32Ue8m0))
    return failWith(std::string(entry) + ": unknown FP8 scheme " + std::to_string(scheme) +
                    " (expected 1 = fp8g128 or 2 = fp8g32ue8m0)");
  if (n < 0 || n > limits::kMaxWorkspaceBytes)
    return failWith(std::string(entry) + ": n = " + std::to_string(n) +
                    " is outside [0, 2^40]");
  if (n > 0 && (!a || !b || !c))
    return failWith(std::string(entry) + ": null buffer");
  if (Status e = checkQuantShape(QuantScheme(scheme), n))
    return failWith(std::string(entry) + ": " + *e);
  return 0;
}

int moert_quantize_row(int scheme, const float *x, int64_t n, uint8_t *q,
                       uint8_t *scales) {
  return guardStatus("moert_quantize_row", 1, [&] {
    if (checkQuantHook("moert_quantize_row", scheme, x, q, scales, n))
      return 1;
    quantizeRow(QuantScheme(scheme), x, n, q, scales);
    return 0;
  });
}

int moert_dequantize_row(int scheme, const uint8_t *q, const uint8_t *scales,
                         int64_t n, float *out) {
  return guardStatus("moert_dequantize_row", 1, [&] {
    if (checkQuantHook("moert_dequantize_row", scheme, q, scales, out, n))
      return 1;
    dequantizeRow(QuantScheme(scheme), q, scales, n, out);
    return 0;
  });
}

void _mlir_ciface_moert_tp_gather_into_f32(moert_memref2d *slice, int64_t tokens, int64_t tp,
                                           moert_memref2d *y, void *stream) {
  guardFatal("moert_tp_gather_into_f32", "tp.tokens", [&] {
    tpGatherInto("moert_tp_gather_into_f32", slice, tokens, tp, y, stream, 4);
  });
}
void _mlir_ciface_moert_tp_gather_into_bf16(moert_memref2d *slice, int64_t tokens, int64_t tp,
                                            moert_memref2d *y, void *stream) {
  guardFatal("moert_tp_gather_into_bf16", "tp.tokens", [&] {
    tpGatherInto("moert_tp_gather_into_bf16", slice, tokens, tp, y, stream, 2);
  });
}
void _mlir_ciface_moert_tp_gather_f32(moert_memref2d *result, moert_memref2d *slice,
                                      int64_t tokens, int64_t tp) {
  guardFatal("moert_tp_gather_f32", "tp.tokens", [&] {
    tpGatherEntry("moert_tp_gather_f32", result, slice, tokens, tp, 4);
  });
}
void _mlir_ciface_moert_tp_gather_bf16(moert_memref2d *result, moert_memref2d *slice,
                                       int64_t tokens, int64_t tp) {
  guardFatal("moert_tp_gather_bf16", "tp.tokens", [&] {
    tpGatherEntry("moert_tp_gather_bf16", result, slice, tokens, tp, 2);
  });
}

} // extern "C"
