#include "common/util/log.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace specd {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};
std::mutex g_mu;
std::string& Component() {
  static std::string c = "specd";
  return c;
}
const char* LevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarn: return "warn";
    case LogLevel::kError: return "error";
  }
  return "info";
}
}  // namespace

void SetLogComponent(std::string_view name) {
  std::lock_guard<std::mutex> l(g_mu);
  Component() = std::string(name);
}
void SetLogLevel(LogLevel level) { g_level = static_cast<int>(level); }
LogLevel GetLogLevel() { return static_cast<LogLevel>(g_level.load()); }

bool ParseLogLevel(std::string_view s, LogLevel* out) {
  if (s == "debug") *out = LogLevel::kDebug;
  else if (s == "info") *out = LogLevel::kInfo;
  else if (s == "warn" || s == "warning") *out = LogLevel::kWarn;
  else if (s == "error") *out = LogLevel::kError;
  else return false;
  return true;
}

std::string LogQuote(std::string_view v) {
  bool needs = v.empty();
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n' || c == '\t' || c == '\\') needs = true;
  }
  if (!needs) return std::string(v);
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

LogLine::LogLine(LogLevel level, const char* /*file*/, int /*line*/)
    : enabled_(static_cast<int>(level) >= g_level.load()), level_(level) {}

LogLine& LogLine::operator<<(const Kv& kv) {
  if (enabled_) {
    kvs_ += ' ';
    kvs_ += kv.key;
    kvs_ += '=';
    kvs_ += LogQuote(kv.value);
  }
  return *this;
}

LogLine::~LogLine() {
  if (!enabled_) return;
  using namespace std::chrono;
  const auto now = system_clock::now();
  const std::time_t t = system_clock::to_time_t(now);
  const int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  gmtime_r(&t, &tm);
  char ts[32];
  std::strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string line;
  {
    std::lock_guard<std::mutex> l(g_mu);
    line = std::string("ts=") + ts + "." + (ms < 10 ? "00" : ms < 100 ? "0" : "") +
           std::to_string(ms) + "Z level=" + LevelName(level_) + " proc=" + Component() +
           " pid=" + std::to_string(getpid()) + " msg=" + LogQuote(msg_.str()) + kvs_ + "\n";
  }
  std::fputs(line.c_str(), stderr);
}

}  // namespace specd
