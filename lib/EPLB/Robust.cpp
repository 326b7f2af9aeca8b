//===- Robust.cpp - Planning over several time windows --------------------===//
#include "moe/EPLB/Robust.h"
#include "moe/EPLB/LocalSearch.h"

#include <algorithm>
#include <cmath>
#include <limits>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

std::vector<double>
eplb::robustLoad(const std::vector<std::vector<double>> &windows, Robust kind,
                 double k) {
  size_t experts = windows.front().size();
  double count = static_cast<double>(windows.size());
  std::vector<double> out(experts, 0.0);
  for (size_t e = 0; e < experts; ++e) {
    double sum = 0, sumSq = 0, most = 0;
    for (const std::vector<double> &w : windows) {
      sum += w[e];
      sumSq += w[e] * w[e];
      most = std::max(most, w[e]);
    }
    double mean = sum / count;
    double var = std::max(0.0, sumSq / count - mean * mean);
    switch (kind) {
    case Robust::Mean:
    case Robust::Worst:
      out[e] = mean;
      break;
    case Robust::Max:
      out[e] = most;
      break;
    case Robust::MeanStd:
      out[e] = mean + k * std::sqrt(var);
      break;
    }
  }
  return out;
}

std::vector<double>
eplb::windowRatios(const Placement &placement,
                   const std::vector<std::vector<double>> &windows,
                   int64_t devices) {
  std::vector<double> ratios;
  for (const std::vector<double> &w : windows)
    ratios.push_back(peakOverAverage(placement, w, devices));
  return ratios;
}

LayerPlan eplb::planWindows(const std::vector<std::vector<double>> &windows,
                            const Topology &topology,
                            const PlanOptions &options, Robust kind, double k) {
  std::vector<double> mean = robustLoad(windows, Robust::Mean, 0);
  auto finish = [&](LayerPlan plan) {
    plan.peak = peakLoad(plan.placement, mean, topology.devices);
    double total = 0;
    for (double w : mean)
      total += w;
    plan.mean = total / static_cast<double>(topology.devices);
    return plan;
  };
  if (windows.size() == 1)
    return planLayer(windows.front(), topology, options);
  if (kind != Robust::Worst)
    return finish(planLayer(robustLoad(windows, kind, k), topology, options));

  std::vector<LayerPlan> candidates;
  candidates.push_back(planLayer(mean, topology, options));
  candidates.push_back(
      planLayer(robustLoad(windows, Robust::Max, 0), topology, options));
  for (double sigmas : {0.5, 1.0, 2.0, 3.0})
    candidates.push_back(planLayer(robustLoad(windows, Robust::MeanStd, sigmas),
                                   topology, options));
  // A plan exact for one window may hold up in the others.
  if (windows.size() <= 16)
    for (const std::vector<double> &w : windows)
      candidates.push_back(planLayer(w, topology, options));
  if (options.algorithm == Algorithm::Ours) {
    PlanOptions deepseek = options;
    deepseek.algorithm = Algorithm::DeepSeek;
    LayerPlan baseline = planLayer(mean, topology, deepseek);
    if (checkPlacement(baseline.placement, static_cast<int64_t>(mean.size()),
                       topology) == "") {
      candidates.push_back(std::move(baseline));
    } else if (!topology.hierarchical()) {
      baseline.placement = separateDuplicates(
          {mean, topology.devices, topology.slotsPerDevice()},
          baseline.placement);
      candidates.push_back(std::move(baseline));
    }
  }
  size_t best = 0;
  double bestWorst = std::numeric_limits<double>::infinity();
  for (size_t c = 0; c < candidates.size(); ++c) {
    std::vector<double> r =
        windowRatios(candidates[c].placement, windows, topology.devices);
    double worst = *std::max_element(r.begin(), r.end());
    if (worst < bestWorst) {
      bestWorst = worst;
      best = c;
    }
  }
  LayerPlan plan = finish(std::move(candidates[best]));
  plan.optimal = false;
  return plan;
}
