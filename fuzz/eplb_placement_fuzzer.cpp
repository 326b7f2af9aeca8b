//===- eplb_placement_fuzzer.cpp - fuzzes the placement reader ------------===//
//
// The first byte picks one of a few fixed clusters; the rest goes to
// parsePlacements (moe-eplb's own plan or DeepSeek's {"phy2log": ...}). A
// placement it accepts must follow its rules, is written back as JSON (all
// numbers finite) and serves as the current placement of a redeploy
// decision on fixed loads. Nothing may crash.
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/PlanIO.h"
#include "moe/EPLB/Redeploy.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace mlir::moe::eplb;

namespace {
void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "eplb_placement_fuzzer: %s\n", what);
    std::abort();
  }
}

struct Cluster {
  int64_t experts;
  Topology topology;
};

// FlashLB's example (8 experts on 8 x 2), 4 experts on 2 x 4, DeepSeek's
// README example (12 experts, 2 nodes, 4 groups on 8 x 2) and 6 experts on
// 3 x 3.
const Cluster kClusters[] = {
    {8, {16, 8, 1, 1}},
    {4, {8, 2, 1, 1}},
    {12, {16, 8, 2, 4}},
    {6, {9, 3, 1, 1}},
};
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 8192)
    return 0;
  const Cluster &cluster =
      kClusters[data[0] % (sizeof(kClusters) / sizeof(kClusters[0]))];
  const Topology &t = cluster.topology;
  llvm::StringRef text(reinterpret_cast<const char *>(data + 1), size - 1);
  llvm::Expected<std::vector<Placement>> parsed =
      parsePlacements(text, cluster.experts, t);
  if (!parsed) {
    llvm::consumeError(parsed.takeError());
    return 0;
  }
  PlanOptions even, shares;
  for (PlanOptions *o : {&even, &shares}) {
    o->exactBudget = 1000;
    o->searchWork = int64_t(1) << 16;
  }
  shares.shares = true;
  std::vector<double> load(cluster.experts);
  for (int64_t e = 0; e < cluster.experts; ++e)
    load[e] = static_cast<double>((e * 37) % 11 + 1) * 10;
  for (size_t l = 0; l < parsed->size() && l < 4; ++l) {
    const Placement &p = (*parsed)[l];
    require(checkPlacement(p, cluster.experts, t, /*allowSameDevice=*/true) ==
                "",
            "accepted an invalid placement");
    require(firstNonFinite(llvm::json::Value(placementJSON(p, load, t.devices))).empty(),
            "non-finite number in the JSON plan");
    for (const PlanOptions &options : {even, shares}) {
      RedeployDecision d = decideRedeploy(p, load, t, options, 0.01);
      require(checkPlacement(d.placement, cluster.experts, t, true) == "",
              "invalid redeploy placement");
      require(std::isfinite(d.currentRatio) && std::isfinite(d.plannedRatio),
              "non-finite redeploy ratio");
      require(d.movedReplicas >= 0 && d.movedReplicas <= t.slots,
              "moved replicas out of range");
    }
  }
  return 0;
}
