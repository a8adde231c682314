#include "common/util/subprocess.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

namespace specd {
namespace {

using Clock = std::chrono::steady_clock;

// fork + exec with stdout/stderr on the given descriptors. Everything the
// child needs is prepared before fork (no allocation after it).
absl::StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, int out_fd, int err_fd) {
  if (argv.empty()) return absl::InvalidArgumentError("empty command");
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // the parent died before prctl
    dup2(out_fd, 1);
    dup2(err_fd, 2);
    execv(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

absl::Status Subprocess::Start(const std::vector<std::string>& argv, const std::string& log) {
  Stop();
  log_ = log;
  exit_code_ = -1;
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return absl::InternalError("cannot open log " + log);
  auto pid = Spawn(argv, fd, fd);
  close(fd);
  if (!pid.ok()) return pid.status();
  pid_ = *pid;
  return absl::OkStatus();
}

void Subprocess::Reaped(int status) {
  if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
  pid_ = -1;
}

void Subprocess::Stop(int sig, std::chrono::milliseconds grace) {
  if (pid_ <= 0) return;
  kill(pid_, sig);
  const auto end = Clock::now() + grace;
  int status = 0;
  while (Clock::now() < end) {
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) return Reaped(status);
    if (r < 0) {  // not ours any more
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  Reaped(status);
}

bool Subprocess::Alive() {
  if (pid_ <= 0) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    Reaped(status);
    return false;
  }
  if (r < 0) pid_ = -1;
  return pid_ > 0;
}

std::string Subprocess::LogTail(size_t bytes) const {
  std::ifstream in(log_);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

absl::StatusOr<std::string> RunCapture(const std::vector<std::string>& argv, std::chrono::milliseconds timeout) {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  auto pid = Spawn(argv, fds[1], null_fd >= 0 ? null_fd : fds[1]);
  close(fds[1]);
  if (null_fd >= 0) close(null_fd);
  if (!pid.ok()) {
    close(fds[0]);
    return pid.status();
  }
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  std::string out;
  char buf[4096];
  const auto end = Clock::now() + timeout;
  int status = 0;
  bool exited = false;
  while (true) {
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    if (exited) break;  // drained after the exit
    if (waitpid(*pid, &status, WNOHANG) == *pid) {
      exited = true;
      continue;
    }
    if (Clock::now() >= end) {
      kill(*pid, SIGKILL);
      waitpid(*pid, &status, 0);
      close(fds[0]);
      return absl::DeadlineExceededError(absl::StrCat(argv[0], " did not finish within ", timeout.count(), " ms"));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  close(fds[0]);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    return absl::FailedPreconditionError(
        absl::StrCat(argv[0], " exited with status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1));
  return out;
}

}  // namespace specd
