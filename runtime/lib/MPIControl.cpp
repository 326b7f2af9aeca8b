//===- MPIControl.cpp - MPI pieces shared by the MPI and NCCL backends ----===//
#include "MPIControl.h"

#include <algorithm>
#include <thread>

using namespace moert;

namespace {
constexpr int kDescriptorTag = 7001;
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
                    Clock::time_point deadline, const char *what) {
  auto pause = std::chrono::microseconds(20);
  while (true) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                         &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return errorText(what, rc);
    if (done)
      return std::nullopt;
    if (Clock::now() > deadline)
      return std::string(what) + " timed out";
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

Status mpi::exchangeDescriptors(MPI_Comm control,
                                const CollectiveDescriptor &mine,
                                std::vector<CollectiveDescriptor> &all,
                                std::vector<int> &missing,
                                Clock::time_point deadline) {
  int myRank = 0, mySize = 1;
  MPI_Comm_rank(control, &myRank);
  MPI_Comm_size(control, &mySize);
  all.assign(mySize, CollectiveDescriptor());
  all[myRank] = mine;
  std::vector<MPI_Request> receives, sends;
  std::vector<int> peers;
  for (int p = 0; p < mySize; ++p) {
    if (p == myRank)
      continue;
    peers.push_back(p);
    receives.emplace_back();
    MPI_Irecv(&all[p], sizeof(CollectiveDescriptor), MPI_BYTE, p,
              kDescriptorTag, control, &receives.back());
    sends.emplace_back();
    MPI_Isend(&mine, sizeof(CollectiveDescriptor), MPI_BYTE, p, kDescriptorTag,
              control, &sends.back());
  }
  Status status = waitAll(receives, deadline, "descriptor exchange");
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
  return waitAll(sends, deadline, "descriptor exchange");
}
