//===- ChunkPlan.cpp - chunk size from an activation-memory budget --------===//
#include "moe/Dialect/MoE/Analysis/ChunkPlan.h"

#include "CheckedSize.h"
#include "moe/Support/Limits.h"

#include <algorithm>

using namespace mlir::moe;
using mlir::moe::detail::CheckedSize;

std::optional<std::string> mlir::moe::checkLayerShape(const LayerShape &s) {
  auto outside = [](int64_t v, int64_t lo, int64_t hi) { return v < lo || v > hi; };
  auto why = [](const char *name, int64_t v, int64_t lo, int64_t hi) {
    return std::string(name) + " " + std::to_string(v) + " is outside [" +
           std::to_string(lo) + ", " + std::to_string(hi) + "]";
  };
  if (outside(s.hidden, 1, limits::kMaxHidden))
    return why("hidden size", s.hidden, 1, limits::kMaxHidden);
  if (outside(s.intermediate, 1, limits::kMaxIntermediate))
    return why("intermediate size", s.intermediate, 1, limits::kMaxIntermediate);
  if (outside(s.experts, 1, limits::kMaxExperts))
    return why("expert count", s.experts, 1, limits::kMaxExperts);
  if (outside(s.topK, 1, limits::kMaxTopK))
    return why("top-k", s.topK, 1, limits::kMaxTopK);
  if (outside(s.ep, 1, limits::kMaxRanks))
    return why("ep", s.ep, 1, limits::kMaxRanks);
  if (outside(s.elementBytes, 1, 8))
    return why("element bytes", s.elementBytes, 1, 8);
  if (outside(s.sharedIntermediate, 0, limits::kMaxIntermediate))
    return why("shared intermediate size", s.sharedIntermediate, 0,
               limits::kMaxIntermediate);
  return std::nullopt;
}

std::vector<BufferFootprint> mlir::moe::moeBuffers(const LayerShape &s) {
  if (checkLayerShape(s))
    return {};
  CheckedSize c;
  const int64_t f32 = 4, i32 = 4, eb = s.elementBytes, h = s.hidden,
                i = s.intermediate, k = s.topK, e = s.experts, ep = s.ep;
  const int64_t rows = c.mul(ep, k);     // local dispatch rows per token
  const int64_t sent = std::min(k, ep);  // rows sent per token
  const int64_t wireRow = c.add(c.mul(h, eb), c.mul(k, i32 + f32));
  std::vector<BufferFootprint> buffers = {
      {"router", "10*E*4 + 8*k*4", c.add(c.mul(10, e, f32), c.mul(8, k, f32))},
      {"dispatch.local", "ep*k*(5*4 + H*eb)", c.mul(rows, c.add(5 * i32, c.mul(h, eb)))},
      {"experts.gate_up", "ep*k*2I*(4 + eb)", c.mul(c.mul(rows, 2, i), f32 + eb)},
      {"experts.act", "ep*k*I*eb", c.mul(rows, i, eb)},
      {"experts.down", "ep*k*H*(4 + eb)", c.mul(rows, h, f32 + eb)},
      {"combine.local", "ep*H*(4 + eb)", c.mul(ep, h, f32 + eb)},
  };
  // bf16 rows are widened to f32 once for the GEMMs that read them many
  // times (the packed prefill GEMM; every GEMM over FP8 weights).
  if (eb < f32)
    buffers.push_back({"experts.f32_rows", "ep*k*(H + I)*4 (bf16 only)",
                       c.mul(rows, c.add(h, i), f32)});
  if (ep > 1) {
    buffers.push_back({"dispatch.send", "min(k,ep)*(H*eb + 8k)", c.mul(sent, wireRow)});
    buffers.push_back({"dispatch.recv+rows", "2*ep*(H*eb + 8k) + H*eb + 8k",
                       c.add(c.mul(2, ep, wireRow), wireRow)});
    buffers.push_back({"combine.exchange", "(min(k,ep) + ep + 1)*H*eb + H*4",
                       c.add(c.mul(sent + ep + 1, h, eb), c.mul(h, f32))});
  }
  if (int64_t is = s.sharedIntermediate)
    buffers.push_back({"shared_expert", "2Is*(4 + eb) + Is*eb + H*(4 + 2eb)",
                       c.add(c.mul(2, is, f32 + eb), c.mul(is, eb),
                             c.mul(h, f32 + 2 * eb))});
  if (!c.ok())
    return {};
  return buffers;
}

int64_t mlir::moe::moeBytesPerToken(const LayerShape &s) {
  std::vector<BufferFootprint> buffers = moeBuffers(s);
  if (buffers.empty())
    return -1;
  CheckedSize c;
  int64_t total = 0;
  for (const BufferFootprint &b : buffers)
    total = c.add(total, b.bytesPerToken);
  return c.ok() ? total : -1;
}

std::optional<ChunkPlan> mlir::moe::planChunks(const LayerShape &shape,
                                               int64_t budgetBytes,
                                               int64_t maxTokensPerRank,
                                               std::string &error) {
  if (std::optional<std::string> why = checkLayerShape(shape)) {
    error = "cannot plan this layer: " + *why;
    return std::nullopt;
  }
  if (maxTokensPerRank < 0 || maxTokensPerRank > limits::kMaxTokens) {
    error = "max tokens per rank " + std::to_string(maxTokensPerRank) +
            " is outside [0, " + std::to_string(limits::kMaxTokens) + "]";
    return std::nullopt;
  }
  if (budgetBytes <= 0) {
    error = "the budget must be positive, got " + std::to_string(budgetBytes);
    return std::nullopt;
  }
  ChunkPlan plan;
  plan.bytesPerToken = moeBytesPerToken(shape);
  if (plan.bytesPerToken <= 0) {
    error = "the MoE buffers of one token overflow a 64-bit byte count";
    return std::nullopt;
  }
  if (budgetBytes < plan.bytesPerToken) {
    error = "a budget of " + std::to_string(budgetBytes) +
            " bytes does not fit one token (" +
            std::to_string(plan.bytesPerToken) + " bytes of MoE buffers)";
    return std::nullopt;
  }
  // A rank of 0 tokens needs no chunk; the chunk size stays a valid divisor.
  plan.chunkSize = std::min(budgetBytes / plan.bytesPerToken,
                            std::max<int64_t>(maxTokensPerRank, 1));
  plan.maxChunks = detail::ceilDiv(maxTokensPerRank, plan.chunkSize);
  plan.chunked = plan.maxChunks > 1;
  return plan;
}
