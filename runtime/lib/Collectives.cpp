//===- Collectives.cpp - checked, timed, counted collectives --------------===//
#include "Collectives.h"
#include "Message.h"
#include "PlanCheck.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

using namespace moert;

namespace {
std::string describe(const CollectiveDescriptor &d) {
  MessageStream os;
  os << "'" << std::string(d.name, strnlen(d.name, sizeof(d.name))) << "' (#"
     << d.sequence << ", " << d.elements << " elements)";
  return os.str();
}

const char *fieldName(int f) {
  switch (f) {
  case CallSignature::Hidden:
    return "hidden size";
  case CallSignature::TopK:
    return "top-k";
  case CallSignature::Dtype:
    return "dtype";
  case CallSignature::Quantization:
    return "quantization";
  case CallSignature::Ep:
    return "ep (the plan's ranks)";
  case CallSignature::Experts:
    return "experts (expert_rank or phys_to_log length)";
  case CallSignature::Entry:
    return "entry point";
  case CallSignature::PlanHash:
    return "plan hash";
  case CallSignature::Tp:
    return "tp";
  case CallSignature::Layer:
    return "layer (the compiled layer's fingerprint: libraries built from different "
           "configs or options)";
  }
  return "field";
}

std::string fieldValue(int f, int64_t v) {
  MessageStream os;
  switch (f) {
  case CallSignature::Dtype:
    return v == 4 ? "f32" : v == 2 ? "bf16" : std::to_string(v) + "-byte elements";
  case CallSignature::Quantization:
    return v == 0 ? "none" : v == 1 ? "fp8g128" : v == 2 ? "fp8g32ue8m0" : std::to_string(v);
  case CallSignature::Entry:
    if (v & 4)
      return "ep_gather (the all-gather dispatch)";
    return std::string("ep_dispatch") + (v & 1 ? "_placed" : "") + (v & 2 ? "_fp8" : "");
  case CallSignature::PlanHash:
  case CallSignature::Layer:
    os << "0x" << std::hex << uint64_t(v);
    return os.str();
  }
  return std::to_string(v);
}

/// The fields that ranks carrying a signature disagree on, each with every
/// value and the ranks that have it; empty when they agree.
std::string signatureDisagreement(const std::vector<CollectiveDescriptor> &all) {
  std::vector<size_t> carriers;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].signature.present)
      carriers.push_back(r);
  if (carriers.size() < 2)
    return "";
  MessageStream os;
  for (int f = 0; f < CallSignature::FieldCount; ++f) {
    std::map<int64_t, std::vector<size_t>> ranksWith; // value -> ranks
    bool everywhere = true;
    for (size_t r : carriers) {
      everywhere &= all[r].signature.has(f);
      if (all[r].signature.has(f))
        ranksWith[all[r].signature.values[f]].push_back(r);
    }
    if (!everywhere || ranksWith.size() < 2)
      continue;
    os << (os.tellp() ? "; " : "") << fieldName(f) << ":";
    // In rank order of each value's first rank.
    std::vector<std::pair<size_t, int64_t>> order;
    for (auto &[value, ranks] : ranksWith)
      order.push_back({ranks.front(), value});
    std::sort(order.begin(), order.end());
    for (size_t i = 0; i < order.size(); ++i) {
      const std::vector<size_t> &ranks = ranksWith[order[i].second];
      os << (i ? "," : "") << " rank" << (ranks.size() > 1 ? "s" : "");
      for (size_t j = 0; j < ranks.size(); ++j)
        os << (j ? "," : "") << " " << ranks[j];
      os << " ha" << (ranks.size() > 1 ? "ve " : "s ") << fieldValue(f, order[i].second);
    }
  }
  return os.str();
}
} // namespace

Collectives::Collectives(std::unique_ptr<Communicator> comm,
                         std::chrono::milliseconds timeout)
    : comm(std::move(comm)),
      limit(std::clamp<int64_t>(timeout.count(), 1, limits::kMaxTimeoutMs)) {
  if (const char *rule = std::getenv("MOERT_INJECT_SKIP"))
    skipRule = rule;
}

int64_t Collectives::mostBytes() const {
  return std::min(comm->maxCollectiveBytes(), limits::kMaxWorkspaceBytes);
}

