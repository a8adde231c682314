// Child processes: the one fork/exec in specd (`specd tune` starts the
// services with it, the integration tests too). A child never outlives its
// parent (it gets SIGKILL when the parent dies), output goes to a log file,
// and every wait is bounded.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <string>
#include <vector>

#include "common/util/status.h"

namespace specd {

class Subprocess {
 public:
  Subprocess() = default;
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;
  ~Subprocess() { Stop(); }

  // Starts argv[0] (a path) with stdout and stderr appended to `log`.
  absl::Status Start(const std::vector<std::string>& argv, const std::string& log);
  // Sends `sig` and reaps the process; SIGKILL when it is still there after
  // `grace`. SIGTERM is a clean exit (the draft unlinks its shared memory).
  void Stop(int sig = 15 /* SIGTERM */, std::chrono::milliseconds grace = std::chrono::seconds(10));
  bool Alive();
  pid_t pid() const { return pid_; }
  int exit_code() const { return exit_code_; }  // -1 while running or unknown
  std::string LogTail(size_t bytes = 4000) const;

 private:
  void Reaped(int status);
  pid_t pid_ = -1;
  int exit_code_ = -1;
  std::string log_;
};

// Runs argv to its end and returns what it wrote on stdout (stderr is
// dropped); an error when it cannot start, exits non-zero or outlives `timeout`.
absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace specd
