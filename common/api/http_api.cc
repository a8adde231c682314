#include "common/api/http_api.h"

#include <httplib.h>
#include <openssl/crypto.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>
#include <thread>

#include "common/util/digest.h"
#include "common/util/log.h"
#include "common/util/net.h"

namespace specd::api {

using nlohmann::json;

namespace {

absl::Status Invalid(const std::string& field, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("'", field, "' ", why));
}

// Optional fields: absent and null mean "unset"; a wrong type is an error.
absl::Status GetNumber(const json& j, const char* key, std::optional<double>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number()) return Invalid(key, "must be a number");
  *out = j[key].get<double>();
  return absl::OkStatus();
}
absl::Status GetInt(const json& j, const char* key, std::optional<int64_t>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_number_integer()) return Invalid(key, "must be an integer");
  *out = j[key].get<int64_t>();
  return absl::OkStatus();
}
absl::Status GetBool(const json& j, const char* key, std::optional<bool>* out) {
  if (!j.contains(key) || j[key].is_null()) return absl::OkStatus();
  if (!j[key].is_boolean()) return Invalid(key, "must be true or false");
  *out = j[key].get<bool>();
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> TokenIds(const json& a, const char* field) {
  std::vector<int32_t> ids;
  for (const json& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() > INT32_MAX)
      return Invalid(field, "must be text or a list of token ids");
    ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return ids;
}

absl::Status ParsePrompt(const json& p, Request* r) {
  if (p.is_string()) {
    r->prompt = p.get<std::string>();
    return absl::OkStatus();
  }
  if (!p.is_array() || p.empty()) return Invalid("prompt", "must be text, one text in a list, or token ids");
  if (p.size() == 1 && (p[0].is_string() || p[0].is_array())) return ParsePrompt(p[0], r);
  if (p[0].is_string() || p[0].is_array()) return Invalid("prompt", "holds several prompts; send one per request");
  SPECD_ASSIGN_OR_RETURN(r->prompt_tokens, TokenIds(p, "prompt"));
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& m, Request* r) {
  if (!m.is_array() || m.empty()) return Invalid("messages", "must be a non-empty list");
  for (const json& msg : m) {
    if (!msg.is_object() || !msg.contains("role") || !msg["role"].is_string())
      return Invalid("messages", "entries need a 'role'");
    ChatMessage cm{msg["role"].get<std::string>(), ""};
    const json& c = msg.contains("content") ? msg["content"] : json();
    if (c.is_string()) {
      cm.content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: text only
      for (const json& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          return Invalid("messages", "content parts must be {\"type\": \"text\", \"text\": ...}");
        cm.content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      return Invalid("messages", "content must be text or text parts");
    }
    r->messages.push_back(std::move(cm));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(const json& body, bool chat) {
  if (!body.is_object()) return absl::InvalidArgumentError("the request body must be a JSON object");
  OpenAiRequest o;
  o.chat = chat;
  Request& r = o.request;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string()) return Invalid("model", "must be text");
    o.model = body["model"].get<std::string>();
  }
  if (chat) {
    if (!body.contains("messages")) return Invalid("messages", "is required");
    SPECD_RETURN_IF_ERROR(ParseMessages(body["messages"], &r));
  } else {
    if (!body.contains("prompt")) return Invalid("prompt", "is required");
    SPECD_RETURN_IF_ERROR(ParsePrompt(body["prompt"], &r));
  }
  // What specd does not do is refused, not ignored.
  std::optional<int64_t> n, best_of;
  SPECD_RETURN_IF_ERROR(GetInt(body, "n", &n));
  if (n && *n != 1) return Invalid("n", "must be 1 (one choice per request)");
  SPECD_RETURN_IF_ERROR(GetInt(body, "best_of", &best_of));
  if (best_of && *best_of != 1) return Invalid("best_of", "must be 1");
  std::optional<bool> echo;
  SPECD_RETURN_IF_ERROR(GetBool(body, "echo", &echo));
  if (echo.value_or(false)) return Invalid("echo", "is not supported");
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    std::optional<double> v;
    SPECD_RETURN_IF_ERROR(GetNumber(body, key, &v));
    if (v && *v != 0) return Invalid(key, "is not supported (use repetition_penalty)");
  }
  for (const char* key : {"suffix", "tools", "functions", "tool_choice", "function_call"}) {
    if (body.contains(key) && !body[key].is_null()) return Invalid(key, "is not supported");
  }
  if (body.contains("logit_bias") && !body["logit_bias"].is_null() && !body["logit_bias"].empty())
    return Invalid("logit_bias", "is not supported");
  if (body.contains("response_format") && !body["response_format"].is_null() &&
      !(body["response_format"].is_object() && body["response_format"].value("type", "") == "text"))
    return Invalid("response_format", "only {\"type\": \"text\"} is supported");

  std::optional<int64_t> max_tokens, seed, top_k, logprobs_n, top_logprobs;
  SPECD_RETURN_IF_ERROR(GetInt(body, "max_tokens", &max_tokens));
  if (chat && !max_tokens) SPECD_RETURN_IF_ERROR(GetInt(body, "max_completion_tokens", &max_tokens));
  if (max_tokens) {
    if (*max_tokens < 1 || *max_tokens > INT32_MAX) return Invalid("max_tokens", "must be at least 1");
    r.max_tokens = static_cast<int>(*max_tokens);
  }
  std::optional<double> temperature, top_p, min_p, rep;
  SPECD_RETURN_IF_ERROR(GetNumber(body, "temperature", &temperature));
  SPECD_RETURN_IF_ERROR(GetNumber(body, "top_p", &top_p));
  SPECD_RETURN_IF_ERROR(GetNumber(body, "min_p", &min_p));
  SPECD_RETURN_IF_ERROR(GetNumber(body, "repetition_penalty", &rep));
  SPECD_RETURN_IF_ERROR(GetInt(body, "top_k", &top_k));
  SPECD_RETURN_IF_ERROR(GetInt(body, "seed", &seed));
  SamplingParams& sp = r.sampling;
  sp.temperature = static_cast<float>(temperature.value_or(1.0));  // OpenAI's default
  if (top_p) sp.top_p = static_cast<float>(*top_p);
  if (min_p) sp.min_p = static_cast<float>(*min_p);
  if (rep) sp.repetition_penalty = static_cast<float>(*rep);
  if (top_k) {
    if (*top_k < 0 || *top_k > INT32_MAX) return Invalid("top_k", "must be >= 0");
    sp.top_k = static_cast<int32_t>(*top_k);
  }
  sp.seed = seed ? static_cast<uint64_t>(*seed) : std::random_device()();

  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      r.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      for (const json& x : s) {
        if (!x.is_string()) return Invalid("stop", "must be text or a list of texts");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      return Invalid("stop", "must be text or a list of texts");
    }
  }

  if (chat) {
    std::optional<bool> lp;
    SPECD_RETURN_IF_ERROR(GetBool(body, "logprobs", &lp));
    SPECD_RETURN_IF_ERROR(GetInt(body, "top_logprobs", &top_logprobs));
    if (top_logprobs && !lp.value_or(false)) return Invalid("top_logprobs", "needs logprobs: true");
    if (lp.value_or(false)) o.logprobs = static_cast<int>(top_logprobs.value_or(0));
  } else {
    SPECD_RETURN_IF_ERROR(GetInt(body, "logprobs", &logprobs_n));
    if (logprobs_n) o.logprobs = static_cast<int>(std::clamp<int64_t>(*logprobs_n, -1, 1000));
  }
  if (o.logprobs < -1 || o.logprobs > kMaxTopLogprobs)
    return Invalid(chat ? "top_logprobs" : "logprobs", absl::StrCat("must be in [0, ", kMaxTopLogprobs, "]"));
  sp.logprobs = o.logprobs;

  std::optional<bool> stream, ignore_eos, ids;
  SPECD_RETURN_IF_ERROR(GetBool(body, "stream", &stream));
  SPECD_RETURN_IF_ERROR(GetBool(body, "ignore_eos", &ignore_eos));
  SPECD_RETURN_IF_ERROR(GetBool(body, "return_token_ids", &ids));
  o.stream = stream.value_or(false);
  r.ignore_eos = ignore_eos.value_or(false);
  o.return_token_ids = ids.value_or(false);
  if (body.contains("stream_options") && body["stream_options"].is_object()) {
    std::optional<bool> usage;
    SPECD_RETURN_IF_ERROR(GetBool(body["stream_options"], "include_usage", &usage));
    o.include_usage = usage.value_or(false);
  }
  if (body.contains("speculation") && !body["speculation"].is_null()) {
    const json& s = body["speculation"];
    if (!s.is_object())
      return Invalid("speculation", "must be an object {k, adaptive, disable, min_confidence, proposer}");
    std::optional<int64_t> k;
    std::optional<bool> adaptive, disable;
    std::optional<double> conf;
    if (s.contains("proposer") && !s["proposer"].is_null()) {
      if (!s["proposer"].is_string()) return Invalid("speculation.proposer", "must be a string");
      auto p = ParseProposer(s["proposer"].get<std::string>());
      if (!p.ok()) return p.status();
      r.proposer = *p;
    }
    SPECD_RETURN_IF_ERROR(GetInt(s, "k", &k));
    SPECD_RETURN_IF_ERROR(GetBool(s, "adaptive", &adaptive));
    SPECD_RETURN_IF_ERROR(GetBool(s, "disable", &disable));
    SPECD_RETURN_IF_ERROR(GetNumber(s, "min_confidence", &conf));
    if (k) r.k = static_cast<int>(std::clamp<int64_t>(*k, -1, 1 << 20));
    r.adaptive = adaptive;
    r.disable_speculation = disable.value_or(false);
    if (conf) r.min_confidence = static_cast<float>(*conf);
  }
  return o;
}

