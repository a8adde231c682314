// Config (flags + files, lists, --help=json), addresses, child processes,
// thread pool, fp16 conversion, KV block manager.
#include <atomic>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>

#include "common/kv/block_manager.h"
#include "common/util/config.h"
#include "common/util/fp16.h"
#include "common/util/net.h"
#include "common/util/subprocess.h"
#include "nlohmann/json.hpp"
#include "common/util/thread_pool.h"
#include "gtest/gtest.h"
#include "tests/support/test_util.h"

namespace specd {
namespace {

Config MakeConfig() {
  Config c("prog");
  c.AddString("model", "", "model path");
  c.AddInt("threads", 4, "threads", 0, 64);
  c.AddDouble("temp", 0.5, "temperature", 0, 10);
  c.AddBool("verbose", false, "verbose");
  c.AddBytes("budget", "auto", "budget");
  return c;
}

TEST(ConfigTest, FlagsFileAndPrecedence) {
  testing::TempDir dir;
  std::ofstream(dir.File("c.conf")) << "# comment\nmodel = /m.gguf\nthreads = 8\nbudget = 2GiB\n";
  Config c = MakeConfig();
  ASSERT_TRUE(c.ParseArgs({"--threads=3", "--config", dir.File("c.conf"), "--verbose", "pos1", "--temp", "1.5"}).ok());
  EXPECT_EQ(c.GetString("model"), "/m.gguf");
  EXPECT_EQ(c.GetInt("threads"), 3);  // flag beats file
  EXPECT_TRUE(c.GetBool("verbose"));
  EXPECT_DOUBLE_EQ(c.GetDouble("temp"), 1.5);
  EXPECT_EQ(c.GetBytes("budget"), 2ll << 30);
  EXPECT_EQ(c.positional(), std::vector<std::string>{"pos1"});
  EXPECT_NE(c.Summary().find("threads = 3  (flag --threads)"), std::string::npos) << c.Summary();
}

TEST(ConfigTest, UnknownKeysAndBadValuesAreErrors) {
  testing::TempDir dir;
  std::ofstream(dir.File("bad.conf")) << "model = x\nthreds = 8\n";
  Config c = MakeConfig();
  auto st = c.ParseArgs({"--config=" + dir.File("bad.conf")});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("bad.conf:2: unknown option 'threds'"), std::string::npos) << st;
  Config c2 = MakeConfig();
  st = c2.ParseArgs({"--modle=x"});
  EXPECT_NE(st.message().find("unknown flag '--modle'"), std::string::npos) << st;
  Config c3 = MakeConfig();
  EXPECT_FALSE(c3.ParseArgs({"--threads=100"}).ok());
  EXPECT_FALSE(c3.ParseArgs({"--threads=abc"}).ok());
  EXPECT_FALSE(c3.ParseArgs({"--budget=12XB"}).ok());
  EXPECT_FALSE(c3.ParseArgs({"--model"}).ok());
  Config c4 = MakeConfig();
  ASSERT_TRUE(c4.ParseArgs({"--no-verbose"}).ok());
  EXPECT_FALSE(c4.GetBool("verbose"));
}

TEST(ConfigTest, ConfigFileRoundTrip) {
  testing::TempDir dir;
  Config c = MakeConfig();
  ASSERT_TRUE(c.ParseArgs({"--model=/x y.gguf", "--threads=2"}).ok());
  std::ofstream(dir.File("out.conf")) << c.ToConfigFile();
  Config d = MakeConfig();
  ASSERT_TRUE(d.ParseArgs({"--config", dir.File("out.conf")}).ok());
  EXPECT_EQ(d.GetString("model"), "/x y.gguf");
  EXPECT_EQ(d.GetInt("threads"), 2);
}

TEST(ConfigTest, ListsAndStructuredHelp) {
  EXPECT_EQ(SplitList(" a, b,,c ,"), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_TRUE(SplitList("").empty());
  auto ints = ParseList<int>("1, 2,8", "batch", 1, 8);
  ASSERT_TRUE(ints.ok());
  EXPECT_EQ(*ints, (std::vector<int>{1, 2, 8}));
  EXPECT_NE(ParseList<int>("1,9", "batch", 1, 8).status().message().find("bad batch '9'"), std::string::npos);
  EXPECT_FALSE(ParseList<int>("x", "k", 0, 8).ok());
  auto d = ParseList<double>("0.5,1", "t", 0.0, 1.0);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(*d, (std::vector<double>{0.5, 1.0}));
  Config c = MakeConfig();
  ASSERT_TRUE(c.ParseArgs({"--help=json"}).ok());
  ASSERT_TRUE(c.help_requested());
  const nlohmann::json j = nlohmann::json::parse(c.Usage());
  EXPECT_EQ(j["program"], "prog");
  ASSERT_EQ(j["options"].size(), 5u);
  EXPECT_EQ(j["options"][0]["name"], "budget");
  EXPECT_EQ(j["options"][3]["name"], "threads");
  EXPECT_EQ(j["options"][3]["default"], "4");
}

TEST(NetTest, FreeLoopbackPortsAreNeverHandedOutTwice) {
  std::set<int> seen;
  for (int i = 0; i < 300; ++i) {
    const int port = FreeLoopbackPort();
    ASSERT_GT(port, 0);
    EXPECT_TRUE(seen.insert(port).second) << "port " << port << " handed out again (call " << i << ")";
  }
}

TEST(NetTest, HostPort) {
  auto a = ParseHostPort("127.0.0.1:7810");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 7810);
  auto b = ParseHostPort("[::1]:0");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "::1");
  EXPECT_EQ(b->port, 0);
  for (const char* bad : {"7810", ":80", "host:99999", "host:-1", "[::1]80", "::1:80", "[]:80", "host:"})
    EXPECT_FALSE(ParseHostPort(bad).ok()) << bad;
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.1.2.3"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_FALSE(IsLoopbackHost("0.0.0.0"));
  EXPECT_FALSE(IsLoopbackHost("10.1.2.3"));
}

