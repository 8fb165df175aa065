//===- ProfileTest.cpp - the .sprof format --------------------------------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/Profile.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <unistd.h>

using namespace sparsec::rt;

namespace {
std::string tempPath(const char *name) {
  return "/tmp/sparsec-profile-test-" + std::to_string(getpid()) + "-" + name;
}

Profile sample() {
  Profile p;
  p.modelHash = 0x0123456789abcdefULL;
  p.model = "dir/model \"quoted\".onnx";
  p.sites.push_back({"/layers.0/Relu", 4, 10, {10, 0, 3, 7}});
  p.sites.push_back({"/layers.1/Relu", 2, 10, {1, 2}});
  // Three sampled (input, mask) pairs on the first site.
  ProfileSite &s = p.sites[0];
  s.samples = 3;
  s.inputDim = 2;
  s.sampleInputs = {1.0f, -2.0f, 0.5f, 0.25f, 3.0f, 4.0f};
  s.sampleMasks = {0x9, 0x0, 0xf};
  // Tile counts on the second site: 3 blocks of 8 rows, 1 of 32.
  ProfileSite &t = p.sites[1];
  t.tileRows = {8, 32};
  t.tileBlocks = {3, 1};
  t.tileCounts = {1, 2, 1, 1};
  return p;
}
} // namespace

