// Metrics primitives, the Prometheus text rendering, and the HTTP endpoint
// (real GETs on loopback, bounded by socket timeouts).

#include <cmath>
#include <thread>

#include "common/metrics/metrics.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd::metrics {
namespace {

TEST(Metrics, CounterGaugeHistogram) {
  Counter c;
  c.Inc();
  c.Inc(2.5);
  c.Inc(-3);  // counters never go down
  EXPECT_DOUBLE_EQ(c.Value(), 3.5);
  Gauge g;
  g.Set(4);
  g.Add(-1.5);
  EXPECT_DOUBLE_EQ(g.Value(), 2.5);
  Histogram h({1, 0.5, 2, 2, INFINITY});  // sorted, deduplicated, +Inf implied
  for (double v : {0.1, 0.5, 0.7, 2.0, 9.0, static_cast<double>(NAN)}) h.Observe(v);
  const Histogram::Snapshot s = h.Snap();
  EXPECT_EQ(s.bounds, (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ(s.counts, (std::vector<uint64_t>{2, 1, 1, 1}));  // le is inclusive; NaN ignored
  EXPECT_EQ(s.count, 5u);
  EXPECT_DOUBLE_EQ(s.sum, 12.3);
  EXPECT_EQ(LinearBuckets(0, 1, 3), (std::vector<double>{0, 1, 2}));
  EXPECT_EQ(ExponentialBuckets(1, 2, 4), (std::vector<double>{1, 2, 4, 8}));
}

TEST(Metrics, ConcurrentUpdatesAreNotLost) {
  Counter c;
  Histogram h(LinearBuckets(0, 1, 4));
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    ts.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Inc();
        h.Observe(i % 5);
      }
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_DOUBLE_EQ(c.Value(), 40000);
  EXPECT_EQ(h.Snap().count, 40000u);
}

TEST(Metrics, RendersTheTextFormat) {
  Registry r;
  r.AddCounter("specd_requests_total", "Finished requests.", {{"reason", "eos"}})->Inc(3);
  r.AddCounter("specd_requests_total", "Finished requests.", {{"reason", "length"}})->Inc();
  // The same name and labels is the same series.
  r.AddCounter("specd_requests_total", "Finished requests.", {{"reason", "eos"}})->Inc();
  r.AddGauge("specd_queue_depth", "Requests waiting.\nSecond line \\ here")->Set(2);
  Histogram* h = r.AddHistogram("specd_latency_seconds", "Latency.", {0.1, 1});
  h->Observe(0.25 - 0.2);
  h->Observe(0.75);
  h->Observe(3);
  r.AddGauge("specd_label_escape", "Escapes.", {{"path", "a\"b\\c\nd"}})->Set(1.25);
  r.AddCollector([](Sink& s) {
    s.Add("specd_worker_memory_bytes", "Memory.", Type::kGauge, {{"role", "target"}}, 1024);
    s.Add("specd_requests_total", "ignored help", Type::kCounter, {{"reason", "stop"}}, 7);  // joins the family
    s.Add("specd_queue_depth", "wrong type", Type::kCounter, {}, 9);                          // dropped
  });
  const std::string want =
      "# HELP specd_requests_total Finished requests.\n"
      "# TYPE specd_requests_total counter\n"
      "specd_requests_total{reason=\"eos\"} 4\n"
      "specd_requests_total{reason=\"length\"} 1\n"
      "specd_requests_total{reason=\"stop\"} 7\n"
      "# HELP specd_queue_depth Requests waiting.\\nSecond line \\\\ here\n"
      "# TYPE specd_queue_depth gauge\n"
      "specd_queue_depth 2\n"
      "# HELP specd_latency_seconds Latency.\n"
      "# TYPE specd_latency_seconds histogram\n"
      "specd_latency_seconds_bucket{le=\"0.1\"} 1\n"
      "specd_latency_seconds_bucket{le=\"1\"} 2\n"
      "specd_latency_seconds_bucket{le=\"+Inf\"} 3\n"
      "specd_latency_seconds_sum 3.8\n"
      "specd_latency_seconds_count 3\n"
      "# HELP specd_label_escape Escapes.\n"
      "# TYPE specd_label_escape gauge\n"
      "specd_label_escape{path=\"a\\\"b\\\\c\\nd\"} 1.25\n"
      "# HELP specd_worker_memory_bytes Memory.\n"
      "# TYPE specd_worker_memory_bytes gauge\n"
      "specd_worker_memory_bytes{role=\"target\"} 1024\n";
  EXPECT_EQ(r.Render(), want);
}

TEST(Metrics, BadNamesAreKeptButNotExported) {
  Registry r;
  Counter* bad = r.AddCounter("1bad name", "x");
  ASSERT_NE(bad, nullptr);
  bad->Inc();
  Gauge* bad_label = r.AddGauge("ok_name", "x", {{"le", "1"}});
  ASSERT_NE(bad_label, nullptr);
  r.AddCounter("dup", "x")->Inc();
  Gauge* clash = r.AddGauge("dup", "x");  // a counter family already
  ASSERT_NE(clash, nullptr);
  clash->Set(5);
  EXPECT_EQ(r.Render(), "# HELP dup x\n# TYPE dup counter\ndup 1\n");
  EXPECT_TRUE(ValidMetricName("a_b:c9"));
  EXPECT_FALSE(ValidMetricName("9a"));
  EXPECT_FALSE(ValidLabelName("__reserved"));
  EXPECT_EQ(FormatValue(1e20), "1e+20");
  EXPECT_EQ(FormatValue(-3), "-3");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
}

}  // namespace
}  // namespace specd::metrics
