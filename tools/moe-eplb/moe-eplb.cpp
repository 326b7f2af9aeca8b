//===- moe-eplb.cpp - Expert placement planner driver ---------------------===//
//
// Reads expert loads ([layers][experts], [windows][layers][experts] or
// {"logical_count": ...}), plans each layer's placement with DeepSeek's EPLB
// or ours, optionally decides per layer whether to leave a current placement,
// prints a summary table and writes the plans as JSON.
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/PlanIO.h"
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/Redeploy.h"
#include "moe/EPLB/Robust.h"
#include "moe/Support/Limits.h"
#include "moe/Support/OutputFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

using namespace mlir::moe::eplb;
namespace cl = llvm::cl;
namespace json = llvm::json;

namespace {
cl::OptionCategory category("moe-eplb options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<loads.json>"),
                               cl::cat(category));
cl::opt<int64_t> slots("slots", cl::desc("Physical expert slots in total"),
                       cl::init(0), cl::cat(category));
cl::opt<int64_t> devices("devices", cl::desc("Devices (expert-parallel ranks)"),
                         cl::init(0), cl::cat(category));
cl::opt<int64_t> nodes("nodes", cl::desc("Nodes the devices are spread over"),
                       cl::init(1), cl::cat(category));
cl::opt<int64_t> groups("groups",
                        cl::desc("Expert groups of consecutive ids (node-aware "
                                 "placement keeps a group on one node when nodes "
                                 "divide groups; the future objective spreads a "
                                 "group's experts over the devices: DeepSeek-V3 "
                                 "has 8)"),
                        cl::init(1), cl::cat(category));
cl::opt<Algorithm> algorithm(
    "algorithm", cl::desc("Balancer"),
    cl::values(clEnumValN(Algorithm::DeepSeek, "deepseek",
                          "deepseek-ai/EPLB (the baseline)"),
               clEnumValN(Algorithm::Ours, "ours",
                          "joint replica counts and packing (default)")),
    cl::init(Algorithm::Ours), cl::cat(category));
cl::opt<Objective> objective(
    "objective", cl::desc("What ours plans for, with even shares"),
    cl::values(clEnumValN(Objective::Future, "future",
                          "traffic like the loads (default): replicas on the "
                          "hottest experts, devices whose pieces spread alike"),
               clEnumValN(Objective::Sample, "sample",
                          "the loads themselves: the least peak on them")),
    cl::init(Objective::Future), cl::cat(category));
cl::opt<bool> shares("shares",
                     cl::desc("Replicas may take uneven shares of their "
                              "expert's tokens (ours only)"),
                     cl::cat(category));
cl::opt<Robust> robust(
    "robust", cl::desc("Load to plan for with several windows"),
    cl::values(clEnumValN(Robust::Next, "next",
                          "the next window: replicas for mean + 1 std, "
                          "packing for mean + 0.5 std and the windows' "
                          "variance (default)"),
               clEnumValN(Robust::Mean, "mean", "per-expert mean"),
               clEnumValN(Robust::Max, "max", "per-expert maximum"),
               clEnumValN(Robust::MeanStd, "mean+kstd",
                          "mean + k standard deviations (--robust-k)"),
               clEnumValN(Robust::Worst, "worst",
                          "the plan with the best worst window")),
    cl::init(Robust::Next), cl::cat(category));
cl::opt<double> robustK("robust-k",
                        cl::desc("k of --robust=mean+kstd, in [0, 100]"),
                        cl::init(1.0), cl::cat(category));
cl::opt<std::string> currentFile(
    "current",
    cl::desc("Current placement (moe-eplb output or {\"phy2log\": ...}): "
             "decide per layer whether to redeploy"),
    cl::value_desc("placement.json"), cl::cat(category));
cl::opt<double> threshold(
    "redeploy-threshold",
    cl::desc("Redeploy a layer when peak/average drops by at least this "
             "(finite, >= 0)"),
    cl::init(0.05), cl::cat(category));
cl::opt<int64_t> exactBudget(
    "exact-budget",
    cl::desc("Branch-and-bound nodes for small layers (0: no exact search; "
             "at most 1e9)"),
    cl::init(2000000), cl::cat(category));
cl::opt<std::string>
    outputFile("o",
               cl::desc("Write the plans as JSON here (\"-\": stdout, the table then on stderr)"),
               cl::value_desc("path"), cl::cat(category));

constexpr int64_t kMaxExactBudget = 1000000000;

int fail(const llvm::Twine &message) {
  llvm::errs() << "moe-eplb: error: " << message << "\n";
  return 1;
}