TEST(Profile, RoundTrip) {
  std::string path = tempPath("rt.sprof"), error;
  ASSERT_TRUE(writeProfile(path, sample(), error)) << error;
  Profile p;
  ASSERT_TRUE(readProfile(path, p, error)) << error;
  EXPECT_EQ(p.modelHash, 0x0123456789abcdefULL);
  EXPECT_EQ(p.model, "dir/model \"quoted\".onnx");
  ASSERT_EQ(p.sites.size(), 2u);
  ASSERT_NE(p.find("/layers.1/Relu"), nullptr);
  EXPECT_EQ(p.find("/layers.1/Relu")->counts, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(p.find("/layers.0/Relu")->tokens, 10);
  EXPECT_EQ(p.find("nope"), nullptr);
  const ProfileSite &s = *p.find("/layers.0/Relu");
  ASSERT_EQ(s.samples, 3);
  EXPECT_EQ(s.inputDim, 2);
  EXPECT_EQ(s.sampleInputs, sample().sites[0].sampleInputs);
  EXPECT_TRUE(s.sampleActive(0, 0));
  EXPECT_FALSE(s.sampleActive(0, 1));
  EXPECT_TRUE(s.sampleActive(0, 3));
  EXPECT_FALSE(s.sampleActive(1, 2));
  EXPECT_TRUE(s.sampleActive(2, 2));
  EXPECT_EQ(p.find("/layers.1/Relu")->samples, 0);
  const ProfileSite &t = *p.find("/layers.1/Relu");
  EXPECT_EQ(t.tileRows, (std::vector<int64_t>{8, 32}));
  EXPECT_EQ(t.tileBlocks, (std::vector<int64_t>{3, 1}));
  EXPECT_EQ(t.tileCounts, (std::vector<uint64_t>{1, 2, 1, 1}));
  EXPECT_EQ(t.tileIndex(32), 1);
  EXPECT_EQ(t.tileIndex(16), -1);
  EXPECT_TRUE(s.tileRows.empty());
  EXPECT_EQ(s.tileIndex(8), -1);
  std::remove(path.c_str());
}

TEST(Profile, RejectsTileCountsAboveBlocks) {
  Profile p = sample();
  p.sites[1].tileCounts[3] = 2; // active in 2 of 1 blocks
  std::string path = tempPath("tiles.sprof"), error;
  ASSERT_TRUE(writeProfile(path, p, error)) << error;
  Profile q;
  EXPECT_FALSE(readProfile(path, q, error));
  EXPECT_NE(error.find("more tiles than it saw"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Profile, WriterRejectsInconsistentTiles) {
  Profile p = sample();
  p.sites[1].tileCounts.pop_back();
  std::string error;
  EXPECT_FALSE(writeProfile(tempPath("badtiles.sprof"), p, error));
  EXPECT_NE(error.find("inconsistent tile counts"), std::string::npos);
}

TEST(Profile, WriterRejectsInconsistentSites) {
  Profile p = sample();
  p.sites[0].counts.pop_back();
  std::string error;
  EXPECT_FALSE(writeProfile(tempPath("bad.sprof"), p, error));
  EXPECT_NE(error.find("has 3 counters for 4 neurons"), std::string::npos);
}

TEST(Profile, EveryPrefixFailsCleanly) {
  std::string path = tempPath("full.sprof"), error;
  ASSERT_TRUE(writeProfile(path, sample(), error)) << error;
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  std::string cut = tempPath("cut.sprof");
  for (size_t n = 0; n < bytes.size(); ++n) {
    std::ofstream(cut, std::ios::binary | std::ios::trunc).write(bytes.data(), n);
    Profile p;
    EXPECT_FALSE(readProfile(cut, p, error)) << "prefix " << n;
    EXPECT_NE(error.find("sparsec profile"), std::string::npos) << error;
  }
  std::remove(path.c_str());
  std::remove(cut.c_str());
}

TEST(Profile, RejectsCountsAboveTokens) {
  Profile p = sample();
  p.sites[1].counts[0] = 11; // more often active than tokens seen
  std::string path = tempPath("over.sprof"), error;
  ASSERT_TRUE(writeProfile(path, p, error));
  Profile q;
  EXPECT_FALSE(readProfile(path, q, error));
  EXPECT_NE(error.find("more often than the tokens seen"), std::string::npos);
  std::remove(path.c_str());
}

TEST(Profile, WriterRejectsInconsistentSamples) {
  Profile p = sample();
  p.sites[0].sampleInputs.pop_back();
  std::string error;
  EXPECT_FALSE(writeProfile(tempPath("bad2.sprof"), p, error));
  EXPECT_NE(error.find("inconsistent samples"), std::string::npos);
}

TEST(Profile, RejectsTrailingBytes) {
  std::string path = tempPath("trail.sprof"), error;
  ASSERT_TRUE(writeProfile(path, sample(), error)) << error;
  std::ofstream(path, std::ios::binary | std::ios::app).write("12345678", 8);
  Profile p;
  EXPECT_FALSE(readProfile(path, p, error));
  EXPECT_NE(error.find("trailing bytes"), std::string::npos) << error;
  std::remove(path.c_str());
}

TEST(Profile, MissingFile) {
  Profile p;
  std::string error;
  EXPECT_FALSE(readProfile("/nonexistent/x.sprof", p, error));
  EXPECT_NE(error.find("cannot open profile '/nonexistent/x.sprof'"),
            std::string::npos);
}

// Random byte changes (a fixed seed) are read as a valid profile or
// refused with a message; none crashes, hangs or allocates without bound.
TEST(Profile, RandomMutationsFailCleanly) {
  std::string path = tempPath("base.sprof"), error;
  ASSERT_TRUE(writeProfile(path, sample(), error)) << error;
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  std::string mutated = tempPath("mut.sprof");
  uint64_t state = 0x9e3779b97f4a7c15ULL;
  auto next = [&] {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  };
  int accepted = 0, refused = 0;
  for (int round = 0; round < 4000; ++round) {
    std::string b = bytes;
    const int edits = 1 + int(next() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t at = size_t(next() % b.size());
      switch (next() % 3) {
      case 0: // one bit
        b[at] = char(b[at] ^ (1 << (next() % 8)));
        break;
      case 1: // a byte set to an extreme
        b[at] = char((next() & 1) ? 0xff : 0x7f);
        break;
      default: // eight bytes of a large value (lengths, counts)
        for (size_t i = 0; i < 8 && at + i < b.size(); ++i)
          b[at + i] = char(i == 7 ? 0x40 : 0xff);
        break;
      }
    }
    std::ofstream(mutated, std::ios::binary | std::ios::trunc).write(b.data(),
                                                                      b.size());
    Profile p;
    error.clear();
    if (readProfile(mutated, p, error)) {
      ++accepted;
      for (const ProfileSite &s : p.sites)
        for (uint64_t c : s.counts)
          EXPECT_LE(c, uint64_t(s.tokens)) << "round " << round;
    } else {
      ++refused;
      EXPECT_NE(error.find("sparsec profile"), std::string::npos)
          << "round " << round << ": " << error;
    }
  }
  EXPECT_GT(refused, 0);
  std::remove(path.c_str());
  std::remove(mutated.c_str());
}
