// The OpenAI-compatible HTTP adapter over an in-process generator: the
// request translation and its errors, answers equal to the request API's own
// for the same request and seed (streamed and not), logprobs equal to a
// float64 log-softmax of the target's logits, API keys and TLS.
#include "common/api/http_api.h"

#include <httplib.h>

#include <cmath>

#include "common/api/local_generator.h"
#include "gtest/gtest.h"
#include "tests/support/test_models.h"
#include "tests/support/test_util.h"

namespace specd::api {
namespace {

using nlohmann::json;

// One generator and one HTTP server per test binary (the models load once).
class HttpApiTest : public ::testing::Test {
 protected:
  static EngineOptions Options() {
    EngineOptions o;
    o.model_path = testing::SharedTestModels().target;
    o.backend.threads = 1;
    o.max_seqs = 2;
    o.max_seq_len = 512;
    o.kv_type = GgmlType::F32;
    return o;
  }
  static void SetUpTestSuite() {
    auto g = LocalGenerator::Create(Options(), testing::SharedTestModels().draft, SpecDefaults{});
    ASSERT_TRUE(g.ok()) << g.status();
    gen_ = g->release();
  }
  static void TearDownTestSuite() {
    delete gen_;
    gen_ = nullptr;
  }

  std::unique_ptr<HttpApi> Serve(HttpApiOptions o = {}) {
    o.listen = "127.0.0.1:0";
    HttpApiHooks h;
    h.model = [] { return std::string("test-target"); };
    h.ready = [] { return true; };
    h.metrics = [] { return std::string("specd_up 1\n"); };
    h.token_text = [](int32_t id) { return gen_->tokenizer().TokenBytes(id, true); };
    auto s = HttpApi::Start(o, gen_, std::move(h));
    EXPECT_TRUE(s.ok()) << s.status();
    return s.ok() ? std::move(*s) : nullptr;
  }
  static httplib::Client ClientOf(const HttpApi& s) {
    httplib::Client c("127.0.0.1", s.port());
    c.set_read_timeout(120, 0);
    return c;
  }
  static json Post(httplib::Client& c, const std::string& path, const json& body, int* status,
                   const httplib::Headers& h = {}) {
    auto r = c.Post(path.c_str(), h, body.dump(), "application/json");
    *status = r ? r->status : -1;
    return r ? json::parse(r->body, nullptr, false) : json();
  }
  // The data lines of a server-sent event stream.
  static std::vector<std::string> Events(const std::string& body) {
    std::vector<std::string> out;
    size_t p = 0;
    while ((p = body.find("data: ", p)) != std::string::npos) {
      const size_t e = body.find("\n\n", p);
      out.push_back(body.substr(p + 6, e - p - 6));
      p = e;
    }
    return out;
  }

