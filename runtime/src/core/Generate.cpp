//===- Generate.cpp - `model generate`: autoregressive decoding -----------===//
//
// Part of the sparsec project.
//
// Decoder LMs with an input_ids input and a logits output [batch, seq,
// vocab]. Two export conventions:
//  - KV-cache exports (Optimum naming: past_key_values.{i}.key/value inputs,
//    present.{i}.key/value outputs): the runtime owns the cache. The prompt
//    is one prefill run with an empty cache, then one run per new token.
//    On x86 the cache is host memory reserved for --max-seq-len up front.
//    A device backend keeps it in device memory at a fixed capacity
//    (planned for the prompt and every new token, within --max-seq-len):
//    past = [1, H, capacity, D] with the unused entries
//    masked out by attention_mask, so every decode step has one shape and
//    replays one CUDA graph; each step's new K/V row is moved into place on
//    the device. The padded step is checked once against the prefill's
//    logits (re-running the last prompt token), and generation falls back
//    to host copies for an export whose attention does not honour the
//    mask for past entries.
//  - Exports without a cache: each step runs the whole sequence again (the
//    correct but quadratic fallback; compiled with --kv-cache, such an
//    export gets the KV-cache interface from sparsec-derive-kv-cache and
//    decodes as above).
// Greedy decoding, or seeded sampling with temperature, top-k and top-p.
// Greedy decode steps over a device cache ask the backend for the logits'
// argmax only (Context::argmaxOutput): a backend that honours it (CUDA,
// unless SPARSEC_CUDA_ARGMAX=0) picks the token on the device and returns
// one id a row instead of the vocabulary-wide rows; otherwise the host
// picks.
// Byte-level models (vocabulary 256) stream the continuation as raw bytes,
// others as token ids; the last line on stderr gives time to first token,
// decode tokens/s and, for sparse builds, the mean density the sparse
// kernels used. --prompt-ids [B, n] decodes a static batch of B
// independent prompts of one length together (every step runs all B rows;
// the sparse kernels then compute the union of the rows' neurons); each
// row's continuation is printed as one line of ids at the end, and tokens/s
// counts all rows.
//
//===----------------------------------------------------------------------===//

#include "Argmax.h"
#include "Cli.h"
#include "sparsec/rt/Half.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>

#include <unistd.h>

namespace sparsec::rt::cli {

namespace {
struct CacheSlot {
  int input = -1, output = -1; // indices into desc.inputs / desc.outputs
  int64_t heads = 0, headDim = 0;
  DType dtype = DType::f32; // the model's: float32, or float16 (host mode)
  std::vector<unsigned char> data; // [1, heads, len, headDim] (host mode)
  Tensor device;           // [1, heads, capacity, headDim] (device mode)
};

/// The machine's physical memory in bytes, 0 where unknown.
uint64_t physicalMemoryBytes() {
#if defined(_SC_PHYS_PAGES) && defined(_SC_PAGESIZE)
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages > 0 && size > 0)
    return uint64_t(pages) * uint64_t(size);
#endif
  return 0;
}

int64_t capacityFor(int64_t needed, int64_t limit) {
  int64_t c = 128;
  while (c < needed)
    c *= 2;
  return std::max(needed, std::min(c, limit));
}

/// Picks the next token from the last position's logits.
int64_t pickToken(const float *logits, int64_t vocab, const Options &opts,
                  std::mt19937_64 &rng) {
  if (opts.temperature <= 0.0)
    return argmaxFirst(logits, vocab);
  std::vector<int64_t> order(static_cast<size_t>(vocab));
  std::iota(order.begin(), order.end(), 0);
  // Only the top-k candidates need an order (all of them without top-k).
  int64_t keep = opts.topK > 0 ? std::min(opts.topK, vocab) : vocab;
  std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                    [&](int64_t a, int64_t b) { return logits[a] > logits[b]; });
  std::vector<double> p(static_cast<size_t>(keep));
  double maxLogit = logits[order[0]], sum = 0;
  for (int64_t i = 0; i < keep; ++i)
    sum += p[size_t(i)] =
        std::exp((double(logits[order[size_t(i)]]) - maxLogit) / opts.temperature);
  // Nucleus: the smallest prefix whose probability reaches top-p.
  double mass = 0;
  int64_t nucleus = keep;
  for (int64_t i = 0; i < keep; ++i) {
    mass += p[size_t(i)] / sum;
    if (mass >= opts.topP) {
      nucleus = i + 1;
      break;
    }
  }
  std::discrete_distribution<int64_t> pick(p.begin(), p.begin() + nucleus);
  return order[size_t(pick(rng))];
}
} // namespace

