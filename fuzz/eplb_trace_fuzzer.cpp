//===- eplb_trace_fuzzer.cpp - fuzzes the load-trace reader and planner ---===//
//
// Bytes -> parseLoadTrace; a trace it accepts (kept small: at most 48
// experts, 8 layer-windows) is planned on a fixed small cluster derived from
// its expert count: DeepSeek's EPLB, ours with even and uneven shares,
// node-aware when the experts split over two nodes, several windows with
// --robust=worst, and a redeploy from DeepSeek's placement. The search
// budgets are small, so one input runs in milliseconds. Nothing may crash,
// every plan must follow the rules and every number written must be finite.
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/PlanIO.h"
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/Redeploy.h"
#include "moe/EPLB/Robust.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

using namespace mlir::moe::eplb;

namespace {
void require(bool ok, const char *what) {
  if (!ok) {
    std::fprintf(stderr, "eplb_trace_fuzzer: %s\n", what);
    std::abort();
  }
}

void checkPlan(const LayerPlan &plan, const std::vector<double> &load,
               const Topology &t, bool allowSameDevice) {
  int64_t experts = static_cast<int64_t>(load.size());
  require(checkPlacement(plan.placement, experts, t, allowSameDevice) == "",
          "invalid placement");
  require(std::isfinite(plan.peak) && std::isfinite(plan.mean),
          "non-finite peak or mean");
  require(std::isfinite(peakOverAverage(plan.placement, load, t.devices)),
          "non-finite peak/average");
  require(firstNonFinite(llvm::json::Value(
              placementJSON(plan.placement, load, t.devices))).empty(),
          "non-finite number in the JSON plan");
}
} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<LoadTrace> trace = parseLoadTrace(text);
  if (!trace) {
    llvm::consumeError(trace.takeError());
    return 0;
  }
  int64_t experts = trace->experts(), layers = trace->layers();
  int64_t windows = static_cast<int64_t>(trace->windows.size());
  if (experts > 48 || layers * windows > 8)
    return 0;

  // A fixed cluster for the expert count: up to 4 devices, about a quarter
  // more slots than experts, at most one replica of an expert per device.
  int64_t devices = std::min<int64_t>(4, experts);
  int64_t perDevice = std::min<int64_t>(
      experts, (experts + (experts + 3) / 4 + devices - 1) / devices);
  Topology flat{devices * perDevice, devices, 1, 1};
  require(checkTopology(flat, experts) == "", "fixed topology rejected");
  std::vector<Topology> topologies = {flat};
  Topology nodeAware{devices * perDevice, devices, 2, 2};
  if (devices % 2 == 0 && experts % 2 == 0 &&
      checkTopology(nodeAware, experts) == "")
    topologies.push_back(nodeAware);

  PlanOptions deepseek, even, shares;
  deepseek.algorithm = Algorithm::DeepSeek;
  for (PlanOptions *o : {&even, &shares}) {
    o->exactBudget = 2000;
    o->searchWork = int64_t(1) << 16;
  }
  shares.shares = true;

  for (const Topology &t : topologies)
    for (int64_t l = 0; l < layers; ++l) {
      std::vector<std::vector<double>> loads = trace->layer(l);
      std::vector<double> mean = robustLoad(loads, Robust::Mean, 0);
      require(checkLoads(mean) == "", "mean load out of range");
      LayerPlan base = planLayer(mean, t, deepseek);
      checkPlan(base, mean, t, /*allowSameDevice=*/true);
      LayerPlan ours = planLayer(mean, t, even);
      checkPlan(ours, mean, t, false);
      LayerPlan uneven = planLayer(mean, t, shares);
      checkPlan(uneven, mean, t, false);
      require(std::isfinite(peakLowerBound(mean, t, true)) &&
                  std::isfinite(peakLowerBound(mean, t, false)),
              "non-finite bound");
      if (windows > 1) {
        LayerPlan robust = planWindows(loads, t, even, Robust::Worst, 1.0);
        checkPlan(robust, mean, t, false);
        for (double r : windowRatios(robust.placement, loads, t.devices))
          require(std::isfinite(r), "non-finite window ratio");
        LayerPlan kstd = planWindows(loads, t, even, Robust::MeanStd, 100.0);
        checkPlan(kstd, mean, t, false);
        LayerPlan next = planWindows(loads, t, even, Robust::Next, 0);
        checkPlan(next, mean, t, false);
      }
      RedeployDecision decision =
          decideRedeploy(base.placement, mean, t, even, 0.05);
      require(checkPlacement(decision.placement, experts, t, true) == "",
              "invalid redeploy placement");
      require(std::isfinite(decision.gain()), "non-finite redeploy gain");
    }
  return 0;
}
