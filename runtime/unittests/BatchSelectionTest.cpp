//===- BatchSelectionTest.cpp - replicas chosen per batch -----------------===//
//
// The selection's peak against an exhaustive search over every integer
// split, and the rank-order fill against the split.
//
//===----------------------------------------------------------------------===//
#include "BatchSelection.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <functional>
#include <random>

using namespace moert;

namespace {
Placement placementOf(const std::vector<int32_t> &physToLog, int ranks, int64_t experts) {
  Placement placement;
  Status e = Placement::fromReplicas(physToLog.data(), nullptr, int64_t(physToLog.size()),
                                     ranks, experts, placement);
  EXPECT_FALSE(e) << *e;
  return placement;
}

/// The least peak over every way of splitting each expert's choices over
/// the ranks holding its slots, by enumeration.
int64_t exhaustivePeak(const std::vector<int32_t> &physToLog, int ranks,
                       const std::vector<int64_t> &counts) {
  const int64_t perRank = int64_t(physToLog.size()) / ranks;
  std::vector<std::vector<int>> ranksOf(counts.size());
  for (size_t p = 0; p < physToLog.size(); ++p) {
    std::vector<int> &r = ranksOf[physToLog[p]];
    if (std::find(r.begin(), r.end(), int(p / perRank)) == r.end())
      r.push_back(int(p / perRank));
  }
  std::vector<int64_t> load(ranks, 0);
  int64_t best = INT64_MAX;
  // Expert e gives `left` choices to its ranks from index k on.
  std::function<void(size_t, size_t, int64_t)> split = [&](size_t e, size_t k, int64_t left) {
    if (e == counts.size()) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    const std::vector<int> &r = ranksOf[e];
    if (k + 1 == r.size()) {
      load[r[k]] += left;
      split(e + 1, 0, e + 1 < counts.size() ? counts[e + 1] : 0);
      load[r[k]] -= left;
      return;
    }
    for (int64_t here = 0; here <= left; ++here) {
      load[r[k]] += here;
      split(e, k + 1, left - here);
      load[r[k]] -= here;
    }
  };
  split(0, 0, counts.empty() ? 0 : counts[0]);
  return best;
}
} // namespace

TEST(BatchSelection, PeakIsTheExhaustiveOptimum) {
  std::mt19937 random(7);
  for (int trial = 0; trial < 300; ++trial) {
    const int ranks = 2 + int(random() % 3), perRank = 2 + int(random() % 2);
    const int slots = ranks * perRank;
    const int experts = std::max(2, slots - 1 - int(random() % 3));
    // Every expert once, the other slots to random experts, shuffled; a
    // rank may hold two slots of one expert.
    std::vector<int32_t> physToLog(slots);
    for (int p = 0; p < slots; ++p)
      physToLog[p] = p < experts ? p : int32_t(random() % experts);
    std::shuffle(physToLog.begin(), physToLog.end(), random);
    std::vector<int64_t> counts(experts);
    for (int64_t &c : counts)
      c = random() % 7;
    Placement placement = placementOf(physToLog, ranks, experts);
    BatchSelection s = selectReplicas(placement, counts, ranks);

    ASSERT_EQ(s.peak, exhaustivePeak(physToLog, ranks, counts)) << "trial " << trial;
    std::vector<int64_t> byExpert(experts, 0), byRank(ranks, 0);
    for (int p = 0; p < slots; ++p) {
      ASSERT_GE(s.slotChoices[p], 0);
      byExpert[physToLog[p]] += s.slotChoices[p];
      byRank[p / perRank] += s.slotChoices[p];
    }
    EXPECT_EQ(byExpert, counts) << "trial " << trial;
    EXPECT_EQ(*std::max_element(byRank.begin(), byRank.end()), s.peak) << "trial " << trial;
  }
}

TEST(BatchSelection, RanksFillTheSplitInRankOrder) {
  // Expert 0 has a slot on each of 4 ranks, expert 1 one slot on rank 3.
  const int ranks = 4;
  std::vector<int32_t> physToLog = {0, 2, 0, 3, 0, 4, 0, 1};
  Placement placement = placementOf(physToLog, ranks, 5);
  // Choices of each expert on each rank.
  std::vector<std::vector<int64_t>> mine = {
      {10, 0, 1, 1, 1}, {3, 0, 1, 1, 1}, {0, 0, 1, 1, 1}, {7, 20, 1, 1, 1}};
  std::vector<int64_t> total(5, 0);
  for (const auto &m : mine)
    for (int e = 0; e < 5; ++e)
      total[e] += m[e];
  BatchSelection s = selectReplicas(placement, total, ranks);
  // Rank 3 holds expert 1's 20 choices: the peak, so its slot of expert 0
  // takes none and ranks 0..2 share expert 0's 20.
  EXPECT_EQ(s.peak, 20);
  EXPECT_EQ(s.slotChoices[6], 0);

  std::vector<int64_t> got(physToLog.size(), 0), before(5, 0);
  for (int r = 0; r < ranks; ++r) {
    SlotCursor cursor(placement, s, before);
    for (int e = 0; e < 5; ++e)
      for (int64_t n = 0; n < mine[r][e]; ++n)
        ++got[cursor.next(e)];
    for (int e = 0; e < 5; ++e)
      before[e] += mine[r][e];
  }
  EXPECT_EQ(got, s.slotChoices);
}

TEST(BatchSelection, OneHotExpertOnEveryRankSplitsEvenly) {
  const int ranks = 4;
  // Expert 0 on every rank; experts 1..4 once each.
  std::vector<int32_t> physToLog = {0, 1, 0, 2, 0, 3, 0, 4};
  Placement placement = placementOf(physToLog, ranks, 5);
  BatchSelection s = selectReplicas(placement, {1001, 0, 0, 0, 0}, ranks);
  EXPECT_EQ(s.peak, 251);
  int64_t sum = 0;
  for (int p : {0, 2, 4, 6}) {
    EXPECT_LE(s.slotChoices[p], 251);
    sum += s.slotChoices[p];
  }
  EXPECT_EQ(sum, 1001);
}
