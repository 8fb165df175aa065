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
  std::remove(path.c_str());
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

TEST(Profile, MissingFile) {
  Profile p;
  std::string error;
  EXPECT_FALSE(readProfile("/nonexistent/x.sprof", p, error));
  EXPECT_NE(error.find("cannot open profile '/nonexistent/x.sprof'"),
            std::string::npos);
}