TEST(SubprocessTest, RunsLogsStopsAndCaptures) {
  testing::TempDir dir;
  Subprocess p;
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "echo started; exec sleep 30"}, dir.File("log")).ok());
  EXPECT_TRUE(p.Alive());
  for (int i = 0; i < 200 && p.LogTail().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(p.LogTail(), "started\n");
  p.Stop();
  EXPECT_FALSE(p.Alive());
  ASSERT_TRUE(p.Start({"/bin/sh", "-c", "exit 3"}, dir.File("log2")).ok());
  for (int i = 0; i < 500 && p.Alive(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(p.exit_code(), 3);
  auto out = RunCapture({"/bin/sh", "-c", "echo out; echo err >&2"}, std::chrono::seconds(10));
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, "out\n");
  EXPECT_EQ(RunCapture({"/bin/sh", "-c", "exit 1"}, std::chrono::seconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RunCapture({"/bin/sleep", "10"}, std::chrono::milliseconds(200)).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_FALSE(RunCapture({"/no/such/binary"}, std::chrono::seconds(10)).ok());
}

TEST(ThreadPoolTest, CoversRangeExactlyOnceWithAlignedChunks) {
  // Polling for the next job (the default) and sleeping at once (--cpu-spin-us 0).
  for (int64_t spin_us : {ThreadPool::kDefaultSpinUs, int64_t{0}}) {
    ThreadPool pool(3, spin_us);
    for (int64_t n : {1, 7, 64, 1000}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(n, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b % 16, 0);
        for (int64_t i = b; i < e; ++i) hits[i]++;
      }, 16);
      for (auto& h : hits) EXPECT_EQ(h.load(), 1);
    }
  }
}

TEST(Fp16Test, ExactConversions) {
  EXPECT_EQ(HalfToFloat(0x3c00), 1.0f);
  EXPECT_EQ(HalfToFloat(0xc000), -2.0f);
  EXPECT_EQ(HalfToFloat(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(HalfToFloat(0x7bff), 65504.0f);
  EXPECT_TRUE(std::isinf(HalfToFloat(0x7c00)));
  EXPECT_TRUE(std::isnan(HalfToFloat(0x7e00)));
  EXPECT_EQ(FloatToHalf(1.0f), 0x3c00);
  EXPECT_EQ(FloatToHalf(65520.0f), 0x7c00);  // rounds to inf
  EXPECT_EQ(FloatToHalf(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie to even
  EXPECT_EQ(FloatToHalf(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);
  EXPECT_EQ(FloatToHalf(std::ldexp(1.0f, -25)), 0x0000);  // tie to even (zero)
  EXPECT_EQ(FloatToHalf(std::ldexp(1.5f, -25)), 0x0001);
  for (uint32_t h = 0; h < 0x7c00; ++h) ASSERT_EQ(FloatToHalf(HalfToFloat(static_cast<uint16_t>(h))), h);
  EXPECT_EQ(Bf16ToFloat(FloatToBf16(3.0f)), 3.0f);
  EXPECT_EQ(FloatToBf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);  // tie to even
}

TEST(KvBlockManagerTest, ReserveTruncateRelease) {
  KvBlockManager kv(10, 4);
  ASSERT_TRUE(kv.Create(1).ok());
  EXPECT_FALSE(kv.Create(1).ok());
  ASSERT_TRUE(kv.Reserve(1, 9).ok());  // 3 blocks
  EXPECT_EQ(kv.Blocks(1).size(), 3u);
  ASSERT_TRUE(kv.SetLength(1, 9).ok());
  EXPECT_EQ(kv.free_blocks(), 7);
  ASSERT_TRUE(kv.Truncate(1, 4).ok());  // 1 block kept
  EXPECT_EQ(kv.Blocks(1).size(), 1u);
  EXPECT_EQ(kv.free_blocks(), 9);
  EXPECT_FALSE(kv.Truncate(1, 5).ok());  // cannot grow by truncation
  ASSERT_TRUE(kv.Create(2).ok());
  auto st = kv.Reserve(2, 41);
  EXPECT_EQ(st.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(kv.Blocks(2).size(), 0u);  // nothing taken on failure
  EXPECT_TRUE(kv.Reserve(2, 36).ok());
  EXPECT_EQ(kv.free_blocks(), 0);
  kv.Release(2);
  kv.Release(1);
  EXPECT_EQ(kv.free_blocks(), 10);
}

}  // namespace
}  // namespace specd
