// Beyond loopback: the three processes with an API key and TLS from PEM
// files (certificates made here with the openssl CLI). Good keys and
// certificates are served over gRPC and HTTPS; a wrong or missing key is
// UNAUTHENTICATED / 401; a certificate from another authority, or
// plaintext against TLS, does not connect.
#include <httplib.h>

#include <fstream>

#include "nlohmann/json.hpp"
#include "proto/rpc/security.h"
#include "proto/specd.grpc.pb.h"
#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

constexpr char kKey[] = "k3y-for-the-test";

// A CA and a server certificate it signed for 127.0.0.1 / localhost.
absl::Status MakeCerts(const TempDir& d, const std::string& name) {
  std::string out;
  const std::string cmd =
      "set -e; cd " + ShellQuote(d.path()) + "; " +
      "openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=" + name + "-ca -keyout " + name + "-ca.key -out " +
      name + "-ca.pem; " + "openssl req -newkey rsa:2048 -nodes -subj /CN=localhost -keyout " + name +
      "-server.key -out " + name + "-server.csr; " +
      "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > " + name + "-san.ext; " + "openssl x509 -req -in " +
      name + "-server.csr -CA " + name + "-ca.pem -CAkey " + name + "-ca.key -CAcreateserial -days 2 -extfile " + name +
      "-san.ext -out " + name + "-server.pem 2>&1";
  if (RunCommand("(" + cmd + ") 2>&1", &out) != 0) return absl::InternalError("openssl failed: " + out);
  return absl::OkStatus();
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string out;
    if (RunCommand("command -v openssl", &out) != 0) GTEST_FAIL() << "openssl is not installed";
    ASSERT_TRUE(MakeCerts(dir_, "good").ok());
    ASSERT_TRUE(MakeCerts(dir_, "other").ok());
    std::ofstream(dir_.File("key.txt")) << kKey << "\n";
    http_port_ = FreeLoopbackPort();
    const std::vector<std::string> tls = {"--api-key-file", dir_.File("key.txt"), "--tls-cert",
                                          dir_.File("good-server.pem"), "--tls-key", dir_.File("good-server.key")};
    ServiceOptions o;
    o.target_model = SharedTestModels().target;
    o.draft_model = SharedTestModels().draft;
    o.worker_flags = tls;
    o.coordinator_flags = tls;
    for (const std::string& f : {std::string("--worker-tls-ca"), dir_.File("good-ca.pem"), std::string("--http-listen"),
                                 "127.0.0.1:" + std::to_string(http_port_)})
      o.coordinator_flags.push_back(f);
    o.connect.api_key = kKey;
    o.connect.tls_ca = dir_.File("good-ca.pem");
    svc_ = std::make_unique<Service>(dir_.path(), o);
    const absl::Status st = svc_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && svc_) std::cerr << svc_->Logs() << "\n";
  }
  absl::Status Generate(const client::ConnectOptions& o) {
    auto c = client::Client::Connect(svc_->coordinator_address, o);
    if (!c.ok()) return c.status();
    api::Request r;
    r.prompt = "Hello";
    r.max_tokens = 3;
    r.deadline = api::After(std::chrono::seconds(30));
    return (*c)->Generate(r).status();
  }

  TempDir dir_;
  int http_port_ = 0;
  std::unique_ptr<Service> svc_;
};

