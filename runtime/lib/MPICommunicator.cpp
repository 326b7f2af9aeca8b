//===- MPICommunicator.cpp - collectives over MPI -------------------------===//
//
// Every operation is nonblocking and polled against a deadline, so a rank
// that never joins yields an error, not a hang.
//
//===----------------------------------------------------------------------===//
#include "MPICommunicator.h"

#include <mpi.h>

#include <climits>
#include <thread>

using namespace moert;

namespace {
constexpr int kDescriptorTag = 7001;

std::string mpiError(const char *what, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(what) + " failed: " + std::string(text, length);
}

/// Polls `requests` until all complete or `deadline` passes.
Status waitAll(std::vector<MPI_Request> &requests, Clock::time_point deadline,
               const char *what) {
  auto pause = std::chrono::microseconds(20);
  while (true) {
    int done = 0;
    int rc = MPI_Testall(static_cast<int>(requests.size()), requests.data(),
                         &done, MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS)
      return mpiError(what, rc);
    if (done)
      return std::nullopt;
    if (Clock::now() > deadline)
      return std::string(what) + " timed out";
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(2000));
  }
}

Status checkedInts(const int64_t *bytes, int n, std::vector<int> &counts,
                   std::vector<int> &displs) {
  counts.resize(n);
  displs.resize(n);
  int64_t offset = 0;
  for (int p = 0; p < n; ++p) {
    if (bytes[p] < 0 || bytes[p] > INT_MAX || offset > INT_MAX)
      return std::string("message to/from rank ") + std::to_string(p) +
             " exceeds MPI's int count";
    counts[p] = static_cast<int>(bytes[p]);
    displs[p] = static_cast<int>(offset);
    offset += bytes[p];
  }
  return std::nullopt;
}

class MPICommunicator final : public Communicator {
public:
  MPICommunicator(MPI_Comm data, MPI_Comm control, bool ownsMPI)
      : data(data), control(control), ownsMPI(ownsMPI) {
    MPI_Comm_rank(data, &myRank);
    MPI_Comm_size(data, &mySize);
  }
  ~MPICommunicator() override {
    MPI_Comm_free(&data);
    MPI_Comm_free(&control);
    if (ownsMPI)
      MPI_Finalize();
  }
  int rank() const override { return myRank; }
  int size() const override { return mySize; }
  const char *backend() const override { return "mpi"; }

  Status exchangeDescriptors(const CollectiveDescriptor &mine,
                             std::vector<CollectiveDescriptor> &all,
                             std::vector<int> &missing,
                             Clock::time_point deadline) override {
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
      MPI_Isend(&mine, sizeof(CollectiveDescriptor), MPI_BYTE, p,
                kDescriptorTag, control, &sends.back());
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

  Status allToAllV(const void *send, const int64_t *sendBytes, void *recv,
                   const int64_t *recvBytes,
                   Clock::time_point deadline) override {
    std::vector<int> sc, sd, rc, rd;
    if (Status s = checkedInts(sendBytes, mySize, sc, sd))
      return s;
    if (Status s = checkedInts(recvBytes, mySize, rc, rd))
      return s;
    std::vector<MPI_Request> request(1);
    int code = MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_BYTE, recv,
                              rc.data(), rd.data(), MPI_BYTE, data, &request[0]);
    if (code != MPI_SUCCESS)
      return mpiError("MPI_Ialltoallv", code);
    return waitAll(request, deadline, "all-to-all");
  }

  Status allReduce(int64_t *values, int64_t count, ReduceOp op,
                   Clock::time_point deadline) override {
    std::vector<MPI_Request> request(1);
    int code = MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(count),
                              MPI_INT64_T, op == ReduceOp::Sum ? MPI_SUM : MPI_MAX,
                              data, &request[0]);
    if (code != MPI_SUCCESS)
      return mpiError("MPI_Iallreduce", code);
    return waitAll(request, deadline, "all-reduce");
  }

  Status allGather(const void *send, int64_t bytes, void *recv,
                   Clock::time_point deadline) override {
    if (bytes > INT_MAX)
      return std::string("all-gather of ") + std::to_string(bytes) +
             " bytes exceeds MPI's int count";
    std::vector<MPI_Request> request(1);
    int code = MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                              static_cast<int>(bytes), MPI_BYTE, data, &request[0]);
    if (code != MPI_SUCCESS)
      return mpiError("MPI_Iallgather", code);
    return waitAll(request, deadline, "all-gather");
  }

  Status barrier(Clock::time_point deadline) override {
    std::vector<MPI_Request> request(1);
    int code = MPI_Ibarrier(data, &request[0]);
    if (code != MPI_SUCCESS)
      return mpiError("MPI_Ibarrier", code);
    return waitAll(request, deadline, "barrier");
  }

private:
  MPI_Comm data, control;
  bool ownsMPI;
  int myRank = 0, mySize = 1;
};
} // namespace

std::unique_ptr<Communicator> moert::createMPICommunicator(Status &error) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    int code = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (code != MPI_SUCCESS) {
      error = mpiError("MPI_Init_thread", code);
      return nullptr;
    }
  }
  MPI_Comm data, control;
  MPI_Comm_dup(MPI_COMM_WORLD, &data);
  MPI_Comm_dup(MPI_COMM_WORLD, &control);
  MPI_Comm_set_errhandler(data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(control, MPI_ERRORS_RETURN);
  return std::make_unique<MPICommunicator>(data, control, !initialized);
}