Status Collectives::checkName(const char *name) {
  if (!name)
    return std::string("the collective's name is a null pointer");
  size_t length = strnlen(name, sizeof(CollectiveDescriptor::name));
  if (length == 0 || length >= sizeof(CollectiveDescriptor::name))
    return "the collective's name must have 1 to " +
           std::to_string(sizeof(CollectiveDescriptor::name) - 1) + " characters";
  return std::nullopt;
}

bool Collectives::injectedSkip(const char *name) const {
  // MOERT_INJECT_SKIP="<rank>:<collective name>"
  if (skipRule.empty())
    return false;
  return skipRule == std::to_string(rank()) + ":" + name;
}

Status Collectives::agree(const char *name, int64_t elements,
                          Clock::time_point &deadline,
                          const std::string &problem, const Carry *carry,
                          std::vector<CollectiveDescriptor> *received,
                          bool *carried) {
  CollectiveDescriptor mine;
  mine.sequence = sequence++;
  std::strncpy(mine.name, name, sizeof(mine.name) - 1);
  mine.elements = elements;
  mine.signature = signature;
  std::strncpy(mine.problem, problem.c_str(), sizeof(mine.problem) - 1);
  deadline = Clock::now() + limit;
  std::vector<CollectiveDescriptor> local;
  std::vector<CollectiveDescriptor> &all = received ? *received : local;
  std::vector<int> missing;
  const bool carrying = carry && comm->carriesData();
  if (carried)
    *carried = false;
  Status exchanged;
  if (carrying) {
    // One descriptor per peer, each with that peer's bytes. A rank with a
    // problem carries nothing: its sizes may not be readable.
    std::vector<CollectiveDescriptor> toPeer(size(), mine);
    bool fits = problem.empty();
    for (int p = 0; p < size() && fits; ++p)
      fits = carry->fill(p, toPeer[p]);
    for (CollectiveDescriptor &d : toPeer) {
      d.carried = fits;
      if (!fits)
        d.inlineBytes = 0;
    }
    exchanged = comm->exchangeCarrying(toPeer, all, missing, deadline);
  } else {
    exchanged = comm->exchangeDescriptors(mine, all, missing, deadline);
  }
  if (Status error = exchanged) {
    MessageStream os;
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
  // A reported problem explains more than the disagreement it causes; but
  // ranks running different layers explain more than the problems that
  // follow from it (e.g. a plan for another ep), so the layer comes first.
  std::string problems;
  for (size_t r = 0; r < all.size(); ++r)
    if (all[r].problem[0])
      problems += (problems.empty() ? "" : "; ") + ("rank " + std::to_string(r)) +
                  ": " +
                  std::string(all[r].problem,
                              strnlen(all[r].problem, sizeof(all[r].problem)));
  // Ranks in calls of different layers: name the fields that differ.
  std::string differ = signatureDisagreement(all);
  // Same shapes, another plan: most often a phase variant (a rank passed
  // another phase argument) or a layer compiled with other options.
  if (differ.rfind("plan hash:", 0) == 0 && differ.find(';') == std::string::npos)
    differ += " (the same shapes with another plan: a different phase argument, prefill or "
              "decode, or a library compiled with other options on some rank)";
  if (!differ.empty())
    return "ranks disagree on the layer they run (at collective " + describe(mine) +
           "): " + differ + (problems.empty() ? "" : " (and " + problems + ")");
  if (!problems.empty())
    return problems;
  bool agreed = true;
  for (const CollectiveDescriptor &d : all)
    agreed &= d.sequence == mine.sequence &&
              std::strncmp(d.name, mine.name, sizeof(d.name)) == 0 &&
              d.elements == mine.elements;
  if (agreed) {
    if (carrying && carried) {
      bool every = true;
      for (const CollectiveDescriptor &d : all)
        every &= d.carried != 0;
      *carried = every;
    }
    return std::nullopt;
  }
  MessageStream os;
  os << "ranks disagree on collective #" << mine.sequence << ":";
  for (size_t r = 0; r < all.size(); ++r)
    os << (r ? "," : "") << " rank " << r << " issues " << describe(all[r]);
  return os.str();
}

void Collectives::count(const char *name, int64_t sent, int64_t received,
                        Clock::time_point start, Clock::time_point agreed) {
  CollectiveCounter &c = measured.collectives[name];
  c.calls += 1;
  c.bytesSent += sent;
  c.bytesReceived += received;
  c.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  c.waitSeconds += std::chrono::duration<double>(agreed - start).count();
}

Status Collectives::run(const char *name, int64_t elements, int64_t sent,
                        int64_t received,
                        const std::function<Status(Clock::time_point)> &call,
                        const std::string &problem, const Carry *carry) {
  if (injectedSkip(name))
    return std::nullopt;
  auto start = Clock::now();
  Clock::time_point deadline;
  std::vector<CollectiveDescriptor> all;
  bool carried = false;
  if (Status e = agree(name, elements, deadline, problem, carry, &all, &carried))
    return e;
  auto agreed = Clock::now();
  if (Status e = carried ? carry->finish(all) : call(deadline))
    return "collective '" + std::string(name) + "': " + *e;
  count(name, sent, received, start, agreed);
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
  // Sizes this rank cannot move fail every rank at the agreement, before
  // any byte travels (MPI counts are ints).
  int64_t sent = 0, received = 0;
  std::string problem;
  for (int p = 0; p < size() && problem.empty(); ++p) {
    if (sendBytes[p] < 0 || recvBytes[p] < 0 || !checkedAdd(sent, sendBytes[p], sent) ||
        !checkedAdd(received, recvBytes[p], received))
      problem = "collective '" + std::string(name) + "': message to/from rank " +
                std::to_string(p) + " has " + std::to_string(sendBytes[p]) + "/" +
                std::to_string(recvBytes[p]) + " bytes";
  }
  const int64_t most = mostBytes();
  if (problem.empty() && (sent > most || received > most))
    problem = "collective '" + std::string(name) + "': " + std::to_string(sent) +
              " bytes to send and " + std::to_string(received) +
              " to receive exceed the " + comm->backend() + " backend's limit of " +
              std::to_string(most) + " bytes per collective";
  // Counts and other small exchanges travel with the agreement.
  const int64_t kInline = CollectiveDescriptor::kInlineBytes;
  std::vector<int64_t> sendAt(size() + 1, 0), recvAt(size() + 1, 0);
  bool small = problem.empty();
  for (int p = 0; p < size() && small; ++p) {
    small = sendBytes[p] <= kInline && recvBytes[p] <= kInline;
    sendAt[p + 1] = sendAt[p] + sendBytes[p];
    recvAt[p + 1] = recvAt[p] + recvBytes[p];
  }
  Carry carry;
  carry.fill = [&](int p, CollectiveDescriptor &d) {
    if (!small)
      return false;
    d.inlineBytes = sendBytes[p];
    if (sendBytes[p])
      std::memcpy(d.data, static_cast<const uint8_t *>(send) + sendAt[p],
                  size_t(sendBytes[p]));
    return true;
  };
  carry.finish = [&](const std::vector<CollectiveDescriptor> &all) -> Status {
    for (int p = 0; p < size(); ++p)
      if (all[p].inlineBytes != recvBytes[p])
        return "all-to-all: rank " + std::to_string(p) + " sent " +
               std::to_string(all[p].inlineBytes) + " bytes to rank " +
               std::to_string(rank()) + ", which expects " +
               std::to_string(recvBytes[p]);
    for (int p = 0; p < size(); ++p)
      if (recvBytes[p])
        std::memcpy(static_cast<uint8_t *>(recv) + recvAt[p], all[p].data,
                    size_t(recvBytes[p]));
    return std::nullopt;
  };
  return run(
      name, 0, sent, received,
      [&](Clock::time_point deadline) {
        return comm->allToAllV(send, sendBytes, recv, recvBytes, deadline);
      },
      problem, &carry);
}

Status Collectives::allReduce(const char *name, int64_t *values, int64_t count_,
                              ReduceOp op) {
  int64_t bytes = 0;
  std::string problem;
  if (count_ < 0 || !checkedMul(count_, int64_t(sizeof(int64_t)), bytes) ||
      bytes > mostBytes())
    problem = "collective '" + std::string(name) + "': " + std::to_string(count_) +
              " values are outside [0, " +
              std::to_string(mostBytes() / int64_t(sizeof(int64_t))) + "]";
  else if (count_ > 0 && !values)
    problem = "collective '" + std::string(name) + "': values is a null pointer";
  int64_t moved = size() > 1 ? bytes : 0;
  // Each rank sends every rank its values; each reduces them in rank order.
  // The count is agreed, so either every rank carries or none does.
  Carry carry;
  carry.fill = [&](int, CollectiveDescriptor &d) {
    if (bytes > CollectiveDescriptor::kInlineBytes)
      return false;
    d.inlineBytes = bytes;
    if (bytes)
      std::memcpy(d.data, values, size_t(bytes));
    return true;
  };
  carry.finish = [&](const std::vector<CollectiveDescriptor> &all) -> Status {
    std::vector<int64_t> result(static_cast<size_t>(count_), 0);
    std::vector<int64_t> theirs(static_cast<size_t>(count_), 0);
    for (size_t r = 0; r < all.size(); ++r) {
      if (all[r].inlineBytes != bytes)
        return "all-reduce: rank " + std::to_string(r) + " sent " +
               std::to_string(all[r].inlineBytes) + " bytes, not " + std::to_string(bytes);
      if (bytes)
        std::memcpy(theirs.data(), all[r].data, size_t(bytes));
      for (int64_t i = 0; i < count_; ++i)
        result[i] = r == 0 ? theirs[i]
                    : op == ReduceOp::Sum
                        ? int64_t(uint64_t(result[i]) + uint64_t(theirs[i])) // wraps, as MPI_SUM
                        : std::max(result[i], theirs[i]);
    }
    if (bytes)
      std::memcpy(values, result.data(), size_t(bytes));
    return std::nullopt;
  };
  return run(
      name, count_, moved, moved,
      [&](Clock::time_point deadline) {
        return comm->allReduce(values, count_, op, deadline);
      },
      problem, &carry);
}

Status Collectives::allGather(const char *name, const void *send, int64_t bytes,
                              void *recv) {
  int64_t all = 0;
  std::string problem;
  if (bytes < 0 || !checkedMul(bytes, int64_t(size()), all) || all > mostBytes())
    problem = "collective '" + std::string(name) + "': " + std::to_string(bytes) +
              " bytes per rank x " + std::to_string(size()) + " ranks are outside [0, " +
              std::to_string(mostBytes()) + "]";
  else if (bytes > 0 && (!send || !recv))
    problem = "collective '" + std::string(name) + "': a null buffer";
  int64_t moved = problem.empty() ? all - bytes : 0;
  Carry carry;
  carry.fill = [&](int, CollectiveDescriptor &d) {
    if (bytes > CollectiveDescriptor::kInlineBytes)
      return false;
    d.inlineBytes = bytes;
    if (bytes)
      std::memcpy(d.data, send, size_t(bytes));
    return true;
  };
  carry.finish = [&](const std::vector<CollectiveDescriptor> &got) -> Status {
    for (size_t r = 0; r < got.size(); ++r)
      if (got[r].inlineBytes != bytes)
        return "all-gather: rank " + std::to_string(r) + " sent " +
               std::to_string(got[r].inlineBytes) + " bytes, not " + std::to_string(bytes);
    for (size_t r = 0; r < got.size(); ++r)
      if (bytes)
        std::memcpy(static_cast<uint8_t *>(recv) + r * size_t(bytes), got[r].data,
                    size_t(bytes));
    return std::nullopt;
  };
  return run(
      name, bytes, moved, moved,
      [&](Clock::time_point deadline) {
        return comm->allGather(send, bytes, recv, deadline);
      },
      problem, &carry);
}

Status Collectives::barrier(const char *name) {
  // Every rank has heard from every rank once the descriptors arrived: the
  // agreement is the barrier.
  Carry carry;
  carry.fill = [](int, CollectiveDescriptor &d) {
    d.inlineBytes = 0;
    return true;
  };
  carry.finish = [](const std::vector<CollectiveDescriptor> &) -> Status {
    return std::nullopt;
  };
  return run(
      name, 0, 0, 0,
      [&](Clock::time_point deadline) { return comm->barrier(deadline); }, "",
      &carry);
}