const char* OpenAiFinishReason(FinishReason r) {
  return r == FinishReason::kEos || r == FinishReason::kStop ? "stop" : "length";
}

int HttpStatusOf(const absl::Status& st) {
  switch (st.code()) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kFailedPrecondition: return 400;
    case absl::StatusCode::kUnauthenticated: return 401;
    case absl::StatusCode::kPermissionDenied: return 403;
    case absl::StatusCode::kNotFound: return 404;
    case absl::StatusCode::kResourceExhausted: return 429;
    case absl::StatusCode::kCancelled: return 499;
    case absl::StatusCode::kUnimplemented: return 501;
    case absl::StatusCode::kUnavailable: return 503;
    case absl::StatusCode::kDeadlineExceeded: return 504;
    default: return 500;
  }
}

json ErrorBody(const absl::Status& st) {
  const int http = HttpStatusOf(st);
  const char* type = http == 400   ? "invalid_request_error"
                     : http == 401 ? "authentication_error"
                     : http == 404 ? "not_found_error"
                     : http == 429 ? "rate_limit_error"
                     : http == 503 ? "service_unavailable"
                     : http == 504 ? "timeout"
                                   : "server_error";
  json code = nullptr;
  if (http == 401) code = "invalid_api_key";
  return {{"error", {{"message", std::string(st.message())}, {"type", type}, {"param", nullptr}, {"code", code}}}};
}

