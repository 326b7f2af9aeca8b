/*===- moert.h - C ABI of the MoE runtime ----------------------------------===*/
/* The runtime that compiled MoE layers call: communicators (MPI, NCCL, local),
 * expert-parallel dispatch and combine, counters. No MLIR dependency.
 * Functions return 0 on success; on failure moert_last_error() says why.
 * The `_mlir_ciface_*` entry points are called by compiled code, which has
 * no error path: on failure they print the error and end the process.
 * Every entry checks its arguments (null pointers, sizes, strides, the plan)
 * before it reads or writes through them, and no exception leaves one: a
 * failure, out of memory included, is an error naming the entry point.
 * Where the ranks are in a collective call, a failure on one rank is
 * carried in the next collective's descriptor, so every rank fails with it. */
#ifndef MOERT_MOERT_H
#define MOERT_MOERT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts the runtime on `backend` ("mpi", "local" or "nccl"). Every
 * collective fails after `timeout_ms` (<= 0: $MOERT_TIMEOUT_MS, else 30000).
 * $MOERT_TIMEOUT_MS must be digits only (a positive number of ms); values
 * over one day (86400000 ms) are clamped to one day, like `timeout_ms`. */
int moert_init(const char *backend, int64_t timeout_ms);
int moert_finalize(void);
int moert_rank(void);
int moert_size(void);
const char *moert_last_error(void);

/* Counters of this rank as JSON; returns the length (writes at most
 * `capacity` bytes including the NUL). */
int64_t moert_counters_json(char *buffer, int64_t capacity);
void moert_counters_reset(void);

/* Collectives for hosts and tests (host memory; op 0 = sum, 1 = max). */
int moert_allreduce_i64(const char *name, int64_t *values, int64_t count, int op);
int moert_allgather(const char *name, const void *send, int64_t bytes, void *recv);
int moert_barrier(const char *name);

/* The heap of compiled layers (they allocate through MLIR's generic
 * _mlir_memref_to_llvm_alloc/free, which the runtime provides): bytes live
 * now and the high-water mark since the last reset. Free a buffer a compiled
 * layer returned with moert_free (plain malloc'ed pointers are accepted). */
void moert_free(void *pointer);
int64_t moert_heap_live_bytes(void);
int64_t moert_heap_peak_bytes(void);
void moert_heap_reset_peak(void);

/* Called by compiled code (moe.agree_count): the maximum of `local` over the
 * group, for `purpose` MOERT_AGREE_CHUNKS (the chunks every rank's chunk loop
 * runs; collective "chunks.count") or MOERT_AGREE_PHASE_TOKENS (the token
 * count that picks prefill or decode; "phase.tokens"). Ends the process on
 * failure, like the other entry points for compiled code. */
enum { MOERT_AGREE_CHUNKS = 0, MOERT_AGREE_PHASE_TOKENS = 1 };
int64_t moert_agree_max(int64_t local, int64_t purpose);

/* MLIR's ranked memref descriptors, as compiled code passes them. */
typedef struct {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[1];
  int64_t strides[1];
} moert_memref1d;
typedef struct {
  void *allocated;
  void *aligned;
  int64_t offset;
  int64_t sizes[2];
  int64_t strides[2];
} moert_memref2d;

/* Results of moert_ep_dispatch_*: received rows [R,H], local expert ids
 * [R,k] (-1: not on this rank), weights [R,k], and the handle that combine
 * takes. The buffers are malloc'ed; the caller owns them. */
typedef struct {
  moert_memref2d x;
  moert_memref2d local_ids;
  moert_memref2d weights;
  int64_t handle;
} moert_dispatch_result;

