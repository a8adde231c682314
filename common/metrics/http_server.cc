#include "common/metrics/http_server.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/numbers.h"
#include "common/util/log.h"

namespace specd::metrics {
namespace {

constexpr size_t kMaxRequest = 8192;
constexpr int kIoTimeoutMs = 2000;

bool SendAll(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    const ssize_t n = send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return false;
    }
    off += static_cast<size_t>(n);
  }
  return true;
}

std::string Response(int code, const char* reason, const std::string& content_type, const std::string& body,
                     bool head, const std::string& extra_headers = "") {
  std::string r = absl::StrCat("HTTP/1.1 ", code, " ", reason, "\r\nContent-Type: ", content_type,
                               "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n", extra_headers, "\r\n");
  if (!head) r += body;
  return r;
}

}  // namespace

absl::Status ParseHostPort(const std::string& address, std::string* host, int* port) {
  std::string h = "127.0.0.1", p = address;
  if (!address.empty() && address[0] == '[') {
    const size_t close = address.find(']');
    if (close == std::string::npos || close + 1 >= address.size() || address[close + 1] != ':')
      return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' ([V6]:PORT)"));
    h = address.substr(1, close - 1);
    p = address.substr(close + 2);
  } else if (const size_t colon = address.rfind(':'); colon != std::string::npos) {
    h = address.substr(0, colon);
    p = address.substr(colon + 1);
  }
  int v = -1;
  if (h.empty() || !absl::SimpleAtoi(p, &v) || v < 0 || v > 65535)
    return absl::InvalidArgumentError(absl::StrCat("bad address '", address, "' (HOST:PORT or PORT)"));
  *host = h;
  *port = v;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(const std::string& address,
                                                             std::function<std::string()> render) {
  std::string host;
  int port = 0;
  SPECD_RETURN_IF_ERROR(ParseHostPort(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0 || !res)
    return absl::InvalidArgumentError(absl::StrCat("metrics address '", address, "': ", gai_strerror(rc)));
  std::unique_ptr<HttpServer> s(new HttpServer());
  s->render_ = std::move(render);
  std::string err = "no usable address";
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    const int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 16) == 0) {
      s->listen_fd_ = fd;
      break;
    }
    err = std::strerror(errno);
    close(fd);
  }
  freeaddrinfo(res);
  if (s->listen_fd_ < 0)
    return absl::UnavailableError(absl::StrCat("cannot listen for metrics on '", address, "': ", err));
  sockaddr_storage bound{};
  socklen_t len = sizeof bound;
  if (getsockname(s->listen_fd_, reinterpret_cast<sockaddr*>(&bound), &len) == 0) {
    if (bound.ss_family == AF_INET) s->port_ = ntohs(reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    else if (bound.ss_family == AF_INET6) s->port_ = ntohs(reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  }
  if (pipe2(s->stop_pipe_, O_CLOEXEC) != 0) return absl::InternalError("pipe2 failed");
  if (host != "127.0.0.1" && host != "localhost" && host != "::1")
    SPECD_LOG(WARN) << "metrics endpoint beyond loopback: it has no authentication" << Kv("listen", address);
  HttpServer* self = s.get();
  s->thread_ = std::thread([self] { self->Loop(); });
  return s;
}

HttpServer::~HttpServer() {
  if (stop_pipe_[1] >= 0) {
    const char c = 'x';
    (void)!write(stop_pipe_[1], &c, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int fd : {listen_fd_, stop_pipe_[0], stop_pipe_[1]}) {
    if (fd >= 0) close(fd);
  }
}

void HttpServer::Loop() {
  while (true) {
    pollfd fds[2] = {{listen_fd_, POLLIN, 0}, {stop_pipe_[0], POLLIN, 0}};
    const int n = poll(fds, 2, -1);
    if (n < 0) {
      if (errno == EINTR) continue;
      SPECD_LOG(ERROR) << "metrics server: poll failed" << Kv("error", std::strerror(errno));
      return;
    }
    if (fds[1].revents) return;
    if (!(fds[0].revents & POLLIN)) continue;
    const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    Serve(fd);
    close(fd);
  }
}

void HttpServer::Serve(int fd) {
  timeval tv{kIoTimeoutMs / 1000, (kIoTimeoutMs % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  std::string req;
  char buf[2048];
  while (req.find("\r\n\r\n") == std::string::npos && req.find("\n\n") == std::string::npos) {
    if (req.size() >= kMaxRequest) {
      SendAll(fd, Response(431, "Request Header Fields Too Large", "text/plain", "request too large\n", false));
      return;
    }
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // closed or timed out before a full request
    req.append(buf, static_cast<size_t>(n));
  }
  ++requests_;
  // Request line: METHOD SP TARGET SP HTTP/x.y
  const std::string line = req.substr(0, req.find_first_of("\r\n"));
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string::npos ? std::string::npos : line.find(' ', sp1 + 1);
  if (sp2 == std::string::npos || line.compare(sp2 + 1, 5, "HTTP/") != 0) {
    SendAll(fd, Response(400, "Bad Request", "text/plain", "malformed request line\n", false));
    return;
  }
  const std::string method = line.substr(0, sp1);
  std::string path = line.substr(sp1 + 1, sp2 - sp1 - 1);
  path = path.substr(0, path.find('?'));
  const bool head = method == "HEAD";
  if (method != "GET" && !head) {
    SendAll(fd, Response(405, "Method Not Allowed", "text/plain", "only GET and HEAD\n", false, "Allow: GET, HEAD\r\n"));
    return;
  }
  if (path == "/metrics") {
    SendAll(fd, Response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", render_(), head));
  } else if (path == "/") {
    SendAll(fd, Response(200, "OK", "text/plain", "specd metrics: GET /metrics\n", head));
  } else {
    SendAll(fd, Response(404, "Not Found", "text/plain", "not found; try /metrics\n", head));
  }
}

}  // namespace specd::metrics
