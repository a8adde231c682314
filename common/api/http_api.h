// The OpenAI-compatible HTTP API: an adapter over the request API
// (common/api/request.h) on cpp-httplib, JSON through nlohmann-json.
//
//   POST /v1/completions        prompt (text, [text], token ids)
//   POST /v1/chat/completions   messages (text content, or text parts)
//     stream: false  one JSON answer;  stream: true  server-sent events, one
//     chunk per step with text, then the finish reason, ending `data: [DONE]`
//     (`stream_options.include_usage` adds the usage chunk). Both carry
//     usage, finish_reason ("stop", "length"), logprobs / top_logprobs when
//     asked, and specd's own figures under "specd" (acceptance, mean
//     accepted length, k per step, speculative steps, finish reason).
//     Fields: max_tokens (chat also max_completion_tokens), temperature
//     (default 1), top_p, seed (default: random), stop, n (1), logprobs,
//     top_logprobs, stream_options; extensions: top_k, min_p,
//     repetition_penalty, ignore_eos, return_token_ids (each choice/chunk
//     gets "token_ids"), speculation {k, adaptive, disable, min_confidence}.
//     What specd cannot honour (n > 1, echo, best_of, suffix, penalties,
//     logit_bias, tools) is a 400, never silently dropped.
//   GET /v1/models   the served model;  GET /health   200 when serving, else
//   503;  GET /metrics   the Prometheus text exposition.
//
// Errors are OpenAI's JSON ({"error": {"message", "type", "param", "code"}})
// with the matching status: 400 invalid, 401 bad or missing key, 404, 429
// queue full, 503 no target, 504 deadline, 500 otherwise. With an API key,
// every path but /health needs `Authorization: Bearer KEY` (compared in
// constant time). With a certificate and key it serves HTTPS only.
#pragma once
#include <functional>
#include <memory>
#include <string>

#include "common/api/request.h"
#include "nlohmann/json.hpp"

namespace specd::api {

struct HttpApiOptions {
  std::string listen = "127.0.0.1:8080";  // HOST:PORT (port 0: any)
  std::string api_key;                    // empty: no authentication
  std::string tls_cert, tls_key;          // PEM files; both or neither
  int threads = 64;                       // connections served at once (streams hold one each)
};

// What the adapter asks of its service besides generating.
struct HttpApiHooks {
  std::function<std::string()> model;                 // the served model's id ("" while unknown)
  std::function<bool()> ready;                        // /health
  std::function<std::string()> metrics;               // /metrics (empty: 404)
  std::function<std::string(int32_t)> token_text;     // a token's bytes (logprobs)
};

class HttpApi {
 public:
  // Binds and starts serving on its own threads.
  static absl::StatusOr<std::unique_ptr<HttpApi>> Start(const HttpApiOptions& opts, Generator* gen,
                                                        HttpApiHooks hooks);
  ~HttpApi();  // stops serving (in-flight streams end) and joins
  int port() const { return port_; }

 private:
  struct Impl;
  explicit HttpApi(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

// ---- the translation, exposed for tests

struct OpenAiRequest {
  Request request;
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  bool return_token_ids = false;
  int logprobs = -1;  // completions: top-n (0..20); chat: top_logprobs with logprobs=true; -1: none
  std::string model;
};
// INVALID_ARGUMENT names the field.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const nlohmann::json& body, bool chat);
// "stop" or "length" (OpenAI's vocabulary; specd's own reason is in "specd").
const char* OpenAiFinishReason(FinishReason r);
// The HTTP status and OpenAI error body of a failed request.
int HttpStatusOf(const absl::Status& st);
nlohmann::json ErrorBody(const absl::Status& st);
// Constant-time comparison of two secrets (SHA-256 of each, CRYPTO_memcmp).
bool SecretEquals(const std::string& a, const std::string& b);

}  // namespace specd::api
