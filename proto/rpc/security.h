// Transport security of every specd server and client: an API key (gRPC
// metadata `authorization: Bearer KEY`, compared in constant time) and TLS
// from PEM files. Servers refuse a call without the key with
// UNAUTHENTICATED; the standard health and reflection services stay open
// (probes carry no key). A server bound beyond loopback without a key or
// TLS logs a loud warning.
#pragma once
#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "common/util/config.h"
#include "common/util/status.h"

namespace specd::rpc {

struct ServerSecurity {
  std::string api_key;            // empty: none required
  std::string tls_cert, tls_key;  // PEM file paths; both or neither
};

struct ClientSecurity {
  std::string api_key;  // sent with every call (empty: none)
  std::string tls_ca;   // PEM roots that must have signed the server's certificate; empty: plaintext
};

// --api-key, --api-key-file, --tls-cert, --tls-key.
void AddServerSecurityFlags(Config* cfg);
// Reads the key file; checks that a certificate comes with its key.
absl::StatusOr<ServerSecurity> ServerSecurityFromConfig(const Config& cfg);
// The key `prefix` + "api-key" / + "api-key-file" names (a file wins), trimmed.
absl::StatusOr<std::string> ApiKeyFromConfig(const Config& cfg, const std::string& prefix = "");

// Credentials for ServerBuilder; also makes Authorize require `sec.api_key`
// in this process from now on.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerSecurity& sec);
// UNAUTHENTICATED unless the call carries the key this process requires.
grpc::Status Authorize(const grpc::ServerContext* ctx);
// Logs a loud warning when `address` is reachable beyond this machine and
// neither a key nor TLS protects it (`what`: "gRPC", "HTTP").
void WarnIfExposed(const std::string& address, bool has_key, bool has_tls, const char* what);

// A channel to `address` with `sec` (TLS when tls_ca is set; the key on
// every call) and `args`.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address, const ClientSecurity& sec,
                                                           const grpc::ChannelArguments& args = {});

// A file's bytes.
absl::StatusOr<std::string> ReadFile(const std::string& path);

}  // namespace specd::rpc
