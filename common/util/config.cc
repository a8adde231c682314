#include "common/util/config.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "absl/strings/str_join.h"
#include "common/util/log.h"

namespace specd {
namespace {
std::string Trim(const std::string& s) { return std::string(absl::StripAsciiWhitespace(s)); }
const char* TypeName(Config::Type t) {
  switch (t) {
    case Config::Type::kString: return "string";
    case Config::Type::kInt: return "int";
    case Config::Type::kDouble: return "float";
    case Config::Type::kBool: return "bool";
    case Config::Type::kBytes: return "bytes";
  }
  return "?";
}
}  // namespace

void Config::AddString(const std::string& name, const std::string& def, const std::string& help) {
  opts_[name] = Opt{Type::kString, help, def};
}
void Config::AddInt(const std::string& name, int64_t def, const std::string& help, int64_t min,
                    int64_t max) {
  Opt o{Type::kInt, help, std::to_string(def)};
  o.imin = min;
  o.imax = max;
  opts_[name] = o;
}
void Config::AddDouble(const std::string& name, double def, const std::string& help, double min,
                       double max) {
  std::ostringstream os;
  os << def;
  Opt o{Type::kDouble, help, os.str()};
  o.dmin = min;
  o.dmax = max;
  opts_[name] = o;
}
void Config::AddBool(const std::string& name, bool def, const std::string& help) {
  opts_[name] = Opt{Type::kBool, help, def ? "true" : "false"};
}
void Config::AddBytes(const std::string& name, const std::string& def, const std::string& help) {
  opts_[name] = Opt{Type::kBytes, help, def};
}

absl::StatusOr<int64_t> Config::ParseBytes(const std::string& in) {
  std::string s = absl::AsciiStrToLower(Trim(in));
  if (s == "auto") return -1;
  size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  if (i == 0) return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", in, "'"));
  double num = 0;
  if (!absl::SimpleAtod(s.substr(0, i), &num))
    return absl::InvalidArgumentError(absl::StrCat("not a byte size: '", in, "'"));
  std::string suf = Trim(s.substr(i));
  double mul = 1;
  if (suf.empty() || suf == "b") mul = 1;
  else if (suf == "k" || suf == "kb" || suf == "kib") mul = 1024.0;
  else if (suf == "m" || suf == "mb" || suf == "mib") mul = 1024.0 * 1024;
  else if (suf == "g" || suf == "gb" || suf == "gib") mul = 1024.0 * 1024 * 1024;
  else if (suf == "t" || suf == "tb" || suf == "tib") mul = 1024.0 * 1024 * 1024 * 1024;
  else return absl::InvalidArgumentError(absl::StrCat("unknown size suffix in '", in, "'"));
  const double v = num * mul;
  if (!(v >= 0) || v > 9e18) return absl::InvalidArgumentError(absl::StrCat("byte size out of range: '", in, "'"));
  return static_cast<int64_t>(std::llround(v));
}

std::string Config::FormatBytes(int64_t b) {
  if (b < 0) return "auto";
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(b);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  if (u == 0) return absl::StrCat(b, " B");
  return absl::StrFormat("%.2f %s", v, units[u]);
}

absl::Status Config::Validate(const std::string& name, Opt& o, const std::string& value,
                              const std::string& origin) {
  auto bad = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": bad value '", value, "' for ", name, " (", TypeName(o.type), "): ", why));
  };
  switch (o.type) {
    case Type::kString: o.value = value; break;
    case Type::kInt: {
      int64_t v;
      if (!absl::SimpleAtoi(Trim(value), &v)) return bad("not an integer");
      if (v < o.imin || v > o.imax)
        return bad(absl::StrCat("must be in [", o.imin, ", ", o.imax, "]"));
      o.value = std::to_string(v);
      break;
    }
    case Type::kDouble: {
      double v;
      if (!absl::SimpleAtod(Trim(value), &v) || !std::isfinite(v)) return bad("not a number");
      if (v < o.dmin || v > o.dmax) return bad(absl::StrCat("must be in [", o.dmin, ", ", o.dmax, "]"));
      o.value = Trim(value);
      break;
    }
    case Type::kBool: {
      std::string v = absl::AsciiStrToLower(Trim(value));
      if (v == "1" || v == "true" || v == "yes" || v == "on") o.value = "true";
      else if (v == "0" || v == "false" || v == "no" || v == "off") o.value = "false";
      else return bad("expected true/false");
      break;
    }
    case Type::kBytes: {
      auto b = ParseBytes(value);
      if (!b.ok()) return bad(std::string(b.status().message()));
      o.value = Trim(value);
      break;
    }
  }
  o.source = origin;
  return absl::OkStatus();
}

absl::Status Config::Set(const std::string& name, const std::string& value, const std::string& origin) {
  auto it = opts_.find(name);
  if (it == opts_.end()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": unknown option '", name, "' for ", program_,
                                                   " (see --help for the list)"));
  }
  return Validate(name, it->second, value, origin);
}

absl::Status Config::LoadFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open config file '", path, "'"));
  std::string line;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    const auto hash = line.find('#');
    if (hash != std::string::npos) line = line.substr(0, hash);
    line = Trim(line);
    if (line.empty()) continue;
    const auto eq = line.find('=');
    const std::string origin = absl::StrCat(path, ":", lineno);
    if (eq == std::string::npos)
      return absl::InvalidArgumentError(absl::StrCat(origin, ": expected 'name = value', got '", line, "'"));
    std::string key = Trim(line.substr(0, eq));
    std::string val = Trim(line.substr(eq + 1));
    if (val.size() >= 2 && val.front() == '"' && val.back() == '"') val = val.substr(1, val.size() - 2);
    if (key == "config") return absl::InvalidArgumentError(absl::StrCat(origin, ": 'config' cannot nest"));
    SPECD_RETURN_IF_ERROR(Set(key, val, origin));
  }
  return absl::OkStatus();
}

