// SdNotify speaks systemd's notify protocol: one datagram to $NOTIFY_SOCKET
// (a path or an abstract '@name'), nothing without the variable, clear errors.
#include "common/util/sd_notify.h"

#include <unistd.h>

#include <cstdlib>
#include <string>

#include "gtest/gtest.h"
#include "proto/rpc/server.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

class SdNotifyTest : public ::testing::Test {
 protected:
  void TearDown() override {
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
  }
};

TEST_F(SdNotifyTest, WithoutTheVariableNothingIsSent) {
  unsetenv("NOTIFY_SOCKET");
  EXPECT_TRUE(SdNotify("READY=1").ok());
}

TEST_F(SdNotifyTest, SendsOneDatagramToAPathSocket) {
  const std::string path = ::testing::TempDir() + "/specd-notify-" + std::to_string(getpid());
  testing::NotifyListener l(path);
  ASSERT_TRUE(l.ok());
  setenv("NOTIFY_SOCKET", path.c_str(), 1);
  ASSERT_TRUE(SdNotify("READY=1\nSTATUS=serving m").ok());
  EXPECT_EQ(l.Receive(), "READY=1\nSTATUS=serving m");
  ASSERT_TRUE(SdNotify("STOPPING=1").ok());
  EXPECT_EQ(l.Receive(), "STOPPING=1");
}

TEST_F(SdNotifyTest, SendsToAnAbstractSocket) {
  const std::string name = "@specd-notify-test-" + std::to_string(getpid());
  testing::NotifyListener l(name);
  ASSERT_TRUE(l.ok());
  setenv("NOTIFY_SOCKET", name.c_str(), 1);
  ASSERT_TRUE(SdNotify("READY=1").ok());
  EXPECT_EQ(l.Receive(), "READY=1");
}

TEST_F(SdNotifyTest, BadOrMissingSocketsAreErrors) {
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  absl::Status st = SdNotify("READY=1");
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_NE(st.ToString().find("relative/path"), std::string::npos) << st;
  const std::string gone = ::testing::TempDir() + "/specd-no-such-socket";
  setenv("NOTIFY_SOCKET", gone.c_str(), 1);
  st = SdNotify("READY=1");
  EXPECT_EQ(st.code(), absl::StatusCode::kUnavailable) << st;
  EXPECT_NE(st.ToString().find(gone), std::string::npos) << st;
}

// systemd's watchdog settings: ping every half of WATCHDOG_USEC, only when
// WATCHDOG_PID (if set) is this process.
TEST_F(SdNotifyTest, WatchdogIntervalFollowsTheEnvironment) {
  EXPECT_EQ(rpc::WatchdogInterval().count(), 0);
  setenv("WATCHDOG_USEC", "400000", 1);
  EXPECT_EQ(rpc::WatchdogInterval().count(), 200000);
  setenv("WATCHDOG_PID", std::to_string(getpid()).c_str(), 1);
  EXPECT_EQ(rpc::WatchdogInterval().count(), 200000);
  setenv("WATCHDOG_PID", std::to_string(getpid() + 1).c_str(), 1);
  EXPECT_EQ(rpc::WatchdogInterval().count(), 0);
  unsetenv("WATCHDOG_PID");
  setenv("WATCHDOG_USEC", "nonsense", 1);
  EXPECT_EQ(rpc::WatchdogInterval().count(), 0);
}

}  // namespace
}  // namespace specd
