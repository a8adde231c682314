// Config (flags + files), thread pool, fp16 conversion, KV block manager.
#include <atomic>
#include <cmath>
#include <fstream>

#include "common/kv/block_manager.h"
#include "common/util/config.h"
#include "common/util/fp16.h"
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

TEST(ThreadPoolTest, CoversRangeExactlyOnceWithAlignedChunks) {
  ThreadPool pool(3);
  for (int64_t n : {1, 7, 64, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.ParallelFor(n, [&](int64_t b, int64_t e) {
      EXPECT_EQ(b % 16, 0);
      for (int64_t i = b; i < e; ++i) hits[i]++;
    }, 16);
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
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
