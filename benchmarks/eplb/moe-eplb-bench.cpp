//===- moe-eplb-bench.cpp - DeepSeek's EPLB against ours ------------------===//
//
// moe-eplb-bench DATA_DIR: peak/average per layer of DeepSeek's EPLB and ours
// (even and uneven shares) on every *.json trace of DATA_DIR at EP32, EP64
// and EP144; planning time for 58 layers x 256 experts at EP32; synthetic
// traces whose hot experts drift over windows (plan on the mean, the max,
// mean + std, the worst window); plan on one trace, run on another.
//
//===----------------------------------------------------------------------===//
#include "moe/EPLB/DeepSeek.h"
#include "moe/EPLB/EvenPacking.h"
#include "moe/EPLB/PlanIO.h"
#include "moe/EPLB/Planner.h"
#include "moe/EPLB/Robust.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <map>

using namespace mlir::moe::eplb;

namespace {
struct Config {
  const char *name;
  Topology topology;
};

// EP64 takes 320 slots (5 per device): 288 does not divide over 64 devices.
const Config kConfigs[] = {
    {"EP32", {288, 32, 1, 1}},
    {"EP64", {320, 64, 1, 1}},
    {"EP144", {288, 144, 1, 1}},
};
const Config kNodeAware = {"EP32/4node", {288, 32, 4, 8}};

struct Trace {
  std::string name;
  std::vector<std::vector<double>> layers; // non-zero layers only
};

bool allZero(const std::vector<double> &row) {
  return std::all_of(row.begin(), row.end(), [](double x) { return x == 0; });
}

/// CPU seconds of this process since `since` (robust to other load on
/// the machine; the planner is single-threaded).
double cpuSeconds(std::clock_t since) {
  return static_cast<double>(std::clock() - since) / CLOCKS_PER_SEC;
}

struct Stats {
  double sum = 0, max = 0;
  int n = 0;
  void add(double x) {
    sum += x;
    max = std::max(max, x);
    ++n;
  }
  double mean() const { return n ? sum / n : 0; }
};

void realTraces(const std::vector<Trace> &traces) {
  std::printf("\n== Real traces (SGLang DeepSeek-V3): peak/avg per layer, mean "
              "and max over layers ==\n");
  std::printf("%-28s %-10s %6s | %-13s | %-13s | %-13s | %-13s | %5s %5s %5s\n",
              "trace", "config", "layers", "deepseek", "ours even",
              "ours shares", "even bound", "worse", "wrsS", "dupDS");
  std::printf("%-28s %-10s %6s | %6s %6s | %6s %6s | %6s %6s | %6s %6s |\n", "",
              "", "", "mean", "max", "mean", "max", "mean", "max", "mean",
              "max");
  std::vector<Config> configs(std::begin(kConfigs), std::end(kConfigs));
  configs.push_back(kNodeAware);
  for (const Trace &trace : traces)
    for (const Config &config : configs) {
      Stats base, even, shares, bound;
      int worse = 0, worseShares = 0, duplicates = 0;
      const Topology &t = config.topology;
      for (const std::vector<double> &load : trace.layers) {
        PlanOptions deepseek;
        deepseek.algorithm = Algorithm::DeepSeek;
        LayerPlan b = planLayer(load, t, deepseek);
        LayerPlan o = planLayer(load, t, PlanOptions());
        PlanOptions withShares;
        withShares.shares = true;
        LayerPlan s = planLayer(load, t, withShares);
        base.add(b.ratio());
        even.add(o.ratio());
        shares.add(s.ratio());
        bound.add(peakLowerBound(load, t, /*shares=*/false) / o.mean);
        worse += o.ratio() > b.ratio() * (1 + 1e-12);
        worseShares += s.ratio() > b.ratio() * (1 + 1e-12);
        duplicates +=
            checkPlacement(b.placement, static_cast<int64_t>(load.size()), t) !=
            "";
      }
      std::printf("%-28s %-10s %6d | %6.4f %6.4f | %6.4f %6.4f | %6.4f %6.4f | "
                  "%6.4f %6.4f | %5d %5d %5d\n",
                  trace.name.c_str(), config.name, base.n, base.mean(),
                  base.max, even.mean(), even.max, shares.mean(), shares.max,
                  bound.mean(), bound.max, worse, worseShares, duplicates);
      std::fflush(stdout);
    }
}

void planningTime(const std::vector<Trace> &traces) {
  std::printf("\n== Planning time, all layers of a trace at EP32 (288 slots, "
              "32 devices), CPU seconds on one core ==\n");
  std::printf("%-28s %6s %12s %12s %12s\n", "trace", "layers", "deepseek [s]",
              "ours even [s]", "ours shares [s]");
  const Topology t = kConfigs[0].topology;
  for (const Trace &trace : traces) {
    double times[3];
    for (int mode = 0; mode < 3; ++mode) {
      PlanOptions options;
      options.algorithm = mode == 0 ? Algorithm::DeepSeek : Algorithm::Ours;
      options.shares = mode == 2;
      std::clock_t start = std::clock();
      for (const std::vector<double> &load : trace.layers)
        planLayer(load, t, options);
      times[mode] = cpuSeconds(start);
    }
    std::printf("%-28s %6zu %12.3f %12.3f %12.3f\n", trace.name.c_str(),
                trace.layers.size(), times[0], times[1], times[2]);
  }
}
/// splitmix64: a fixed, portable random stream.
struct Random {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  int64_t below(int64_t n) { return static_cast<int64_t>(next() % n); }
};

/// [layer][window][expert]: Zipf(0.8) loads with +-20% noise; between
/// windows, `drift` of the 32 hottest ranks trade places with random experts.
std::vector<std::vector<std::vector<double>>>
driftingTrace(uint64_t seed, int64_t layers, int64_t windows, int64_t experts,
              int64_t drift) {
  Random rng{seed};
  std::vector<std::vector<std::vector<double>>> out(layers);
  for (int64_t l = 0; l < layers; ++l) {
    std::vector<int64_t> expertOfRank(experts);
    for (int64_t r = 0; r < experts; ++r)
      expertOfRank[r] = r;
    for (int64_t r = experts - 1; r > 0; --r)
      std::swap(expertOfRank[r], expertOfRank[rng.below(r + 1)]);
    for (int64_t w = 0; w < windows; ++w) {
      if (w > 0)
        for (int64_t k = 0; k < drift; ++k)
          std::swap(expertOfRank[rng.below(32)],
                    expertOfRank[rng.below(experts)]);
      std::vector<double> load(experts);
      for (int64_t r = 0; r < experts; ++r)
        load[expertOfRank[r]] =
            std::round(1e6 / std::pow(1.0 + r, 0.8) * (0.8 + 0.4 * rng.unit()));
      out[l].push_back(std::move(load));
    }
  }
  return out;
}

void drifting() {
  const int64_t layers = 16, windows = 8, experts = 256, drift = 4;
  std::printf("\n== Synthetic drifting traces (seed 42, %lld layers x %lld "
              "windows x %lld experts, Zipf 0.8, %lld hot ranks move per "
              "window), EP32 ==\n",
              (long long)layers, (long long)windows, (long long)experts,
              (long long)drift);
  std::printf("peak/avg per window, mean over layers of the window mean and "
              "of the worst window\n");
  std::printf("%-36s %12s %12s\n", "plan", "mean window", "worst window");
  auto trace = driftingTrace(42, layers, windows, experts, drift);
  const Topology t = kConfigs[0].topology;
  struct Row {
    const char *name;
    Algorithm algorithm;
    bool shares;
    int kind; // 0..3: Robust; 4: window 0 only; 5: every window replanned
  };
  const Row rows[] = {
      {"deepseek, window 0 (stale)", Algorithm::DeepSeek, false, 4},
      {"deepseek, mean of windows", Algorithm::DeepSeek, false, 0},
      {"ours, window 0 (stale)", Algorithm::Ours, false, 4},
      {"ours, mean of windows", Algorithm::Ours, false, 0},
      {"ours, max of windows", Algorithm::Ours, false, 1},
      {"ours, mean + 1 std", Algorithm::Ours, false, 2},
      {"ours, worst window", Algorithm::Ours, false, 3},
      {"ours shares, worst window", Algorithm::Ours, true, 3},
      {"ours, replanned every window", Algorithm::Ours, false, 5},
  };
  for (const Row &row : rows) {
    PlanOptions options;
    options.algorithm = row.algorithm;
    options.shares = row.shares;
    Stats meanWindow, worstWindow;
    for (const auto &loads : trace) {
      std::vector<double> ratios;
      if (row.kind == 5) {
        for (const std::vector<double> &w : loads)
          ratios.push_back(planLayer(w, t, options).ratio());
      } else {
        LayerPlan plan = row.kind == 4
                             ? planLayer(loads[0], t, options)
                             : planWindows(loads, t, options,
                                           static_cast<Robust>(row.kind), 1.0);
        ratios = windowRatios(plan.placement, loads, t.devices);
      }
      double sum = 0;
      for (double r : ratios)
        sum += r;
      meanWindow.add(sum / static_cast<double>(ratios.size()));
      worstWindow.add(*std::max_element(ratios.begin(), ratios.end()));
    }
    std::printf("%-36s %12.4f %12.4f\n", row.name, meanWindow.mean(),
                worstWindow.mean());
  }
}

void crossTrace(const std::vector<Trace> &traces) {
  std::printf("\n== Plan on trace A, run on trace B (EP32): mean peak/avg over "
              "layers, deepseek / ours ==\n");
  std::printf("%-24s", "plan on \\ run on");
  for (const Trace &b : traces)
    std::printf(" %22s", b.name.c_str());
  std::printf("\n");
  const Topology t = kConfigs[0].topology;
  PlanOptions deepseek;
  deepseek.algorithm = Algorithm::DeepSeek;
  for (const Trace &a : traces) {
    std::vector<Placement> ours, theirs;
    for (const std::vector<double> &load : a.layers) {
      ours.push_back(planLayer(load, t, PlanOptions()).placement);
      theirs.push_back(planLayer(load, t, deepseek).placement);
    }
    std::printf("%-24s", a.name.c_str());
    for (const Trace &b : traces) {
      Stats o, d;
      for (size_t l = 0; l < std::min(a.layers.size(), b.layers.size()); ++l) {
        o.add(peakOverAverage(ours[l], b.layers[l], t.devices));
        d.add(peakOverAverage(theirs[l], b.layers[l], t.devices));
      }
      std::printf("        %6.4f / %6.4f", d.mean(), o.mean());
    }
    std::printf("\n");
  }
}
} // namespace

