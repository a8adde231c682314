#include "cli/cli_util.h"

#include <cstdio>

namespace specd::cli {

int ParseOrExit(Config& c, const std::vector<std::string>& args) {
  absl::Status st = c.ParseArgs(args);
  if (c.help_requested()) {
    std::printf("%s", c.Usage().c_str());
    return 0;
  }
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
    return 2;
  }
  return -1;
}

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "error: %s\n", std::string(st.message()).c_str());
  return 1;
}

void AddConnectFlags(Config* c) {
  c->AddString("api-key", "", "the coordinator's API key");
  c->AddString("api-key-file", "", "read the API key from this file");
  c->AddString("tls-ca", "", "connect with TLS, verifying the coordinator against these PEM roots");
}

int Fail(const std::string& msg) {
  std::fprintf(stderr, "error: %s\n", msg.c_str());
  return 1;
}

}  // namespace specd::cli
