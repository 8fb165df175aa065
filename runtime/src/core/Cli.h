//===- Cli.h - shared pieces of the compiled model's command line -*- C++ -*-===//
//
// Part of the sparsec project.
//
// Internal to the runtime: the parsed options and the helpers the commands
// (Main.cpp: run, bench, info, profile; Eval.cpp: eval; Generate.cpp:
// generate) share.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CORE_CLI_H
#define SPARSEC_RUNTIME_CORE_CLI_H

#include "sparsec/rt/Runtime.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sparsec::rt::cli {

struct Options {
  std::string command;
  std::vector<std::pair<std::string, std::string>> inputs;
  std::string outputDir = ".";
  int threads = 0;
  int64_t runs = 20;
  int64_t warmup = 3;
  bool json = false;
  std::vector<std::pair<std::string, int64_t>> dims;
  bool help = false;
  std::string inputList; // profile
  std::string profileOut; // profile
  bool quiet = false;       // profile: no progress lines
  int64_t samples = 0;     // profile: (input, mask) pairs kept per site
  int64_t sampleEvery = 1; // profile: sample every N-th token
  std::string text;        // eval
  int64_t seqLen = 128;    // eval
  int64_t maxChunks = 0;   // eval (0: all)
  std::string saveTop1, compareTop1; // eval
  std::string prompt, promptIds;     // generate: text or .npy token ids
  int64_t maxNewTokens = 64;         // generate
  int64_t maxSeqLen = 0;             // generate (0: the model's bound or 4096)
  double temperature = 0.0;          // generate (0: greedy)
  int64_t topK = 0;                  // generate (0: all)
  double topP = 1.0;                 // generate
  uint64_t seed = 0;                 // generate
};

/// Prints "error: <message>" to stderr; returns 1 (the exit status).
int reportError(const std::string &message);
bool parseInt(const std::string &text, int64_t &value);
std::string executableDir(const char *argv0);
std::string joinPath(const std::string &dir, const std::string &file);
std::string fileSafe(const std::string &name);

/// The weights and execution context every command runs with.
struct Session {
  std::unique_ptr<WeightPack> pack;
  std::unique_ptr<Context> ctx;
  bool open(const ModelDesc &desc, const char *argv0, int threads,
            std::string &error);
};

/// Runs the model once, after checking each input against the compiled
/// element type, rank, fixed sizes and maxima; returns false with the
/// error.
bool runOnce(const ModelDesc &desc, Context &ctx, const Tensor *inputs,
             std::vector<Tensor> &outputs, std::string &error);

int commandEval(const Options &opts, const ModelDesc &desc, const char *argv0);
int commandGenerate(const Options &opts, const ModelDesc &desc,
                    const char *argv0);

} // namespace sparsec::rt::cli

#endif // SPARSEC_RUNTIME_CORE_CLI_H
