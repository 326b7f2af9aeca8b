//===- Collectives.cpp - checked, timed, counted collectives --------------===//
#include "Collectives.h"

#include <cstdlib>
#include <cstring>
#include <sstream>

using namespace moert;

namespace {
std::string describe(const CollectiveDescriptor &d) {
  std::ostringstream os;
  os << "'" << std::string(d.name, strnlen(d.name, sizeof(d.name))) << "' (#"
     << d.sequence << ", " << d.elements << " elements)";
  return os.str();
}
} // namespace

Collectives::Collectives(std::unique_ptr<Communicator> comm,
                         std::chrono::milliseconds timeout)
    : comm(std::move(comm)), limit(timeout) {
  if (const char *rule = std::getenv("MOERT_INJECT_SKIP"))
    skipRule = rule;
}

bool Collectives::injectedSkip(const char *name) const {
  // MOERT_INJECT_SKIP="<rank>:<collective name>"
  if (skipRule.empty())
    return false;
  return skipRule == std::to_string(rank()) + ":" + name;
}

Status Collectives::agree(const char *name, int64_t elements,
                          Clock::time_point &deadline,
                          const std::string &problem) {
  CollectiveDescriptor mine;
  mine.sequence = sequence++;
  std::strncpy(mine.name, name, sizeof(mine.name) - 1);
  mine.elements = elements;
  std::strncpy(mine.problem, problem.c_str(), sizeof(mine.problem) - 1);
  deadline = Clock::now() + limit;
  std::vector<CollectiveDescriptor> all;
  std::vector<int> missing;
  if (Status error = comm->exchangeDescriptors(mine, all, missing, deadline)) {
    std::ostringstream os;
    os << "collective " << describe(mine) << ": ";
    if (missing.empty()) {
      os << *error;
    } else {
      os << "rank(s)";
      for (int r : missing)
        os << " " << r;
      os << " did not join within " << limit.count() << " ms";
    }
    return os.str();
  }
  // A reported problem explains more than the disagreement it causes.
  std::string problems;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].problem[0])
      problems += (problems.empty() ? "" : "; ") + ("rank " + std::to_string(r)) +
                  ": " +
                  std::string(all[r].problem,
                              strnlen(all[r].problem, sizeof(all[r].problem)));
  if (!problems.empty())
    return problems;
  bool agreed = true;
  for (const CollectiveDescriptor &d : all)
    agreed &= d.sequence == mine.sequence &&
              std::strncmp(d.name, mine.name, sizeof(d.name)) == 0 &&
              d.elements == mine.elements;
  if (agreed)
    return std::nullopt;
  std::ostringstream os;
  os << "ranks disagree on collective #" << mine.sequence << ":";
  for (size_t r = 0; r < all.size(); ++r)
    os << (r ? "," : "") << " rank " << r << " issues " << describe(all[r]);
  return os.str();
}

void Collectives::count(const char *name, int64_t sent, int64_t received,
                        Clock::time_point start) {
  CollectiveCounter &c = measured.collectives[name];
  c.calls += 1;
  c.bytesSent += sent;
  c.bytesReceived += received;
  c.seconds += std::chrono::duration<double>(Clock::now() - start).count();
}

Status Collectives::run(const char *name, int64_t elements, int64_t sent,
                        int64_t received,
                        const std::function<Status(Clock::time_point)> &call) {
  if (injectedSkip(name))
    return std::nullopt;
  auto start = Clock::now();
  Clock::time_point deadline;
  if (Status e = agree(name, elements, deadline))
    return e;
  if (Status e = call(deadline))
    return "collective '" + std::string(name) + "': " + *e;
  count(name, sent, received, start);
  return std::nullopt;
}

Status Collectives::failTogether(const char *name, const std::string &problem) {
  Clock::time_point deadline;
  if (Status e = agree(name, 0, deadline, problem.empty() ? "failed" : problem))
    return e;
  return problem; // not reached: agree reports every problem
}

Status Collectives::allToAllV(const char *name, const void *send,
                              const int64_t *sendBytes, void *recv,
                              const int64_t *recvBytes) {
  int64_t sent = 0, received = 0;
  for (int p = 0; p < size(); ++p) {
    sent += sendBytes[p];
    received += recvBytes[p];
  }
  return run(name, 0, sent, received, [&](Clock::time_point deadline) {
    return comm->allToAllV(send, sendBytes, recv, recvBytes, deadline);
  });
}

Status Collectives::allReduce(const char *name, int64_t *values, int64_t count_,
                              ReduceOp op) {
  int64_t bytes = size() > 1 ? count_ * int64_t(sizeof(int64_t)) : 0;
  return run(name, count_, bytes, bytes, [&](Clock::time_point deadline) {
    return comm->allReduce(values, count_, op, deadline);
  });
}

Status Collectives::allGather(const char *name, const void *send, int64_t bytes,
                              void *recv) {
  int64_t moved = bytes * (size() - 1);
  return run(name, bytes, moved, moved, [&](Clock::time_point deadline) {
    return comm->allGather(send, bytes, recv, deadline);
  });
}

Status Collectives::barrier(const char *name) {
  return run(name, 0, 0, 0, [&](Clock::time_point deadline) {
    return comm->barrier(deadline);
  });
}
