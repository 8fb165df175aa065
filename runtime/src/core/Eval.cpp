//===- Eval.cpp - `model eval`: loss and top-1 agreement over text -------===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#include "Cli.h"
#include "sparsec/rt/Profile.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

namespace sparsec::rt::cli {

/// Byte-level LMs: next-byte loss and top-1 predictions over a text file.
int commandEval(const Options &opts, const ModelDesc &desc, const char *argv0) {
  if (opts.text.empty())
    return reportError("eval needs --text FILE");
  int idsIndex = -1, maskIndex = -1, positionsIndex = -1;
  for (int i = 0; i < desc.numInputs; ++i) {
    std::string n = desc.inputs[i].name ? desc.inputs[i].name : "";
    if (n == "input_ids")
      idsIndex = i;
    else if (n == "attention_mask")
      maskIndex = i;
    else if (n == "position_ids")
      positionsIndex = i;
    else
      return reportError("eval needs a byte-level LM whose inputs are "
                         "input_ids (and attention_mask, position_ids); this "
                         "model also takes '" + n + "'");
  }
  if (idsIndex < 0 || desc.numOutputs < 1)
    return reportError("eval needs a model with an input_ids input and a "
                       "logits output");
  for (int i : {idsIndex, maskIndex, positionsIndex})
    if (i >= 0 && (desc.inputs[i].dtype != DType::i64 || desc.inputs[i].rank != 2))
      return reportError(std::string("eval expects int64 [batch, seq] for '") +
                         desc.inputs[i].name + "'");
  std::string text, readError;
  if (!readFileBytes(opts.text, text, readError, "text file"))
    return reportError(readError);
  const int64_t len = opts.seqLen;
  int64_t chunks = int64_t(text.size()) / len;
  if (opts.maxChunks > 0)
    chunks = std::min(chunks, opts.maxChunks);
  if (chunks == 0)
    return reportError("text file '" + opts.text + "' is shorter than one " +
                       std::to_string(len) + "-byte chunk");
  std::vector<int32_t> reference;
  if (!opts.compareTop1.empty()) {
    std::string bytes;
    if (!readFileBytes(opts.compareTop1, bytes, readError) ||
        bytes.size() != size_t(chunks * len) * sizeof(int32_t))
      return reportError("'" + opts.compareTop1 + "' does not hold the top-1 "
                         "predictions of " + std::to_string(chunks) +
                         " chunks of " + std::to_string(len) +
                         " bytes (write it with --save-top1 and the same "
                         "--text, --seq-len and --max-chunks)");
    reference.resize(size_t(chunks * len));
    std::memcpy(reference.data(), bytes.data(), bytes.size());
  }
  std::string error;
  Session session;
  if (!session.open(desc, argv0, opts.threads, error))
    return reportError(error);
  Context &ctx = *session.ctx;
  std::vector<int64_t> ids(static_cast<size_t>(len)), mask(static_cast<size_t>(len), 1);
  std::vector<int64_t> positions(static_cast<size_t>(len));
  for (int64_t k = 0; k < len; ++k)
    positions[size_t(k)] = k; // each chunk starts a sequence
  std::vector<Tensor> inputs(size_t(desc.numInputs));
  inputs[size_t(idsIndex)] = Tensor{ids.data(), DType::i64, 2, {1, len}};
  if (maskIndex >= 0)
    inputs[size_t(maskIndex)] = Tensor{mask.data(), DType::i64, 2, {1, len}};
  if (positionsIndex >= 0)
    inputs[size_t(positionsIndex)] =
        Tensor{positions.data(), DType::i64, 2, {1, len}};
  std::vector<Tensor> outputs(size_t(desc.numOutputs));
  std::vector<int32_t> top1(size_t(chunks * len));
  double nll = 0;
  int64_t scored = 0, agree = 0;
  bool tty = isatty(fileno(stderr));
  auto start = std::chrono::steady_clock::now();
  for (int64_t c = 0; c < chunks; ++c) {
    for (int64_t t = 0; t < len; ++t)
      ids[size_t(t)] = static_cast<unsigned char>(text[size_t(c * len + t)]);
    if (!runOnce(desc, ctx, inputs.data(), outputs, error))
      return reportError("chunk " + std::to_string(c) + ": " + error);
    const Tensor &logits = outputs[0];
    if (logits.dtype != DType::f32 || logits.rank != 3 ||
        logits.shape[0] != 1 || logits.shape[1] != len)
      return reportError("eval expects float32 logits [1, " +
                         std::to_string(len) + ", vocab], got " +
                         logits.describe());
    const int64_t vocab = logits.shape[2];
    for (int64_t t = 0; t < len; ++t) {
      const float *row = logits.as<float>() + t * vocab;
      int64_t best = std::max_element(row, row + vocab) - row;
      top1[size_t(c * len + t)] = int32_t(best);
      if (!reference.empty())
        agree += reference[size_t(c * len + t)] == int32_t(best);
      if (t + 1 < len) {
        int64_t next = ids[size_t(t + 1)];
        if (next >= vocab)
          return reportError("byte " + std::to_string(next) +
                             " is outside the vocabulary of " +
                             std::to_string(vocab));
        double sum = 0;
        for (int64_t v = 0; v < vocab; ++v)
          sum += std::exp(double(row[v]) - double(row[best]));
        nll += std::log(sum) + double(row[best]) - double(row[next]);
        ++scored;
      }
    }
    if (tty || c + 1 == chunks || (c + 1) % 64 == 0)
      std::fprintf(stderr, "%s[eval] %lld/%lld chunks%s", tty ? "\r" : "",
                   (long long)(c + 1), (long long)chunks, tty ? "" : "\n");
  }
  if (tty)
    std::fprintf(stderr, "\n");
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start).count();
  if (!opts.saveTop1.empty()) {
    std::ofstream out(opts.saveTop1, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char *>(top1.data()),
              std::streamsize(top1.size() * sizeof(int32_t)));
    if (!out)
      return reportError("cannot write '" + opts.saveTop1 + "'");
  }
  std::printf("tokens: %lld (%lld chunks of %lld bytes)\n",
              (long long)(chunks * len), (long long)chunks, (long long)len);
  std::printf("loss: %.5f nats/byte\n", nll / double(scored));
  if (!reference.empty())
    std::printf("top-1 agreement: %.3f%% (%lld of %lld)\n",
                100.0 * double(agree) / double(chunks * len), (long long)agree,
                (long long)(chunks * len));
  std::printf("time: %.2f s\n", seconds);
  std::fflush(stdout);
  return 0;
}

} // namespace sparsec::rt::cli