  static LocalGenerator* gen_;
};
LocalGenerator* HttpApiTest::gen_ = nullptr;

TEST(OpenAiRequest, TranslationAndRefusals) {
  auto o = ParseOpenAiRequest(json{{"prompt", {1, 2, 3}}, {"max_tokens", 5}, {"temperature", 0.5}, {"top_p", 0.9},
                                   {"seed", 11}, {"stop", "x"}, {"logprobs", 2}, {"stream", true},
                                   {"speculation", {{"k", 3}, {"adaptive", false}, {"proposer", "ngram"}}}},
                              false);
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->request.prompt_tokens, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(o->request.max_tokens, 5);
  EXPECT_FLOAT_EQ(o->request.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(o->request.sampling.top_p, 0.9f);
  EXPECT_EQ(o->request.sampling.seed, 11u);
  EXPECT_EQ(o->request.sampling.logprobs, 2);
  EXPECT_EQ(o->request.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(o->request.k, 3);
  EXPECT_EQ(o->request.adaptive, false);
  EXPECT_EQ(o->request.proposer, ProposerKind::kNgram);
  EXPECT_TRUE(o->stream);
  // OpenAI's default temperature is 1; chat content may come in text parts.
  auto chat = ParseOpenAiRequest(
      json{{"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
           {"max_completion_tokens", 3}, {"logprobs", true}, {"top_logprobs", 4}},
      true);
  ASSERT_TRUE(chat.ok()) << chat.status();
  EXPECT_FLOAT_EQ(chat->request.sampling.temperature, 1.0f);
  EXPECT_EQ(chat->request.messages[0].content, "ab");
  EXPECT_EQ(chat->request.max_tokens, 3);
  EXPECT_EQ(chat->logprobs, 4);
  struct Bad {
    json body;
    bool chat;
    const char* field;
  };
  const std::vector<Bad> bad = {
      {json{{"max_tokens", 3}}, false, "'prompt'"},
      {json{{"prompt", 3}}, false, "'prompt'"},
      {json{{"prompt", {"a", "b"}}}, false, "'prompt'"},
      {json{{"prompt", "a"}, {"n", 2}}, false, "'n'"},
      {json{{"prompt", "a"}, {"echo", true}}, false, "'echo'"},
      {json{{"prompt", "a"}, {"presence_penalty", 0.5}}, false, "'presence_penalty'"},
      {json{{"prompt", "a"}, {"temperature", "hot"}}, false, "'temperature'"},
      {json{{"prompt", "a"}, {"max_tokens", 0}}, false, "'max_tokens'"},
      {json{{"prompt", "a"}, {"stop", 5}}, false, "'stop'"},
      {json{{"prompt", "a"}, {"logprobs", 50}}, false, "'logprobs'"},
      {json{{"prompt", "a"}, {"speculation", {{"proposer", "eagle"}}}}, false, "proposer 'eagle'"},
      {json{{"prompt", "a"}, {"speculation", {{"proposer", 1}}}}, false, "'speculation.proposer'"},
      {json{{"messages", json::array()}}, true, "'messages'"},
      {json{{"messages", {{{"content", "x"}}}}}, true, "'messages'"},
      {json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"tools", json::array()}}, true, "'tools'"},
      {json{{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}}, true, "'top_logprobs'"},
  };
  for (const Bad& b : bad) {
    auto r = ParseOpenAiRequest(b.body, b.chat);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << b.body;
    EXPECT_NE(r.status().message().find(b.field), std::string::npos) << r.status();
  }
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("")), 503);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("")), 401);
  EXPECT_EQ(ErrorBody(absl::InvalidArgumentError("m"))["error"]["type"], "invalid_request_error");
  EXPECT_TRUE(SecretEquals("k3y", "k3y"));
  EXPECT_FALSE(SecretEquals("k3y", "k3z"));
  EXPECT_FALSE(SecretEquals("k3y", "k3y "));
}