/* The plan of one dispatch (a dense i64 memref of MOERT_DISPATCH_PLAN_FIELDS
 * values, written by the compiler):
 *  - capacity: most rows any rank may receive;
 *  - max_tokens: most tokens any rank may hold (0: unchecked);
 *  - slots: 0 for the prefill layout (counts travel first, received rows are
 *    packed); > 0 for the decode layout: every rank sends every rank a fixed
 *    block of `slots` rows, valid rows first and the rest masked (ids -1,
 *    weights 0, x 0), no counts travel, and the result has ranks * slots rows;
 *  - quantization: 0 none; 1 FP8 E4M3 with one f32 scale (amax / 448) per 128
 *    elements; 2 FP8 E4M3 with one UE8M0 power-of-two scale per 32 elements
 *    (docs/FP8Dispatch.md). With FP8 only codes and scales travel and the
 *    receiver dequantizes into x's element type; the hidden size must be a
 *    multiple of the group size;
 *  - ranks: the expert-parallel group size the layer was compiled for (0:
 *    unchecked); a different group fails every rank;
 *  - send_bytes, recv_bytes, expert_rows_bytes, combine_bytes: the static
 *    workspace sizes of moe-plan-buffers (0: derived from the fields above);
 *  - experts (optional 10th field; a plan may have 9 or 10 values): the
 *    layer's logical expert count E. With expert_rank it must equal its
 *    length; with a placement it bounds phys_to_log's values and the ids
 *    (without it the runtime infers E from phys_to_log, docs/Runtime.md);
 *  - replica_selection (optional 11th field, after experts, which may then
 *    be 0: inferred): 0 static shares; 1 per batch (placement only): the
 *    ranks all-gather their choices per expert, every rank computes the
 *    same split of each replicated expert's choices over its replicas that
 *    makes the batch's busiest rank least busy (an integer max flow), and
 *    rank r's choices of an expert fill that split's replicas in rank
 *    order; replica_share is not read;
 *  - layer (optional 12th field, after replica_selection): a fingerprint of
 *    the compiled layer (its module before any machine-dependent lowering;
 *    0: none). Ranks must agree on it: layers
 *    whose collectives match but whose math differs (intermediate size,
 *    norm_topk_prob, activation, ...) would otherwise mix their results.
 * Every field is checked against the runtime's limits (docs/Runtime.md) and
 * every workspace product for overflow before anything is allocated.
 * A rank that breaks the plan (too many tokens or rows, bad ids) makes every
 * rank fail before any payload is written, and ranks whose calls disagree
 * on the layer (hidden size, top-k, dtype, quantization, ep, experts, plan,
 * the layer's fingerprint)
 * fail together at the dispatch's first collective, naming the field and
 * each rank's value. The send, receive and combine workspaces are sized
 * from the plan once and reused. */
enum {
  MOERT_PLAN_CAPACITY = 0,
  MOERT_PLAN_MAX_TOKENS = 1,
  MOERT_PLAN_SLOTS = 2,
  MOERT_PLAN_QUANTIZATION = 3,
  MOERT_PLAN_RANKS = 4,
  MOERT_PLAN_SEND_BYTES = 5,
  MOERT_PLAN_RECV_BYTES = 6,
  MOERT_PLAN_EXPERT_ROWS_BYTES = 7,
  MOERT_PLAN_COMBINE_BYTES = 8,
  MOERT_PLAN_EXPERTS = 9,            /* optional */
  MOERT_PLAN_REPLICA_SELECTION = 10, /* optional, after experts */
  MOERT_PLAN_LAYER = 11,             /* optional, after replica_selection */
  MOERT_DISPATCH_PLAN_FIELDS = 9,
  MOERT_DISPATCH_PLAN_FIELDS_MAX = 12
};
void _mlir_ciface_moert_ep_dispatch_f32(moert_dispatch_result *result,
                                        moert_memref2d *x, moert_memref2d *ids,
                                        moert_memref2d *weights,
                                        moert_memref1d *expert_rank,
                                        moert_memref1d *plan);
void _mlir_ciface_moert_ep_dispatch_bf16(moert_dispatch_result *result,
                                         moert_memref2d *x, moert_memref2d *ids,
                                         moert_memref2d *weights,
                                         moert_memref1d *expert_rank,
                                         moert_memref1d *plan);
/* The same with a load-balancer placement instead of expert_rank:
 * phys_to_log[P] (i32) names each physical slot's logical expert, slot p
 * living on rank p / (P / ranks) as local expert p % (P / ranks);
 * replica_share[P] (f32, >= 0) is each slot's share of its expert's tokens.
 * The n-th choice of an expert on this rank (in token, choice order) goes
 * to the replica whose interval of cumulative shares holds
 * frac((n + 0.5) * 0.6180339887...): deterministic and in proportion. */
void _mlir_ciface_moert_ep_dispatch_placed_f32(
    moert_dispatch_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan);
