#include "common/util/net.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

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

int FreeLoopbackPort() {
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

}  // namespace specd
