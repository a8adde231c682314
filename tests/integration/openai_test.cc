// The OpenAI-compatible HTTP API of the three real processes: the official
// `openai` Python client (tests/python/openai_check.py), streamed and not,
// completions and chat, must produce exactly the gRPC API's tokens and text
// for the same request and seed; curl sees errors, /health and /metrics.
#include <fstream>

#include "nlohmann/json.hpp"
#include "tests/integration/service_harness.h"

namespace specd::testing {
namespace {

using nlohmann::json;

class OpenAiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    http_port_ = FreeLoopbackPort();
    ServiceOptions o;
    o.target_model = SharedTestModels().target;
    o.draft_model = SharedTestModels().draft;
    o.coordinator_flags = {"--http-listen", Base()};
    svc_ = std::make_unique<Service>(dir_.path(), o);
    const absl::Status st = svc_->Start();
    ASSERT_TRUE(st.ok()) << st << "\n" << svc_->Logs();
  }
  void TearDown() override {
    if (HasFailure() && svc_) std::cerr << svc_->Logs() << "\n";
  }
  std::string Base() const { return "127.0.0.1:" + std::to_string(http_port_); }
  // curl's status code and body.
  int Curl(const std::string& args, std::string* body) {
    std::string out;
    RunCommand("curl -s -m 60 -w '\\n%{http_code}' " + args + " 2>&1", &out);
    const size_t nl = out.rfind('\n');
    if (body) *body = nl == std::string::npos ? out : out.substr(0, nl);
    return nl == std::string::npos ? -1 : std::atoi(out.c_str() + nl + 1);
  }

  TempDir dir_;
  int http_port_ = 0;
  std::unique_ptr<Service> svc_;
};

TEST_F(OpenAiTest, OfficialClientMatchesTheGrpcApi) {
  SPECD_REQUIRE_PYREF("openai");
  // Sampled cases fix the speculation schedule (k = 3 every step): a sampled
  // output depends on the proposals it was verified against, and the
  // adaptive length follows measured times.
  struct Case {
    const char* name;
    bool chat;
    json request;  // as the openai client sends it
    bool fixed_k = false;
  };
  const std::vector<Case> cases = {
      {"completion-greedy", false, {{"prompt", "Hello world"}, {"max_tokens", 12}, {"temperature", 0}}},
      {"completion-sampled", false,
       {{"prompt", "The quick brown fox"}, {"max_tokens", 12}, {"temperature", 0.8}, {"top_p", 0.9}, {"seed", 7}},
       true},
      {"completion-logprobs", false,
       {{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}, {"logprobs", 3}}},
      {"chat-greedy", true,
       {{"messages", {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Say hi"}}}},
        {"max_tokens", 10},
        {"temperature", 0}}},
      {"chat-sampled", true,
       {{"messages", {{{"role", "user"}, {"content", "Tell me a story"}}}},
        {"max_tokens", 12},
        {"temperature", 1.0},
        {"top_p", 0.95},
        {"seed", 3},
        {"logprobs", true},
        {"top_logprobs", 2}},
       true},
  };
  json out = json::array();
  for (const Case& c : cases) {
    // The same request through the gRPC API.
    api::Request r;
    if (c.chat) {
      for (const json& m : c.request["messages"])
        r.messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
    } else {
      r.prompt = c.request["prompt"].get<std::string>();
    }
    r.max_tokens = c.request["max_tokens"].get<int>();
    r.sampling.temperature = c.request["temperature"].get<float>();
    r.sampling.top_p = c.request.value("top_p", 1.0f);
    r.sampling.seed = c.request.value("seed", 0u);
    ASSERT_TRUE(c.request.contains("seed") || r.sampling.greedy()) << c.name;
    json extra = json::object();
    if (c.fixed_k) {
      r.k = 3;
      r.adaptive = false;
      extra["speculation"] = {{"k", 3}, {"adaptive", false}};
    }
    auto s = svc_->client->Generate(r);
    ASSERT_TRUE(s.ok()) << c.name << ": " << s.status();
    ASSERT_FALSE(s->tokens.empty()) << c.name;
    out.push_back({{"name", c.name}, {"chat", c.chat}, {"request", c.request}, {"extra_body", extra},
                   {"token_ids", s->tokens}, {"text", s->text}});
  }
  const std::string cases_file = dir_.File("cases.json");
  std::ofstream(cases_file) << out.dump(1);
  std::string report;
  const int rc = RunCommand(ShellQuote(PythonPath()) + " " + ShellQuote(SourcePath("tests/python/openai_check.py")) +
                                " http://" + Base() + "/v1 " + ShellQuote(cases_file) + " 2>&1",
                            &report);
  EXPECT_EQ(rc, 0) << report;
  EXPECT_NE(report.find("11 passed, 0 failed"), std::string::npos) << report;
}

TEST_F(OpenAiTest, CurlSeesErrorsHealthAndMetrics) {
  std::string out;
  if (RunCommand("command -v curl", &out) != 0) GTEST_FAIL() << "curl is not installed (deploy/install-deps.sh --test)";
  std::string body;
  EXPECT_EQ(Curl("http://" + Base() + "/health", &body), 200) << body;
  EXPECT_EQ(json::parse(body, nullptr, false).value("status", ""), "ok") << body;
  const std::string post = "-H 'Content-Type: application/json' -X POST http://" + Base();
  // Bad JSON, a bad field, an unknown route: OpenAI-style errors with their status.
  EXPECT_EQ(Curl(post + "/v1/completions -d '{not json'", &body), 400) << body;
  EXPECT_EQ(json::parse(body, nullptr, false)["error"]["type"], "invalid_request_error") << body;
  EXPECT_EQ(Curl(post + "/v1/completions -d '{\"prompt\": \"hi\", \"n\": 3}'", &body), 400) << body;
  EXPECT_NE(json::parse(body, nullptr, false)["error"]["message"].get<std::string>().find("'n'"), std::string::npos)
      << body;
  EXPECT_EQ(Curl(post + "/v1/completions -d '{\"prompt\": \"hi\", \"max_tokens\": 100000000}'", &body), 400) << body;
  EXPECT_EQ(Curl(post + "/v1/chat/completions -d '{\"messages\": []}'", &body), 400) << body;
  EXPECT_EQ(Curl("http://" + Base() + "/v2/nothing", &body), 404) << body;
  EXPECT_EQ(json::parse(body, nullptr, false)["error"]["type"], "not_found_error") << body;
  // A streamed answer ends with [DONE].
  EXPECT_EQ(Curl("-N " + post +
                     "/v1/completions -d '{\"prompt\": \"Hello\", \"max_tokens\": 4, \"temperature\": 0, \"stream\": true}'",
                 &body),
            200)
      << body;
  EXPECT_EQ(body.rfind("data: ", 0), 0u) << body;
  EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos) << body;
  EXPECT_NE(body.find("data: [DONE]\n\n"), std::string::npos) << body;
  // The Prometheus exposition counts what was served.
  EXPECT_EQ(Curl("http://" + Base() + "/metrics", &body), 200) << body;
  EXPECT_NE(body.find("# TYPE specd_requests_total counter"), std::string::npos) << body;
  EXPECT_NE(body.find("specd_requests_total{reason=\"length\"} 1"), std::string::npos) << body;
  // Without its target the coordinator is not healthy.
  svc_->target.Kill(SIGKILL);
  int code = 0;
  for (int i = 0; i < 100 && code != 503; ++i) {
    code = Curl("http://" + Base() + "/health", &body);
    if (code != 503) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(code, 503) << body;
}

}  // namespace
}  // namespace specd::testing