void _mlir_ciface_moert_ep_dispatch_placed_bf16(
    moert_dispatch_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan);

/* FP8 dispatch whose experts take the codes as they arrived: x's rows travel
 * as E4M3 codes and scales (plan quantization 1 or 2, required) and the
 * result holds the codes [R,H] (e4m3fn bytes), their f32 scales [R,H/group]
 * (UE8M0 bytes decoded to 2^(b-127)), local ids, weights and the handle. */
typedef struct {
  moert_memref2d codes;
  moert_memref2d scales;
  moert_memref2d local_ids;
  moert_memref2d weights;
  int64_t handle;
} moert_dispatch_fp8_result;
void _mlir_ciface_moert_ep_dispatch_fp8_f32(moert_dispatch_fp8_result *result,
                                            moert_memref2d *x, moert_memref2d *ids,
                                            moert_memref2d *weights,
                                            moert_memref1d *expert_rank,
                                            moert_memref1d *plan);
void _mlir_ciface_moert_ep_dispatch_fp8_bf16(moert_dispatch_fp8_result *result,
                                             moert_memref2d *x, moert_memref2d *ids,
                                             moert_memref2d *weights,
                                             moert_memref1d *expert_rank,
                                             moert_memref1d *plan);
void _mlir_ciface_moert_ep_dispatch_placed_fp8_f32(
    moert_dispatch_fp8_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan);
void _mlir_ciface_moert_ep_dispatch_placed_fp8_bf16(
    moert_dispatch_fp8_result *result, moert_memref2d *x, moert_memref2d *ids,
    moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan);

/* Sends each received row's partial result back and sums them per token:
 * result is y[T,H] (malloc'ed). */
void _mlir_ciface_moert_ep_combine_f32(moert_memref2d *result,
                                       moert_memref2d *partial, int64_t handle);
void _mlir_ciface_moert_ep_combine_bf16(moert_memref2d *result,
                                        moert_memref2d *partial, int64_t handle);

/* The same dispatch and combine into the caller's buffers, for GPU layers
 * (whose buffers are views of one device workspace): `received`,
 * `local_ids` and `local_weights` have the plan's receive rows (the decode
 * layout's ranks x slots, else its capacity); the rows past those received
 * are masked (x 0, ids -1, weights 0). Returns the handle for the combine,
 * which sends back the first received rows of `partial` (at least that many
 * rows) and writes this rank's sums into `y[T, H]`. With a non-null `stream`
 * (a CUstream) every tensor but the plan is device memory: the entry copies
 * it to the host on that stream, waits for the stream (a host
 * synchronization: the MPI backend sends host memory), and copies the
 * results back before it returns. A null stream: host memory. The plan is
 * host memory. With FP8 quantization the receiver dequantizes, or, with
 * the _fp8_ entries below, keeps the codes for the experts. */
int64_t _mlir_ciface_moert_ep_dispatch_into_f32(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *expert_rank, moert_memref1d *plan, moert_memref2d *received,
    moert_memref2d *local_ids, moert_memref2d *local_weights, void *stream);
int64_t _mlir_ciface_moert_ep_dispatch_into_bf16(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *expert_rank, moert_memref1d *plan, moert_memref2d *received,
    moert_memref2d *local_ids, moert_memref2d *local_weights, void *stream);
int64_t _mlir_ciface_moert_ep_dispatch_placed_into_f32(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received, moert_memref2d *local_ids, moert_memref2d *local_weights,
    void *stream);
int64_t _mlir_ciface_moert_ep_dispatch_placed_into_bf16(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received, moert_memref2d *local_ids, moert_memref2d *local_weights,
    void *stream);
/* The same dispatch with FP8 quantization (plan quantization 1 or 2) whose
 * experts read the codes as they arrived (moe-fuse-quant-dispatch
 * {gemm-consumes-fp8}): `received_codes[rows, H]` (E4M3 bytes) and
 * `received_scales[rows, H/group]` (f32; UE8M0 bytes decoded to
 * 2^(b-127)) instead of the dequantized rows; masked rows have codes and
 * scales 0. The suffix is the layer's dtype (x's, and the combine's). */
int64_t _mlir_ciface_moert_ep_dispatch_fp8_into_f32(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *expert_rank,
    moert_memref1d *plan, moert_memref2d *received_codes, moert_memref2d *received_scales,
    moert_memref2d *local_ids, moert_memref2d *local_weights, void *stream);
