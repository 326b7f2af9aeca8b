//===- Placement.cpp - Expert placement on devices and its load -----------===//
#include "moe/EPLB/Placement.h"

#include "moe/Support/Limits.h"

#include <algorithm>
#include <cfloat>
#include <cmath>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

static std::string str(int64_t v) { return std::to_string(v); }

std::string eplb::checkTopology(const Topology &t, int64_t experts) {
  if (experts <= 0)
    return "the load has no experts";
  if (experts > limits::kMaxExperts)
    return "the load has " + str(experts) + " experts, more than the limit " +
           str(limits::kMaxExperts);
  if (t.slots <= 0 || t.slots > limits::kMaxExperts)
    return "--slots must be a positive number of physical expert slots, at "
           "most " +
           str(limits::kMaxExperts) + "; got " + str(t.slots);
  if (t.devices <= 0 || t.devices > limits::kMaxRanks)
    return "--devices must be a positive number of devices, at most " +
           str(limits::kMaxRanks) + "; got " + str(t.devices);
  if (t.slots < experts)
    return "--slots (" + str(t.slots) +
           ") must be at least the number of "
           "experts (" +
           str(experts) + ")";
  if (t.slots % t.devices != 0)
    return "--slots (" + str(t.slots) + ") must be a multiple of --devices (" +
           str(t.devices) + ")";
  if (t.slotsPerDevice() > experts)
    return "--slots / --devices (" + str(t.slotsPerDevice()) +
           ") exceeds the number of experts (" + str(experts) +
           "): a device cannot hold two replicas of one expert";
  if (t.nodes <= 0 || t.devices % t.nodes != 0)
    return "--nodes (" + str(t.nodes) +
           ") must be positive and divide "
           "--devices (" +
           str(t.devices) + ")";
  if (t.groups <= 0 || t.groups > limits::kMaxTopK || experts % t.groups != 0)
    return "--groups (" + str(t.groups) +
           ") must be positive, at most " + str(limits::kMaxTopK) +
           ", and divide the number of experts (" + str(experts) + ")";
  if (t.hierarchical() && t.slotsPerDevice() > experts / t.nodes)
    return "--slots / --devices (" + str(t.slotsPerDevice()) +
           ") exceeds the experts per node (" + str(experts / t.nodes) +
           " = " + str(experts) + " experts / " + str(t.nodes) +
           " --nodes): node-aware placement keeps a group's experts on one "
           "node and a device cannot hold two replicas of one expert";
  return "";
}

std::string eplb::checkLoads(const std::vector<double> &load,
                             const std::string &path) {
  for (size_t e = 0; e < load.size(); ++e)
    if (!(load[e] >= 0 && load[e] <= kMaxLoad))
      return path + "[" + std::to_string(e) + "]: expected a finite load in " +
             "[0, 2^53], got " + std::to_string(load[e]);
  return "";
}

double Problem::total() const {
  double sum = 0;
  for (double w : load)
    sum += w;
  return sum;
}

std::vector<int64_t> eplb::replicaCounts(const Placement &p, int64_t experts) {
  std::vector<int64_t> count(experts, 0);
  for (int64_t e : p.phy2log)
    ++count[e];
  return count;
}

std::vector<std::vector<int64_t>> eplb::logicalToPhysical(const Placement &p,
                                                          int64_t experts) {
  std::vector<std::vector<int64_t>> slots(experts);
  for (size_t s = 0; s < p.phy2log.size(); ++s)
    slots[p.phy2log[s]].push_back(static_cast<int64_t>(s));
  return slots;
}

void eplb::setEvenShares(Placement &p, int64_t experts) {
  std::vector<int64_t> count = replicaCounts(p, experts);
  p.share.resize(p.phy2log.size());
  for (size_t s = 0; s < p.phy2log.size(); ++s)
    p.share[s] = 1.0 / static_cast<double>(count[p.phy2log[s]]);
}

std::vector<double> eplb::deviceLoads(const Placement &p,
                                      const std::vector<double> &load,
                                      int64_t devices) {
  std::vector<double> device(devices, 0.0);
  int64_t perDevice = static_cast<int64_t>(p.phy2log.size()) / devices;
  for (size_t s = 0; s < p.phy2log.size(); ++s)
    device[s / perDevice] += load[p.phy2log[s]] * p.share[s];
  return device;
}

double eplb::peakLoad(const Placement &p, const std::vector<double> &load,
                      int64_t devices) {
  std::vector<double> device = deviceLoads(p, load, devices);
  return *std::max_element(device.begin(), device.end());
}

double eplb::ratioToMean(double peak, double total, int64_t devices) {
  if (!(total > 0))
    return 1.0;
  double mean = total / static_cast<double>(devices);
  if (mean >= DBL_MIN)
    return peak / mean;
  // A subnormal mean loses precision or becomes 0: divide by the total. The
  // device loads of such loads may round to 0, below the mean, which no
  // placement can be: at least 1.
  return std::max(1.0, peak / total * static_cast<double>(devices));
}

double eplb::peakOverAverage(const Placement &p,
                             const std::vector<double> &load, int64_t devices) {
  double total = 0;
  for (double w : load)
    total += w;
  return ratioToMean(peakLoad(p, load, devices), total, devices);
}

std::string eplb::checkPlacement(const Placement &p, int64_t experts,
                                 const Topology &t, bool allowSameDevice) {
  if (t.devices <= 0 || t.slots <= 0 || t.slots % t.devices != 0 ||
      experts <= 0 || experts > limits::kMaxExperts)
    return checkTopology(t, experts);
  if (static_cast<int64_t>(p.phy2log.size()) != t.slots)
    return "phy2log has " + str(p.phy2log.size()) + " slots, expected " +
           str(t.slots);
  if (p.share.size() != p.phy2log.size())
    return "share has " + str(p.share.size()) + " entries, expected " +
           str(p.phy2log.size());
  int64_t perDevice = t.slotsPerDevice();
  std::vector<double> shareSum(experts, 0.0);
  std::vector<int64_t> lastDevice(experts, -1);
  for (int64_t s = 0; s < t.slots; ++s) {
    int64_t e = p.phy2log[s];
    if (e < 0 || e >= experts)
      return "slot " + str(s) + " holds expert " + str(e) + ", outside [0, " +
             str(experts) + ")";
    if (!allowSameDevice && lastDevice[e] == s / perDevice)
      return "device " + str(s / perDevice) + " holds two replicas of expert " +
             str(e);
    lastDevice[e] = s / perDevice;
    if (!(p.share[s] >= 0.0 && p.share[s] <= 1.0 + 1e-9))
      return "slot " + str(s) + " has share " + std::to_string(p.share[s]) +
             ", outside [0, 1]";
    shareSum[e] += p.share[s];
  }
  for (int64_t e = 0; e < experts; ++e) {
    if (lastDevice[e] < 0)
      return "expert " + str(e) + " has no replica";
    if (std::fabs(shareSum[e] - 1.0) > 1e-6)
      return "the shares of expert " + str(e) + " sum to " +
             std::to_string(shareSum[e]) + ", not 1";
  }
  return "";
}
