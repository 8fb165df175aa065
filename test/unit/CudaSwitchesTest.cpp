//===- CudaSwitchesTest.cpp - the CUDA runtime's environment switches ----===//
//
// Part of the sparsec project.
//
// SPARSEC_CUDA_PDL, SPARSEC_CUDA_SPLIT, SPARSEC_CUDA_UP, SPARSEC_CUDA_PIT_MMA
// and SPARSEC_CUDA_PIT parsing, where PIT applies and the cut points of a
// step (runtime/src/cuda/Switches.h), which need no GPU.
//
//===----------------------------------------------------------------------===//

#include "cuda/Switches.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

using namespace sparsec::rt::cuda;

namespace {

EarlyKinds kinds(const std::string &v, std::vector<std::string> *unknown = nullptr) {
  std::vector<std::string> u;
  EarlyKinds k = parseEarlyKinds(v, u);
  if (unknown)
    *unknown = u;
  else
    EXPECT_TRUE(u.empty()) << v;
  return k;
}

TEST(CudaSwitches, EarlyKindsDefaultIsAll) {
  EarlyKinds k;
  EXPECT_TRUE(k.small);
  EXPECT_TRUE(k.gemv);
  EXPECT_TRUE(k.sparse);
}

TEST(CudaSwitches, EarlyKindsAllOrNone) {
  EarlyKinds all = kinds("1"), none = kinds("0");
  EXPECT_TRUE(all.small && all.gemv && all.sparse);
  EXPECT_FALSE(none.small || none.gemv || none.sparse);
}

TEST(CudaSwitches, EarlyKindsLists) {
  EarlyKinds k = kinds("small");
  EXPECT_TRUE(k.small);
  EXPECT_FALSE(k.gemv || k.sparse);
  k = kinds("small+sparse");
  EXPECT_TRUE(k.small && k.sparse);
  EXPECT_FALSE(k.gemv);
  k = kinds("gemv,sparse");
  EXPECT_TRUE(k.gemv && k.sparse);
  EXPECT_FALSE(k.small);
}

TEST(CudaSwitches, EarlyKindsUnknownNamesAreReported) {
  std::vector<std::string> unknown;
  EarlyKinds k = kinds("small,attention,+", &unknown);
  EXPECT_TRUE(k.small);
  EXPECT_FALSE(k.gemv || k.sparse);
  ASSERT_EQ(unknown.size(), 2u);
  EXPECT_EQ(unknown[0], "attention");
  EXPECT_EQ(unknown[1], "");
}

TEST(CudaSwitches, SplitDivisors) {
  std::vector<int> d = defaultSplitDivisors();
  EXPECT_EQ(d, (std::vector<int>{32, 4}));
  ASSERT_TRUE(parseSplitDivisors("0", d));
  EXPECT_TRUE(d.empty());
  ASSERT_TRUE(parseSplitDivisors("1", d));
  EXPECT_EQ(d, defaultSplitDivisors());
  ASSERT_TRUE(parseSplitDivisors("128,16,4", d));
  EXPECT_EQ(d, (std::vector<int>{128, 16, 4}));
  ASSERT_TRUE(parseSplitDivisors("64", d));
  EXPECT_EQ(d, (std::vector<int>{64}));
}

TEST(CudaSwitches, SplitDivisorsRejected) {
  for (const char *bad : {"", "x", "4,32", "16,16", "8,1", "0,4", "1,0", "32,",
                          "5000", "-2", "3.5"}) {
    std::vector<int> d{7, 3};
    EXPECT_FALSE(parseSplitDivisors(bad, d)) << bad;
    EXPECT_EQ(d, (std::vector<int>{7, 3})) << bad;
  }
}

TEST(CudaSwitches, SplitPoints) {
  // Short steps are one graph.
  EXPECT_TRUE(splitPoints(kSplitMinAllocs - 1, {32, 4}).empty());
  EXPECT_EQ(splitPoints(320, {32, 4}), (std::vector<size_t>{10, 80}));
  // Never before allocation 2, and never twice at one point.
  EXPECT_EQ(splitPoints(64, {256, 128, 4}), (std::vector<size_t>{2, 16}));
  EXPECT_TRUE(splitPoints(320, {}).empty());
}

TEST(CudaSwitches, StepCuts) {
  // A step the host waits for is cut by default ...
  EXPECT_EQ(stepCuts(320, defaultSplitDivisors(), false, false),
            (std::vector<size_t>{10, 80}));
  // ... one launched ahead is one graph, unless SPARSEC_CUDA_SPLIT was set.
  EXPECT_TRUE(stepCuts(320, defaultSplitDivisors(), true, false).empty());
  EXPECT_EQ(stepCuts(320, defaultSplitDivisors(), true, true),
            (std::vector<size_t>{10, 80}));
  EXPECT_EQ(stepCuts(320, {128, 16, 4}, true, true),
            (std::vector<size_t>{2, 20, 80}));
  EXPECT_TRUE(stepCuts(320, {}, false, true).empty());
}

} // namespace

TEST(CudaSwitches, UpKernel) {
  bool row = false;
  ASSERT_TRUE(parseUpKernel("row", row));
  EXPECT_TRUE(row);
  ASSERT_TRUE(parseUpKernel("split", row));
  EXPECT_FALSE(row);
  row = true;
  for (const char *bad : {"", "Row", "1", "0", "rows", "split,row"}) {
    EXPECT_FALSE(parseUpKernel(bad, row)) << bad;
    EXPECT_TRUE(row) << "left untouched: " << bad;
  }
}

