//===- ChunkPlan.h - chunk size from an activation-memory budget -*- C++ -*-===//
#ifndef MOE_DIALECT_MOE_ANALYSIS_CHUNKPLAN_H
#define MOE_DIALECT_MOE_ANALYSIS_CHUNKPLAN_H

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace mlir::moe {

/// The sizes of one MoE layer on one rank that its buffers depend on.
struct LayerShape {
  int64_t hidden = 0;
  int64_t intermediate = 0;
  int64_t experts = 0;
  int64_t topK = 0;
  int64_t ep = 1;
  int64_t elementBytes = 4;
  int64_t sharedIntermediate = 0;
};

/// One buffer of a MoE layer: its bytes per token of a chunk and how they
/// are computed (for the plan report).
struct BufferFootprint {
  std::string name;
  std::string formula;
  int64_t bytesPerToken = 0;
};

/// Why `shape` is outside the sizes the planners accept (every field within
/// moe/Support/Limits.h: 1 <= hidden, intermediate, experts, top-k, ep; 0 <=
/// shared intermediate; element bytes 1..8), or nothing. Within them every
/// product the planners form fits int64_t; they still compute with checked
/// arithmetic and report an overflow rather than wrap.
std::optional<std::string> checkLayerShape(const LayerShape &shape);

/// The MoE buffers of one chunk, per token (see moeBytesPerToken). Empty
/// when `shape` fails checkLayerShape or a size overflows.
std::vector<BufferFootprint> moeBuffers(const LayerShape &shape);

/// Bytes of MoE buffers that one token of a chunk needs at most: router
/// temporaries, the dispatch send/receive rows (up to `ep` received rows per
/// local token when every rank sends here), the expert intermediates
/// (ep x top-k rows of 2 x intermediate), the combine rows, and the shared
/// expert. An upper bound of what the compiled layer and the runtime
/// allocate for the chunk (every temporary counted, none reused). -1 when
/// moeBuffers is empty (an invalid shape or an overflow).
int64_t moeBytesPerToken(const LayerShape &shape);

/// The decision of moe-plan-chunks.
struct ChunkPlan {
  int64_t bytesPerToken = 0;
  int64_t chunkSize = 0; ///< Tokens per chunk.
  int64_t maxChunks = 0; ///< For a rank holding maxTokensPerRank tokens.
  bool chunked = false;  ///< False when all tokens fit the budget at once.
};

/// Largest chunk whose buffers fit `budgetBytes`; at most maxTokensPerRank
/// (and at least 1: a rank holding 0 tokens gets one chunk size of 1 and
/// 0 chunks). Fails (with `error` set) when not even one token fits, the
/// shape fails checkLayerShape, a size overflows, the budget is not
/// positive or maxTokensPerRank is outside [0, limits::kMaxTokens].
std::optional<ChunkPlan> planChunks(const LayerShape &shape,
                                    int64_t budgetBytes,
                                    int64_t maxTokensPerRank,
                                    std::string &error);

} // namespace mlir::moe

#endif // MOE_DIALECT_MOE_ANALYSIS_CHUNKPLAN_H
