//===- ChunkPlan.cpp - chunk size from an activation-memory budget --------===//
#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"

#include <algorithm>

using namespace mlir::moe;

std::vector<BufferFootprint> mlir::moe::moeBuffers(const LayerShape &s) {
  const int64_t f32 = 4, i32 = 4, eb = s.elementBytes, h = s.hidden,
                i = s.intermediate, k = s.topK, e = s.experts, ep = s.ep;
  const int64_t rows = ep * k;           // local dispatch rows per token
  const int64_t sent = std::min(k, ep);  // rows sent per token
  const int64_t wireRow = h * eb + k * (i32 + f32);
  std::vector<BufferFootprint> buffers = {
      {"router", "10*E*4 + 8*k*4", 10 * e * f32 + 8 * k * f32},
      {"dispatch.local", "ep*k*(5*4 + H*eb)", rows * (5 * i32 + h * eb)},
      {"experts.gate_up", "ep*k*2I*(4 + eb)", rows * 2 * i * (f32 + eb)},
      {"experts.act", "ep*k*I*eb", rows * i * eb},
      {"experts.down", "ep*k*H*(4 + eb)", rows * h * (f32 + eb)},
      {"combine.local", "ep*H*(4 + eb)", ep * h * (f32 + eb)},
  };
  if (ep > 1) {
    buffers.push_back({"dispatch.send", "min(k,ep)*(H*eb + 8k)", sent * wireRow});
    buffers.push_back({"dispatch.recv+rows", "2*ep*(H*eb + 8k) + H*eb + 8k",
                       2 * ep * wireRow + wireRow});
    buffers.push_back({"combine.exchange", "(min(k,ep) + ep + 1)*H*eb + H*4",
                       (sent + ep + 1) * h * eb + h * f32});
  }
  if (int64_t is = s.sharedIntermediate)
    buffers.push_back({"shared_expert", "2Is*(4 + eb) + Is*eb + H*(4 + 2eb)",
                       2 * is * (f32 + eb) + is * eb + h * (f32 + 2 * eb)});
  return buffers;
}

int64_t mlir::moe::moeBytesPerToken(const LayerShape &s) {
  int64_t total = 0;
  for (const BufferFootprint &b : moeBuffers(s))
    total += b.bytesPerToken;
  return total;
}

std::optional<ChunkPlan> mlir::moe::planChunks(const LayerShape &shape,
                                               int64_t budgetBytes,
                                               int64_t maxTokensPerRank,
                                               std::string &error) {
  ChunkPlan plan;
  plan.bytesPerToken = moeBytesPerToken(shape);
  if (budgetBytes < plan.bytesPerToken) {
    error = "a budget of " + std::to_string(budgetBytes) +
            " bytes does not fit one token (" +
            std::to_string(plan.bytesPerToken) + " bytes of MoE buffers)";
    return std::nullopt;
  }
  plan.chunkSize = std::min(budgetBytes / plan.bytesPerToken, maxTokensPerRank);
  plan.maxChunks = (maxTokensPerRank + plan.chunkSize - 1) / plan.chunkSize;
  plan.chunked = plan.maxChunks > 1;
  return plan;
}
