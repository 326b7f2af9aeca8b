//===- MPIControl.cpp - MPI pieces shared by the MPI and NCCL backends ----===//
#include "MPIControl.h"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <sched.h>
#include <thread>

using namespace moert;

namespace {
constexpr int kDescriptorTag = 7001;
constexpr long kDefaultSpins = 0;
constexpr std::chrono::microseconds kRestAfter{1000}, kRest{50};

/// Polls before waitAll starts yielding: $MOERT_WAIT_SPINS (digits), else 0.
/// Yielding at once is what oversubscribed ranks need; with a core per rank
/// sched_yield returns at once, and 200 or 5000 polls first measured no
/// better (runtime/bench/ep_bench.cpp, 2 and 4 ranks on 2 cores).
int pollsBeforeYield() {
  static const int spins = [] {
    const char *text = std::getenv("MOERT_WAIT_SPINS");
    long value = kDefaultSpins;
    if (text && *text) {
      char *end = nullptr;
      long parsed = std::strtol(text, &end, 10);
      if (*end == '\0' && parsed >= 0)
        value = std::min(parsed, 1L << 30);
    }
    return int(value);
  }();
  return spins;
}
} // namespace

std::string mpi::errorText(const char *what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(what) + " failed: " + std::string(text, length);
}

Status mpi::initialize(bool &initializedHere) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  initializedHere = !initialized;
  if (initialized)
    return std::nullopt;
  int provided = 0;
  int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
  if (code != MPI_SUCCESS) {
    initializedHere = false;
    return errorText("MPI_Init_thread", code);
  }
  return std::nullopt;
}

MPI_Comm mpi::duplicateWorld() {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return comm;
}

Status mpi::waitAll(std::vector<MPI_Request> &requests,
                    Clock::time_point deadline, const char *what, LongWait longWait) {
  // No sleep on the data path: MPI_Testall drives the transfer (libnbc's
  // collectives progress only inside MPI calls), so it runs back to back.
  // After a few polls each poll gives the core away (sched_yield), so that
  // ranks sharing a core (mpirun --oversubscribe) still run their side; on
  // a core of its own a rank just comes back at once. The deadline is read
  // at every poll: a peer that never comes is an error, not a hang.
  //
  // A rank waiting for peers to arrive (the descriptor exchange) rests once
  // the wait is long: sched_yield keeps it runnable, and on a shared core
  // the scheduler then keeps preempting the peer it waits for (measured:
  // thousands of involuntary context switches per call and 15% more CPU per
  // FLOP on 4 ranks over 2 cores). Payload transfers never rest.
  const int spins = pollsBeforeYield();
  const Clock::time_point start = Clock::now();
  for (int polls = 0;; ++polls) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                         &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return errorText(what, rc);
    if (done)
      return std::nullopt;
    const Clock::time_point now = Clock::now();
    if (now > deadline)
      return std::string(what) + " timed out";
    if (longWait == LongWait::Rest && now - start > kRestAfter)
      std::this_thread::sleep_for(kRest);
    else if (polls >= spins)
      sched_yield();
  }
}

namespace {
/// The bytes of `d` that travel: everything up to the inline data, and the
/// inline bytes used.
int wireBytes(const CollectiveDescriptor &d) {
  int64_t used = std::clamp<int64_t>(d.inlineBytes, 0, CollectiveDescriptor::kInlineBytes);
  return int(offsetof(CollectiveDescriptor, data) + used);
}

Status exchange(MPI_Comm control, const CollectiveDescriptor *toPeer, bool perPeer,
                std::vector<CollectiveDescriptor> &all, std::vector<int> &missing,
                Clock::time_point deadline) {
  int myRank = 0, mySize = 1;
  MPI_Comm_rank(control, &myRank);
  MPI_Comm_size(control, &mySize);
  all.assign(mySize, CollectiveDescriptor());
  all[myRank] = toPeer[perPeer ? myRank : 0];
  std::vector<MPI_Request> receives, sends;
  std::vector<int> peers;
  receives.reserve(mySize);
  sends.reserve(mySize);
  for (int p = 0; p < mySize; ++p) {
    if (p == myRank)
      continue;
    peers.push_back(p);
    // The whole descriptor may come; a peer sends only what it uses.
    receives.emplace_back();
    MPI_Irecv(&all[p], sizeof(CollectiveDescriptor), MPI_BYTE, p,
              kDescriptorTag, control, &receives.back());
  }
  for (int p = 0; p < mySize; ++p) {
    if (p == myRank)
      continue;
    const CollectiveDescriptor &d = toPeer[perPeer ? p : 0];
    sends.emplace_back();
    MPI_Isend(&d, wireBytes(d), MPI_BYTE, p, kDescriptorTag, control, &sends.back());
  }
  Status status = mpi::waitAll(receives, deadline, "descriptor exchange",
                               mpi::LongWait::Rest);
  if (status) {
    missing.clear();
    for (size_t i = 0; i < receives.size(); ++i) {
      int done = 0;
      MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE);
      if (!done)
        missing.push_back(peers[i]);
    }
    return status;
  }
  return mpi::waitAll(sends, deadline, "descriptor exchange");
}
} // namespace

Status mpi::exchangeDescriptors(MPI_Comm control,
                                const CollectiveDescriptor &mine,
                                std::vector<CollectiveDescriptor> &all,
                                std::vector<int> &missing,
                                Clock::time_point deadline) {
  return exchange(control, &mine, false, all, missing, deadline);
}

Status mpi::exchangeDescriptors(MPI_Comm control,
                                const std::vector<CollectiveDescriptor> &toPeer,
                                std::vector<CollectiveDescriptor> &all,
                                std::vector<int> &missing,
                                Clock::time_point deadline) {
  int mySize = 1;
  MPI_Comm_size(control, &mySize);
  if (int(toPeer.size()) != mySize)
    return std::string("descriptor exchange: ") + std::to_string(toPeer.size()) +
           " descriptors for " + std::to_string(mySize) + " ranks";
  return exchange(control, toPeer.data(), true, all, missing, deadline);
}
