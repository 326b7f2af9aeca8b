//===- ChildProcess.h - run calls that may end the process ------*- C++ -*-===//
//
// The entry points for compiled code end the process on failure. Tests run
// each such call in a forked child and check how it ended (exit status,
// signal) and what it printed on stderr. Children run in parallel (each
// failing one pauses 0.5 s so other ranks can print), each under an alarm
// so that a hang is a failure, not a stuck test.
//
//===----------------------------------------------------------------------===//
#ifndef MOERT_UNITTESTS_CHILDPROCESS_H
#define MOERT_UNITTESTS_CHILDPROCESS_H

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

namespace moert::test {

struct Ending {
  bool exited = false; ///< false: killed by a signal (a crash, or the alarm)
  int code = -1;       ///< exit status, or the signal
  std::string stderrText;
  std::string describe() const {
    return (exited ? "exit " : "signal ") + std::to_string(code) + ", stderr: " +
           stderrText;
  }
};

/// Runs each body in its own child (stderr captured); a body that returns
/// exits 0. All children run at once.
inline std::vector<Ending> runInChildren(const std::vector<std::function<void()>> &bodies,
                                         unsigned alarmSeconds = 30) {
  std::vector<Ending> endings(bodies.size());
  std::vector<pid_t> pids(bodies.size(), -1);
  std::vector<int> pipes(bodies.size(), -1);
  std::fflush(nullptr);
  for (size_t i = 0; i < bodies.size(); ++i) {
    int fds[2];
    if (pipe(fds) != 0)
      continue;
    pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      dup2(fds[1], 2);
      alarm(alarmSeconds);
      bodies[i]();
      std::fflush(nullptr);
      _exit(0);
    }
    close(fds[1]);
    pids[i] = pid;
    pipes[i] = fds[0];
  }
  for (size_t i = 0; i < bodies.size(); ++i) {
    if (pids[i] < 0)
      continue;
    char buffer[4096];
    ssize_t n;
    while ((n = read(pipes[i], buffer, sizeof(buffer))) > 0)
      endings[i].stderrText.append(buffer, size_t(n));
    close(pipes[i]);
    int status = 0;
    waitpid(pids[i], &status, 0);
    endings[i].exited = WIFEXITED(status);
    endings[i].code = WIFEXITED(status) ? WEXITSTATUS(status) : WTERMSIG(status);
  }
  return endings;
}

inline Ending runInChild(const std::function<void()> &body) {
  return runInChildren({body}).front();
}

} // namespace moert::test

#endif // MOERT_UNITTESTS_CHILDPROCESS_H
