#include "common/util/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <bitset>
#include <mutex>

#include "absl/strings/numbers.h"
#include "absl/strings/match.h"

namespace specd {

absl::StatusOr<HostPort> ParseHostPort(const std::string& address) {
  auto bad = [&] {
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' (HOST:PORT or [V6]:PORT, port 0..65535)"));
  };
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad();
  HostPort hp;
  std::string host = address.substr(0, colon);
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') return bad();
    host = host.substr(1, host.size() - 2);
  } else if (host.find(':') != std::string::npos) {
    return bad();  // a bare IPv6 address needs brackets
  }
  hp.host = host;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &hp.port) || hp.port < 0 || hp.port > 65535) return bad();
  return hp;
}

bool IsLoopbackHost(const std::string& host) {
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

namespace {
int ProbeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}
}  // namespace

int FreeLoopbackPort() {
  // The probe socket is closed before the caller binds, so the kernel may
  // hand the same port out again: a caller asking for a target's, a draft's
  // and a coordinator's port would get two services on one (round 29: a CI
  // run's target and draft workers both bound 127.0.0.1:37773). A port is
  // handed out once per process.
  static std::mutex mu;
  static std::bitset<65536> given;
  std::lock_guard<std::mutex> lock(mu);
  for (int attempt = 0; attempt < 64; ++attempt) {
    const int port = ProbeLoopbackPort();
    if (port == 0) return 0;
    if (!given[port]) {
      given[port] = true;
      return port;
    }
  }
  return 0;
}

}  // namespace specd
