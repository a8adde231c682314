// Metrics primitives and their Prometheus text rendering (format 0.0.4).
//
//   Counter    monotonic (Inc with v >= 0)
//   Gauge      set / add
//   Histogram  fixed bucket upper bounds chosen at registration (+Inf implied)
//   Registry   owns the metrics; a name registered again with other labels is
//              another series of the same family (one HELP/TYPE block).
//              Collectors add values computed at scrape time (e.g. figures a
//              remote process reported) under their own family names.
//
// Updates are lock-free (atomics); only registration and rendering lock.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace specd::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;

enum class Type { kCounter, kGauge, kHistogram };
const char* TypeName(Type t);

class Counter {
 public:
  void Inc(double v = 1.0) {
    if (v > 0) v_.fetch_add(v, std::memory_order_relaxed);
  }
  double Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0.0};
};

class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  void Add(double v) { v_.fetch_add(v, std::memory_order_relaxed); }
  double Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0.0};
};

class Histogram {
 public:
  // `bounds`: bucket upper bounds; sorted and deduplicated here, non-finite dropped.
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<double> bounds;
    std::vector<uint64_t> counts;  // per bucket, not cumulative; bounds.size() + 1 (the last: +Inf)
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Snap() const;

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

// start, start + width, ... (n bounds).
std::vector<double> LinearBuckets(double start, double width, int n);
// start, start * factor, ... (n bounds).
std::vector<double> ExponentialBuckets(double start, double factor, int n);

// Values a collector reports at scrape time.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void Add(const std::string& name, const std::string& help, Type type, const Labels& labels,
                   double value) = 0;
};

class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // Never null. A name that is not a valid metric name, or that is already a
  // family of another type, gets a metric that is kept but not rendered
  // (programming errors must not take a server down).
  Counter* AddCounter(const std::string& name, const std::string& help, const Labels& labels = {});
  Gauge* AddGauge(const std::string& name, const std::string& help, const Labels& labels = {});
  Histogram* AddHistogram(const std::string& name, const std::string& help, std::vector<double> bounds,
                          const Labels& labels = {});
  // Called on every Render, in registration order.
  void AddCollector(std::function<void(Sink&)> collect);

  // The Prometheus text exposition (version 0.0.4).
  std::string Render() const;

 private:
  struct Series;
  struct Family;
  Family* FamilyFor(const std::string& name, const std::string& help, Type type);
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Family>> families_;
  std::vector<std::unique_ptr<Family>> rejected_;
  std::vector<std::function<void(Sink&)>> collectors_;
};

// [a-zA-Z_:][a-zA-Z0-9_:]*
bool ValidMetricName(const std::string& name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__"
bool ValidLabelName(const std::string& name);
// A sample value as the text format writes it: integers without exponent,
// +Inf, -Inf, NaN.
std::string FormatValue(double v);

}  // namespace specd::metrics
