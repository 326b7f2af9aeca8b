//===- Robust.cpp - Planning over several time windows --------------------===//
#include "moe/EPLB/Robust.h"
#include "moe/EPLB/LocalSearch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

namespace {
/// Robust::Next: replica counts for mean + kNextReplicaSigmas standard
/// deviations, packing for mean + kNextFitSigmas, variance counted
/// kNextVarianceWeight times. Chosen on the four shared SGLang traces and the
/// twelve of the SGLang repository, each left out in turn and planned on
/// the others as windows (docs/EPLB.md); neighbouring values (0.75-1.5,
/// 0.4-0.6, 1-4) moved the results by less than 0.3%.
constexpr double kNextReplicaSigmas = 1.0;
constexpr double kNextFitSigmas = 0.5;
constexpr double kNextVarianceWeight = 2.0;

/// `windows` scaled to the mean of their totals (all-zero windows stay).
std::vector<std::vector<double>>
sameTotals(const std::vector<std::vector<double>> &windows) {
  std::vector<double> totals;
  double sum = 0;
  for (const std::vector<double> &w : windows) {
    totals.push_back(std::accumulate(w.begin(), w.end(), 0.0));
    sum += totals.back();
  }
  double target = sum / static_cast<double>(windows.size());
  std::vector<std::vector<double>> out = windows;
  for (size_t i = 0; i < out.size(); ++i)
    if (totals[i] > 0)
      for (double &x : out[i])
        x *= target / totals[i];
  return out;
}

/// Per expert: the mean and the standard deviation over the windows.
void meanAndDeviation(const std::vector<std::vector<double>> &windows,
                      std::vector<double> &mean, std::vector<double> &deviation) {
  size_t experts = windows.front().size();
  double count = static_cast<double>(windows.size());
  mean.assign(experts, 0.0);
  deviation.assign(experts, 0.0);
  for (size_t e = 0; e < experts; ++e) {
    double sum = 0, sumSq = 0;
    for (const std::vector<double> &w : windows) {
      sum += w[e];
      sumSq += w[e] * w[e];
    }
    mean[e] = sum / count;
    deviation[e] = std::sqrt(std::max(0.0, sumSq / count - mean[e] * mean[e]));
  }
}

std::vector<double> meanPlus(const std::vector<double> &mean,
                             const std::vector<double> &deviation, double k) {
  std::vector<double> out(mean.size());
  for (size_t e = 0; e < mean.size(); ++e)
    out[e] = mean[e] + k * deviation[e];
  return out;
}
} // namespace

std::vector<double>
eplb::robustLoad(const std::vector<std::vector<double>> &windows, Robust kind,
                 double k) {
  std::vector<double> mean, deviation;
  switch (kind) {
  case Robust::Mean:
  case Robust::Worst:
    meanAndDeviation(windows, mean, deviation);
    return mean;
  case Robust::MeanStd:
    meanAndDeviation(windows, mean, deviation);
    return meanPlus(mean, deviation, k);
  case Robust::Next:
    meanAndDeviation(sameTotals(windows), mean, deviation);
    return meanPlus(mean, deviation, kNextFitSigmas);
  case Robust::Max:
    break;
  }
  std::vector<double> most(windows.front().size(), 0.0);
  for (const std::vector<double> &w : windows)
    for (size_t e = 0; e < most.size(); ++e)
      most[e] = std::max(most[e], w[e]);
  return most;
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
  if (kind == Robust::Next) {
    std::vector<double> next, deviation;
    meanAndDeviation(sameTotals(windows), next, deviation);
    LoadSpread spread;
    spread.replicaLoad = meanPlus(next, deviation, kNextReplicaSigmas);
    for (double d : deviation)
      spread.variance.push_back(kNextVarianceWeight * d * d);
    return finish(planLayer(meanPlus(next, deviation, kNextFitSigmas), topology,
                            options, spread));
  }
  if (kind != Robust::Worst)
    return finish(planLayer(robustLoad(windows, kind, k), topology, options));

  std::vector<LayerPlan> candidates;
  // The default's plan for the next window often has the best worst window
  // too (on three SGLang traces as windows, in 46 of 58 layers).
  candidates.push_back(planWindows(windows, topology, options, Robust::Next, k));
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