TEST(CudaSwitches, PitMma) {
  bool warpgroup = false;
  ASSERT_TRUE(parsePitMma("wgmma", warpgroup));
  EXPECT_TRUE(warpgroup);
  ASSERT_TRUE(parsePitMma("sync", warpgroup));
  EXPECT_FALSE(warpgroup);
  warpgroup = true;
  for (const char *bad : {"", "WGMMA", "1", "0", "mma", "sync,wgmma"}) {
    EXPECT_FALSE(parsePitMma(bad, warpgroup)) << bad;
    EXPECT_TRUE(warpgroup) << "left untouched: " << bad;
  }
}

TEST(CudaSwitches, PitMmaFromEnvironment) {
  const char *was = std::getenv("SPARSEC_CUDA_PIT_MMA");
  const std::string saved = was ? was : "";
  bool warpgroup = true;
  unsetenv("SPARSEC_CUDA_PIT_MMA");
  EXPECT_FALSE(pitMmaFromEnvironment(warpgroup)) << "unset";
  EXPECT_TRUE(warpgroup);
  setenv("SPARSEC_CUDA_PIT_MMA", "sync", 1);
  ASSERT_TRUE(pitMmaFromEnvironment(warpgroup));
  EXPECT_FALSE(warpgroup);
  setenv("SPARSEC_CUDA_PIT_MMA", "wgmma", 1);
  ASSERT_TRUE(pitMmaFromEnvironment(warpgroup));
  EXPECT_TRUE(warpgroup);
  setenv("SPARSEC_CUDA_PIT_MMA", "on", 1);
  testing::internal::CaptureStderr();
  EXPECT_FALSE(pitMmaFromEnvironment(warpgroup)) << "unknown";
  EXPECT_NE(testing::internal::GetCapturedStderr().find(
                "SPARSEC_CUDA_PIT_MMA='on' ignored"),
            std::string::npos);
  EXPECT_TRUE(warpgroup) << "left untouched";
  if (was)
    setenv("SPARSEC_CUDA_PIT_MMA", saved.c_str(), 1);
  else
    unsetenv("SPARSEC_CUDA_PIT_MMA");
}

TEST(CudaSwitches, PitUse) {
  PitUse use = PitUse::fill;
  ASSERT_TRUE(parsePitUse("always", use));
  EXPECT_EQ(use, PitUse::always);
  ASSERT_TRUE(parsePitUse("0", use));
  EXPECT_EQ(use, PitUse::never);
  ASSERT_TRUE(parsePitUse("fill", use));
  EXPECT_EQ(use, PitUse::fill);
  for (const char *bad : {"", "1", "on", "Always", "fill,always"}) {
    use = PitUse::never;
    EXPECT_FALSE(parsePitUse(bad, use)) << bad;
    EXPECT_EQ(use, PitUse::never) << "left untouched: " << bad;
  }
}

TEST(CudaSwitches, KvCache) {
  bool half = false;
  ASSERT_TRUE(parseKvCache("f16", half));
  EXPECT_TRUE(half);
  ASSERT_TRUE(parseKvCache("f32", half));
  EXPECT_FALSE(half);
  for (const char *bad : {"", "0", "1", "fp16", "F16", "half"}) {
    half = true;
    EXPECT_FALSE(parseKvCache(bad, half)) << bad;
    EXPECT_TRUE(half) << "left untouched: " << bad;
  }
}

TEST(CudaSwitches, PitFillsGpu) {
  // OPT-6.7B's down projection (N 4096) on 132 SMs at 32-token tiles of
  // 256 columns (16 output blocks): a decode batch of 16 and a 128-token
  // prompt are 16 and 64 blocks, cuBLAS's; 9 token blocks fill the GPU.
  EXPECT_FALSE(pitFillsGpu(16, 4096, 32, 256, 132));
  EXPECT_FALSE(pitFillsGpu(128, 4096, 32, 256, 132));
  EXPECT_FALSE(pitFillsGpu(256, 4096, 32, 256, 132));
  EXPECT_TRUE(pitFillsGpu(257, 4096, 32, 256, 132));
  EXPECT_TRUE(pitFillsGpu(16 * 1024, 4096, 32, 256, 132));
  // 128 columns (columns 0, the runtime's default width): 32 output blocks.
  EXPECT_FALSE(pitFillsGpu(128, 4096, 32, 0, 132));
  EXPECT_TRUE(pitFillsGpu(129, 4096, 32, 0, 132));
  EXPECT_TRUE(pitFillsGpu(129, 4096, 32, 128, 132));
  // 16-token tiles: twice the token blocks; a partial block counts.
  EXPECT_FALSE(pitFillsGpu(64, 4096, 16, 0, 132));
  EXPECT_TRUE(pitFillsGpu(65, 4096, 16, 0, 132));
  // opt-byte-s (N 256): a 71-token prompt is 3 x 2 blocks.
  EXPECT_FALSE(pitFillsGpu(71, 256, 32, 0, 132));
  // Degenerate shapes and SM counts.
  EXPECT_FALSE(pitFillsGpu(0, 4096, 32, 0, 132));
  EXPECT_FALSE(pitFillsGpu(512, 0, 32, 0, 132));
  EXPECT_FALSE(pitFillsGpu(512, 4096, 0, 0, 132));
  EXPECT_TRUE(pitFillsGpu(1, 1, 32, 0, 0));
}