bool SecretEquals(const std::string& a, const std::string& b) {
  // Digests first: equal lengths, so the comparison time says nothing about either secret.
  const std::array<uint8_t, 32> da = Sha256Digest(a), db = Sha256Digest(b);
  return CRYPTO_memcmp(da.data(), db.data(), da.size()) == 0;
}

// ---------------------------------------------------------------- the server

namespace {

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t UnixNow() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  static const uint64_t salt = std::random_device()();
  return absl::StrCat(prefix, absl::Hex(salt ^ (counter.fetch_add(1) * 0x9e3779b97f4a7c15ull), absl::kZeroPad16));
}

// One streamed request: the generation runs on its own thread and hands
// events to the connection's thread.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Event> events;
  bool finished = false;
  absl::StatusOr<Summary> result = absl::UnknownError("not finished");
  std::atomic<bool> gone{false};  // the client went away
  std::thread thread;
  ~StreamState() {
    gone = true;
    if (thread.joinable()) thread.join();
  }
};

}  // namespace

struct HttpApi::Impl {
  HttpApiOptions opts;
  Generator* gen = nullptr;
  HttpApiHooks hooks;
  std::unique_ptr<httplib::Server> server;
  std::thread thread;

  std::string Model() const {
    std::string m = hooks.model ? hooks.model() : "";
    return m.empty() ? "specd" : m;
  }

  static void Reply(httplib::Response& res, int status, const json& body) {
    res.status = status;
    res.set_content(Dump(body), "application/json");
  }
  static void Fail(httplib::Response& res, const absl::Status& st) { Reply(res, HttpStatusOf(st), ErrorBody(st)); }

  bool Authorized(const httplib::Request& req) const {
    if (opts.api_key.empty()) return true;
    const std::string h = req.get_header_value("Authorization");
    constexpr std::string_view kBearer = "Bearer ";
    if (h.compare(0, kBearer.size(), kBearer) != 0) return false;
    return SecretEquals(h.substr(kBearer.size()), opts.api_key);
  }