int64_t _mlir_ciface_moert_ep_dispatch_fp8_into_bf16(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *expert_rank,
    moert_memref1d *plan, moert_memref2d *received_codes, moert_memref2d *received_scales,
    moert_memref2d *local_ids, moert_memref2d *local_weights, void *stream);
int64_t _mlir_ciface_moert_ep_dispatch_placed_fp8_into_f32(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan, moert_memref2d *received_codes,
    moert_memref2d *received_scales, moert_memref2d *local_ids, moert_memref2d *local_weights,
    void *stream);
int64_t _mlir_ciface_moert_ep_dispatch_placed_fp8_into_bf16(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan, moert_memref2d *received_codes,
    moert_memref2d *received_scales, moert_memref2d *local_ids, moert_memref2d *local_weights,
    void *stream);
void _mlir_ciface_moert_ep_combine_into_f32(moert_memref2d *partial, int64_t handle,
                                            moert_memref2d *y, void *stream);
void _mlir_ciface_moert_ep_combine_into_bf16(moert_memref2d *partial, int64_t handle,
                                             moert_memref2d *y, void *stream);

/* The all-gather form of the decode layout (plan slots = S > 0, no
 * quantization (FP8 rows: below), rank r owning experts [r*E/R, (r+1)*E/R)): every rank's
 * block of S token rows lands in `received[R*S, H]`, `gathered_ids` and
 * `gathered_weights` ([R*S, k]): token t of rank r at row r*S + t, rows past
 * rank r's tokens masked (x 0, ids -1, weights 0). The ids stay global (the
 * compiled code maps them to this rank's experts). Returns the handle for
 * moert_ep_return_into_*, which sends block r of `partial[R*S, H]` to rank r
 * and writes block r of `returned[R*S, H]` from rank r (the compiled code sums
 * a token's rows in rank order). A non-null `stream` means device buffers:
 * with the mpi backend staged through the host, with nccl sent as they are,
 * on `stream` after the work enqueued there (the entry returns once they are
 * done, or fails every rank after the timeout). */
int64_t _mlir_ciface_moert_ep_gather_into_f32(moert_memref2d *x, moert_memref2d *ids,
                                              moert_memref2d *weights, moert_memref1d *expert_rank,
                                              moert_memref1d *plan, moert_memref2d *received,
                                              moert_memref2d *gathered_ids,
                                              moert_memref2d *gathered_weights, void *stream);
int64_t _mlir_ciface_moert_ep_gather_into_bf16(moert_memref2d *x, moert_memref2d *ids,
                                               moert_memref2d *weights, moert_memref1d *expert_rank,
                                               moert_memref1d *plan, moert_memref2d *received,
                                               moert_memref2d *gathered_ids,
                                               moert_memref2d *gathered_weights, void *stream);
/* The same exchange of FP8 rows the layer quantized (plan quantization
 * 1 = fp8g128: `scales` f32 [T, H/128]; 2 = fp8g32ue8m0: UE8M0 exponent
 * bytes [T, H/32]): `codes[T, H]` (E4M3 bytes) and `scales` land in
 * `received_codes[R*S, H]` and `received_scales[R*S, H/group]`, masked rows
 * all 0 (which dequantize to 0). The suffix is the layer's dtype, which the
 * combine (moert_ep_return_into_*) returns. */
int64_t _mlir_ciface_moert_ep_gather_fp8_into_f32(moert_memref2d *codes, moert_memref2d *scales,
                                                  moert_memref2d *ids, moert_memref2d *weights,
                                                  moert_memref1d *expert_rank, moert_memref1d *plan,
                                                  moert_memref2d *received_codes,
                                                  moert_memref2d *received_scales,
                                                  moert_memref2d *gathered_ids,
                                                  moert_memref2d *gathered_weights, void *stream);
int64_t _mlir_ciface_moert_ep_gather_fp8_into_bf16(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *expert_rank, moert_memref1d *plan, moert_memref2d *received_codes,
    moert_memref2d *received_scales, moert_memref2d *gathered_ids, moert_memref2d *gathered_weights,
    void *stream);