std::string str(int64_t v) { return std::to_string(v); }
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.6g", v);
  return text;
}

/// The options' ranges that do not depend on the loads, or "".
std::string checkOptions() {
  if (slots.getNumOccurrences() == 0)
    return "--slots is required: the physical expert slots in total";
  if (devices.getNumOccurrences() == 0)
    return "--devices is required: the devices (expert-parallel ranks)";
  if (slots <= 0 || slots > mlir::moe::limits::kMaxExperts)
    return "--slots must be a positive number of physical expert slots, at "
           "most " +
           str(mlir::moe::limits::kMaxExperts) + "; got " + str(slots);
  if (devices <= 0 || devices > mlir::moe::limits::kMaxRanks)
    return "--devices must be a positive number of devices, at most " +
           str(mlir::moe::limits::kMaxRanks) + "; got " + str(devices);
  if (nodes <= 0 || nodes > devices)
    return "--nodes must be in [1, --devices (" + str(devices) + ")]; got " +
           str(nodes);
  if (groups <= 0 || groups > mlir::moe::limits::kMaxTopK)
    return "--groups must be in [1, " + str(mlir::moe::limits::kMaxTopK) +
           "]; got " + str(groups);
  if (!std::isfinite(robustK) || robustK < 0 || robustK > 100)
    return "--robust-k must be a finite number in [0, 100]; got " +
           num(robustK);
  if (!std::isfinite(threshold) || threshold < 0)
    return "--redeploy-threshold must be a finite number >= 0; got " +
           num(threshold);
  if (threshold.getNumOccurrences() && currentFile.empty())
    return "--redeploy-threshold decides against the placement deployed now: "
           "it needs --current";
  if (exactBudget < 0 || exactBudget > kMaxExactBudget)
    return "--exact-budget must be in [0, " + str(kMaxExactBudget) +
           "]; got " + str(exactBudget);
  if (shares && algorithm == Algorithm::DeepSeek)
    return "--shares needs --algorithm=ours (DeepSeek's EPLB splits evenly)";
  return "";
}

const char *robustName(Robust kind) {
  switch (kind) {
  case Robust::Mean:
    return "mean";
  case Robust::Max:
    return "max";
  case Robust::MeanStd:
    return "mean+kstd";
  case Robust::Worst:
    return "worst";
  case Robust::Next:
    return "next";
  }
  return "";
}