  json Logprobs(const OpenAiRequest& o, const std::vector<TokenLogprob>& lps, size_t* offset) const {
    auto text = [&](int32_t id) { return hooks.token_text ? hooks.token_text(id) : std::string(); };
    auto bytes = [](const std::string& s) {
      json b = json::array();
      for (unsigned char c : s) b.push_back(static_cast<int>(c));
      return b;
    };
    if (o.chat) {
      json content = json::array();
      for (const TokenLogprob& l : lps) {
        const std::string t = text(l.token);
        json top = json::array();
        for (size_t i = 0; i < l.top_tokens.size(); ++i) {
          const std::string tt = text(l.top_tokens[i]);
          top.push_back({{"token", tt}, {"logprob", l.top_logprobs[i]}, {"bytes", bytes(tt)}});
        }
        content.push_back({{"token", t}, {"logprob", l.logprob}, {"bytes", bytes(t)}, {"top_logprobs", top}});
      }
      return {{"content", content}};
    }
    json tokens = json::array(), token_lps = json::array(), tops = json::array(), offsets = json::array();
    for (const TokenLogprob& l : lps) {
      const std::string t = text(l.token);
      tokens.push_back(t);
      token_lps.push_back(l.logprob);
      json top = json::object();
      for (size_t i = 0; i < l.top_tokens.size(); ++i) top[text(l.top_tokens[i])] = l.top_logprobs[i];
      tops.push_back(top);
      offsets.push_back(*offset);
      *offset += t.size();
    }
    return {{"tokens", tokens}, {"token_logprobs", token_lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
  }

  static json Usage(const Summary& s) {
    return {{"prompt_tokens", s.prompt_tokens},
            {"completion_tokens", s.completion_tokens},
            {"total_tokens", s.prompt_tokens + s.completion_tokens}};
  }

  static json Figures(const Summary& s) {
    return {{"finish_reason", FinishReasonName(s.finish_reason)},
            {"acceptance_rate", s.acceptance_rate},
            {"mean_accepted_length", s.mean_accepted_length},
            {"mean_k", s.MeanK()},
            {"k_histogram", s.k_histogram},
            {"adaptive", s.adaptive},
            {"steps", s.steps},
            {"speculative_steps", s.speculative_steps},
            {"proposed", s.proposed},
            {"accepted", s.accepted},
            {"draft_failures", s.draft_failures},
            {"tokens_per_second", s.tokens_per_second},
            {"time_to_first_token_seconds", s.time_to_first_token_seconds},
            {"queue_seconds", s.queue_seconds},
            {"elapsed_seconds", s.elapsed_seconds}};
  }

  // The part of a choice that carries output: text or a chat message/delta.
  static void SetOutput(const OpenAiRequest& o, bool delta, const std::string& text, json* choice) {
    if (!o.chat) {
      (*choice)["text"] = text;
    } else if (delta) {
      (*choice)["delta"] = {{"content", text}};
    } else {
      (*choice)["message"] = {{"role", "assistant"}, {"content", text}};
    }
  }

  void Complete(const OpenAiRequest& o, httplib::Response& res) {
    auto sum = gen->Generate(o.request);
    if (!sum.ok()) return Fail(res, sum.status());
    json choice = {{"index", 0}};
    SetOutput(o, false, sum->text, &choice);
    choice["logprobs"] = nullptr;  // requests with logprobs are collected from the events (Collect)
    choice["finish_reason"] = OpenAiFinishReason(sum->finish_reason);
    if (o.return_token_ids) choice["token_ids"] = sum->tokens;
    Reply(res, 200,
          {{"id", NewId(o.chat ? "chatcmpl-" : "cmpl-")},
           {"object", o.chat ? "chat.completion" : "text_completion"},
           {"created", UnixNow()},
           {"model", Model()},
           {"choices", json::array({choice})},
           {"usage", Usage(*sum)},
           {"specd", Figures(*sum)}});
  }

  void Handle(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!Authorized(req))
      return Fail(res, absl::UnauthenticatedError("missing or wrong API key (Authorization: Bearer KEY)"));
    const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) return Fail(res, absl::InvalidArgumentError("the request body is not valid JSON"));
    auto o = ParseOpenAiRequest(body, chat);
    if (!o.ok()) return Fail(res, o.status());
    if (!o->stream && o->logprobs < 0) return Complete(*o, res);
    Stream(*std::move(o), res);
  }

