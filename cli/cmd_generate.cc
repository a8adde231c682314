// specd generate: in-process generation on one model (optionally with a
// draft model for speculative decoding), or through a coordinator.
#include <chrono>
#include <cstdio>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "common/engine/engine.h"
#include "common/engine/spec_core.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/log.h"

namespace specd::cli {

int GenerateRemote(const Config& c);  // cmd_client.cc

namespace {
double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

void AddSamplingFlags(Config* c) {
  c->AddString("prompt", "", "prompt text");
  c->AddBool("chat", false, "render the prompt as a user message with the model's chat template");
  c->AddString("system", "", "system message (with --chat)");
  c->AddInt("max-tokens", 64, "tokens to generate at most", 1, 1 << 20);
  c->AddDouble("temperature", 0.0, "sampling temperature (0: greedy)", 0.0, 100.0);
  c->AddInt("top-k", 0, "top-k (0: off)", 0, 1 << 24);
  c->AddDouble("top-p", 1.0, "nucleus probability (1: off)", 1e-6, 1.0);
  c->AddDouble("min-p", 0.0, "min-p relative to the top token (0: off)", 0.0, 0.999);
  c->AddDouble("repetition-penalty", 1.0, "repetition penalty (1: off)", 0.01, 100.0);
  c->AddInt("seed", 0, "sampling seed");
  c->AddBool("ignore-eos", false, "keep generating past end-of-generation tokens");
  c->AddBool("print-ids", false, "print the generated token ids on stdout after the text");
}

SamplingParams SamplingFromConfig(const Config& c) {
  SamplingParams p;
  p.temperature = static_cast<float>(c.GetDouble("temperature"));
  p.top_k = static_cast<int32_t>(c.GetInt("top-k"));
  p.top_p = static_cast<float>(c.GetDouble("top-p"));
  p.min_p = static_cast<float>(c.GetDouble("min-p"));
  p.repetition_penalty = static_cast<float>(c.GetDouble("repetition-penalty"));
  p.seed = static_cast<uint64_t>(c.GetInt("seed"));
  return p;
}

int Generate(const std::vector<std::string>& args) {
  Config c("specd generate");
  EngineOptions::AddFlags(&c);
  AddSamplingFlags(&c);
  c.AddString("draft", "", "draft model for in-process speculative decoding");
  c.AddInt("k", 4, "draft tokens proposed per step", 1, 16);
  c.AddString("coordinator", "", "generate through this coordinator (host:port or unix:PATH) instead of in-process");
  c.AddString("log-level", "warn", "log level: debug, info, warn, error");
  c.Set("max-seqs", "1", "default").IgnoreError();
  // `model` is not required with --coordinator; check below.
  if (int rc = ParseOrExit(c, args); rc >= 0) return rc;
  LogLevel lvl;
  if (!ParseLogLevel(c.GetString("log-level"), &lvl)) return Fail("bad --log-level");
  SetLogLevel(lvl);
  if (!c.GetString("coordinator").empty()) return GenerateRemote(c);
  if (c.GetString("prompt").empty()) return Fail("--prompt is required (and must not be empty)");
  auto opts = EngineOptions::FromConfig(c);
  if (!opts.ok()) return Fail(opts.status());
  auto target = Engine::Create(*opts);
  if (!target.ok()) return Fail(target.status());
  Engine& e = **target;
  const Tokenizer& tok = e.tokenizer();
  std::string text = c.GetString("prompt");
  if (c.GetBool("chat")) {
    std::vector<ChatMessage> msgs;
    if (!c.GetString("system").empty()) msgs.push_back({"system", c.GetString("system")});
    msgs.push_back({"user", text});
    auto r = tok.ApplyChatTemplate(msgs, true);
    if (!r.ok()) return Fail(r.status());
    text = *r;
  }
  // A rendered chat template carries its own bos.
  std::vector<int32_t> prompt = tok.Encode(text, !c.GetBool("chat"), true);
  if (prompt.empty()) return Fail("the prompt encodes to no tokens");
  const SamplingParams sp = SamplingFromConfig(c);

  std::unique_ptr<Engine> draft_engine;
  std::unique_ptr<DraftCore> draft;
  std::vector<float> q;
  const int k = static_cast<int>(c.GetInt("k"));
  if (!c.GetString("draft").empty()) {
    EngineOptions d = *opts;
    d.model_path = c.GetString("draft");
    auto de = Engine::Create(d);
    if (!de.ok()) return Fail(de.status());
    if ((*de)->tokenizer().VocabDigest() != tok.VocabDigest())
      return Fail("draft and target vocabularies differ: " + d.model_path + " cannot draft for " + opts->model_path);
    draft_engine = std::move(*de);
    draft = std::make_unique<DraftCore>(draft_engine.get());
    q.resize(static_cast<size_t>(k) * e.vocab_size());
  }

  TargetCore core(&e);
  const auto t0 = std::chrono::steady_clock::now();
  if (auto st = core.Open(0, prompt, sp); !st.ok()) return Fail(st);
  if (draft) {
    if (auto st = draft->Open(0, prompt, sp); !st.ok()) return Fail(st);
  }
  const double prefill_s = Since(t0);
  StreamDecoder dec(&tok);
  std::vector<int32_t> out;
  const int max_tokens = static_cast<int>(c.GetInt("max-tokens"));
  int64_t steps = 0, proposed = 0, accepted = 0;
  std::vector<int32_t> last_appended;
  int64_t base_len = static_cast<int64_t>(prompt.size());
  const auto t1 = std::chrono::steady_clock::now();
  bool done = false;
  while (!done && static_cast<int>(out.size()) < max_tokens) {
    VerifyRequest vr;
    vr.seq = 0;
    if (draft) {
      if (!last_appended.empty()) {
        if (auto st = draft->Sync(0, base_len, last_appended); !st.ok()) return Fail(st);
      }
      auto props = draft->Propose({ProposeRequest{0, k, 0.0f}}, {q.data()});
      if (!props[0].status.ok()) return Fail(props[0].status);
      vr.proposals = props[0].tokens;
      vr.q = q.data();
    }
    base_len = core.CommittedLength(0);
    auto res = core.Verify({vr});
    if (!res[0].status.ok()) return Fail(res[0].status);
    ++steps;
    proposed += res[0].n_proposed;
    accepted += res[0].n_accepted;
    last_appended = res[0].appended;
    for (int32_t t : res[0].appended) {
      if (static_cast<int>(out.size()) >= max_tokens) break;
      if (!c.GetBool("ignore-eos") && tok.IsEog(t)) {
        done = true;
        break;
      }
      out.push_back(t);
      std::fputs(dec.Push(t).c_str(), stdout);
      std::fflush(stdout);
    }
  }
  std::fputs(dec.Flush().c_str(), stdout);
  const double decode_s = Since(t1);
  std::printf("\n");
  if (c.GetBool("print-ids")) {
    std::printf("ids:");
    for (int32_t t : out) std::printf(" %d", t);
    std::printf("\n");
  }
  std::fprintf(stderr, "prompt: %zu tokens, prefill %.1f tok/s (%.3f s); generated: %zu tokens, decode %.2f tok/s (%.3f s)",
               prompt.size(), prompt.size() / std::max(prefill_s, 1e-9), prefill_s, out.size(),
               out.size() / std::max(decode_s, 1e-9), decode_s);
  if (draft) {
    std::fprintf(stderr, "; k=%d acceptance %.1f%% (%lld/%lld), mean accepted length %.2f tokens/step",
                 k, proposed ? 100.0 * accepted / proposed : 0.0, static_cast<long long>(accepted),
                 static_cast<long long>(proposed), steps ? static_cast<double>(accepted + steps) / steps : 0.0);
  }
  std::fprintf(stderr, "\n");
  return 0;
}

}  // namespace specd::cli
