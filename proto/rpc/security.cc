#include "proto/rpc/security.h"

#include <grpcpp/support/client_interceptor.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "common/api/http_api.h"
#include "common/util/log.h"
#include "common/util/net.h"

namespace specd::rpc {
namespace {

constexpr char kAuthHeader[] = "authorization";

std::string& RequiredKey() {
  static std::string key;  // set once at start-up, before serving
  return key;
}

// Adds the key to every call's initial metadata.
class ApiKeyInterceptor : public grpc::experimental::Interceptor {
 public:
  explicit ApiKeyInterceptor(std::string header) : header_(std::move(header)) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* m) override {
    if (m->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_INITIAL_METADATA))
      m->GetSendInitialMetadata()->insert({kAuthHeader, header_});
    m->Proceed();
  }

 private:
  std::string header_;
};

class ApiKeyInterceptorFactory : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit ApiKeyInterceptorFactory(std::string key) : header_("Bearer " + std::move(key)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(grpc::experimental::ClientRpcInfo*) override {
    return new ApiKeyInterceptor(header_);
  }

 private:
  std::string header_;
};

}  // namespace

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", path, "'"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void AddServerSecurityFlags(Config* cfg) {
  cfg->AddString("api-key", "", "require this key from callers (gRPC metadata / HTTP 'authorization: Bearer KEY')");
  cfg->AddString("api-key-file", "", "read the required key from this file instead (not visible in ps)");
  cfg->AddString("tls-cert", "", "serve TLS with this PEM certificate chain (with --tls-key)");
  cfg->AddString("tls-key", "", "the PEM private key of --tls-cert");
}

absl::StatusOr<std::string> ApiKeyFromConfig(const Config& cfg, const std::string& prefix) {
  std::string key = cfg.GetString(prefix + "api-key");
  const std::string file = cfg.GetString(prefix + "api-key-file");
  if (!file.empty()) {
    SPECD_ASSIGN_OR_RETURN(key, ReadFile(file));
  }
  key = std::string(absl::StripAsciiWhitespace(key));
  if (!file.empty() && key.empty()) return absl::InvalidArgumentError(absl::StrCat("API key file '", file, "' is empty"));
  return key;
}

absl::StatusOr<ServerSecurity> ServerSecurityFromConfig(const Config& cfg) {
  ServerSecurity s;
  SPECD_ASSIGN_OR_RETURN(s.api_key, ApiKeyFromConfig(cfg));
  s.tls_cert = cfg.GetString("tls-cert");
  s.tls_key = cfg.GetString("tls-key");
  if (s.tls_cert.empty() != s.tls_key.empty())
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  return s;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const ServerSecurity& sec) {
  RequiredKey() = sec.api_key;
  if (sec.tls_cert.empty()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions o;
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  SPECD_ASSIGN_OR_RETURN(pair.cert_chain, ReadFile(sec.tls_cert));
  SPECD_ASSIGN_OR_RETURN(pair.private_key, ReadFile(sec.tls_key));
  if (!absl::StrContains(pair.cert_chain, "-----BEGIN CERTIFICATE-----"))
    return absl::InvalidArgumentError(absl::StrCat("'", sec.tls_cert, "' holds no PEM certificate"));
  if (!absl::StrContains(pair.private_key, "PRIVATE KEY-----"))
    return absl::InvalidArgumentError(absl::StrCat("'", sec.tls_key, "' holds no PEM private key"));
  o.pem_key_cert_pairs.push_back(std::move(pair));
  return grpc::SslServerCredentials(o);
}

grpc::Status Authorize(const grpc::ServerContext* ctx) {
  const std::string& key = RequiredKey();
  if (key.empty()) return grpc::Status::OK;
  const auto& md = ctx->client_metadata();
  const auto it = md.find(kAuthHeader);
  const std::string bearer = "Bearer ";
  if (it != md.end()) {
    const std::string v(it->second.data(), it->second.size());
    if (v.compare(0, bearer.size(), bearer) == 0 && api::SecretEquals(v.substr(bearer.size()), key))
      return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong API key (metadata 'authorization: Bearer KEY')");
}

void WarnIfExposed(const std::string& address, bool has_key, bool has_tls, const char* what) {
  if (absl::StartsWith(address, "unix:") || absl::StartsWith(address, "unix-abstract:")) return;
  auto hp = ParseHostPort(address);
  if (!hp.ok() || IsLoopbackHost(hp->host) || (has_key && has_tls)) return;
  SPECD_LOG(WARN) << "!!! " << what << " listens beyond loopback WITHOUT "
                  << (!has_key && !has_tls ? "an API key or TLS" : !has_key ? "an API key" : "TLS")
                  << ": anyone who can reach it can use it" << (has_tls ? "" : " and read its traffic")
                  << "; set --api-key(-file) and --tls-cert/--tls-key" << Kv("listen", address);
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const std::string& address, const ClientSecurity& sec,
                                                           const grpc::ChannelArguments& args) {
  std::shared_ptr<grpc::ChannelCredentials> creds = grpc::InsecureChannelCredentials();
  if (!sec.tls_ca.empty()) {
    grpc::SslCredentialsOptions o;
    SPECD_ASSIGN_OR_RETURN(o.pem_root_certs, ReadFile(sec.tls_ca));
    creds = grpc::SslCredentials(o);
  }
  if (sec.api_key.empty()) return grpc::CreateCustomChannel(address, creds, args);
  std::vector<std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<ApiKeyInterceptorFactory>(sec.api_key));
  return grpc::experimental::CreateCustomChannelWithInterceptors(address, creds, args, std::move(interceptors));
}

}  // namespace specd::rpc