TEST_F(SecurityTest, GrpcNeedsTheKeyAndTheRightCertificate) {
  // The harness's client (right key, right CA) got the service up, through TLS workers.
  EXPECT_TRUE(Generate({kKey, dir_.File("good-ca.pem")}).ok());
  EXPECT_EQ(Generate({"wrong", dir_.File("good-ca.pem")}).code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(Generate({"", dir_.File("good-ca.pem")}).code(), absl::StatusCode::kUnauthenticated);
  // A server certificate from another authority, or plaintext against TLS: no connection.
  EXPECT_EQ(Generate({kKey, dir_.File("other-ca.pem")}).code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(Generate({kKey, ""}).code(), absl::StatusCode::kUnavailable);
  // The workers require the key too.
  for (const std::string& key : {std::string(), std::string(kKey)}) {
    auto ch = rpc::MakeChannel(svc_->target_address, {key, dir_.File("good-ca.pem")});
    ASSERT_TRUE(ch.ok()) << ch.status();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::InfoResponse info;
    const grpc::Status st = v1::TargetWorker::NewStub(*ch)->Info(&ctx, v1::InfoRequest(), &info);
    EXPECT_EQ(st.error_code(), key.empty() ? grpc::StatusCode::UNAUTHENTICATED : grpc::StatusCode::OK)
        << st.error_message();
  }
}

// The CLI's clients take the key and the roots as flags.
TEST_F(SecurityTest, CliClientsConnectWithKeyAndRoots) {
  const std::string specd = ShellQuote(BinaryPath("cli/specd"));
  const std::string sec = " --coordinator " + svc_->coordinator_address + " --api-key-file " +
                          ShellQuote(dir_.File("key.txt")) + " --tls-ca " + ShellQuote(dir_.File("good-ca.pem"));
  std::string out;
  EXPECT_EQ(RunCommand(specd + " stats" + sec + " 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("draft ready"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(specd + " generate" + sec + " --prompt Hello --max-tokens 3 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("3 tokens in"), std::string::npos) << out;
  EXPECT_EQ(RunCommand(specd + " loadgen" + sec +
                           " --requests 2 --concurrency 2 --prompt-tokens 4 --max-tokens 2 --distinct-prompts 1 --quiet 2>&1",
                       &out),
            0)
      << out;
  EXPECT_NE(out.find("2 ok"), std::string::npos) << out;
  EXPECT_NE(RunCommand(specd + " stats --coordinator " + svc_->coordinator_address + " --tls-ca " +
                           ShellQuote(dir_.File("good-ca.pem")) + " 2>&1",
                       &out),
            0);
  EXPECT_NE(out.find("API key"), std::string::npos) << out;
}

TEST_F(SecurityTest, HttpsNeedsTheBearerKey) {
  httplib::SSLClient c("127.0.0.1", http_port_);
  c.set_ca_cert_path(dir_.File("good-ca.pem").c_str());
  c.enable_server_certificate_verification(true);
  c.set_read_timeout(60, 0);
  const std::string body = R"({"prompt": "Hello", "max_tokens": 3, "temperature": 0})";
  auto r = c.Post("/v1/completions", body, "application/json");
  ASSERT_TRUE(r) << httplib::to_string(r.error());
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(nlohmann::json::parse(r->body)["error"]["code"], "invalid_api_key");
  r = c.Post("/v1/completions", {{"Authorization", "Bearer wrong"}}, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = c.Post("/v1/completions", {{"Authorization", std::string("Bearer ") + kKey}}, body, "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(nlohmann::json::parse(r->body)["usage"]["completion_tokens"], 3);
  // Another authority's roots: the handshake fails.
  httplib::SSLClient other("127.0.0.1", http_port_);
  other.set_ca_cert_path(dir_.File("other-ca.pem").c_str());
  other.enable_server_certificate_verification(true);
  EXPECT_FALSE(other.Get("/health"));
  // Plain HTTP against HTTPS gets no answer.
  httplib::Client plain("127.0.0.1", http_port_);
  plain.set_read_timeout(5, 0);
  auto p = plain.Get("/health");
  EXPECT_TRUE(!p || p->status != 200);
}

TEST(SecurityConfig, BadFilesAreClearErrors) {
  TempDir d;
  std::ofstream(d.File("junk.pem")) << "not a certificate\n";
  std::string out;
  const std::string bin = ShellQuote(BinaryPath("target_worker/specd-target-worker"));
  EXPECT_EQ(RunCommand(bin + " --model " + ShellQuote(SharedTestModels().target) + " --listen 127.0.0.1:0 --tls-cert " +
                           ShellQuote(d.File("junk.pem")) + " 2>&1",
                       &out),
            2)
      << out;
  EXPECT_NE(out.find("--tls-cert and --tls-key go together"), std::string::npos) << out;
  EXPECT_NE(RunCommand(bin + " --model " + ShellQuote(SharedTestModels().target) + " --listen 127.0.0.1:0 --tls-cert " +
                           ShellQuote(d.File("junk.pem")) + " --tls-key " + ShellQuote(d.File("junk.pem")) + " 2>&1",
                       &out),
            0);
  EXPECT_NE(out.find("holds no PEM certificate"), std::string::npos) << out;
  EXPECT_NE(RunCommand(bin + " --model " + ShellQuote(SharedTestModels().target) +
                           " --listen 127.0.0.1:0 --api-key-file " + ShellQuote(d.File("missing")) + " 2>&1",
                       &out),
            0);
  EXPECT_NE(out.find("missing"), std::string::npos) << out;
}

}  // namespace
}  // namespace specd::testing
