// A tiny HTTP/1.1 server for Prometheus scrapes: GET (or HEAD) /metrics
// answers the text exposition; other paths 404, other methods 405, malformed
// requests 400. One thread serves connections one at a time (scrapes are
// rare and small); every socket has a 2 s I/O timeout and requests are capped
// at 8 KiB, so a stuck or hostile client delays the next scrape by at most
// that and can never block the service. Connection: close on every answer.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "common/util/status.h"

namespace specd::metrics {

class HttpServer {
 public:
  // `address`: "HOST:PORT", "[V6]:PORT" or "PORT" (= 127.0.0.1:PORT); port 0
  // lets the kernel choose. Hosts beyond loopback are allowed but logged.
  // `render` is called per scrape, on the server's thread.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(const std::string& address,
                                                           std::function<std::string()> render);
  ~HttpServer();  // stops accepting and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  int64_t requests() const { return requests_; }

 private:
  HttpServer() = default;
  void Loop();
  void Serve(int fd);

  std::function<std::string()> render_;
  int listen_fd_ = -1;
  int stop_pipe_[2] = {-1, -1};
  int port_ = 0;
  std::atomic<int64_t> requests_{0};
  std::thread thread_;
};

// Splits "HOST:PORT" / "[V6]:PORT" / "PORT" (host 127.0.0.1).
absl::Status ParseHostPort(const std::string& address, std::string* host, int* port);

}  // namespace specd::metrics