/* Both with a placement (phys_to_log[P], replica_share[P] instead of
 * expert_rank; P = ranks x slots per rank): the layer chooses each
 * choice's replica (docs/Runtime.md); the runtime checks the placement and
 * the ids. With replicas chosen per batch (plan replica_selection = 1) the
 * runtime chooses instead: the ranks all-gather their choices per expert
 * ("dispatch.expert_counts"), split them as the packed dispatch does, and
 * gathered_ids holds slots, not experts (replica_share is not read). */
int64_t _mlir_ciface_moert_ep_gather_placed_into_f32(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan, moert_memref2d *received,
    moert_memref2d *gathered_ids, moert_memref2d *gathered_weights, void *stream);
int64_t _mlir_ciface_moert_ep_gather_placed_into_bf16(
    moert_memref2d *x, moert_memref2d *ids, moert_memref2d *weights, moert_memref1d *phys_to_log,
    moert_memref1d *replica_share, moert_memref1d *plan, moert_memref2d *received,
    moert_memref2d *gathered_ids, moert_memref2d *gathered_weights, void *stream);
int64_t _mlir_ciface_moert_ep_gather_placed_fp8_into_f32(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received_codes, moert_memref2d *received_scales, moert_memref2d *gathered_ids,
    moert_memref2d *gathered_weights, void *stream);
int64_t _mlir_ciface_moert_ep_gather_placed_fp8_into_bf16(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *ids, moert_memref2d *weights,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received_codes, moert_memref2d *received_scales, moert_memref2d *gathered_ids,
    moert_memref2d *gathered_weights, void *stream);
void _mlir_ciface_moert_ep_return_into_f32(moert_memref2d *partial, int64_t handle,
                                           moert_memref2d *returned, void *stream);
void _mlir_ciface_moert_ep_return_into_bf16(moert_memref2d *partial, int64_t handle,
                                            moert_memref2d *returned, void *stream);

/* The prefill dispatch packed by the layer (moe-compile --ep-pack-in-layer;
 * plan slots 0, no quantization (FP8: below), rank r owning experts [r*E/R, (r+1)*E/R)
 * or, placed, slots [r*P/R, (r+1)*P/R)): the layer's own kernels grouped its
 * rows by destination rank, rank p's block `rows[offsets[p], offsets[p+1])`
 * of `rows[N, H]`, each with its route row in `route[N, 2k]` (the token's k
 * targets, global experts or slots, as the bits of f32, then its k
 * weights). The ranks exchange their counts and check them against the
 * capacity as the packed dispatch does, then every rank's block for this
 * one lands in `received[C, H]` and `received_route[C, 2k]` (C = the
 * plan's capacity) in rank order; the route rows past them are all ones
 * (ids -1), the rows past them are not written. The host reads only the
 * offsets and the map (one wait); with the nccl backend the blocks move
 * between device buffers on the layer's stream, and the host waits for them
 * against the timeout. Returns the handle for
 * moert_ep_return_packed_into_*, which sends the first received rows of
 * `partial[C, H]` back to their ranks, into `returned[N, H]` in the send
 * order (the layer sums each token's rows). */
int64_t _mlir_ciface_moert_ep_send_packed_into_f32(moert_memref2d *rows, moert_memref2d *route,
                                                   moert_memref1d *offsets,
                                                   moert_memref1d *expert_rank,
                                                   moert_memref1d *plan, moert_memref2d *received,
                                                   moert_memref2d *received_route, void *stream);
int64_t _mlir_ciface_moert_ep_send_packed_into_bf16(moert_memref2d *rows, moert_memref2d *route,
                                                    moert_memref1d *offsets,
                                                    moert_memref1d *expert_rank,
                                                    moert_memref1d *plan, moert_memref2d *received,
                                                    moert_memref2d *received_route, void *stream);
int64_t _mlir_ciface_moert_ep_send_packed_placed_into_f32(
    moert_memref2d *rows, moert_memref2d *route, moert_memref1d *offsets,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received, moert_memref2d *received_route, void *stream);
int64_t _mlir_ciface_moert_ep_send_packed_placed_into_bf16(
    moert_memref2d *rows, moert_memref2d *route, moert_memref1d *offsets,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received, moert_memref2d *received_route, void *stream);
/* With FP8 quantization (plan quantization 1 or 2) the layer quantizes its
 * rows itself: the E4M3 `codes[N, H]` and their `scales[N, H/group]` travel
 * (a third block, `dispatch.scales`) into `received_codes` and
 * `received_scales`, which the layer dequantizes (docs/FP8Dispatch.md). */