double worst(const std::vector<double> &v) {
  return *std::max_element(v.begin(), v.end());
}
} // namespace

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "moe-eplb: expert-parallel load balancer (DeepSeek's EPLB and ours)\n\n"
      "Complexity per layer and window, for E experts on N slots, D devices,\n"
      "S = N / D slots per device (docs/EPLB.md):\n"
      "  deepseek       O(N log N)\n"
      "  ours, even     objective future: O(N log N) for the counts and the\n"
      "                 packing, swaps of O(S N) each, capped at 2^26\n"
      "                 candidates (with --groups: O(S N) per device\n"
      "                 searched from); plus, on layers of <= 16 experts\n"
      "                 and <= 64 devices, the sample objective's plan\n"
      "                 when the future plan is 5% above the bound:\n"
      "  ours, sample   O(N log N) per packing, at most 2 x 44 packings;\n"
      "                 local search capped at 2^26 elementary steps\n"
      "                 (a move: about N log N + S (E + D log S));\n"
      "                 S = 2: pair counts capped at 2^25 steps;\n"
      "                 exact search only for <= 16 experts per node and\n"
      "                 <= 64 devices, at most --exact-budget nodes\n"
      "  ours, --shares the above, plus a ring placement and at most 256\n"
      "                 max flows on E + D nodes and N edges each\n"
      "  --robust=worst about 24 plans; --current adds one plan and a\n"
      "                 device matching (O(D^3) up to 256 devices per\n"
      "                 node, greedy beyond)\n"
      "A layer of 4,096 experts plans in well under 1 s (even or --shares).\n"
      "Limits: experts and slots <= 2^20, devices <= 2^16, groups <= 1024,\n"
      "layers and windows <= 2^16, loads finite in [0, 2^53].\n");

  if (inputFile.empty())
    return fail("give the expert loads: moe-eplb <loads.json> --slots N "
                "--devices N");
  std::string badOption = checkOptions();
  if (!badOption.empty())
    return fail(badOption);
  if (!outputFile.empty()) { // before planning, which may take a while
    llvm::SmallString<256> parent(llvm::sys::path::parent_path(outputFile));
    if (parent.empty())
      parent = ".";
    if (!llvm::sys::fs::is_directory(parent))
      return fail("-o " + outputFile + ": the directory it goes in, " + parent +
                  ", does not exist");
  }

  llvm::Expected<LoadTrace> trace = readLoadTrace(inputFile);
  if (!trace)
    return fail(llvm::toString(trace.takeError()));
  int64_t experts = trace->experts(), layers = trace->layers();
  int64_t windows = static_cast<int64_t>(trace->windows.size());
  Topology topology{slots, devices, nodes, groups};
  std::string problem = checkTopology(topology, experts);
  if (!problem.empty())
    return fail(problem);
  if (nodes > 1 && !topology.hierarchical())
    llvm::errs() << "moe-eplb: warning: --nodes=" << nodes.getValue()
                 << " has no effect: node-aware placement needs --groups (" << groups.getValue()
                 << ") to be a multiple of the nodes; planning as one node\n";
  if (robustK.getNumOccurrences() && robust != Robust::MeanStd)
    llvm::errs() << "moe-eplb: warning: --robust-k has no effect without --robust=mean+kstd\n";
  if (robust.getNumOccurrences() && windows == 1)
    llvm::errs() << "moe-eplb: warning: --robust=" << robustName(robust) << " has no effect: "
                 << inputFile << " has one window of loads\n";

  std::vector<Placement> current;
  if (!currentFile.empty()) {
    llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> buffer =
        llvm::MemoryBuffer::getFile(currentFile);
    if (!buffer)
      return fail(currentFile +
                  ": cannot read: " + buffer.getError().message());
    llvm::Expected<std::vector<Placement>> parsed =
        parsePlacements((*buffer)->getBuffer(), experts, topology, layers);
    if (!parsed)
      return fail(currentFile + ": " + llvm::toString(parsed.takeError()));
    current = std::move(*parsed);
  }

  // The table goes to stderr when the JSON goes to stdout.
  FILE *table = outputFile == "-" || outputFile == "/dev/stdout" ? stderr : stdout;
  PlanOptions options;
  options.algorithm = algorithm;
  options.objective = objective;
  options.shares = shares;
  options.exactBudget = exactBudget;
  PlanOptions deepseek;
  deepseek.algorithm = Algorithm::DeepSeek;

  std::fprintf(table,
               "moe-eplb: %lld layers x %lld experts%s, %lld slots on %lld "
               "devices (%lld per device), %lld node(s), %lld group(s); %s, %s "
               "shares%s%s%s\n",
               (long long)layers, (long long)experts,
               windows > 1 ? (", " + std::to_string(windows) + " windows").c_str() : "",
               (long long)slots, (long long)devices, (long long)topology.slotsPerDevice(),
               (long long)nodes, (long long)groups,
               algorithm == Algorithm::Ours ? "ours" : "deepseek", shares ? "uneven" : "even",
               algorithm == Algorithm::Ours && !shares
                   ? (objective == Objective::Future ? ", objective future" : ", objective sample")
                   : "",
               windows > 1 ? ", robust=" : "", windows > 1 ? robustName(robust) : "");
  std::fprintf(table, "%5s %12s %9s %9s %9s %7s", "layer", "peak", "deepseek", "planned", "bound",
               "optimal");
  if (windows > 1)
    std::fprintf(table, " %11s %11s", "ds worst-w", "plan worst-w");
  if (!current.empty())
    std::fprintf(table, " %9s %7s %8s %6s", "current", "gain", "redeploy", "moved");
  std::fprintf(table, "\n");

  json::Array layerPlans;
  double sumDeepSeek = 0, sumPlanned = 0, maxDeepSeek = 0, maxPlanned = 0;
  int64_t worse = 0, redeployed = 0, moved = 0;
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<std::vector<double>> loads = trace->layer(l);
    std::vector<double> planningLoad = robustLoad(
        loads, robust == Robust::Worst ? Robust::Mean : robust, robustK);
    LayerPlan plan = planWindows(loads, topology, options, robust, robustK);
    LayerPlan baseline = planLayer(planningLoad, topology, deepseek);
    double planned = peakOverAverage(plan.placement, planningLoad, devices);
    double base = peakOverAverage(baseline.placement, planningLoad, devices);
    double total = 0;
    for (double w : planningLoad)
      total += w;
    double bound = ratioToMean(peakLowerBound(planningLoad, topology, shares),
                               total, devices);

    Placement chosen = plan.placement;
    json::Object redeploy;
    std::optional<RedeployDecision> decision;
    if (!current.empty()) {
      decision = decideRedeploy(current[l], planningLoad, topology, options,
                                threshold);
      chosen = decision->placement;
      // What a redeploy would run: the fresh plan aligned to the current
      // one, or the current one improved in few moves.
      plan.optimal &= decision->plannedRatio <= planned * (1 + 1e-9);
      planned = decision->plannedRatio;
      redeployed += decision->redeploy;
      moved += decision->movedReplicas;
      redeploy = json::Object{
          {"redeploy", decision->redeploy},
          {"current_peak_over_average", decision->currentRatio},
          {"planned_peak_over_average", decision->plannedRatio},
          {"gain", decision->gain()},
          {"moved_replicas", decision->movedReplicas},
      };
    }

    sumDeepSeek += base;
    sumPlanned += planned;
    maxDeepSeek = std::max(maxDeepSeek, base);
    maxPlanned = std::max(maxPlanned, planned);
    // --robust=worst optimises the worst window, the others the planning
    // load: compare with DeepSeek on what was optimised.
    if (windows == 1 || robust != Robust::Worst)
      worse += planned > base * (1 + 1e-9);
    std::fprintf(table, "%5lld %12.6g %9.4f %9.4f %9.4f %7s", (long long)l,
                 peakLoad(chosen, planningLoad, devices), base, planned, bound,
                 plan.optimal ? "yes" : "-");
    json::Object layer = placementJSON(chosen, planningLoad, devices);
    layer["layer"] = l;
    layer["peak_over_average"] = peakOverAverage(chosen, planningLoad, devices);
    layer["deepseek_peak_over_average"] = base;
    layer["lower_bound_peak_over_average"] = bound;
    layer["optimal"] = plan.optimal;
    if (windows > 1) {
      std::vector<double> ours = windowRatios(chosen, loads, devices);
      std::vector<double> theirs =
          windowRatios(baseline.placement, loads, devices);
      std::fprintf(table, " %11.4f %11.4f", worst(theirs), worst(ours));
      if (robust == Robust::Worst)
        worse += worst(ours) > worst(theirs) * (1 + 1e-9);
      layer["window_peak_over_average"] = json::Array(ours);
      layer["deepseek_window_peak_over_average"] = json::Array(theirs);
    }
    if (decision) {
      std::fprintf(table, " %9.4f %7.4f %8s %6lld", decision->currentRatio, decision->gain(),
                   decision->redeploy ? "yes" : "no", (long long)decision->movedReplicas);
      layer["redeploy"] = std::move(redeploy);
    }
    std::fprintf(table, "\n");
    layerPlans.push_back(std::move(layer));
  }
  std::fprintf(table, "%5s %12s %9.4f %9.4f\n", "mean", "", sumDeepSeek / layers,
               sumPlanned / layers);
  std::fprintf(table, "%5s %12s %9.4f %9.4f\n", "max", "", maxDeepSeek, maxPlanned);
  std::fprintf(table, "layers where the plan is worse than deepseek%s: %lld\n",
               windows > 1 && robust == Robust::Worst ? " (worst window)" : "", (long long)worse);
  if (!current.empty())
    std::fprintf(table, "layers redeployed: %lld of %lld, replicas moved: %lld\n",
                 (long long)redeployed, (long long)layers, (long long)moved);

  if (outputFile.empty())
    return 0;
  json::Object out{
      {"algorithm", algorithm == Algorithm::Ours ? "ours" : "deepseek"},
      {"shares", shares ? "uneven" : "even"},
      {"objective", algorithm == Algorithm::DeepSeek ? "none"
                    : objective == Objective::Future && !shares ? "future"
                                                                : "sample"},
      {"robust", robustName(robust)},
      {"robust_k", robustK.getValue()},
      {"experts", experts},
      {"windows", windows},
      {"slots", slots.getValue()},
      {"devices", devices.getValue()},
      {"nodes", nodes.getValue()},
      {"groups", groups.getValue()},
      {"layers", std::move(layerPlans)},
  };
  json::Value value(std::move(out));
  std::string bad = firstNonFinite(value);
  if (!bad.empty())
    return fail(outputFile + ": not written: " + bad +
                " is not a finite number");
  // All or nothing: a failed write leaves no partial file.
  if (llvm::Error e = mlir::moe::writeOutputFile(
          outputFile, [&](llvm::raw_ostream &os) { os << llvm::formatv("{0:2}", value) << "\n"; }))
    return fail(llvm::toString(std::move(e)));
  return 0;
}
