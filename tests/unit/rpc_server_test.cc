// StartServer: a second server on a port already in use is refused (gRPC's
// default SO_REUSEPORT would let both bind and split the connections).
#include "proto/rpc/server.h"

#include <memory>
#include <string>

#include "gtest/gtest.h"

namespace specd {
namespace {

TEST(RpcServer, ASecondServerOnAPortInUseIsRefused) {
  int port = 0;
  auto first = rpc::StartServer("127.0.0.1:0", {}, rpc::ServerSecurity{}, 0, &port);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_GT(port, 0);
  const std::string busy = "127.0.0.1:" + std::to_string(port);
  auto second = rpc::StartServer(busy, {}, rpc::ServerSecurity{}, 0, nullptr);
  EXPECT_FALSE(second.ok()) << "two servers bound " << busy;
  if (!second.ok()) {
    EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
    EXPECT_NE(std::string(second.status().message()).find(busy), std::string::npos) << second.status();
  } else {
    (*second)->Shutdown();
  }
  (*first)->Shutdown();
  // Once the first is gone the port is free again.
  auto third = rpc::StartServer(busy, {}, rpc::ServerSecurity{}, 0, nullptr);
  EXPECT_TRUE(third.ok()) << third.status();
  if (third.ok()) (*third)->Shutdown();
}

}  // namespace
}  // namespace specd
