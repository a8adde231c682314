// Small socket helpers.
#pragma once
#include <string>

#include "common/util/status.h"

namespace specd {

struct HostPort {
  std::string host;  // without the brackets of "[V6]"
  int port = 0;
};
// "HOST:PORT" or "[V6]:PORT", port 0..65535 (0: the kernel chooses). The one
// parser of TCP addresses: listen flags, worker addresses, tools.
absl::StatusOr<HostPort> ParseHostPort(const std::string& address);
// 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(const std::string& host);

// A loopback TCP port nobody listens on right now and not returned before by
// this process (0 if none was found). The port is only free until someone
// binds it: callers retry on a bind failure.
int FreeLoopbackPort();

}  // namespace specd