int commandGenerate(const Options &opts, const ModelDesc &desc,
                    const char *argv0) {
  if (opts.prompt.empty() == opts.promptIds.empty())
    return reportError(opts.prompt.empty() && opts.promptIds.empty()
                           ? "generate needs --prompt TEXT or --prompt-ids FILE.npy"
                           : "give either --prompt or --prompt-ids, not both");
  // The model's interface.
  int idsInput = -1, maskInput = -1, positionsInput = -1, logitsOutput = 0;
  std::vector<CacheSlot> cache;
  for (int i = 0; i < desc.numInputs; ++i) {
    const IODesc &io = desc.inputs[i];
    std::string name = io.name ? io.name : "";
    if (name == "input_ids" && io.dtype == DType::i64 && io.rank == 2) {
      idsInput = i;
    } else if (name == "attention_mask" && io.dtype == DType::i64 && io.rank == 2) {
      maskInput = i;
    } else if (name == "position_ids" && io.dtype == DType::i64 && io.rank == 2) {
      positionsInput = i; // LLaMA-style exports: each token's index
    } else if (name.rfind("past_key_values.", 0) == 0 &&
               (io.dtype == DType::f32 || io.dtype == DType::f16) &&
               io.rank == 4 && io.dims[1] > 0 && io.dims[3] > 0) {
      CacheSlot slot;
      slot.input = i;
      slot.dtype = io.dtype;
      slot.heads = io.dims[1];
      slot.headDim = io.dims[3];
      std::string present = "present." + name.substr(16);
      for (int o = 0; o < desc.numOutputs; ++o)
        if (desc.outputs[o].name && present == desc.outputs[o].name)
          slot.output = o;
      if (slot.output < 0)
        return reportError("the model takes '" + name + "' but has no '" +
                           present + "' output");
      cache.push_back(std::move(slot));
    } else if (name.rfind("past_key_values.", 0) == 0 &&
               io.dtype != DType::f32 && io.dtype != DType::f16) {
      return reportError("generate keeps the KV cache in float32 or float16, "
                         "and this model takes '" + name + "' as " +
                         dtypeName(io.dtype));
    } else {
      return reportError("generate needs a decoder LM whose inputs are "
                         "input_ids (int64 [batch, seq]), attention_mask, "
                         "position_ids and past_key_values.*; this model also "
                         "takes '" + name + "'");
    }
  }
  // The device caches may be kept in 16 bits where every past input takes
  // a float16 cache too (IODesc::attentionPast): all or none, as an
  // attention reads its past keys and values in one type.
  const bool narrowCaches =
      std::all_of(cache.begin(), cache.end(), [&](const CacheSlot &s) {
        const IODesc &io = desc.inputs[s.input];
        return io.attentionPast && io.dtype == DType::f32;
      });
  if (idsInput < 0 || desc.numOutputs < 1)
    return reportError("generate needs an input_ids input and a logits output");
  for (int o = 0; o < desc.numOutputs; ++o)
    if (desc.outputs[o].name && std::string(desc.outputs[o].name) == "logits")
      logitsOutput = o;
  const IODesc &logitsDesc = desc.outputs[logitsOutput];
  const int64_t staticVocab =
      logitsDesc.rank == 3 && logitsDesc.dims[2] > 0 ? logitsDesc.dims[2] : -1;

  // The prompt: row 0 in `tokens`, rows 1.. of a batch in `rows`.
  std::vector<int64_t> tokens;
  std::vector<std::vector<int64_t>> rows;
  int64_t batch = 1;
  bool bytes = staticVocab == 256;
  if (!opts.prompt.empty()) {
    if (!bytes)
      return reportError("--prompt takes text for byte-level models "
                         "(vocabulary 256); this model's vocabulary is " +
                         (staticVocab > 0 ? std::to_string(staticVocab)
                                          : std::string("dynamic")) +
                         ": use --prompt-ids");
    for (unsigned char c : opts.prompt)
      tokens.push_back(c);
  } else {
    Buffer storage;
    Tensor ids;
    std::string error;
    if (!readNpy(opts.promptIds, storage, ids, error))
      return reportError(error);
    if (ids.dtype != DType::i64 || ids.rank < 1 || ids.rank > 2 ||
        (ids.rank == 2 && ids.shape[0] < 1))
      return reportError("--prompt-ids expects int64 [n] or [batch, n], got " +
                         ids.describe());
    if (ids.rank == 2)
      batch = ids.shape[0];
    tokens.assign(ids.as<int64_t>(), ids.as<int64_t>() + ids.numel() / batch);
    for (int64_t b = 1; b < batch; ++b)
      rows.emplace_back(ids.as<int64_t>() + b * ids.shape[1],
                        ids.as<int64_t>() + (b + 1) * ids.shape[1]);
  }
  if (tokens.empty())
    return reportError("the prompt is empty");
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t : b == 0 ? tokens : rows[size_t(b - 1)])
      if (t < 0 || (staticVocab > 0 && t >= staticVocab))
        return reportError("token id " + std::to_string(t) +
                           " is outside the vocabulary of " +
                           std::to_string(staticVocab));
  // The longest sequence this binary was compiled for (--max-dims): the
  // attention mask spans the whole sequence where there is one.
  const IODesc &ids = desc.inputs[idsInput];
  const int64_t compiledMax =
      maskInput >= 0 && desc.inputs[maskInput].maxDims[1] > 0
          ? desc.inputs[maskInput].maxDims[1]
          : ids.maxDims[1];
  if (ids.dims[1] >= 0)
    return reportError(std::string("generate runs the prompt, then one token a "
                                   "step, so the sequence dimension of '") +
                       ids.name + "' must be dynamic; this binary was compiled "
                       "with it fixed at " + std::to_string(ids.dims[1]) +
                       " (--dims): compile it with --max-dims instead");
  // The compiler's bound on the sequence from the model's position table
  // (a longer one would look up rows past its end).
  const int64_t tablePositions = desc.maxPositions;
  const std::string tableText =
      tablePositions > 0
          ? "the " + std::to_string(tablePositions) +
                " positions of the model's position table '" +
                (desc.positionTable ? desc.positionTable : "?") + "' (" +
                std::to_string(desc.positionRows) + " rows)"
          : std::string();
  int64_t maxSeqLen = opts.maxSeqLen;
  // What bounds the sequence, for the messages: the option or the table.
  std::string limitText = "--max-seq-len " + std::to_string(maxSeqLen);
  if (maxSeqLen == 0) {
    maxSeqLen = compiledMax > 0 ? compiledMax : 4096;
    limitText = "--max-seq-len " + std::to_string(maxSeqLen);
    if (tablePositions > 0 && tablePositions < maxSeqLen) {
      maxSeqLen = tablePositions;
      limitText = tableText;
    }
  } else if (compiledMax > 0 && maxSeqLen > compiledMax) {
    return reportError("--max-seq-len " + std::to_string(maxSeqLen) +
                       " exceeds the " + std::to_string(compiledMax) +
                       " positions this binary was compiled for (its --max-dims)");
  } else if (tablePositions > 0 && maxSeqLen > tablePositions) {
    return reportError("--max-seq-len " + std::to_string(maxSeqLen) +
                       " exceeds " + tableText);
  }
  if (ids.maxDims[1] > 0 && int64_t(tokens.size()) > ids.maxDims[1])
    return reportError("the prompt has " + std::to_string(tokens.size()) +
                       " tokens, more than the " + std::to_string(ids.maxDims[1]) +
                       " this binary takes in one run (its --max-dims)");
  if (ids.maxDims[0] > 0 && batch > ids.maxDims[0])
    return reportError("--prompt-ids has " + std::to_string(batch) +
                       " rows, more than the batch of " +
                       std::to_string(ids.maxDims[0]) +
                       " this binary was compiled for (its --max-dims)");
  if (int64_t(tokens.size()) > maxSeqLen)
    return reportError("the prompt has " + std::to_string(tokens.size()) +
                       " tokens, more than " + limitText);

  std::string error;
  Session session;
  if (!session.open(desc, argv0, opts.threads, error))
    return reportError(error);
  Context &ctx = *session.ctx;
  // The cache in host memory: a float16 cache (the device cache is
  // float32), no attention_mask to hide the padded device cache's unused
  // entries (a cache derived for a causal export without one), or (set
  // below) the device cache's check failed.
  bool hostCacheOnly = maskInput < 0 ||
                       std::any_of(cache.begin(), cache.end(), [](const CacheSlot &s) {
                         return s.dtype != DType::f32;
                       });
  // Ask a device backend to leave the present outputs in device memory
  // (host mode reads them on the host).
  ctx.residentOutputs.assign(size_t(desc.numOutputs), 0);
  if (!hostCacheOnly)
    for (CacheSlot &slot : cache)
      ctx.residentOutputs[size_t(slot.output)] = 1;
  // Only each row's last position of the logits is read: a device backend
  // copies back those rows alone ([batch, 1, vocab]).
  ctx.lastPositionOutput = logitsOutput;
  // The padded cache's mask has capacity + 1 entries.
  int64_t capacityLimit = maxSeqLen;
  if (maskInput >= 0 && desc.inputs[maskInput].maxDims[1] > 0)
    capacityLimit = std::min(capacityLimit, desc.inputs[maskInput].maxDims[1] - 1);

  std::mt19937_64 rng(opts.seed);
  std::vector<Tensor> inputs(size_t(desc.numInputs));
  std::vector<Tensor> outputs(size_t(desc.numOutputs));
  std::vector<int64_t> stepIds, mask, positions;
  // The last position's logits of each row, [batch, vocab]: the output
  // itself where a step has one position (its rows are those), else
  // gathered into `gathered`.
  const float *lastLogits = nullptr;
  std::vector<float> gathered;
  // Or, where the backend returned only the logits' argmax (greedy
  // decoding on a device, Context::argmaxOutput), each row's last id.
  std::vector<int64_t> lastIds;
  bool idsOnly = false;
  int64_t vocab = 0;
  const int64_t promptLen = int64_t(tokens.size());
  // The device cache's capacity, planned for the whole generation (the
  // prompt and every new token but the last, whose K/V no step reads;
  // within --max-seq-len): no cache grows while decoding, so every decode
  // step has one shape (one captured graph) and no device memory is
  // reallocated between steps. Step g >= 1 appends entry promptLen + g - 1,
  // so the last (g = maxNewTokens - 1) needs promptLen + maxNewTokens - 1
  // entries.
  const int64_t plannedCapacity = std::max(
      promptLen, std::min(capacityLimit, promptLen + opts.maxNewTokens - 1));
  int64_t generated = 0;
  double ttftMs = 0, decodeMs = 0;
  int64_t densityActive0 = 0, densityTotal0 = 0;
  bool deviceCache = false;           // the cache lives on the device
  int64_t capacity = 0, cached = 0;   // its capacity and valid entries
  static float emptyCache = 0.0f;

  // A run's outputs: the logits (or their argmax) for n positions, the
  // present caches `total` entries long.
  auto checkOutputs = [&](int64_t n, int64_t total) -> bool {
    const Tensor &logits = outputs[size_t(logitsOutput)];
    idsOnly = ctx.argmaxOutput == logitsOutput && logits.dtype == DType::i64;
    // (Context::lastPositionOutput: the last position's rows alone.)
    if (idsOnly ? logits.rank != 2 || logits.shape[0] != batch ||
                      logits.shape[1] != n
                : (logits.dtype != DType::f32 && logits.dtype != DType::f16) ||
                      logits.rank != 3 || logits.shape[0] != batch ||
                      (logits.shape[1] != n && logits.shape[1] != 1)) {
      error = (idsOnly ? "generate expects the logits' argmax as int64 ["
                       : "generate expects float32 or float16 logits [") +
              std::to_string(batch) + ", " + std::to_string(n) +
              (idsOnly ? "]" : ", vocab]") + ", got " + logits.describe();
      return false;
    }
    for (CacheSlot &slot : cache) {
      const Tensor &present = outputs[size_t(slot.output)];
      if (present.dtype != slot.dtype || present.rank != 4 ||
          present.shape[0] != batch || present.shape[1] != slot.heads ||
          present.shape[2] != total ||
          present.shape[3] != slot.headDim) {
        error = std::string("output '") + desc.outputs[slot.output].name + "' is " +
                present.describe() + ", expected " + dtypeName(slot.dtype) + " [" +
                std::to_string(batch) + ", " +
                std::to_string(slot.heads) +
                ", " + std::to_string(total) + ", " + std::to_string(slot.headDim) +
                "]";
        return false;
      }
    }
    return true;
  };
  // Whether a greedy pick the device made is a token id.
  auto validPick = [&](int64_t id) {
    if (id >= 0 && (staticVocab <= 0 || id < staticVocab))
      return true;
    error = "the device's greedy pick " + std::to_string(id) +
            " is outside the vocabulary";
    return false;
  };
  // The last position's pick (ids) or logits of each row, after a run.
  auto readLogits = [&](int64_t n) -> bool {
    const Tensor &logits = outputs[size_t(logitsOutput)];
    if (idsOnly) {
      lastIds.clear();
      for (int64_t b = 0; b < batch; ++b) {
        const int64_t id = logits.as<int64_t>()[(b + 1) * n - 1];
        if (!validPick(id))
          return false;
        lastIds.push_back(id);
      }
      return true;
    }
    vocab = logits.shape[2];
    // Positions that came back: n, or the last one alone.
    const int64_t back = logits.shape[1];
    if (back == 1 && logits.dtype == DType::f32) {
      lastLogits = logits.as<float>();
      return true;
    }
    gathered.clear();
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t at = ((b + 1) * back - 1) * vocab;
      if (logits.dtype == DType::f16) { // a float16 export's logits
        const uint16_t *row = logits.as<uint16_t>() + at;
        for (int64_t v = 0; v < vocab; ++v)
          gathered.push_back(halfToFloat(row[v]));
      } else {
        const float *row = logits.as<float>() + at;
        gathered.insert(gathered.end(), row, row + vocab);
      }
    }
    lastLogits = gathered.data();
    return true;
  };

  // The mask and past inputs of a run over a sequence of `len` with
  // `first` entries cached: on the host, or the padded device cache.
  auto setPast = [&](bool padded, int64_t first, int64_t len) {
    if (padded) {
      mask.assign(size_t(capacity + 1), 0);
      std::fill(mask.begin(), mask.begin() + cached, 1);
      mask[size_t(capacity)] = 1;
    } else {
      mask.assign(size_t(len), 1);
    }
    const int64_t maskLen = int64_t(mask.size());
    mask.resize(size_t(batch * maskLen));
    for (int64_t b = 1; b < batch; ++b)
      std::copy(mask.begin(), mask.begin() + maskLen, mask.begin() + b * maskLen);
    if (maskInput >= 0)
      inputs[size_t(maskInput)] =
          Tensor{mask.data(), DType::i64, 2, {batch, maskLen}};
    // position_ids: each new token's index in its sequence (the padded
    // cache's new token follows the `cached` ones).
    if (positionsInput >= 0) {
      const int64_t from = padded ? cached : first, to = padded ? cached + 1 : len;
      positions.clear();
      for (int64_t b = 0; b < batch; ++b)
        for (int64_t p = from; p < to; ++p)
          positions.push_back(p);
      inputs[size_t(positionsInput)] =
          Tensor{positions.data(), DType::i64, 2, {batch, to - from}};
    }
    for (CacheSlot &slot : cache) {
      void *data = padded ? slot.device.data
                   : slot.data.empty() ? static_cast<void *>(&emptyCache)
                                       : slot.data.data();
      inputs[size_t(slot.input)] =
          Tensor{data,
                 padded ? slot.device.dtype : slot.dtype,
                 4,
                 {batch, slot.heads, padded ? capacity : first, slot.headDim}};
    }
  };
  // One run over tokens[first, end): host mode (past = first host
  // entries) or device mode (past = the padded device cache).
  // The ids input: positions [first, end) of every row.
  auto setIds = [&](int64_t first, int64_t end) {
    stepIds.assign(tokens.begin() + first, tokens.begin() + end);
    for (const std::vector<int64_t> &r : rows)
      stepIds.insert(stepIds.end(), r.begin() + first, r.begin() + end);
    inputs[size_t(idsInput)] =
        Tensor{stepIds.data(), DType::i64, 2, {batch, end - first}};
  };
  // (Over tokens [first, end); end -1: every token. `exact`: the run is
  // marked Context::exactFfn.)
  auto step = [&](int64_t first, bool padded, int64_t end = -1,
                  bool exact = false) -> bool {
    const int64_t len = end < 0 ? int64_t(tokens.size()) : end;
    setIds(first, len);
    const int64_t n = len - first;
    setPast(padded, first, len);
    ctx.exactFfn = exact;
    const bool ran = runOnce(desc, ctx, inputs.data(), outputs, error);
    ctx.exactFfn = false;
    if (!ran)
      return false;
    return checkOutputs(n, padded ? capacity + 1 : len) && readLogits(n);
  };
  auto resident = [&] {
    return ctx.backend && ctx.backend->keepsResidentOutputs();
  };
  // Untimed warm-up runs with nothing cached do the one-time work before
  // the clock starts, so that time to first token is the prompt's latency
  // (on a GPU at OPT-1.3B, SPARSEC_CUDA_PROFILE: 0.33-0.5 s of weight
  // uploads in the first run; then, in the first run at the prompt's
  // shape, 59-113 ms of host time in cuBLAS's first calls at that shape
  // and 16-24 ms growing buffers; a second run at that shape takes 6-7 ms;
  // docs/Decoding.md).
  // First a run over each row's first token (a device backend's creation
  // and weight uploads, the first reads of the mapped weight pack, the
  // decode path's kernels); then, on a device, one over the whole prompt
  // (the batched path's first calls). Runs marked Context::warmup do not
  // count towards capturing a CUDA graph of their shape. Their outputs are
  // dropped.
  // The run over the prompt computes its FFNs exactly, as the prompt does
  // (Context::exactFfn): its first calls are the prompt's.
  if (opts.warmup > 0) {
    auto warm = [&](int64_t n, bool exact) -> bool {
      setIds(0, n);
      setPast(false, 0, n);
      ctx.warmup = true;
      ctx.exactFfn = exact;
      const bool ran = runOnce(desc, ctx, inputs.data(), outputs, error);
      ctx.warmup = false;
      ctx.exactFfn = false;
      if (!ran)
        return false;
      if (ctx.backend && !ctx.backend->finishStep(ctx, ctx.runs)) {
        error = ctx.error;
        return false;
      }
      return true;
    };
    if (!warm(1, false) ||
        (ctx.backend && promptLen > 1 && !warm(promptLen, true)))
      return reportError("warm-up run: " + error);
    // The device caches' memory, allocated now rather than after the
    // first token (initCache below keeps a buffer large enough): the
    // capacity that setup plans, over the warm-up run's present outputs.
    if (!cache.empty() && resident() && !hostCacheOnly &&
        opts.maxNewTokens > 1 && promptLen < maxSeqLen) {
      for (CacheSlot &slot : cache)
        if (!ctx.backend->initCache(ctx, slot.input,
                                    outputs[size_t(slot.output)], 0,
                                    plannedCapacity, narrowCaches, slot.device))
          return reportError("warm-up run: " + ctx.error);
    }
  }
  auto start = std::chrono::steady_clock::now();
  // SPARSEC_GENERATE_PHASES=1: where the time to first token went, one
  // stderr line (milliseconds since the clock started at each mark).
  const char *phasesEnv = std::getenv("SPARSEC_GENERATE_PHASES");
  const bool showPhases = phasesEnv && std::strcmp(phasesEnv, "0") != 0;
  std::string phases;
  bool phasesOpen = showPhases; // until the first iteration has ended
  auto mark = [&](const char *what) {
    if (!phasesOpen)
      return;
    char buf[96];
    std::snprintf(buf, sizeof(buf), "%s%s %.2f", phases.empty() ? "" : ", ",
                  what,
                  std::chrono::duration<double, std::milli>(
                      std::chrono::steady_clock::now() - start)
                      .count());
    phases += buf;
  };
  // Appends each row's next token (pick(b)), streams it and times it.
  auto record = [&](auto pick) {
    int64_t next = pick(0);
    tokens.push_back(next);
    for (int64_t b = 1; b < batch; ++b)
      rows[size_t(b - 1)].push_back(pick(b));
    ++generated;
    if (batch > 1) {
      // Printed per row at the end.
    } else if (bytes) {
      unsigned char c = static_cast<unsigned char>(next);
      std::fwrite(&c, 1, 1, stdout);
    } else {
      std::printf("%s%lld", generated > 1 ? " " : "", (long long)next);
    }
    std::fflush(stdout);
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start).count();
    if (generated == 1) {
      ttftMs = ms;
      mark("token");
      densityActive0 = ctx.sparseActive;
      densityTotal0 = ctx.sparseTotal;
    } else {
      decodeMs = ms - ttftMs;
    }
  };
  // The device's picks index the logits' last axis: passed as ids only
  // where every table the ids index has at least that many rows (the host
  // checks ids it passes itself; picks it never sees before they are used).
  const int64_t idsLimit = desc.inputs[idsInput].valueLimit;
  const bool aheadInput = desc.inputs[idsInput].deviceValues &&
                          (idsLimit <= 0 || (staticVocab > 0 && staticVocab <= idsLimit));
  const bool greedy = opts.temperature <= 0.0;
  Tensor picks;
  // Greedy only: the device's picks must be the tokens recorded (after the
  // cache check, the host picked them from the same logits the device
  // did; both take the first largest value).
  auto canAhead = [&] {
    return deviceCache && greedy && aheadInput &&
           cached + 1 <= capacity &&
           ctx.backend->deviceArgmax(ctx, logitsOutput, picks) &&
           picks.rank == 2 && picks.shape[0] == batch && picks.shape[1] == 1;
  };
  const int64_t *pending = nullptr; // the outstanding step's picks
  int64_t pendingRun = 0;           // and its run (Context::runs)
  // Waits for the outstanding step and records its picks.
  auto take = [&]() -> bool {
    if (!ctx.backend->finishStep(ctx, pendingRun)) {
      error = ctx.error;
      return false;
    }
    for (int64_t b = 0; b < batch; ++b)
      if (!validPick(pending[b]))
        return false;
    const int64_t *ids = pending;
    pending = nullptr;
    record([&](int64_t b) { return ids[b]; });
    return true;
  };
  // Queues one step on `picks` (from canAhead), or with `hostIds` on the
  // last recorded token of each row, appends its K/V row, then takes the
  // step that was outstanding before it, if any.
  auto launchOne = [&](bool hostIds = false) -> bool {
    if (hostIds)
      setIds(int64_t(tokens.size()) - 1, int64_t(tokens.size()));
    else
      inputs[size_t(idsInput)] = picks;
    setPast(true, 0, 0);
    ctx.launchAhead = true;
    const bool ran = runOnce(desc, ctx, inputs.data(), outputs, error);
    ctx.launchAhead = false;
    if (!ran || !checkOutputs(1, capacity + 1))
      return false;
    if (!idsOnly) {
      error = "internal error: a step launched ahead returned logits";
      return false;
    }
    for (CacheSlot &slot : cache)
      if (!ctx.backend->appendCache(ctx, slot.input,
                                    outputs[size_t(slot.output)], capacity,
                                    cached)) {
        error = ctx.error;
        return false;
      }
    ++cached;
    const int64_t *launched = outputs[size_t(logitsOutput)].as<int64_t>();
    const int64_t run = ctx.runs;
    if (pending && !take())
      return false;
    pending = launched;
    pendingRun = run;
    return true;
  };
  // Greedy steps launched ahead: each takes the ids the step before picked
  // on the device (Backend::deviceArgmax, an input only device ops read),
  // so the host queues step t + 1 before it waits for step t's ids; the
  // device then never waits for the host between steps. Returns false
  // with `error` set on failure; stops at --max-new-tokens or when the
  // cache would have to grow (the caller's loop goes on).
  auto decodeAhead = [&]() -> bool {
    while (generated + (pending ? 1 : 0) < opts.maxNewTokens &&
           int64_t(tokens.size()) + (pending ? 1 : 0) < maxSeqLen &&
           canAhead())
      if (!launchOne())
        return false;
    return !pending || take();
  };
  // Row b's next token from the last run: the device's pick, or one
  // picked from its logits.
  auto pickLast = [&](int64_t b) {
    return idsOnly ? lastIds[size_t(b)]
                   : pickToken(lastLogits + b * vocab, vocab, opts, rng);
  };
  while (generated < opts.maxNewTokens) {
    const int64_t len = int64_t(tokens.size());
    // The last run's logits (or ids) are still to be recorded as a token.
    bool fresh = true;
    if (len >= maxSeqLen) {
      std::fprintf(stderr, "\n[generate] stopped at %s\n", limitText.c_str());
      break;
    }
    std::string where = "step " + std::to_string(generated) + ": ";
    if (pending || canAhead()) {
      if (!decodeAhead()) // `where` names the step the run started at
        return reportError("step " + std::to_string(generated) + ": " + error);
      continue;
    }
    if (deviceCache) {
      // One new token over the padded device cache; then its K/V row
      // (entry `capacity` of present) moves to entry `cached`.
      if (cached + 1 > capacity) {
        int64_t grown = capacityFor(cached + 1, capacityLimit);
        for (CacheSlot &slot : cache)
          if (!ctx.backend->growCache(ctx, slot.input, cached, grown, slot.device))
            return reportError(where + ctx.error);
        capacity = grown;
      }
      if (!step(len - 1, true))
        return reportError(where + error);
      for (CacheSlot &slot : cache)
        if (!ctx.backend->appendCache(ctx, slot.input,
                                      outputs[size_t(slot.output)], capacity,
                                      cached))
          return reportError(where + ctx.error);
      ++cached;
    } else {
      // The whole prompt first, then one token at a time with a cache (the
      // whole sequence without one).
      int64_t past = cache.empty() || generated == 0 ? 0 : len - 1;
      // The prompt computes its FFNs exactly (Context::exactFfn; a device
      // backend does so anyway above a decode batch), as the device
      // cache's check below does: both sides of that comparison alike.
      if (!step(past, false, -1, /*exact=*/generated == 0))
        return reportError(where + error);
      if (generated == 0) {
        // The first token comes from the prompt's logits, before the
        // device cache is set up and checked below.
        mark("prompt");
        record(pickLast);
        fresh = false;
      }
      // Whether another step runs (not where the first token was the
      // last one): only then is a cache set up.
      const bool more =
          generated < opts.maxNewTokens && int64_t(tokens.size()) < maxSeqLen;
      if (more && !cache.empty() && resident() && !hostCacheOnly) {
        // Device backend: move to the padded device cache, checked once by
        // re-running the last prompt token over it (entries len - 1 on).
        std::vector<float> reference(lastLogits, lastLogits + batch * vocab);
        // (len is promptLen: this runs after the prompt only.)
        capacity = plannedCapacity;
        cached = len - 1;
        bool ok = true;
        for (CacheSlot &slot : cache)
          ok = ok && ctx.backend->initCache(
                         ctx, slot.input, outputs[size_t(slot.output)], cached,
                         capacity, narrowCaches, slot.device);
        if (!ok)
          return reportError(where + ctx.error);
        mark("device cache");
        // Greedy, where later steps may take the device's picks as ids: the
        // check itself is launched ahead and the next decode step (on the
        // first token, recorded above) queued behind it before the host
        // waits, so that the device runs the check while the host prepares
        // (and a CUDA backend captures) that step; both are dropped if the
        // check fails. The check runs over the last prompt token alone.
        const bool overlap = greedy && aheadInput;
        // Whether a step is queued behind the check. Only then does the
        // device keep the check's argmax too: that the device picks (a
        // backend that picks none cannot launch steps ahead), not which
        // token it picked (a later step must not take it as its ids).
        const bool queue =
            overlap && len + 1 < maxSeqLen && cached + 2 <= capacity;
        if (queue)
          ctx.argmaxAlso = logitsOutput;
        ctx.launchAhead = overlap;
        // Exact as the prompt's: the check compares the cache, not a
        // predictor.
        const bool checked = step(len - 1, true, len, /*exact=*/true);
        ctx.launchAhead = false;
        ctx.argmaxAlso = -1;
        if (!checked)
          return reportError(where + error);
        mark(overlap ? "check queued" : "check");
        const int64_t checkRun = ctx.runs;
        // The check's K/V row into the device cache.
        auto appendCheckRow = [&] {
          for (CacheSlot &slot : cache)
            if (!ctx.backend->appendCache(ctx, slot.input,
                                          outputs[size_t(slot.output)],
                                          capacity, cached))
              return false;
          ++cached;
          return true;
        };
        bool appended = false; // the check's K/V row, before the queued step
        if (queue) {
          if (!appendCheckRow())
            return reportError(where + ctx.error);
          appended = true;
          deviceCache = true; // for canAhead; undone if the check fails
          ctx.argmaxOutput = logitsOutput;
          if (canAhead()) {
            if (!launchOne(true))
              return reportError(where + error);
            mark("next step queued");
          }
          idsOnly = false; // lastLogits are still the check's
        }
        if (overlap && !ctx.backend->finishStep(ctx, checkRun))
          return reportError(where + ctx.error);
        mark("check done");
        float diff = 0, scale = 1;
        for (size_t i = 0; i < reference.size(); ++i) {
          diff = std::max(diff, std::fabs(reference[i] - lastLogits[i]));
          scale = std::max(scale, std::fabs(reference[i]));
        }
        // Within 1e-3 of the largest logit; 1e-2 with bfloat16 weights,
        // whose prompt GEMMs round their inputs to 8 bits while the check's
        // decode GEMVs keep fp32 (opt-byte-s: 3-4.4e-3 of its 13, where
        // fp16 weights stay within 1e-3). An export whose attention reads
        // the padded entries mixes them into every head's output, which
        // moves the logits by more than that unless the padding is a few
        // entries behind a long prompt.
        const float tolerance = ctx.bf16Weights ? 1e-2f : 1e-3f;
        if (!(diff <= tolerance * scale)) {
          std::fprintf(stderr,
                       "[generate] this export's attention does not ignore "
                       "masked past entries (logits differ by %g): the cache "
                       "goes through host memory\n",
                       double(diff));
          if (pending && !ctx.backend->finishStep(ctx, pendingRun))
            return reportError(where + ctx.error);
          pending = nullptr; // the queued step's pick is not used
          deviceCache = false;
          hostCacheOnly = true; // not checked again at every step
          ctx.argmaxOutput = -1;
          ctx.residentOutputs.assign(ctx.residentOutputs.size(), 0);
          // Over the prompt and the first token: its logits give the next.
          if (!step(0, false))
            return reportError(where + error);
          fresh = true;
        } else {
          if (!appended && !appendCheckRow())
            return reportError(where + ctx.error);
          deviceCache = true;
          // Greedy steps from here on need only the argmax of the logits:
          // a device backend picks it there and downloads one id a row.
          if (greedy)
            ctx.argmaxOutput = logitsOutput;
        }
      }
      if (more && !deviceCache) {
        // The host cache grows in place up to --max-seq-len, reserved on
        // first use (a device backend keeps the cache on the device). A
        // reservation past the machine's memory is refused here: where the
        // system overcommits, it would succeed and fail only once touched.
        if (std::any_of(cache.begin(), cache.end(), [](const CacheSlot &c) {
              return c.data.capacity() == 0;
            })) {
          auto slotBytes = [&](const CacheSlot &slot) {
            return uint64_t(batch * slot.heads * maxSeqLen * slot.headDim) *
                   dtypeSize(slot.dtype);
          };
          const uint64_t memory = physicalMemoryBytes();
          const std::string refused =
              "cannot reserve the KV cache for --max-seq-len " +
              std::to_string(maxSeqLen) + ": ";
          const std::string ofMemory = memory ? ", more than this machine's " +
                                                    std::to_string(memory) +
                                                    " bytes of memory"
                                              : std::string();
          uint64_t total = 0;
          for (const CacheSlot &slot : cache)
            if (slot.data.capacity() == 0) {
              const uint64_t n = slotBytes(slot);
              if (memory && n > memory)
                return reportError(refused + std::to_string(n) +
                                   " bytes for '" +
                                   desc.outputs[slot.output].name + "' alone" +
                                   ofMemory + "; lower --max-seq-len");
              total += n;
            }
          if (memory && total > memory)
            return reportError(refused + std::to_string(total) + " bytes for " +
                               std::to_string(cache.size()) + " tensors" +
                               ofMemory + "; lower --max-seq-len");
          for (CacheSlot &slot : cache)
            if (slot.data.capacity() == 0) {
              const uint64_t n = slotBytes(slot);
              try {
                slot.data.reserve(size_t(n));
              } catch (const std::exception &) {
                return reportError(refused + std::to_string(n) +
                                   " bytes for '" +
                                   desc.outputs[slot.output].name +
                                   "' alone; lower --max-seq-len");
              }
            }
        }
        for (CacheSlot &slot : cache) {
          const Tensor &present = outputs[size_t(slot.output)];
          const auto *p = static_cast<const unsigned char *>(present.data);
          slot.data.assign(p, p + present.bytes());
        }
      }
    }
    if (fresh)
      record(pickLast);
    if (phasesOpen) {
      std::fprintf(stderr, "[generate] first token (ms): %s\n", phases.c_str());
      phasesOpen = false;
    }
  }
  if (batch > 1) {
    for (int64_t b = 0; b < batch; ++b) {
      const std::vector<int64_t> &r = b == 0 ? tokens : rows[size_t(b - 1)];
      for (int64_t i = promptLen; i < int64_t(r.size()); ++i)
        std::printf("%s%lld", i > promptLen ? " " : "", (long long)r[size_t(i)]);
      std::printf("\n");
    }
  } else if (!bytes) {
    std::printf("\n");
  }
  std::fflush(stdout);
  std::string line = "[generate] " +
                     (batch > 1 ? "batch " + std::to_string(batch) + ", " : std::string()) +
                     "prompt " + std::to_string(promptLen) +
                     " tokens, " + std::to_string(generated) +
                     " new; time to first token " +
                     std::to_string(int64_t(std::lround(ttftMs * 1000))) + " us";
  char buf[128];
  if (generated > 1) {
    std::snprintf(buf, sizeof(buf), "; decode %.1f tokens/s",
                  double(batch * (generated - 1)) / (decodeMs / 1000.0));
    line += buf;
  }
  int64_t active = ctx.sparseActive - densityActive0,
          total = ctx.sparseTotal - densityTotal0;
  if (total > 0) {
    std::snprintf(buf, sizeof(buf), "; mean density %.3f", double(active) / total);
    line += buf;
  }
  if (cache.empty())
    line += "; no KV cache in this export (each step reruns the sequence)";
  std::fprintf(stderr, "%s%s\n", bytes && batch == 1 ? "\n" : "", line.c_str());
  return 0;
}

} // namespace sparsec::rt::cli
