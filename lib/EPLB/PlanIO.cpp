//===- PlanIO.cpp - Expert loads and placements as JSON -------------------===//
#include "moe/EPLB/PlanIO.h"
#include "moe/Support/JSONInput.h"
#include "moe/Support/Limits.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cmath>

using namespace mlir::moe;
using namespace mlir::moe::eplb;
namespace json = llvm::json;

namespace {
llvm::Error fail(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

std::string shown(const json::Value &v) {
  std::string text;
  llvm::raw_string_ostream os(text);
  os << v;
  if (text.size() > 40)
    text = text.substr(0, 37) + "...";
  return text;
}

std::string at(const std::string &path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

/// Nesting depth of arrays down the first elements: 2 for [[1]].
int depth(const json::Value &v) {
  int d = 0;
  for (const json::Value *cur = &v; const json::Array *a = cur->getAsArray();
       cur = &(*a)[0]) {
    ++d;
    if (a->empty())
      break;
  }
  return d;
}

/// Fails unless `a` has at most `limit` elements (checked before anything
/// is allocated for them).
llvm::Error checkCount(const json::Array &a, const std::string &path,
                       int64_t limit, const char *what) {
  if (static_cast<int64_t>(a.size()) > limit)
    return fail(path + ": " + std::to_string(a.size()) + " " + what +
                ", more than the limit " + std::to_string(limit));
  return llvm::Error::success();
}

/// Reads an array of numbers in [0, `most`] (loads or shares).
llvm::Error readNumbers(const json::Value &v, const std::string &path,
                        std::vector<double> &row, double most,
                        const char *what, const char *range) {
  const json::Array *a = v.getAsArray();
  if (!a)
    return fail(path + ": expected an array of " + what + ", got " + shown(v));
  if (llvm::Error e = checkCount(*a, path, limits::kMaxExperts, what))
    return e;
  row.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    std::optional<double> x = (*a)[i].getAsNumber();
    if (!x)
      return fail(at(path, i) + ": expected a number, got " + shown((*a)[i]));
    if (!(*x >= 0 && *x <= most))
      return fail(at(path, i) + ": expected " + range + ", got " +
                  shown((*a)[i]));
    row.push_back(*x);
  }
  return llvm::Error::success();
}

llvm::Error readRow(const json::Value &v, const std::string &path,
                    std::vector<double> &row) {
  return readNumbers(v, path, row, kMaxLoad, "expert loads",
                     "a finite load in [0, 2^53]");
}

llvm::Error readMatrix(const json::Value &v, const std::string &path,
                       std::vector<std::vector<double>> &rows) {
  const json::Array *a = v.getAsArray();
  if (!a || a->empty())
    return fail(path + ": expected a non-empty array of layers, got " +
                shown(v));
  if (llvm::Error e = checkCount(*a, path, limits::kMaxLayers, "layers"))
    return e;
  rows.reserve(a->size());
  for (size_t i = 0; i < a->size(); ++i) {
    rows.emplace_back();
    if (llvm::Error e = readRow((*a)[i], at(path, i), rows.back()))
      return e;
    if (rows.back().empty())
      return fail(at(path, i) + ": expected at least one expert");
    // Every layer as long as the first: checked here, before reading on.
    if (rows.back().size() != rows.front().size())
      return fail(at(path, i) + ": expected " +
                  std::to_string(rows.front().size()) +
                  " experts like the first layer, got " +
                  std::to_string(rows.back().size()));
  }
  return llvm::Error::success();
}
} // namespace

std::vector<std::vector<double>> LoadTrace::layer(int64_t l) const {
  std::vector<std::vector<double>> out;
  for (const auto &w : windows)
    out.push_back(w[l]);
  return out;
}

llvm::Expected<LoadTrace> eplb::parseLoadTrace(llvm::StringRef text) {
  llvm::Expected<json::Value> parsed = parseJSONInput(text);
  if (!parsed)
    return fail("not valid JSON: " + llvm::toString(parsed.takeError()));
  const json::Value *root = &*parsed;
  std::string path = "$";
  if (const json::Object *o = root->getAsObject()) {
    root = o->get("logical_count");
    if (!root)
      return fail("$.logical_count: missing (expected the loads as "
                  "[layers][experts] or [windows][layers][experts])");
    path = "$.logical_count";
  }
  LoadTrace trace;
  int d = depth(*root);
  if (d == 2 || d < 2) {
    trace.windows.emplace_back();
    if (llvm::Error e = readMatrix(*root, path, trace.windows.back()))
      return std::move(e);
  } else if (d == 3) {
    const json::Array &a = *root->getAsArray();
    if (llvm::Error e = checkCount(a, path, limits::kMaxLayers, "windows"))
      return std::move(e);
    for (size_t w = 0; w < a.size(); ++w) {
      trace.windows.emplace_back();
      if (llvm::Error e = readMatrix(a[w], at(path, w), trace.windows.back()))
        return std::move(e);
    }
  } else {
    return fail(path +
                ": expected [layers][experts] or "
                "[windows][layers][experts], got " +
                std::to_string(d) + " nested arrays");
  }
  size_t layers = trace.windows[0].size(), experts = trace.windows[0][0].size();
  for (size_t w = 0; w < trace.windows.size(); ++w) {
    std::string wp = trace.windows.size() > 1 ? at(path, w) : path;
    if (trace.windows[w].size() != layers)
      return fail(wp + ": expected " + std::to_string(layers) +
                  " layers like the first window, got " +
                  std::to_string(trace.windows[w].size()));
    for (size_t l = 0; l < layers; ++l)
      if (trace.windows[w][l].size() != experts)
        return fail(at(wp, l) + ": expected " + std::to_string(experts) +
                    " experts like the first layer, got " +
                    std::to_string(trace.windows[w][l].size()));
  }
  return trace;
}

llvm::Expected<LoadTrace> eplb::readLoadTrace(llvm::StringRef path) {
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
      llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return fail(path + ": cannot read: " + buffer.getError().message());
  llvm::Expected<LoadTrace> trace = parseLoadTrace((*buffer)->getBuffer());
  if (!trace)
    return fail(path + ": " + llvm::toString(trace.takeError()));
  return trace;
}

/// moe-eplb's log2phy and replica_count of a layer, where given, must be
/// what its phy2log implies: a file edited by hand in one but not the other
/// is ambiguous.
llvm::Error checkDerived(const json::Object &layer, const std::string &path, const Placement &p,
                         int64_t experts) {
  if (const json::Value *given = layer.get("log2phy")) {
    std::vector<std::vector<int64_t>> slots = logicalToPhysical(p, experts);
    json::Value implied(json::Array{});
    for (const std::vector<int64_t> &s : slots)
      implied.getAsArray()->push_back(json::Array(s));
    if (*given != implied)
      return fail(path + ".log2phy: does not list the slots of each expert in phy2log");
  }
  if (const json::Value *given = layer.get("replica_count"))
    if (*given != json::Value(json::Array(replicaCounts(p, experts))))
      return fail(path + ".replica_count: does not count each expert's slots in phy2log");
  return llvm::Error::success();
}

llvm::Expected<std::vector<Placement>> eplb::parsePlacements(llvm::StringRef text, int64_t experts,
                                                             const Topology &topology,
                                                             int64_t expectedLayers) {
  std::string problem = checkTopology(topology, experts);
  if (!problem.empty())
    return fail(problem);
  llvm::Expected<json::Value> parsed = parseJSONInput(text);
  if (!parsed)
    return fail("not valid JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return fail("$: expected an object with \"layers\" or \"phy2log\"");
  // moe-eplb's output states what it was planned for: a plan for another
  // configuration would be compared with a layout that was never deployed.
  for (auto [key, expected, option] :
       {std::tuple<const char *, int64_t, const char *>{"experts", experts, "the loads have"},
        {"slots", topology.slots, "--slots is"},
        {"devices", topology.devices, "--devices is"}}) {
    const json::Value *stated = root->get(key);
    if (stated && stated->getAsNumber() != std::optional<double>(static_cast<double>(expected)))
      return fail("$." + std::string(key) + ": the placement is for " + shown(*stated) + " " + key +
                  ", " + option + " " + std::to_string(expected));
  }
  std::vector<std::pair<const json::Value *, std::string>> maps;
  std::vector<std::pair<const json::Value *, std::string>> shares;
  std::vector<const json::Object *> planned; // moe-eplb's layer objects
  std::string listPath = root->getArray("layers") ? "$.layers" : "$.phy2log";
  if (const json::Array *layers = root->getArray("layers")) {
    if (llvm::Error e =
            checkCount(*layers, "$.layers", limits::kMaxLayers, "layers"))
      return std::move(e);
    for (size_t l = 0; l < layers->size(); ++l) {
      const json::Object *o = (*layers)[l].getAsObject();
      std::string path = at("$.layers", l);
      if (!o)
        return fail(path + ": expected an object with \"phy2log\", got " +
                    shown((*layers)[l]));
      if (!o->get("phy2log"))
        return fail(path + ".phy2log: missing");
      if (const json::Value *id = o->get("layer");
          id && id->getAsNumber() != std::optional<double>(static_cast<double>(l)))
        return fail(path + ".layer: expected " + std::to_string(l) +
                    " (the layers in order, as moe-eplb writes them), got " + shown(*id));
      maps.push_back({o->get("phy2log"), path + ".phy2log"});
      shares.push_back({o->get("share"), path + ".share"});
      planned.push_back(o);
    }
  } else if (const json::Array *rows = root->getArray("phy2log")) {
    if (llvm::Error e =
            checkCount(*rows, "$.phy2log", limits::kMaxLayers, "layers"))
      return std::move(e);
    for (size_t l = 0; l < rows->size(); ++l) {
      maps.push_back({&(*rows)[l], at("$.phy2log", l)});
      shares.push_back({nullptr, ""});
    }
  } else {
    return fail("$: expected an array under \"layers\" or \"phy2log\"");
  }
  if (expectedLayers >= 0 && static_cast<int64_t>(maps.size()) != expectedLayers)
    return fail(listPath + ": " + std::to_string(maps.size()) + " layers, the loads have " +
                std::to_string(expectedLayers));

  std::vector<Placement> out;
  for (size_t l = 0; l < maps.size(); ++l) {
    Placement p;
    const json::Array *map = maps[l].first->getAsArray();
    if (!map || static_cast<int64_t>(map->size()) != topology.slots)
      return fail(maps[l].second + ": expected an array of " + std::to_string(topology.slots) +
                  " expert ids (--slots), got " +
                  (map ? std::to_string(map->size()) + " ids" : shown(*maps[l].first)));
    p.phy2log.reserve(map->size());
    for (size_t s = 0; s < map->size(); ++s) {
      // A whole number in range (checked as a double first: converting an
      // out-of-range double to an integer is undefined).
      std::optional<double> x = (*map)[s].getAsNumber();
      if (!x || !(*x >= 0 && *x < static_cast<double>(experts)) ||
          *x != std::floor(*x))
        return fail(at(maps[l].second, s) + ": expected an expert id in [0, " +
                    std::to_string(experts) + "), got " + shown((*map)[s]));
      p.phy2log.push_back(static_cast<int64_t>(*x));
    }
    setEvenShares(p, experts);
    if (const json::Value *sv = shares[l].first) {
      std::vector<double> share;
      if (llvm::Error e = readNumbers(*sv, shares[l].second, share, 1.0,
                                      "shares", "a share in [0, 1]"))
        return std::move(e);
      if (share.size() != p.phy2log.size())
        return fail(shares[l].second + ": expected " +
                    std::to_string(p.phy2log.size()) + " shares");
      p.share = std::move(share);
    }
    std::string problem = checkPlacement(p, experts, topology, true);
    if (!problem.empty())
      return fail(maps[l].second + ": " + problem);
    if (!planned.empty()) {
      std::string path = at("$.layers", l);
      if (llvm::Error e = checkDerived(*planned[l], path, p, experts))
        return std::move(e);
    }
    out.push_back(std::move(p));
  }
  return out;
}

json::Object eplb::placementJSON(const Placement &p,
                                 const std::vector<double> &load,
                                 int64_t devices) {
  int64_t experts = static_cast<int64_t>(load.size());
  json::Array log2phy;
  for (const std::vector<int64_t> &slots : logicalToPhysical(p, experts))
    log2phy.push_back(json::Array(slots));
  std::vector<double> device = deviceLoads(p, load, devices);
  double total = 0, peak = 0;
  for (double d : device) {
    total += d;
    peak = std::max(peak, d);
  }
  return json::Object{
      {"phy2log", json::Array(p.phy2log)},
      {"log2phy", std::move(log2phy)},
      {"replica_count", json::Array(replicaCounts(p, experts))},
      {"share", json::Array(p.share)},
      {"device_load", json::Array(device)},
      {"peak", peak},
      {"average", total / static_cast<double>(devices)},
  };
}

std::string eplb::firstNonFinite(const llvm::json::Value &v, const std::string &path) {
  if (const llvm::json::Object *o = v.getAsObject()) {
    for (const auto &[key, value] : *o) {
      std::string found = firstNonFinite(value, path + "." + key.str());
      if (!found.empty())
        return found;
    }
  } else if (const llvm::json::Array *a = v.getAsArray()) {
    for (size_t i = 0; i < a->size(); ++i) {
      std::string found =
          firstNonFinite((*a)[i], path + "[" + std::to_string(i) + "]");
      if (!found.empty())
        return found;
    }
  } else if (std::optional<double> x = v.getAsNumber()) {
    if (!std::isfinite(*x))
      return path;
  }
  return "";
}
