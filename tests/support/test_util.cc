#include "tests/support/test_util.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace specd::testing {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/specd-test-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  const char* p = mkdtemp(buf.data());
  path_ = p ? p : "/tmp";
}

TempDir::~TempDir() {
  std::error_code ec;
  if (path_ != "/tmp") std::filesystem::remove_all(path_, ec);
}

std::string PythonPath() {
  const char* env = std::getenv("SPECD_PYTHON");
  if (env && *env) return env;
  return SPECD_PYTHON;
}

std::string ShellQuote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

int RunCommand(const std::string& cmd, std::string* out) {
  FILE* f = popen(cmd.c_str(), "r");
  if (!f) return -1;
  std::array<char, 4096> buf;
  size_t n;
  if (out) out->clear();
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) {
    if (out) out->append(buf.data(), n);
  }
  const int st = pclose(f);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

std::string PythonMissing(const std::string& modules) {
  const std::string py = PythonPath();
  if (py.empty()) return "no reference python configured (SPECD_PYTHON is empty)";
  if (access(py.c_str(), X_OK) != 0) return "reference python '" + py + "' is not executable";
  std::string out;
  const int rc = RunCommand(ShellQuote(py) + " -c " + ShellQuote("import " + modules) + " 2>&1", &out);
  if (rc != 0) return "'" + py + "' cannot import " + modules + ": " + out;
  return "";
}

std::string SourcePath(const std::string& rel) {
  const char* env = std::getenv("SPECD_SOURCE_DIR");
  return std::string(env && *env ? env : SPECD_SOURCE_DIR) + "/" + rel;
}

std::string BinaryPath(const std::string& rel) {
  const char* env = std::getenv("SPECD_BINARY_DIR");
  return std::string(env && *env ? env : SPECD_BINARY_DIR) + "/" + rel;
}

int RunSpecd(const std::string& args, std::string* out) {
  return RunCommand(ShellQuote(BinaryPath("cli/specd")) + " " + args + " 2>&1", out);
}

std::string SharedModelsDir() {
  const char* env = std::getenv("SPECD_SHARED_MODELS");
  std::string dir = env && *env ? env : SourcePath("../shared/models");
  struct stat st;
  if (stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return dir;
  return "";
}

std::vector<double> RunPythonReference(const std::string& script, const std::string& model,
                                       const std::vector<int32_t>& tokens, const TempDir& dir) {
  std::string csv;
  for (size_t i = 0; i < tokens.size(); ++i) csv += (i ? "," : "") + std::to_string(tokens[i]);
  const std::string out = dir.File("ref.bin");
  const std::string cmd = ShellQuote(PythonPath()) + " " + ShellQuote(SourcePath(script)) + " " + ShellQuote(model) +
                          " " + csv + " " + ShellQuote(out);
  std::string ignored;
  EXPECT_EQ(RunCommand(cmd, &ignored), 0) << cmd;
  std::ifstream in(out, std::ios::binary);
  std::vector<double> v;
  double x;
  while (in.read(reinterpret_cast<char*>(&x), sizeof x)) v.push_back(x);
  return v;
}

std::vector<double> RowRelErrors(const std::vector<float>& got, const std::vector<double>& ref, int vocab) {
  std::vector<double> e;
  const size_t rows = ref.size() / static_cast<size_t>(vocab);
  for (size_t r = 0; r < rows; ++r) {
    double num = 0, den = 0;
    for (int i = 0; i < vocab; ++i) {
      const double d = got[r * vocab + i] - ref[r * vocab + i];
      num += d * d;
      den += ref[r * vocab + i] * ref[r * vocab + i];
    }
    e.push_back(std::sqrt(num / std::max(den, 1e-300)));
  }
  return e;
}

std::string LoopbackExchange(int port, const std::string& request) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(static_cast<uint16_t>(port));
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    if (!request.empty()) (void)!send(fd, request.data(), request.size(), MSG_NOSIGNAL);
    char buf[8192];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof buf, 0)) > 0) out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

NotifyListener::NotifyListener(const std::string& name) : name_(name) {
  fd_ = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (fd_ < 0 || name.empty() || name.size() >= sizeof(a.sun_path)) return;
  std::memcpy(a.sun_path, name.data(), name.size());
  if (name[0] == '@') {
    a.sun_path[0] = '\0';
  } else {
    unlink(name.c_str());
  }
  ok_ = bind(fd_, reinterpret_cast<sockaddr*>(&a), static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())) == 0;
}

NotifyListener::~NotifyListener() {
  if (fd_ >= 0) close(fd_);
  if (!name_.empty() && name_[0] != '@') unlink(name_.c_str());
}

std::string NotifyListener::Receive(int timeout_s) {
  timeval tv{timeout_s, 0};
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  char buf[1024];
  const ssize_t n = recv(fd_, buf, sizeof buf, 0);
  return n < 0 ? std::string("<nothing>") : std::string(buf, static_cast<size_t>(n));
}

}  // namespace specd::testing
