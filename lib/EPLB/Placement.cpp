//===- Placement.cpp - Expert placement on devices and its load -----------===//
#include "moe/EPLB/Placement.h"

#include <algorithm>
#include <cmath>

using namespace mlir::moe;
using namespace mlir::moe::eplb;

static std::string str(int64_t v) { return std::to_string(v); }

std::string eplb::checkTopology(const Topology &t, int64_t experts) {
  if (experts <= 0)
    return "the load has no experts";
  if (t.devices <= 0)
    return "--devices must be positive, got " + str(t.devices);
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
  if (t.groups <= 0 || experts % t.groups != 0)
    return "--groups (" + str(t.groups) +
           ") must be positive and divide the "
           "number of experts (" +
           str(experts) + ")";
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

double eplb::peakOverAverage(const Placement &p,
                             const std::vector<double> &load, int64_t devices) {
  double total = 0;
  for (double w : load)
    total += w;
  if (total <= 0)
    return 1.0;
  return peakLoad(p, load, devices) / (total / static_cast<double>(devices));
}

std::string eplb::checkPlacement(const Placement &p, int64_t experts,
                                 const Topology &t, bool allowSameDevice) {
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