absl::Status Config::Parse(int argc, const char* const* argv) {
  std::vector<std::string> args;
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  return ParseArgs(args);
}

absl::Status Config::ParseArgs(const std::vector<std::string>& args) {
  // The config file is applied first so that flags override it wherever it appears.
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config" || a.rfind("--config=", 0) == 0) {
      std::string path;
      if (a == "--config") {
        if (i + 1 >= args.size()) return absl::InvalidArgumentError("--config needs a file path");
        path = args[i + 1];
      } else {
        path = a.substr(9);
      }
      SPECD_RETURN_IF_ERROR(LoadFile(path));
    }
  }
  bool only_positional = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (only_positional || a.size() < 2 || a[0] != '-' || a == "-") {
      positional_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positional = true;
      continue;
    }
    if (a == "-h" || a == "--help" || a == "--help=json") {
      help_ = true;
      help_json_ = a == "--help=json";
      continue;
    }
    if (a.rfind("--", 0) != 0)
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", a, "' (flags are --name=value)"));
    std::string body = a.substr(2);
    std::string name = body, value;
    bool has_value = false;
    const auto eq = body.find('=');
    if (eq != std::string::npos) {
      name = body.substr(0, eq);
      value = body.substr(eq + 1);
      has_value = true;
    }
    std::replace(name.begin(), name.end(), '_', '-');
    if (name == "config") {
      if (!has_value) ++i;
      continue;
    }
    auto it = opts_.find(name);
    if (it == opts_.end() && !has_value && name.rfind("no-", 0) == 0) {
      auto it2 = opts_.find(name.substr(3));
      if (it2 != opts_.end() && it2->second.type == Type::kBool) {
        SPECD_RETURN_IF_ERROR(Set(name.substr(3), "false", "flag --" + name));
        continue;
      }
    }
    if (it == opts_.end())
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '--", name, "' for ", program_, " (see --help for the list)"));
    if (!has_value) {
      if (it->second.type == Type::kBool) {
        value = "true";
      } else {
        if (i + 1 >= args.size())
          return absl::InvalidArgumentError(absl::StrCat("flag --", name, " needs a value"));
        value = args[++i];
      }
    }
    SPECD_RETURN_IF_ERROR(Set(name, value, "flag --" + name));
  }
  return absl::OkStatus();
}

const Config::Opt& Config::Get(const std::string& name, Type t) const {
  auto it = opts_.find(name);
  if (it == opts_.end() || it->second.type != t) {
    std::fprintf(stderr, "internal error: option %s not declared as %s\n", name.c_str(), TypeName(t));
    std::abort();
  }
  return it->second;
}

bool Config::IsSet(const std::string& name) const {
  auto it = opts_.find(name);
  return it != opts_.end() && it->second.source != "default";
}
std::string Config::GetString(const std::string& name) const { return Get(name, Type::kString).value; }
int64_t Config::GetInt(const std::string& name) const {
  return std::strtoll(Get(name, Type::kInt).value.c_str(), nullptr, 10);
}
double Config::GetDouble(const std::string& name) const {
  return std::strtod(Get(name, Type::kDouble).value.c_str(), nullptr);
}
bool Config::GetBool(const std::string& name) const { return Get(name, Type::kBool).value == "true"; }
int64_t Config::GetBytes(const std::string& name) const {
  auto v = ParseBytes(Get(name, Type::kBytes).value);
  return v.ok() ? *v : -1;
}

std::string Config::Usage() const {
  if (help_json_) {
    nlohmann::ordered_json opts = nlohmann::ordered_json::array();
    for (const auto& [name, o] : opts_)
      opts.push_back({{"name", name}, {"type", TypeName(o.type)}, {"default", o.value}, {"help", o.help}});
    return nlohmann::ordered_json{{"program", program_}, {"options", opts}}.dump(1) + "\n";
  }
  std::ostringstream os;
  os << "usage: " << program_ << " [--config FILE] [--name=value ...]\n\noptions (also accepted as 'name = value' lines in the config file):\n";
  for (const auto& [name, o] : opts_) {
    os << "  --" << name << " (" << TypeName(o.type) << ", default: " << (o.value.empty() ? "\"\"" : o.value)
       << ")\n      " << o.help << "\n";
  }
  return os.str();
}

std::string Config::Summary() const {
  std::ostringstream os;
  for (const auto& [name, o] : opts_) {
    os << "  " << name << " = " << (o.value.empty() ? "\"\"" : o.value) << "  (" << o.source << ")\n";
  }
  return os.str();
}

std::string Config::ToConfigFile() const {
  std::ostringstream os;
  for (const auto& [name, o] : opts_) {
    os << "# " << o.help << "\n" << name << " = " << o.value << "\n";
  }
  return os.str();
}

void Config::LogEffective() const {
  SPECD_LOG(INFO) << "effective configuration" << Kv("program", program_) << Kv("options", opts_.size());
  for (const auto& [name, o] : opts_) {
    SPECD_LOG(INFO) << "config" << Kv("key", name) << Kv("value", o.value) << Kv("source", o.source);
  }
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> out;
  for (absl::string_view part : absl::StrSplit(s, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

}  // namespace specd