int main(int argc, char **argv) {
  if (argc != 2) {
    llvm::errs() << "usage: moe-eplb-bench DATA_DIR (the folder of "
                    "{\"logical_count\": ...} traces)\n";
    return 2;
  }
  std::vector<std::string> files;
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(argv[1], ec), end; it != end && !ec;
       it.increment(ec))
    if (llvm::sys::path::extension(it->path()) == ".json")
      files.push_back(it->path());
  if (ec || files.empty()) {
    llvm::errs() << "moe-eplb-bench: error: " << argv[1]
                 << ": no .json traces found\n";
    return 1;
  }
  std::sort(files.begin(), files.end());
  std::vector<Trace> traces;
  for (const std::string &file : files) {
    llvm::Expected<LoadTrace> loaded = readLoadTrace(file);
    if (!loaded) {
      llvm::errs() << "moe-eplb-bench: error: "
                   << llvm::toString(loaded.takeError()) << "\n";
      return 1;
    }
    Trace trace;
    trace.name = llvm::sys::path::stem(file).str();
    if (trace.name.rfind("sglang_dsv3_", 0) == 0)
      trace.name = trace.name.substr(12);
    for (const std::vector<double> &row : loaded->windows[0])
      if (!allZero(row))
        trace.layers.push_back(row);
    traces.push_back(std::move(trace));
  }
  planningTime(traces);
  realTraces(traces);
  crossTrace(traces);
  drifting();
  return 0;
}
