#include "common/metrics/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "common/util/log.h"

namespace specd::metrics {

const char* TypeName(Type t) {
  switch (t) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// ---------------------------------------------------------------- Histogram

Histogram::Histogram(std::vector<double> bounds) {
  bounds.erase(std::remove_if(bounds.begin(), bounds.end(), [](double b) { return !std::isfinite(b); }), bounds.end());
  std::sort(bounds.begin(), bounds.end());
  bounds.erase(std::unique(bounds.begin(), bounds.end()), bounds.end());
  bounds_ = std::move(bounds);
  counts_ = std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) counts_[i].store(0);
}

void Histogram::Observe(double v) {
  if (std::isnan(v)) return;
  // The first bucket whose upper bound is >= v (Prometheus buckets are "le").
  const size_t i = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_.fetch_add(v, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
}

Histogram::Snapshot Histogram::Snap() const {
  Snapshot s;
  s.bounds = bounds_;
  s.counts.resize(bounds_.size() + 1);
  for (size_t i = 0; i <= bounds_.size(); ++i) s.counts[i] = counts_[i].load(std::memory_order_relaxed);
  s.sum = sum_.load(std::memory_order_relaxed);
  // The count is the buckets' total, so that the rendered +Inf bucket and
  // _count always agree even while observations race with the snapshot.
  s.count = 0;
  for (uint64_t c : s.counts) s.count += c;
  return s;
}

std::vector<double> LinearBuckets(double start, double width, int n) {
  std::vector<double> b;
  for (int i = 0; i < n; ++i) b.push_back(start + width * i);
  return b;
}

std::vector<double> ExponentialBuckets(double start, double factor, int n) {
  std::vector<double> b;
  double v = start;
  for (int i = 0; i < n; ++i, v *= factor) b.push_back(v);
  return b;
}

// ---------------------------------------------------------------- names and values

bool ValidMetricName(const std::string& n) {
  if (n.empty()) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

bool ValidLabelName(const std::string& n) {
  if (n.empty() || n.rfind("__", 0) == 0) return false;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    if (!alpha && !(i > 0 && c >= '0' && c <= '9')) return false;
  }
  return true;
}

std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 9007199254740992.0) {
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  // The shortest form that reads back as the same double (0.1, not 0.10000000000000001).
  for (int prec = 15; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

namespace {

std::string EscapeHelp(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

std::string EscapeLabel(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\') o += "\\\\";
    else if (c == '\n') o += "\\n";
    else if (c == '"') o += "\\\"";
    else o += c;
  }
  return o;
}

bool ValidLabels(const Labels& labels) {
  for (const auto& [k, v] : labels) {
    if (!ValidLabelName(k) || k == "le") return false;
  }
  return true;
}

// {a="x",b="y"} with `extra` (e.g. le) appended; empty when there are none.
std::string LabelText(const Labels& labels, const std::pair<std::string, std::string>* extra = nullptr) {
  if (labels.empty() && !extra) return "";
  std::string o = "{";
  bool first = true;
  auto add = [&](const std::string& k, const std::string& v) {
    if (!first) o += ',';
    first = false;
    o += k;
    o += "=\"";
    o += EscapeLabel(v);
    o += '"';
  };
  for (const auto& [k, v] : labels) add(k, v);
  if (extra) add(extra->first, extra->second);
  o += '}';
  return o;
}

void Header(std::string* out, const std::string& name, const std::string& help, Type type) {
  *out += "# HELP " + name + " " + EscapeHelp(help) + "\n";
  *out += "# TYPE " + name + " " + TypeName(type) + "\n";
}

void Sample(std::string* out, const std::string& name, const Labels& labels, double v) {
  *out += name + LabelText(labels) + " " + FormatValue(v) + "\n";
}

struct Collected {
  std::string help;
  Type type = Type::kGauge;
  std::vector<std::pair<Labels, double>> samples;
};

class MapSink : public Sink {
 public:
  void Add(const std::string& name, const std::string& help, Type type, const Labels& labels, double value) override {
    if (!ValidMetricName(name) || !ValidLabels(labels) || type == Type::kHistogram) return;
    auto it = index_.find(name);
    if (it == index_.end()) {
      it = index_.emplace(name, order_.size()).first;
      order_.push_back({name, Collected{help, type, {}}});
    }
    Collected& c = order_[it->second].second;
    if (c.type == type) c.samples.push_back({labels, value});
  }
  std::vector<std::pair<std::string, Collected>>& families() { return order_; }
  Collected* Find(const std::string& name) {
    auto it = index_.find(name);
    return it == index_.end() ? nullptr : &order_[it->second].second;
  }

 private:
  std::map<std::string, size_t> index_;
  std::vector<std::pair<std::string, Collected>> order_;
};

}  // namespace

// ---------------------------------------------------------------- Registry

struct Registry::Series {
  Labels labels;
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
};

struct Registry::Family {
  std::string name, help;
  Type type;
  std::vector<std::unique_ptr<Series>> series;
};

Registry::Registry() = default;
Registry::~Registry() = default;

Registry::Family* Registry::FamilyFor(const std::string& name, const std::string& help, Type type) {
  for (auto& f : families_) {
    if (f->name != name) continue;
    if (f->type == type) return f.get();
    SPECD_LOG(ERROR) << "metric registered twice with different types; not exported" << Kv("name", name);
    return nullptr;
  }
  if (!ValidMetricName(name)) {
    SPECD_LOG(ERROR) << "invalid metric name; not exported" << Kv("name", name);
    return nullptr;
  }
  families_.push_back(std::make_unique<Family>(Family{name, help, type, {}}));
  return families_.back().get();
}

Counter* Registry::AddCounter(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Family* f = ValidLabels(labels) ? FamilyFor(name, help, Type::kCounter) : nullptr;
  if (f) {
    for (auto& s : f->series) {
      if (s->labels == labels) return s->counter.get();
    }
  } else {
    rejected_.push_back(std::make_unique<Family>(Family{name, help, Type::kCounter, {}}));
    f = rejected_.back().get();
  }
  f->series.push_back(std::make_unique<Series>(Series{labels, std::make_unique<Counter>(), nullptr, nullptr}));
  return f->series.back()->counter.get();
}

Gauge* Registry::AddGauge(const std::string& name, const std::string& help, const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Family* f = ValidLabels(labels) ? FamilyFor(name, help, Type::kGauge) : nullptr;
  if (f) {
    for (auto& s : f->series) {
      if (s->labels == labels) return s->gauge.get();
    }
  } else {
    rejected_.push_back(std::make_unique<Family>(Family{name, help, Type::kGauge, {}}));
    f = rejected_.back().get();
  }
  f->series.push_back(std::make_unique<Series>(Series{labels, nullptr, std::make_unique<Gauge>(), nullptr}));
  return f->series.back()->gauge.get();
}

Histogram* Registry::AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                                  const Labels& labels) {
  std::lock_guard<std::mutex> l(mu_);
  Family* f = ValidLabels(labels) ? FamilyFor(name, help, Type::kHistogram) : nullptr;
  if (f) {
    for (auto& s : f->series) {
      if (s->labels == labels) return s->histogram.get();
    }
  } else {
    rejected_.push_back(std::make_unique<Family>(Family{name, help, Type::kHistogram, {}}));
    f = rejected_.back().get();
  }
  f->series.push_back(
      std::make_unique<Series>(Series{labels, nullptr, nullptr, std::make_unique<Histogram>(std::move(bounds))}));
  return f->series.back()->histogram.get();
}

void Registry::AddCollector(std::function<void(Sink&)> collect) {
  std::lock_guard<std::mutex> l(mu_);
  collectors_.push_back(std::move(collect));
}

std::string Registry::Render() const {
  std::lock_guard<std::mutex> l(mu_);
  MapSink sink;
  for (const auto& c : collectors_) c(sink);
  std::string out;
  for (const auto& f : families_) {
    Header(&out, f->name, f->help, f->type);
    for (const auto& s : f->series) {
      switch (f->type) {
        case Type::kCounter: Sample(&out, f->name, s->labels, s->counter->Value()); break;
        case Type::kGauge: Sample(&out, f->name, s->labels, s->gauge->Value()); break;
        case Type::kHistogram: {
          const Histogram::Snapshot h = s->histogram->Snap();
          uint64_t cum = 0;
          for (size_t i = 0; i <= h.bounds.size(); ++i) {
            cum += h.counts[i];
            const std::pair<std::string, std::string> le{"le", i < h.bounds.size() ? FormatValue(h.bounds[i]) : "+Inf"};
            out += f->name + "_bucket" + LabelText(s->labels, &le) + " " + FormatValue(static_cast<double>(cum)) + "\n";
          }
          Sample(&out, f->name + "_sum", s->labels, h.sum);
          Sample(&out, f->name + "_count", s->labels, static_cast<double>(h.count));
          break;
        }
      }
    }
    // Collected samples of the same family join it (one HELP/TYPE block);
    // of another type they are dropped (a family has one type).
    if (Collected* c = sink.Find(f->name)) {
      if (c->type == f->type) {
        for (const auto& [labels, v] : c->samples) Sample(&out, f->name, labels, v);
      }
      c->samples.clear();
    }
  }
  for (const auto& [name, c] : sink.families()) {
    if (c.samples.empty()) continue;
    Header(&out, name, c.help, c.type);
    for (const auto& [labels, v] : c.samples) Sample(&out, name, labels, v);
  }
  return out;
}

}  // namespace specd::metrics