TEST_F(HttpApiTest, AnswersEqualTheRequestApis) {
  auto s = Serve();
  ASSERT_NE(s, nullptr);
  httplib::Client c = ClientOf(*s);
  // The same request through the request API, sampled with a seed. (A
  // sampled output depends on the proposals it was verified against: equal
  // outputs need the same speculation schedule, here a fixed k.)
  Request r;
  r.prompt = "The quick brown fox";
  r.max_tokens = 10;
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 5;
  r.k = 3;
  r.adaptive = false;
  auto want = gen_->Generate(r);
  ASSERT_TRUE(want.ok()) << want.status();
  const json body = {{"prompt", r.prompt},   {"max_tokens", 10},        {"temperature", 0.9},
                     {"top_p", 0.95},        {"seed", 5},               {"return_token_ids", true},
                     {"speculation", {{"k", 3}, {"adaptive", false}}}};
  int status = 0;
  const json got = Post(c, "/v1/completions", body, &status);
  ASSERT_EQ(status, 200) << got;
  EXPECT_EQ(got["object"], "text_completion");
  EXPECT_EQ(got["model"], "test-target");
  EXPECT_EQ(got["choices"][0]["text"], want->text);
  EXPECT_EQ(got["choices"][0]["token_ids"].get<std::vector<int32_t>>(), want->tokens);
  EXPECT_EQ(got["choices"][0]["finish_reason"], OpenAiFinishReason(want->finish_reason));
  EXPECT_EQ(got["usage"]["completion_tokens"], want->tokens.size());
  EXPECT_EQ(got["usage"]["total_tokens"], want->prompt_tokens + want->tokens.size());
  EXPECT_TRUE(got["specd"].contains("acceptance_rate"));
  EXPECT_TRUE(got["specd"].contains("mean_accepted_length"));
  EXPECT_TRUE(got["specd"].contains("mean_k"));

  // Streamed: chunks add up to the same answer, then the usage, then [DONE].
  json sb = body;
  sb["stream"] = true;
  sb["stream_options"] = {{"include_usage", true}};
  auto res = c.Post("/v1/completions", sb.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const std::vector<std::string> ev = Events(res->body);
  ASSERT_GE(ev.size(), 3u) << res->body;
  EXPECT_EQ(ev.back(), "[DONE]");
  std::string text;
  std::vector<int32_t> ids;
  std::string finish;
  for (size_t i = 0; i + 2 < ev.size(); ++i) {
    const json j = json::parse(ev[i]);
    text += j["choices"][0]["text"].get<std::string>();
    if (j["choices"][0].contains("token_ids")) {
      for (int32_t t : j["choices"][0]["token_ids"]) ids.push_back(t);
    }
    if (!j["choices"][0]["finish_reason"].is_null()) finish = j["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, want->text);
  EXPECT_EQ(ids, want->tokens);
  EXPECT_EQ(finish, OpenAiFinishReason(want->finish_reason));
  const json usage = json::parse(ev[ev.size() - 2]);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], want->tokens.size());

  // Chat, streamed: a role delta first, then the content.
  Request cr;
  cr.messages = {{"user", "Say hi"}};
  cr.max_tokens = 8;
  cr.sampling.temperature = 0;
  auto cwant = gen_->Generate(cr);
  ASSERT_TRUE(cwant.ok()) << cwant.status();
  res = c.Post("/v1/chat/completions",
               json{{"messages", {{{"role", "user"}, {"content", "Say hi"}}}}, {"max_tokens", 8}, {"temperature", 0},
                    {"stream", true}}
                   .dump(),
               "application/json");
  ASSERT_TRUE(res);
  const std::vector<std::string> cev = Events(res->body);
  ASSERT_GE(cev.size(), 2u) << res->body;
  const json first = json::parse(cev[0]);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  std::string ctext;
  for (size_t i = 0; i + 1 < cev.size(); ++i) {
    const json j = json::parse(cev[i]);
    if (j["choices"][0]["delta"].contains("content")) ctext += j["choices"][0]["delta"]["content"].get<std::string>();
  }
  EXPECT_EQ(ctext, cwant->text);
}

TEST_F(HttpApiTest, LogprobsAreTheTargetsLogSoftmax) {
  auto s = Serve();
  ASSERT_NE(s, nullptr);
  httplib::Client c = ClientOf(*s);
  int status = 0;
  const json got = Post(c, "/v1/completions",
                        json{{"prompt", "Once upon a time"}, {"max_tokens", 4}, {"temperature", 0}, {"logprobs", 3},
                             {"ignore_eos", true}, {"return_token_ids", true}},
                        &status);
  ASSERT_EQ(status, 200) << got;
  const json& lp = got["choices"][0]["logprobs"];
  const auto ids = got["choices"][0]["token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(ids.size(), 4u);
  ASSERT_EQ(lp["token_logprobs"].size(), 4u) << lp;
  ASSERT_EQ(lp["top_logprobs"][0].size(), 3u) << lp;
  // Reference: the target's logits for prompt + the tokens before each, in float64.
  auto created = Engine::Create(Options());
  ASSERT_TRUE(created.ok()) << created.status();
  Engine* engine = created->get();
  std::vector<int32_t> seq = gen_->tokenizer().Encode("Once upon a time", true, false);
  ASSERT_TRUE(engine->NewSequence(1).ok());
  Engine::Feed f{1, seq, 1};
  for (size_t i = 0; i < ids.size(); ++i) {
    std::vector<float> logits;
    ASSERT_TRUE(engine->Run({f}, &logits).ok());
    const int V = engine->vocab_size();
    double mx = -INFINITY, z = 0;
    for (int t = 0; t < V; ++t) mx = std::max(mx, static_cast<double>(logits[t]));
    for (int t = 0; t < V; ++t) z += std::exp(static_cast<double>(logits[t]) - mx);
    const double want = static_cast<double>(logits[ids[i]]) - mx - std::log(z);
    EXPECT_NEAR(lp["token_logprobs"][i].get<double>(), want, 1e-4) << "token " << i;
    // Greedy: the chosen token is the most likely one.
    double best = -INFINITY;
    for (const auto& [tok, v] : lp["top_logprobs"][i].items()) best = std::max(best, v.get<double>());
    EXPECT_NEAR(best, want, 1e-6) << "token " << i;
    f.tokens = {ids[i]};
  }
  // Chat's shape: content[] with token, logprob, bytes and top_logprobs.
  const json chat = Post(c, "/v1/chat/completions",
                         json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 3}, {"temperature", 0},
                              {"logprobs", true}, {"top_logprobs", 2}, {"ignore_eos", true}},
                         &status);
  ASSERT_EQ(status, 200) << chat;
  const json& content = chat["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 3u) << chat;
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
  EXPECT_TRUE(content[0]["bytes"].is_array());
  EXPECT_LE(content[0]["logprob"].get<double>(), 0.0);
}

TEST_F(HttpApiTest, ErrorsModelsHealthAndMetrics) {
  auto s = Serve();
  ASSERT_NE(s, nullptr);
  httplib::Client c = ClientOf(*s);
  auto r = c.Post("/v1/completions", "{nope", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "invalid_request_error");
  int status = 0;
  // Checks the generator makes (not the parser): the context is 512 tokens.
  json e = Post(c, "/v1/completions", json{{"prompt", std::vector<int>(600, 5)}}, &status);
  EXPECT_EQ(status, 400) << e;
  EXPECT_NE(e["error"]["message"].get<std::string>().find("does not fit"), std::string::npos) << e;
  e = Post(c, "/v1/completions", json{{"prompt", "a"}, {"stream", true}, {"max_tokens", 1000000}}, &status);
  EXPECT_EQ(status, 400) << e;  // streamed requests fail with a status too, before any event
  r = c.Get("/v1/nothing");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(json::parse(r->body)["error"]["type"], "not_found_error");
  r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(json::parse(r->body)["data"][0]["id"], "test-target");
  r = c.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "specd_up 1\n");
}

TEST_F(HttpApiTest, ApiKeyIsRequiredWhenSet) {
  HttpApiOptions o;
  o.api_key = "s3cret-key";
  auto s = Serve(o);
  ASSERT_NE(s, nullptr);
  httplib::Client c = ClientOf(*s);
  const json body = {{"prompt", "hi"}, {"max_tokens", 2}, {"temperature", 0}};
  int status = 0;
  json e = Post(c, "/v1/completions", body, &status);
  EXPECT_EQ(status, 401) << e;
  EXPECT_EQ(e["error"]["code"], "invalid_api_key");
  Post(c, "/v1/completions", body, &status, {{"Authorization", "Bearer s3cret-kex"}});
  EXPECT_EQ(status, 401);
  Post(c, "/v1/completions", body, &status, {{"Authorization", "s3cret-key"}});
  EXPECT_EQ(status, 401);
  Post(c, "/v1/completions", body, &status, {{"Authorization", "Bearer s3cret-key"}});
  EXPECT_EQ(status, 200);
  auto r = c.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  r = c.Get("/health");  // probes need no key
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
}

}  // namespace
}  // namespace specd::api