int64_t _mlir_ciface_moert_ep_send_packed_fp8_into_f32(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *route, moert_memref1d *offsets,
    moert_memref1d *expert_rank, moert_memref1d *plan, moert_memref2d *received_codes,
    moert_memref2d *received_scales, moert_memref2d *received_route, void *stream);
int64_t _mlir_ciface_moert_ep_send_packed_fp8_into_bf16(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *route, moert_memref1d *offsets,
    moert_memref1d *expert_rank, moert_memref1d *plan, moert_memref2d *received_codes,
    moert_memref2d *received_scales, moert_memref2d *received_route, void *stream);
int64_t _mlir_ciface_moert_ep_send_packed_placed_fp8_into_f32(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *route, moert_memref1d *offsets,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received_codes, moert_memref2d *received_scales, moert_memref2d *received_route,
    void *stream);
int64_t _mlir_ciface_moert_ep_send_packed_placed_fp8_into_bf16(
    moert_memref2d *codes, moert_memref2d *scales, moert_memref2d *route, moert_memref1d *offsets,
    moert_memref1d *phys_to_log, moert_memref1d *replica_share, moert_memref1d *plan,
    moert_memref2d *received_codes, moert_memref2d *received_scales, moert_memref2d *received_route,
    void *stream);
/* Replicas chosen per batch for a dispatch the layer packs (plan
 * replica_selection 1): the ranks all-gather their choices per expert
 * (`dispatch.expert_counts`), every rank computes the same split of the
 * batch, and this rank's choices' slots go into `slots[T, k]` (-1 for a
 * masked choice), which the layer then packs by and sends with
 * moert_ep_send_packed_placed_*. Device buffers with a non-null stream (one
 * host wait for the ids). */
void _mlir_ciface_moert_ep_select_slots_into(moert_memref2d *expert_ids,
                                             moert_memref1d *phys_to_log, moert_memref1d *plan,
                                             moert_memref2d *slots, void *stream);
void _mlir_ciface_moert_ep_return_packed_into_f32(moert_memref2d *partial, int64_t handle,
                                                  moert_memref2d *returned, void *stream);
void _mlir_ciface_moert_ep_return_packed_into_bf16(moert_memref2d *partial, int64_t handle,
                                                   moert_memref2d *returned, void *stream);

/* Test hooks: the row quantization dispatch uses. scheme 1 = fp8g128 (scales:
 * n/128 f32), 2 = fp8g32ue8m0 (scales: n/32 bytes, 2^(byte-127)); n must be a
 * multiple of the group size. q holds n E4M3 (e4m3fn) bytes. No runtime
 * needs to be started. */
int moert_quantize_row(int scheme, const float *x, int64_t n, uint8_t *q,
                       uint8_t *scales);
int moert_dequantize_row(int scheme, const uint8_t *q, const uint8_t *scales,
                         int64_t n, float *out);

/* All-gather within this rank's tensor-parallel group (`tp` consecutive
 * ranks holding the same `tokens` rows): `slice` is this rank's share, rows
 * [j*c, min((j+1)*c, tokens)) with c = ceil(tokens / tp), j = rank % tp;
 * the result has all `tokens` rows (malloc'ed). */
void _mlir_ciface_moert_tp_gather_f32(moert_memref2d *result, moert_memref2d *slice,
                                      int64_t tokens, int64_t tp);
void _mlir_ciface_moert_tp_gather_bf16(moert_memref2d *result, moert_memref2d *slice,
                                       int64_t tokens, int64_t tp);

/* The same gather into the caller's `y[tokens, H]`, for GPU layers; a
 * non-null `stream` means device buffers, staged through host memory as in
 * moert_ep_dispatch_into_*. */
void _mlir_ciface_moert_tp_gather_into_f32(moert_memref2d *slice, int64_t tokens, int64_t tp,
                                           moert_memref2d *y, void *stream);
void _mlir_ciface_moert_tp_gather_into_bf16(moert_memref2d *slice, int64_t tokens, int64_t tp,
                                            moert_memref2d *y, void *stream);

#ifdef __cplusplus
}
#endif

#endif /* MOERT_MOERT_H */