  // Runs the request on its own thread; answers with an error status when
  // it fails before its first event, else streams (SSE) or, for a
  // non-streamed request that asked for logprobs, collects the events.
  void Stream(OpenAiRequest o, httplib::Response& res) {
    auto st = std::make_shared<StreamState>();
    // The thread sees the state by pointer: its owners join the thread before it goes.
    StreamState* raw = st.get();
    o.request.cancelled = [raw] { return raw->gone.load(); };
    st->thread = std::thread([this, raw, req = o.request] {
      auto r = gen->Generate(req, [raw](const Event& ev) {
        {
          std::lock_guard<std::mutex> l(raw->mu);
          raw->events.push_back(ev);
        }
        raw->cv.notify_all();
        return !raw->gone.load();
      });
      std::lock_guard<std::mutex> l(raw->mu);
      raw->result = std::move(r);
      raw->finished = true;
      raw->cv.notify_all();
    });
    {
      std::unique_lock<std::mutex> l(st->mu);
      st->cv.wait(l, [&] { return st->finished || !st->events.empty(); });
      if (st->finished && !st->result.ok()) {
        const absl::Status err = st->result.status();
        l.unlock();
        return Fail(res, err);
      }
    }
    const std::string id = NewId(o.chat ? "chatcmpl-" : "cmpl-");
    const int64_t created = UnixNow();
    const std::string model = Model();
    if (!o.stream) return Collect(o, st, id, created, model, res);
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, o, st, id, created, model](size_t, httplib::DataSink& sink) {
          auto send = [&](const json& j) {
            const std::string line = "data: " + Dump(j) + "\n\n";
            if (!sink.write(line.data(), line.size())) st->gone = true;
            return !st->gone.load();
          };
          auto chunk = [&](json choice) {
            return json{{"id", id},
                        {"object", o.chat ? "chat.completion.chunk" : "text_completion"},
                        {"created", created},
                        {"model", model},
                        {"choices", json::array({std::move(choice)})}};
          };
          if (o.chat) send(chunk({{"index", 0}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"finish_reason", nullptr}}));
          size_t offset = 0;
          while (!st->gone.load()) {
            std::deque<Event> evs;
            bool finished;
            {
              std::unique_lock<std::mutex> l(st->mu);
              st->cv.wait(l, [&] { return st->finished || !st->events.empty(); });
              evs.swap(st->events);
              finished = st->finished;
            }
            for (const Event& ev : evs) {
              if (ev.text.empty() && ev.token_ids.empty()) continue;
              json c = {{"index", 0}};
              SetOutput(o, true, ev.text, &c);
              c["logprobs"] = o.logprobs >= 0 ? Logprobs(o, ev.logprobs, &offset) : json(nullptr);
              c["finish_reason"] = nullptr;
              if (o.return_token_ids) c["token_ids"] = ev.token_ids;
              if (!send(chunk(c))) break;
            }
            if (finished) break;
          }
          if (st->thread.joinable()) st->thread.join();
          if (st->gone.load()) return false;
          if (!st->result.ok()) {  // failed mid-stream: an error event, then the end
            send(ErrorBody(st->result.status()));
          } else {
            json c = {{"index", 0}};
            if (o.chat) c["delta"] = json::object();
            else c["text"] = "";
            c["logprobs"] = nullptr;
            c["finish_reason"] = OpenAiFinishReason(st->result->finish_reason);
            json last = chunk(c);
            last["specd"] = Figures(*st->result);
            send(last);
            if (o.include_usage) {
              json u = chunk(json());
              u["choices"] = json::array();
              u["usage"] = Usage(*st->result);
              send(u);
            }
          }
          const std::string done = "data: [DONE]\n\n";
          sink.write(done.data(), done.size());
          sink.done();
          return true;
        },
        [st](bool) {
          st->gone = true;
          if (st->thread.joinable()) st->thread.join();
        });
  }

  // A non-streamed answer assembled from the events (for logprobs).
  void Collect(const OpenAiRequest& o, const std::shared_ptr<StreamState>& st, const std::string& id, int64_t created,
               const std::string& model, httplib::Response& res) {
    std::vector<TokenLogprob> lps;
    {
      std::unique_lock<std::mutex> l(st->mu);
      st->cv.wait(l, [&] { return st->finished; });
      for (const Event& ev : st->events) lps.insert(lps.end(), ev.logprobs.begin(), ev.logprobs.end());
    }
    st->thread.join();
    if (!st->result.ok()) return Fail(res, st->result.status());
    const Summary& s = *st->result;
    json choice = {{"index", 0}};
    SetOutput(o, false, s.text, &choice);
    size_t offset = 0;
    choice["logprobs"] = Logprobs(o, lps, &offset);
    choice["finish_reason"] = OpenAiFinishReason(s.finish_reason);
    if (o.return_token_ids) choice["token_ids"] = s.tokens;
    Reply(res, 200,
          {{"id", id},
           {"object", o.chat ? "chat.completion" : "text_completion"},
           {"created", created},
           {"model", model},
           {"choices", json::array({choice})},
           {"usage", Usage(s)},
           {"specd", Figures(s)}});
  }
};

