//===- MPICommunicator.cpp - collectives over MPI -------------------------===//
//
// Every operation is nonblocking and polled against a deadline, so a rank
// that never joins yields an error, not a hang. Small collectives travel
// inside the descriptor exchange (carriesData) and need no data collective.
//
//===----------------------------------------------------------------------===//
#include "MPICommunicator.h"
#include "MPIControl.h"

#include <climits>

using namespace moert;

namespace {
using mpi::waitAll;

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
  int64_t maxCollectiveBytes() const override { return INT_MAX; }

  Status exchangeDescriptors(const CollectiveDescriptor &mine,
                             std::vector<CollectiveDescriptor> &all,
                             std::vector<int> &missing,
                             Clock::time_point deadline) override {
    return mpi::exchangeDescriptors(control, mine, all, missing, deadline);
  }

  bool carriesData() const override { return true; }
  Status exchangeCarrying(const std::vector<CollectiveDescriptor> &toPeer,
                          std::vector<CollectiveDescriptor> &all,
                          std::vector<int> &missing,
                          Clock::time_point deadline) override {
    return mpi::exchangeDescriptors(control, toPeer, all, missing, deadline);
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
      return mpi::errorText("MPI_Ialltoallv", code);
    return waitAll(request, deadline, "all-to-all");
  }

  Status allReduce(int64_t *values, int64_t count, ReduceOp op,
                   Clock::time_point deadline) override {
    std::vector<MPI_Request> request(1);
    int code = MPI_Iallreduce(MPI_IN_PLACE, values, static_cast<int>(count),
                              MPI_INT64_T, op == ReduceOp::Sum ? MPI_SUM : MPI_MAX,
                              data, &request[0]);
    if (code != MPI_SUCCESS)
      return mpi::errorText("MPI_Iallreduce", code);
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
      return mpi::errorText("MPI_Iallgather", code);
    return waitAll(request, deadline, "all-gather");
  }

  Status barrier(Clock::time_point deadline) override {
    std::vector<MPI_Request> request(1);
    int code = MPI_Ibarrier(data, &request[0]);
    if (code != MPI_SUCCESS)
      return mpi::errorText("MPI_Ibarrier", code);
    return waitAll(request, deadline, "barrier");
  }

private:
  MPI_Comm data, control;
  bool ownsMPI;
  int myRank = 0, mySize = 1;
};
} // namespace

std::unique_ptr<Communicator> moert::createMPICommunicator(Status &error) {
  bool initializedHere = false;
  if ((error = mpi::initialize(initializedHere)))
    return nullptr;
  MPI_Comm data = mpi::duplicateWorld();
  MPI_Comm control = mpi::duplicateWorld();
  return std::make_unique<MPICommunicator>(data, control, initializedHere);
}

void moert::abortMPIJob() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized)
    MPI_Abort(MPI_COMM_WORLD, 1);
}
