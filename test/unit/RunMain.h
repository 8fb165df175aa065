//===- RunMain.h - run a model's command line inside a unit test -*- C++ -*-===//
//
// Part of the sparsec project.
//
// modelMain (the generated binary's main) driven from GoogleTest with a
// ModelDesc the test builds, its stdout and stderr captured.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_TEST_UNIT_RUNMAIN_H
#define SPARSEC_TEST_UNIT_RUNMAIN_H

#include "sparsec/rt/Runtime.h"

#include "gtest/gtest.h"

#include <string>
#include <vector>

namespace sparsec::rt::test {

struct MainResult {
  int status;
  std::string out, err;
};

/// Runs modelMain with `args` (argv[0] added), capturing stdout and stderr.
inline MainResult runMain(const ModelDesc &desc, std::vector<std::string> args) {
  args.insert(args.begin(), "model");
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  testing::internal::CaptureStdout();
  testing::internal::CaptureStderr();
  int status = modelMain(int(args.size()), argv.data(), desc);
  MainResult r;
  r.status = status;
  r.out = testing::internal::GetCapturedStdout();
  r.err = testing::internal::GetCapturedStderr();
  return r;
}

} // namespace sparsec::rt::test

#endif // SPARSEC_TEST_UNIT_RUNMAIN_H