HttpApi::HttpApi(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}

HttpApi::~HttpApi() {
  impl_->server->stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

absl::StatusOr<std::unique_ptr<HttpApi>> HttpApi::Start(const HttpApiOptions& opts, Generator* gen,
                                                         HttpApiHooks hooks) {
  SPECD_ASSIGN_OR_RETURN(const HostPort hp, ParseHostPort(opts.listen));
  if (opts.tls_cert.empty() != opts.tls_key.empty())
    return absl::InvalidArgumentError("TLS needs both a certificate and a key (PEM files)");
  auto impl = std::make_unique<Impl>();
  impl->opts = opts;
  impl->gen = gen;
  impl->hooks = std::move(hooks);
  if (!opts.tls_cert.empty()) {
    auto s = std::make_unique<httplib::SSLServer>(opts.tls_cert.c_str(), opts.tls_key.c_str());
    if (!s->is_valid())
      return absl::InvalidArgumentError(absl::StrCat("cannot use the TLS certificate '", opts.tls_cert, "' and key '",
                                                     opts.tls_key, "' (unreadable, not PEM, or not a pair)"));
    impl->server = std::move(s);
  } else {
    impl->server = std::make_unique<httplib::Server>();
  }
  httplib::Server& svr = *impl->server;
  const int threads = std::max(1, opts.threads);
  svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  svr.set_payload_max_length(16 << 20);
  svr.set_read_timeout(30);
  svr.set_write_timeout(30);
  Impl* self = impl.get();
  svr.Post("/v1/completions", [self](const httplib::Request& q, httplib::Response& r) { self->Handle(q, r, false); });
  svr.Post("/v1/chat/completions", [self](const httplib::Request& q, httplib::Response& r) { self->Handle(q, r, true); });
  svr.Get("/v1/models", [self](const httplib::Request& q, httplib::Response& r) {
    if (!self->Authorized(q)) return Impl::Fail(r, absl::UnauthenticatedError("missing or wrong API key"));
    Impl::Reply(r, 200,
                {{"object", "list"},
                 {"data", json::array({{{"id", self->Model()}, {"object", "model"}, {"created", 0}, {"owned_by", "specd"}}})}});
  });
  svr.Get("/health", [self](const httplib::Request&, httplib::Response& r) {
    const bool ok = !self->hooks.ready || self->hooks.ready();
    Impl::Reply(r, ok ? 200 : 503, {{"status", ok ? "ok" : "unavailable"}, {"model", self->Model()}});
  });
  svr.Get("/metrics", [self](const httplib::Request& q, httplib::Response& r) {
    if (!self->Authorized(q)) return Impl::Fail(r, absl::UnauthenticatedError("missing or wrong API key"));
    if (!self->hooks.metrics) return Impl::Fail(r, absl::NotFoundError("no metrics here"));
    r.set_content(self->hooks.metrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  svr.set_error_handler([](const httplib::Request& q, httplib::Response& r) {
    if (!r.body.empty()) return;  // a handler's own error answer
    const absl::Status st = r.status == 404 ? absl::NotFoundError(absl::StrCat("no route for ", q.method, " ", q.path))
                                            : absl::InvalidArgumentError(absl::StrCat("HTTP ", r.status));
    const int status = r.status;
    Impl::Reply(r, status, ErrorBody(st));
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& r, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    Impl::Fail(r, absl::InternalError(what));
  });
  const int port = hp.port == 0 ? svr.bind_to_any_port(hp.host) : (svr.bind_to_port(hp.host, hp.port) ? hp.port : -1);
  if (port < 0) return absl::UnavailableError(absl::StrCat("cannot listen on '", opts.listen, "' (address in use?)"));
  impl->thread = std::thread([self] { self->server->listen_after_bind(); });
  return std::unique_ptr<HttpApi>(new HttpApi(std::move(impl), port));
}

}  // namespace specd::api
