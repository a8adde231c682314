// Structured logging in logfmt (one line per event, key=value pairs) to stderr.
//   SPECD_LOG(INFO) << "loaded model" << Kv("path", p) << Kv("layers", n);
// The process name is set once at start (SetLogComponent) and stamped on every
// line so that journald/systemd output from the three services can be told apart.
#pragma once
#include <sstream>
#include <string>
#include <string_view>

namespace specd {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

void SetLogComponent(std::string_view name);
void SetLogLevel(LogLevel level);
LogLevel GetLogLevel();
// Parses "debug", "info", "warn", "error".
bool ParseLogLevel(std::string_view s, LogLevel* out);

// A key/value pair; values with spaces or quotes are quoted on output.
struct Kv {
  template <typename T>
  Kv(std::string_view k, const T& v) : key(k) {
    std::ostringstream os;
    os << v;
    value = os.str();
  }
  Kv(std::string_view k, std::string_view v) : key(k), value(v) {}
  Kv(std::string_view k, const char* v) : key(k), value(v) {}
  Kv(std::string_view k, const std::string& v) : key(k), value(v) {}
  std::string key, value;
};

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  LogLine& operator<<(const Kv& kv);
  template <typename T>
  LogLine& operator<<(const T& v) {
    if (enabled_) msg_ << v;
    return *this;
  }

 private:
  bool enabled_;
  LogLevel level_;
  std::ostringstream msg_;
  std::string kvs_;
};

std::string LogQuote(std::string_view v);

}  // namespace specd

#define SPECD_LOG_DEBUG ::specd::LogLevel::kDebug
#define SPECD_LOG_INFO ::specd::LogLevel::kInfo
#define SPECD_LOG_WARN ::specd::LogLevel::kWarn
#define SPECD_LOG_ERROR ::specd::LogLevel::kError
#define SPECD_LOG(sev) ::specd::LogLine(SPECD_LOG_##sev, __FILE__, __LINE__)
