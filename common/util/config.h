// Flags and config files with one set of names.
//
// Every process declares its options up front; values come from defaults, then
// an optional config file (`--config FILE`, lines `name = value`, '#' comments),
// then command-line flags (`--name=value`, `--name value`, `--flag`,
// `--no-flag`); `--help` lists them (`--help=json` for tools). An unknown
// flag or config key is an error naming where it came from; nothing is
// silently ignored. `Summary()` renders the effective configuration, which
// every process logs at start.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "common/util/status.h"

namespace specd {

class Config {
 public:
  enum class Type { kString, kInt, kDouble, kBool, kBytes };

  explicit Config(std::string program) : program_(std::move(program)) {}

  void AddString(const std::string& name, const std::string& def, const std::string& help);
  void AddInt(const std::string& name, int64_t def, const std::string& help,
              int64_t min = INT64_MIN, int64_t max = INT64_MAX);
  void AddDouble(const std::string& name, double def, const std::string& help,
                 double min = -1e300, double max = 1e300);
  void AddBool(const std::string& name, bool def, const std::string& help);
  // Byte sizes accept suffixes K/M/G/T (powers of 1024, optional "iB"/"B") and
  // the word "auto" (stored as -1, meaning: decide at run time).
  void AddBytes(const std::string& name, const std::string& def, const std::string& help);

  // Parses argv (argv[0] skipped). Positional arguments are kept in order.
  // Returns an error for unknown names, bad values, or out-of-range numbers.
  absl::Status Parse(int argc, const char* const* argv);
  absl::Status ParseArgs(const std::vector<std::string>& args);
  absl::Status LoadFile(const std::string& path);
  absl::Status Set(const std::string& name, const std::string& value, const std::string& origin);

  bool Has(const std::string& name) const { return opts_.count(name) != 0; }
  bool IsSet(const std::string& name) const;  // given explicitly (file or flag)
  std::string GetString(const std::string& name) const;
  int64_t GetInt(const std::string& name) const;
  double GetDouble(const std::string& name) const;
  bool GetBool(const std::string& name) const;
  int64_t GetBytes(const std::string& name) const;  // -1 for "auto"

  const std::vector<std::string>& positional() const { return positional_; }
  bool help_requested() const { return help_; }
  // The options and their help; after --help=json, the same as JSON
  // ({"program", "options": [{"name", "type", "default", "help"}]}) for tools.
  std::string Usage() const;
  // "name = value  (source)" lines, one per option, sorted by name.
  std::string Summary() const;
  // Writes the effective configuration as a config file this class accepts.
  std::string ToConfigFile() const;
  // Logs the effective configuration, one structured line per option.
  void LogEffective() const;

  static absl::StatusOr<int64_t> ParseBytes(const std::string& s);
  static std::string FormatBytes(int64_t bytes);

 private:
  struct Opt {
    Type type;
    std::string help;
    std::string value;  // canonical text form
    std::string source = "default";
    int64_t imin = INT64_MIN, imax = INT64_MAX;
    double dmin = -1e300, dmax = 1e300;
  };
  absl::Status Validate(const std::string& name, Opt& o, const std::string& value,
                        const std::string& origin);
  const Opt& Get(const std::string& name, Type t) const;

  std::string program_;
  std::map<std::string, Opt> opts_;
  std::vector<std::string> positional_;
  bool help_ = false;
  bool help_json_ = false;
};

// The items of a comma-separated option value ("a, b,c"): whitespace around
// items trimmed, empty items skipped.
std::vector<std::string> SplitList(const std::string& s);

// A comma-separated list of numbers in [lo, hi]; `what` names an item in errors.
template <typename T>
absl::StatusOr<std::vector<T>> ParseList(const std::string& s, const std::string& what, T lo, T hi) {
  std::vector<T> out;
  for (const std::string& part : SplitList(s)) {
    T v{};
    bool ok;
    if constexpr (std::is_floating_point_v<T>) ok = absl::SimpleAtod(part, &v);
    else ok = absl::SimpleAtoi(part, &v);
    if (!ok || v < lo || v > hi)
      return absl::InvalidArgumentError(absl::StrCat("bad ", what, " '", part, "' (want ", lo, "..", hi, ")"));
    out.push_back(v);
  }
  return out;
}

}  // namespace specd
