//===- GenerateTest.cpp - `model generate` over a simulated device --------===//
//
// Part of the sparsec project.
//
// `model generate` drives a KV-cache decoder through three paths: the
// host's cache (x86), a device backend's padded cache with each step
// waited for, and steps launched ahead that take their ids from the step
// before on the device (Context::launchAhead, Backend::deviceArgmax). The
// last two run on a GPU only in the product; here a simulated device stands
// in: its "stream" is a queue of work that runs in order only when the host
// waits (finishStep, or a run not launched ahead), its host outputs are
// poisoned until then, and it reads device-side inputs (the cache, the
// picks) when the work runs, not when it is queued. A toy decoder whose
// next token depends on every visible cache entry makes any slip (a wrong
// mask, a row appended to the wrong entry, a pick read before its step ran)
// change the tokens, which are checked against a direct computation.
//
//===----------------------------------------------------------------------===//

#include "RunMain.h"
#include "sparsec/rt/Half.h"
#include "sparsec/rt/Runtime.h"

#include "gtest/gtest.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <unistd.h>

using namespace sparsec::rt;
namespace fs = std::filesystem;

namespace {

using test::MainResult;
using test::runMain;

constexpr int64_t kVocab = 256;
constexpr int64_t kHeadDim = 2;

/// The toy decoder's next token after position i, from what it sees of
/// the visible entries (cached past and new positions up to i, the current
/// one included): the sum of their keys' first field (the token), of their
/// values' first field (2 token + 1) and of their keys' second field (1),
/// and the current token. An entry the mask wrongly shows (the padded
/// cache's unused entries hold a marker row), a value moved as a key or a
/// row appended to the wrong entry all change it.
int64_t nextToken(int64_t keySum, int64_t valueSum, int64_t count,
                  int64_t current) {
  return (keySum * 7 + valueSum * 5 + current * 3 + count) % kVocab;
}
/// The padded cache's unused entries (what a mask that shows one would
/// add).
constexpr float kUnusedKey[kHeadDim] = {97.0f, 1.0f};
constexpr float kUnusedValue[kHeadDim] = {11.0f, 0.0f};

/// The greedy continuation computed directly.
std::vector<int64_t> reference(std::vector<int64_t> seq, int64_t maxNew) {
  std::vector<int64_t> out;
  for (int64_t g = 0; g < maxNew; ++g) {
    int64_t sum = 0;
    for (int64_t t : seq)
      sum += t;
    const int64_t count = int64_t(seq.size());
    int64_t next = nextToken(sum, 2 * sum + count, count, seq.back());
    seq.push_back(next);
    out.push_back(next);
  }
  return out;
}

/// What the simulated device saw, for the test to check.
struct Trace {
  int runs = 0, aheadRuns = 0, pickInputs = 0, grows = 0;
  int positionChecks = 0; // runs whose position_ids were checked
  int exactRuns = 0;      // runs marked Context::exactFfn
  size_t maxOutstanding = 0; // steps queued and not yet waited for
  std::vector<int64_t> capacities; // initCache's
  std::vector<bool> narrow;        // initCache's
  int halfPastRuns = 0;            // runs given a float16 device cache
  int exactWarmups = 0;            // warm-up runs marked Context::exactFfn
  // Runs marked Context::warmup: their sequence lengths and past lengths.
  std::vector<std::pair<int64_t, int64_t>> warmups;
};

/// A device backend simulated on the host (see the file comment).
struct FakeDevice : Context::Backend {
  explicit FakeDevice(Trace &trace) : trace(trace) {}
  bool keepsResidentOutputs() const override { return true; }

  /// float32, or float16 where initCache was asked to narrow it (as the
  /// CUDA backend keeps a cache the model also reads in 16 bits).
  struct Cache {
    std::vector<float> data;
    std::vector<uint16_t> half;
    bool narrow = false;
    int64_t shape[4] = {};
    void *ptr() {
      return narrow ? static_cast<void *>(half.data())
                    : static_cast<void *>(data.data());
    }
    void set(size_t i, float v) {
      if (narrow)
        half[i] = floatToHalf(v);
      else
        data[i] = v;
    }
  };
  /// Element i of a float32 or float16 tensor.
  static float at(const Tensor &t, int64_t i) {
    return t.dtype == DType::f16 ? halfToFloat(t.as<uint16_t>()[i])
                                 : t.as<float>()[i];
  }
  std::vector<Cache> caches;
  // Device slots of the outputs (resident ones are views of them).
  std::vector<std::vector<float>> present;
  std::vector<int64_t> picks; // the last picking run's ids (device)
  bool picked = false;
  int64_t picksRows = 0, picksCols = 0;
  // Host buffers per parity: logits or ids, and non-resident presents.
  std::vector<float> hostLogits[2];
  std::vector<int64_t> hostIds[2];
  std::vector<std::vector<float>> hostPresent[2];
  int parity = 0;
  struct Job {
    int64_t seq;
    std::function<void()> work;
  };
  std::deque<Job> stream;
  struct Outstanding {
    int64_t seq, run;
    int parity;
  };
  std::deque<Outstanding> outstanding;
  int64_t nextSeq = 0;
  Trace &trace;

  void enqueue(std::function<void()> work) {
    stream.push_back({nextSeq++, std::move(work)});
  }
  void drainThrough(int64_t seq) {
    while (!stream.empty() && stream.front().seq <= seq) {
      Job job = std::move(stream.front());
      stream.pop_front();
      job.work();
    }
  }
  void drain() {
    drainThrough(INT64_MAX);
    outstanding.clear();
  }

  bool finishStep(Context &, int64_t run) override {
    while (!outstanding.empty() && outstanding.front().run <= run) {
      drainThrough(outstanding.front().seq);
      outstanding.pop_front();
    }
    return true;
  }
  void finishOldest() {
    drainThrough(outstanding.front().seq);
    outstanding.pop_front();
  }
  bool deviceArgmax(Context &, int index, Tensor &ids) override {
    if (!picked || index != 0)
      return false;
    ids = Tensor{picks.data(), DType::i64, 2, {picksRows, picksCols}};
    return true;
  }
  bool initCache(Context &ctx, int id, const Tensor &src, int64_t count,
                 int64_t capacity, bool narrow, Tensor &cache) override {
    drain(); // an allocation waits for the device
    if (src.rank != 4 || count > src.shape[2] || capacity < count)
      return ctx.fail("fake device: bad initCache");
    trace.capacities.push_back(capacity);
    trace.narrow.push_back(narrow);
    if (size_t(id) >= caches.size())
      caches.resize(size_t(id) + 1);
    Cache &c = caches[size_t(id)];
    const int64_t B = src.shape[0], H = src.shape[1];
    const size_t n = size_t(B * H * capacity * kHeadDim);
    // A new buffer (a grown cache's view reads the old one).
    Cache fresh;
    fresh.narrow = narrow;
    (narrow ? fresh.half.resize(n) : fresh.data.resize(n));
    // Unused entries hold a marker the mask must hide (id % 2: K or V).
    for (size_t e = 0; e < n; ++e)
      fresh.set(e, (id % 2 ? kUnusedValue : kUnusedKey)[e % kHeadDim]);
    const int64_t shape[4] = {B, H, capacity, kHeadDim};
    std::copy(shape, shape + 4, fresh.shape);
    for (int64_t r = 0; r < B * H; ++r)
      for (int64_t e = 0; e < count * kHeadDim; ++e)
        fresh.set(size_t(r * capacity * kHeadDim + e),
                  at(src, r * src.shape[2] * kHeadDim + e));
    c = std::move(fresh);
    cache = Tensor{c.ptr(),
                   narrow ? DType::f16 : DType::f32,
                   4,
                   {B, H, capacity, kHeadDim}};
    return true;
  }
  bool appendCache(Context &ctx, int id, const Tensor &src, int64_t from,
                   int64_t to) override {
    if (size_t(id) >= caches.size() || to >= caches[size_t(id)].shape[2] ||
        from >= src.shape[2])
      return ctx.fail("fake device: bad appendCache");
    // Queued: it reads the present when the work before it has run.
    const float *s = src.as<float>();
    const int64_t srcLen = src.shape[2];
    enqueue([this, id, s, srcLen, from, to] {
      Cache &c = caches[size_t(id)];
      for (int64_t r = 0; r < c.shape[0] * c.shape[1]; ++r)
        for (int64_t e = 0; e < kHeadDim; ++e)
          c.set(size_t((r * c.shape[2] + to) * kHeadDim + e),
                s[(r * srcLen + from) * kHeadDim + e]);
    });
    return true;
  }
  bool growCache(Context &ctx, int id, int64_t valid, int64_t capacity,
                 Tensor &cache) override {
    drain();
    ++trace.grows;
    Cache old = caches[size_t(id)];
    Tensor view{old.ptr(),
                old.narrow ? DType::f16 : DType::f32,
                4,
                {old.shape[0], old.shape[1], old.shape[2], old.shape[3]}};
    return initCache(ctx, id, view, valid, capacity, old.narrow, cache);
  }
};

/// Which backend the run function creates, and what it saw.
struct World {
  bool device = false;
  bool keepsPicks = true; // the device honours Context::argmaxAlso
  bool leaky = false;      // attention also sees masked entries
  float decodeNoise = 0;   // decode steps' logits scaled by 1 + this
  // Runs of at most 8 rows not marked Context::exactFfn: logits scaled by
  // 1 + this more (a predicted build's FFNs on a CUDA device, which
  // computes more rows exactly).
  float predictedNoise = 0;
  bool bf16 = false;       // the run binds bfloat16 weights
  Trace trace;
};
World *world = nullptr;

/// inputs: input_ids [B, n], attention_mask [B, past + n], past K and V
/// [B, 1, past, 2]; outputs: logits [B, n, 256], present K and V
/// [B, 1, past + n, 2].
bool toyRun(Context &ctx, const Tensor *in, Tensor *out) {
  if (world->device && !ctx.backend)
    ctx.backend = std::make_unique<FakeDevice>(world->trace);
  FakeDevice *d = static_cast<FakeDevice *>(ctx.backend.get());
  const Tensor &ids = in[0], &mask = in[1], &pastK = in[2], &pastV = in[3];
  const int64_t B = ids.shape[0], n = ids.shape[1], past = pastK.shape[2];
  const int64_t total = past + n;
  const bool exact = ctx.exactFfn || B * n > 8;
  if (mask.shape[0] != B || mask.shape[1] != total || pastV.shape[2] != past ||
      pastK.shape[0] != B || pastK.shape[1] != 1)
    return ctx.fail("toy: inconsistent input shapes");
  // LLaMA-style position_ids (a fifth input): each token's index, which is
  // the number of unmasked entries before it (the padded device cache's
  // new token follows the cached ones, after the padding).
  if (ctx.desc.numInputs == 5) {
    const Tensor &pos = in[4];
    if (pos.rank != 2 || pos.shape[0] != B || pos.shape[1] != n)
      return ctx.fail("toy: position_ids " + pos.describe() + " for " +
                      ids.describe() + " ids");
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < n; ++j) {
        int64_t before = 0;
        for (int64_t c = 0; c < past + j; ++c)
          before += mask.as<int64_t>()[b * total + c];
        if (pos.as<int64_t>()[b * n + j] != before)
          return ctx.fail("toy: position " + std::to_string(j) + " of row " +
                          std::to_string(b) + " is " +
                          std::to_string(pos.as<int64_t>()[b * n + j]) +
                          ", expected " + std::to_string(before));
      }
    ++world->trace.positionChecks;
  }
  ++world->trace.runs;
  world->trace.exactRuns += ctx.exactFfn;
  ctx.bf16Weights |= world->bf16;
  if (ctx.warmup) {
    world->trace.warmups.emplace_back(n, past);
    world->trace.exactWarmups += ctx.exactFfn;
  }
  const bool picksIn = d && ids.data == d->picks.data() && d->picked;
  world->trace.pickInputs += picksIn;
  if (ctx.launchAhead && d)
    ++world->trace.aheadRuns;
  // Host inputs are read now (staged); device ones when the work runs.
  auto isDevice = [&](const Tensor &t) {
    if (!d)
      return false;
    for (FakeDevice::Cache &c : d->caches)
      if (t.data == c.ptr())
        return true;
    return false;
  };
  auto snapshot = [](const Tensor &t, auto tag) {
    using T = decltype(tag);
    return std::vector<T>(t.as<T>(), t.as<T>() + t.numel());
  };
  std::vector<int64_t> idsNow = picksIn ? std::vector<int64_t>{}
                                        : snapshot(ids, int64_t{});
  std::vector<int64_t> maskNow = snapshot(mask, int64_t{});
  std::vector<float> kNow, vNow;
  if (!isDevice(pastK)) {
    if (pastK.dtype != DType::f32 || pastV.dtype != DType::f32)
      return ctx.fail("toy: a host past must be float32");
    kNow = snapshot(pastK, float{});
    vNow = snapshot(pastV, float{});
  }
  // A device cache: float32 or float16 (read when the work runs).
  const Tensor kDev = pastK, vDev = pastV;
  world->trace.halfPastRuns += pastK.dtype == DType::f16;
  const bool argmax = ctx.argmaxOutput == 0 && d;
  // Context::argmaxAlso: the logits come back and the picks stay too.
  const bool keep = !argmax && ctx.argmaxAlso == 0 && d && world->keepsPicks;

  // The work itself, on whatever the inputs hold when it runs.
  auto compute = [=](std::vector<float> &logits, std::vector<float> &k,
                     std::vector<float> &v, std::vector<int64_t> *pickRows) {
    const int64_t *idv = picksIn ? d->picks.data() : idsNow.data();
    auto pk = [&](int64_t i) {
      return kNow.empty() ? FakeDevice::at(kDev, i) : kNow[size_t(i)];
    };
    auto pv = [&](int64_t i) {
      return vNow.empty() ? FakeDevice::at(vDev, i) : vNow[size_t(i)];
    };
    logits.assign(size_t(B * n * kVocab), 0.0f);
    k.assign(size_t(B * total * kHeadDim), 0.0f);
    v.assign(size_t(B * total * kHeadDim), 0.0f);
    if (pickRows)
      pickRows->assign(size_t(B * n), 0);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t j = 0; j < past; ++j)
        for (int64_t e = 0; e < kHeadDim; ++e) {
          k[size_t((b * total + j) * kHeadDim + e)] =
              pk((b * past + j) * kHeadDim + e);
          v[size_t((b * total + j) * kHeadDim + e)] =
              pv((b * past + j) * kHeadDim + e);
        }
      for (int64_t i = 0; i < n; ++i) {
        const int64_t tok = idv[b * n + i];
        k[size_t((b * total + past + i) * kHeadDim)] = float(tok);
        k[size_t((b * total + past + i) * kHeadDim + 1)] = 1.0f;
        v[size_t((b * total + past + i) * kHeadDim)] = float(2 * tok + 1);
      }
      for (int64_t i = 0; i < n; ++i) {
        int64_t keySum = 0, valueSum = 0, count = 0;
        for (int64_t j = 0; j <= past + i; ++j)
          if (maskNow[size_t(b * total + j)] || world->leaky) {
            keySum += int64_t(k[size_t((b * total + j) * kHeadDim)]);
            count += int64_t(k[size_t((b * total + j) * kHeadDim + 1)]);
            valueSum += int64_t(v[size_t((b * total + j) * kHeadDim)]);
          }
        const int64_t next =
            nextToken(keySum, valueSum, count, idv[b * n + i]);
        float *row = logits.data() + (b * n + i) * kVocab;
        // (A decode step's rounding differs from the prompt's: all its
        // logits by a factor, which keeps their order.)
        const float factor =
            (n == 1 && past > 0 ? 1.0f + world->decodeNoise : 1.0f) *
            (exact ? 1.0f : 1.0f + world->predictedNoise);
        for (int64_t t = 0; t < kVocab; ++t)
          row[t] = -float((t - next + kVocab) % kVocab) * factor;
        if (pickRows)
          (*pickRows)[size_t(b * n + i)] = next;
      }
    }
  };

  const int64_t logitsShape[3] = {B, n, kVocab};
  const int64_t presentShape[4] = {B, 1, total, kHeadDim};
  if (!d) {
    // The host: at once.
    static std::vector<float> logits, k, v;
    compute(logits, k, v, nullptr);
    out[0] = Tensor{logits.data(), DType::f32, 3, {B, n, kVocab}};
    out[1] = Tensor{k.data(), DType::f32, 4,
                    {presentShape[0], presentShape[1], presentShape[2], presentShape[3]}};
    out[2] = Tensor{v.data(), DType::f32, 4,
                    {presentShape[0], presentShape[1], presentShape[2], presentShape[3]}};
    return true;
  }

  // The device: a parity the outstanding step does not hold.
  if (ctx.launchAhead) {
    const int p = d->outstanding.empty() ? d->parity ^ 1
                                         : d->outstanding.back().parity ^ 1;
    while (!d->outstanding.empty() &&
           (d->outstanding.front().parity == p || d->outstanding.size() >= 2))
      d->finishOldest();
    d->parity = p;
  } else {
    d->drain();
    d->parity = 0;
  }
  const int p = d->parity;
  d->present.resize(2);
  d->hostPresent[p].resize(2);
  if (d->present[0].size() != size_t(B * total * kHeadDim) && !d->stream.empty())
    d->drain(); // a slot that grows waits for the work that uses it
  // Poisoned until the work has run.
  d->hostLogits[p].assign(size_t(B * n * kVocab), NAN);
  d->hostIds[p].assign(size_t(B * n), -7);
  for (int o = 0; o < 2; ++o)
    d->hostPresent[p][size_t(o)].assign(size_t(B * total * kHeadDim), NAN);
  const bool resident[2] = {ctx.residentOutputs.size() > 2 && ctx.residentOutputs[1],
                            ctx.residentOutputs.size() > 2 && ctx.residentOutputs[2]};
  d->present[0].resize(size_t(B * total * kHeadDim));
  d->present[1].resize(size_t(B * total * kHeadDim));
  if ((argmax || keep) && d->picks.size() != size_t(B * n)) {
    d->drain(); // the picks' buffer grows before the step, not under it
    d->picks.assign(size_t(B * n), 0);
  }
  d->enqueue([=] {
    std::vector<float> logits;
    std::vector<int64_t> rowPicks;
    compute(logits, d->present[0], d->present[1],
            argmax || keep ? &rowPicks : nullptr);
    if (argmax || keep)
      d->picks = rowPicks; // same size every decode step: no reallocation
    if (argmax)
      d->hostIds[p] = rowPicks;
    else
      d->hostLogits[p] = logits;
    for (int o = 0; o < 2; ++o)
      if (!resident[o])
        d->hostPresent[p][size_t(o)] = d->present[size_t(o)];
  });
  if (argmax) {
    d->picked = true;
    d->picksRows = B;
    d->picksCols = n;
    out[0] = Tensor{d->hostIds[p].data(), DType::i64, 2, {B, n}};
  } else {
    d->picked = keep;
    d->picksRows = B;
    d->picksCols = n;
    out[0] = Tensor{d->hostLogits[p].data(), DType::f32, 3,
                    {logitsShape[0], logitsShape[1], logitsShape[2]}};
  }
  for (int o = 0; o < 2; ++o) {
    float *data = resident[o] ? d->present[size_t(o)].data()
                              : d->hostPresent[p][size_t(o)].data();
    out[o + 1] = Tensor{data, DType::f32, 4,
                        {presentShape[0], presentShape[1], presentShape[2],
                         presentShape[3]}};
  }
  ++ctx.runs;
  if (ctx.launchAhead) {
    d->outstanding.push_back({d->nextSeq - 1, ctx.runs, p});
    world->trace.maxOutstanding =
        std::max(world->trace.maxOutstanding, d->outstanding.size());
  } else {
    d->drain();
  }
  return true;
}

const IODesc kToyInputsHost[] = {
    {"input_ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}},
    {"attention_mask", DType::i64, 2, {-1, -1}, {"batch", "total"}, {-1, -1}},
    {"past_key_values.0.key", DType::f32, 4, {-1, 1, -1, kHeadDim},
     {"batch", "", "past", ""}, {-1, 1, -1, kHeadDim}},
    {"past_key_values.0.value", DType::f32, 4, {-1, 1, -1, kHeadDim},
     {"batch", "", "past", ""}, {-1, 1, -1, kHeadDim}}};
const IODesc kToyInputsAhead[] = {
    {"input_ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}, true, kVocab},
    kToyInputsHost[1], kToyInputsHost[2], kToyInputsHost[3]};
// An embedding table narrower than the logits: the device's picks could
// index past it, so they are never passed as ids.
const IODesc kToyInputsNarrow[] = {
    {"input_ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}, true,
     kVocab - 1},
    kToyInputsHost[1], kToyInputsHost[2], kToyInputsHost[3]};
// Past inputs that only attention ops read (IODesc::attentionPast): the
// device may keep their caches in float16. Both, or only the keys.
const IODesc kToyPastKeyHalf = {"past_key_values.0.key",
                                DType::f32,
                                4,
                                {-1, 1, -1, kHeadDim},
                                {"batch", "", "past", ""},
                                {-1, 1, -1, kHeadDim},
                                false,
                                0,
                                true};
const IODesc kToyInputsHalf[] = {kToyInputsAhead[0],
                                 kToyInputsHost[1],
                                 kToyPastKeyHalf,
                                 {"past_key_values.0.value",
                                  DType::f32,
                                  4,
                                  {-1, 1, -1, kHeadDim},
                                  {"batch", "", "past", ""},
                                  {-1, 1, -1, kHeadDim},
                                  false,
                                  0,
                                  true}};
// The same with ids the device's picks are never passed as: each step
// waited for.
const IODesc kToyInputsHalfHost[] = {kToyInputsHost[0], kToyInputsHalf[1],
                                     kToyInputsHalf[2], kToyInputsHalf[3]};
const IODesc kToyInputsHalfKeys[] = {kToyInputsAhead[0], kToyInputsHost[1],
                                     kToyPastKeyHalf, kToyInputsHost[3]};
// The same with LLaMA-style position_ids.
const IODesc kToyInputsHostPos[] = {
    kToyInputsHost[0], kToyInputsHost[1], kToyInputsHost[2], kToyInputsHost[3],
    {"position_ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}}};
const IODesc kToyInputsAheadPos[] = {
    kToyInputsAhead[0], kToyInputsHost[1], kToyInputsHost[2], kToyInputsHost[3],
    kToyInputsHostPos[4]};
const IODesc kToyOutputs[] = {
    {"logits", DType::f32, 3, {-1, -1, kVocab}, {"batch", "seq", ""}, {-1, -1, kVocab}},
    {"present.0.key", DType::f32, 4, {-1, 1, -1, kHeadDim},
     {"batch", "", "total", ""}, {-1, 1, -1, kHeadDim}},
    {"present.0.value", DType::f32, 4, {-1, 1, -1, kHeadDim},
     {"batch", "", "total", ""}, {-1, 1, -1, kHeadDim}}};
const int64_t kToySlots[] = {-1};

class GenerateTest : public testing::Test {
protected:
  void SetUp() override {
    world = &w;
    dir = fs::path(testing::TempDir()) /
          ("sparsec-generate-" + std::to_string(::getpid()));
    fs::create_directories(dir);
  }
  void TearDown() override {
    world = nullptr;
    std::error_code ec;
    fs::remove_all(dir, ec);
  }

  /// `generate` of the toy decoder: on the host, or on the simulated
  /// device with the ids input marked for device values (`ahead`) or not.
  MainResult generate(bool device, bool ahead, std::vector<std::string> args,
                      bool keepsPicks = true, bool narrowTable = false,
                      bool leaky = false, bool warmup = false) {
    w = World{};
    w.device = device;
    w.keepsPicks = keepsPicks;
    w.leaky = leaky;
    w.decodeNoise = decodeNoise;
    w.predictedNoise = predictedNoise;
    w.bf16 = bf16Weights;
    ModelDesc desc{};
    desc.name = "toy";
    desc.numInputs = withPositions ? 5 : 4;
    desc.inputs = inputs ? inputs
                  : withPositions
                      ? (ahead ? kToyInputsAheadPos : kToyInputsHostPos)
                  : !ahead      ? kToyInputsHost
                  : narrowTable ? kToyInputsNarrow
                                : kToyInputsAhead;
    desc.numOutputs = 3;
    desc.outputs = kToyOutputs;
    desc.numSlots = 1;
    desc.slotBytes = kToySlots;
    desc.run = toyRun;
    if (positions > 0) { // as sparsec-bound-positions records an OPT table
      desc.maxPositions = positions;
      desc.positionTable = "pos.weight";
      desc.positionRows = positions + 2;
    }
    // Without the untimed warm-up runs by default, so that the run counts
    // below are those of the decode itself (WarmupRunChangesNothing).
    if (!warmup) {
      args.push_back("--warmup");
      args.push_back("0");
    }
    args.insert(args.begin(), "generate");
    return runMain(desc, std::move(args));
  }

  std::string promptFile(const std::vector<std::vector<int64_t>> &rows) {
    std::vector<int64_t> flat;
    for (const auto &r : rows)
      flat.insert(flat.end(), r.begin(), r.end());
    Tensor t{flat.data(), DType::i64, 2,
             {int64_t(rows.size()), int64_t(rows[0].size())}};
    std::string path = (dir / ("prompt" + std::to_string(files++) + ".npy")).string();
    std::string error;
    EXPECT_TRUE(writeNpy(path, t, error)) << error;
    return path;
  }

  World w;
  fs::path dir;
  int files = 0;
  /// The model's position bound (ModelDesc::maxPositions); 0: none.
  int64_t positions = 0;
  /// Whether the toy takes position_ids (checked against the mask).
  bool withPositions = false;
  /// The toy's inputs, where not chosen by generate()'s arguments.
  const IODesc *inputs = nullptr;
  float decodeNoise = 0; // World::decodeNoise of the next generate()
  float predictedNoise = 0; // World::predictedNoise of the next generate()
  bool bf16Weights = false;
};

std::string bytesOf(const std::vector<int64_t> &ids) {
  std::string s;
  for (int64_t t : ids)
    s.push_back(char(static_cast<unsigned char>(t)));
  return s;
}

std::string rowLine(const std::vector<int64_t> &ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i)
    s += (i ? " " : "") + std::to_string(ids[i]);
  return s + "\n";
}

TEST_F(GenerateTest, EveryPathDecodesTheReference) {
  const std::string prompt = "sparse";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  const std::string want = bytesOf(reference(seq, 20));
  const std::vector<std::string> args = {"--prompt", prompt, "--max-new-tokens", "20"};

  MainResult host = generate(/*device=*/false, /*ahead=*/false, args);
  ASSERT_EQ(host.status, 0) << host.err;
  EXPECT_EQ(host.out, want);

  MainResult sync = generate(/*device=*/true, /*ahead=*/false, args);
  ASSERT_EQ(sync.status, 0) << sync.err;
  EXPECT_EQ(sync.out, want);
  EXPECT_EQ(w.trace.aheadRuns, 0);
  EXPECT_EQ(w.trace.pickInputs, 0);
  // The padded device cache was kept (no fallback through host memory).
  EXPECT_EQ(sync.err.find("does not ignore"), std::string::npos) << sync.err;
  ASSERT_EQ(w.trace.capacities.size(), 2u);

  MainResult ahead = generate(/*device=*/true, /*ahead=*/true, args);
  ASSERT_EQ(ahead.status, 0) << ahead.err;
  EXPECT_EQ(ahead.out, want);
  // The prefill waits and gives the first token; the padded cache's check
  // is launched ahead, and so are the 19 decode steps: the first, queued
  // before the host waited for the check, on the first token as host ids,
  // the other 18 on the picks of the step before.
  EXPECT_EQ(w.trace.aheadRuns, 20);
  EXPECT_EQ(w.trace.pickInputs, 18);
  EXPECT_EQ(w.trace.runs, 21);
  // Each step was queued before the host waited for the one before.
  EXPECT_EQ(w.trace.maxOutstanding, 2u);
  EXPECT_EQ(ahead.err.find("does not ignore"), std::string::npos) << ahead.err;
  // The cache holds the prompt and every new token but the last.
  ASSERT_EQ(w.trace.capacities.size(), 2u);
  EXPECT_EQ(w.trace.capacities[0], int64_t(prompt.size()) + 20 - 1);
  EXPECT_EQ(w.trace.grows, 0);
  EXPECT_NE(ahead.err.find("20 new;"), std::string::npos) << ahead.err;

  // A device that keeps no picks of the check (Context::argmaxAlso
  // ignored): the first decode step waits, the other 18 go ahead (and the
  // check, before it).
  MainResult later = generate(/*device=*/true, /*ahead=*/true, args,
                              /*keepsPicks=*/false);
  ASSERT_EQ(later.status, 0) << later.err;
  EXPECT_EQ(later.out, want);
  EXPECT_EQ(w.trace.aheadRuns, 19);
  EXPECT_EQ(w.trace.pickInputs, 18);
  EXPECT_EQ(w.trace.runs, 21);
}

// generate's default untimed warm-up runs (one-time setup out of time to
// first token) are the runs below and change no output.
TEST_F(GenerateTest, WarmupRunChangesNothing) {
  const std::string prompt = "sparse";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  const std::string want = bytesOf(reference(seq, 20));
  const std::vector<std::string> args = {"--prompt", prompt, "--max-new-tokens", "20"};
  for (bool device : {false, true})
    for (bool ahead : {false, true}) {
      MainResult cold = generate(device, ahead, args);
      ASSERT_EQ(cold.status, 0) << cold.err;
      const int runs = w.trace.runs;
      EXPECT_TRUE(w.trace.warmups.empty());
      MainResult warm = generate(device, ahead, args, /*keepsPicks=*/true,
                                 /*narrowTable=*/false, /*leaky=*/false,
                                 /*warmup=*/true);
      ASSERT_EQ(warm.status, 0) << warm.err;
      EXPECT_EQ(warm.out, want) << "device " << device << ", ahead " << ahead;
      EXPECT_EQ(cold.out, want);
      // One run over the first token (x86 too), then on a device one over the
      // whole prompt, both with nothing cached; then the same runs as
      // without them.
      using Warm = std::vector<std::pair<int64_t, int64_t>>;
      const Warm expected =
          device ? Warm{{1, 0}, {int64_t(seq.size()), 0}} : Warm{{1, 0}};
      EXPECT_EQ(w.trace.warmups, expected);
      // The run over the prompt computes its FFNs exactly, as the prompt.
      EXPECT_EQ(w.trace.exactWarmups, device ? 1 : 0);
      if (device) {
        EXPECT_EQ(w.trace.runs, runs + 2);
        // The device caches are reserved in the warm-up at the capacity
        // the setup after the first token plans (the prompt and every new
        // token but the last), then set up.
        const int64_t planned = int64_t(seq.size()) + 20 - 1;
        EXPECT_EQ(w.trace.capacities,
                  (std::vector<int64_t>{planned, planned, planned, planned}));
      }
      w.trace.warmups.clear();
      EXPECT_NE(warm.err.find("20 new;"), std::string::npos) << warm.err;
    }
}

TEST_F(GenerateTest, PicksWiderThanTheTableNeverLaunchAhead) {
  const std::string prompt = "sparse";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  MainResult r = generate(/*device=*/true, /*ahead=*/true,
                          {"--prompt", prompt, "--max-new-tokens", "10"},
                          /*keepsPicks=*/true, /*narrowTable=*/true);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, bytesOf(reference(seq, 10)));
  EXPECT_EQ(w.trace.aheadRuns, 0);
  EXPECT_EQ(w.trace.pickInputs, 0);
}

TEST_F(GenerateTest, FailedCheckFallsBackToTheHostCacheOnce) {
  // Attention that sees masked entries: the padded cache's unused entries
  // change the check's logits, so the cache goes through host memory from
  // then on (the prefill, which gives the first token, the check, the
  // prompt and the first token again, which give the second, then one run
  // a token), the same bytes as on the host. Launched ahead, the check had
  // the first decode step queued behind it, which is dropped.
  const std::string prompt = "sparse";
  const std::vector<std::string> args = {"--prompt", prompt, "--max-new-tokens", "8"};
  MainResult host = generate(/*device=*/false, /*ahead=*/false, args, true, false,
                             /*leaky=*/true);
  ASSERT_EQ(host.status, 0) << host.err;
  for (bool ahead : {false, true}) {
    MainResult dev = generate(/*device=*/true, ahead, args, true, false,
                              /*leaky=*/true);
    ASSERT_EQ(dev.status, 0) << dev.err;
    EXPECT_EQ(dev.out, host.out);
    EXPECT_NE(dev.err.find("does not ignore"), std::string::npos) << dev.err;
    EXPECT_EQ(w.trace.runs, 3 + 6 + (ahead ? 1 : 0));
    EXPECT_EQ(w.trace.aheadRuns, ahead ? 2 : 0); // the check, the dropped step
    EXPECT_EQ(w.trace.pickInputs, 0); // that step took the first token
    EXPECT_NE(dev.err.find("8 new;"), std::string::npos) << dev.err;
  }
}

TEST_F(GenerateTest, CacheCheckAllowsForBfloat16Rounding) {
  // Decode steps whose logits differ from the prompt run's by 0.4 % of the
  // largest (as bfloat16 weights' prompt GEMMs, which round their inputs
  // to 8 bits, differ from the decode GEMVs): with bf16 weights the device
  // cache passes the check (within 1e-2); without, it fails it (1e-3) and
  // the cache goes through host memory. The same bytes either way.
  const std::vector<std::string> args = {"--prompt", "sparse",
                                         "--max-new-tokens", "8"};
  decodeNoise = 4e-3f;
  bf16Weights = true;
  MainResult bf = generate(/*device=*/true, /*ahead=*/false, args);
  ASSERT_EQ(bf.status, 0) << bf.err;
  EXPECT_EQ(bf.err.find("does not ignore"), std::string::npos) << bf.err;
  EXPECT_EQ(w.trace.runs, 2 + 7); // the prompt, the check, 7 decode steps
  bf16Weights = false;
  MainResult strict = generate(/*device=*/true, /*ahead=*/false, args);
  ASSERT_EQ(strict.status, 0) << strict.err;
  EXPECT_NE(strict.err.find("does not ignore"), std::string::npos)
      << strict.err;
  EXPECT_EQ(strict.out, bf.out);
  // Past bf16's allowance too, the check fails with bf16 weights.
  decodeNoise = 2e-2f;
  bf16Weights = true;
  MainResult far = generate(/*device=*/true, /*ahead=*/false, args);
  ASSERT_EQ(far.status, 0) << far.err;
  EXPECT_NE(far.err.find("does not ignore"), std::string::npos) << far.err;
  EXPECT_EQ(far.out, bf.out);
}

TEST_F(GenerateTest, CacheCheckComputesFfnsExactly) {
  // A predicted build: runs of up to 8 rows differ by 2 % of the largest
  // logit (the predictor's dropped neurons) unless marked
  // Context::exactFfn; more rows are exact anyway. The prompt and the
  // check's run are marked, so the check compares the cache alone and
  // passes, for a prompt of 6 rows (which would predict) and of 2 x 6;
  // no decode step is marked. The same bytes as on the host.
  predictedNoise = 2e-2f;
  const std::string ids = promptFile({{1, 2, 3, 4, 5, 6}, {6, 5, 4, 3, 2, 1}});
  for (const std::vector<std::string> &args :
       {std::vector<std::string>{"--prompt", "sparse", "--max-new-tokens", "8"},
        std::vector<std::string>{"--prompt-ids", ids, "--max-new-tokens",
                                 "8"}}) {
    MainResult host = generate(/*device=*/false, /*ahead=*/false, args);
    ASSERT_EQ(host.status, 0) << host.err;
    for (bool ahead : {false, true}) {
      MainResult dev = generate(/*device=*/true, ahead, args);
      ASSERT_EQ(dev.status, 0) << dev.err;
      EXPECT_EQ(dev.err.find("does not ignore"), std::string::npos) << dev.err;
      EXPECT_EQ(w.trace.exactRuns, 2); // the prompt and the check
      EXPECT_EQ(w.trace.runs, 2 + 7);  // the prompt, the check, 7 steps
      EXPECT_EQ(dev.out, host.out);
    }
  }
  const std::vector<std::string> args = {"--prompt", "sparse",
                                         "--max-new-tokens", "8"};
  // Were the check a predicted step too, it would fail (2e-2 > 1e-3).
  decodeNoise = 2e-2f;
  predictedNoise = 0;
  MainResult off = generate(/*device=*/true, /*ahead=*/false, args);
  ASSERT_EQ(off.status, 0) << off.err;
  EXPECT_NE(off.err.find("does not ignore"), std::string::npos) << off.err;
}

TEST_F(GenerateTest, HalfDeviceCacheWhereEveryPastIsMarked) {
  // Past inputs marked IODesc::attentionPast: generate asks for narrow
  // caches, the device keeps them in float16 and passes them back as
  // float16 inputs, which the input check accepts for marked inputs. The
  // toy's values are exact in float16: the same bytes as the host, and
  // the cache check passes.
  const std::vector<std::string> args = {"--prompt", "sparse",
                                         "--max-new-tokens", "20"};
  MainResult host = generate(/*device=*/false, /*ahead=*/false, args);
  ASSERT_EQ(host.status, 0) << host.err;
  for (bool ahead : {false, true}) {
    inputs = ahead ? kToyInputsHalf : kToyInputsHalfHost;
    MainResult dev = generate(/*device=*/true, ahead, args);
    ASSERT_EQ(dev.status, 0) << dev.err;
    EXPECT_EQ(dev.out, host.out);
    EXPECT_EQ(dev.err.find("does not ignore"), std::string::npos) << dev.err;
    ASSERT_FALSE(w.trace.narrow.empty());
    for (bool n : w.trace.narrow)
      EXPECT_TRUE(n);
    EXPECT_EQ(w.trace.halfPastRuns, 1 + 19); // the check and 19 steps
    EXPECT_EQ(w.trace.aheadRuns > 0, ahead);
  }
  // Only the keys marked: no cache is narrowed (an attention reads its
  // past keys and values in one type).
  inputs = kToyInputsHalfKeys;
  MainResult keys = generate(/*device=*/true, /*ahead=*/true, args);
  ASSERT_EQ(keys.status, 0) << keys.err;
  EXPECT_EQ(keys.out, host.out);
  ASSERT_FALSE(w.trace.narrow.empty());
  for (bool n : w.trace.narrow)
    EXPECT_FALSE(n);
  EXPECT_EQ(w.trace.halfPastRuns, 0);
}

TEST_F(GenerateTest, SamplingNeverLaunchesAhead) {
  // Seeded sampling picks on the host from the logits: no step takes the
  // device's picks, and the same seed gives the same bytes as the host.
  const std::vector<std::string> args = {"--prompt", "sparse", "--max-new-tokens",
                                         "12", "--temperature", "0.8",
                                         "--seed", "7"};
  MainResult host = generate(/*device=*/false, /*ahead=*/false, args);
  ASSERT_EQ(host.status, 0) << host.err;
  MainResult dev = generate(/*device=*/true, /*ahead=*/true, args);
  ASSERT_EQ(dev.status, 0) << dev.err;
  EXPECT_EQ(dev.out, host.out);
  EXPECT_EQ(w.trace.aheadRuns, 0);
  EXPECT_EQ(w.trace.pickInputs, 0);
}

TEST_F(GenerateTest, BatchLaunchedAhead) {
  const std::vector<std::vector<int64_t>> rows = {
      {3, 1, 4, 1, 5}, {2, 7, 1, 8, 2}, {250, 0, 9, 9, 17}};
  std::string file = promptFile(rows);
  std::string want;
  for (const auto &r : rows)
    want += rowLine(reference(r, 12));
  for (bool ahead : {false, true}) {
    MainResult r = generate(/*device=*/true, ahead,
                        {"--prompt-ids", file, "--max-new-tokens", "12"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, want) << (ahead ? "launched ahead" : "waited for");
    EXPECT_EQ(w.trace.aheadRuns, ahead ? 12 : 0);
  }
  MainResult host = generate(/*device=*/false, false,
                         {"--prompt-ids", file, "--max-new-tokens", "12"});
  ASSERT_EQ(host.status, 0) << host.err;
  EXPECT_EQ(host.out, want);
}

TEST_F(GenerateTest, StopsAtMaxSeqLenLaunchedAhead) {
  // 6 prompt bytes, room for 10 positions: 4 new tokens, the check and
  // the last three launched ahead (the first of them on the prefill's
  // token, the other two on the device's picks), and no step past the
  // limit.
  const std::string prompt = "kvpage";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  MainResult r = generate(/*device=*/true, /*ahead=*/true,
                      {"--prompt", prompt, "--max-new-tokens", "30",
                       "--max-seq-len", "10"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, bytesOf(reference(seq, 4)));
  EXPECT_NE(r.err.find("stopped at --max-seq-len 10"), std::string::npos) << r.err;
  EXPECT_EQ(w.trace.aheadRuns, 4);
  EXPECT_EQ(w.trace.pickInputs, 2);
  EXPECT_EQ(w.trace.runs, 5);
}

TEST_F(GenerateTest, OneNewTokenNeverLaunchesAhead) {
  const std::string prompt = "ab";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  for (int64_t n : {1, 2}) {
    MainResult r = generate(/*device=*/true, /*ahead=*/true,
                        {"--prompt", prompt, "--max-new-tokens", std::to_string(n)});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, bytesOf(reference(seq, n)));
    // The first token comes from the prefill, and where it is the last
    // one no cache is set up or checked; a second one is one step, queued
    // on the first token behind the check (both launched ahead).
    EXPECT_EQ(w.trace.runs, n == 1 ? 1 : 3);
    EXPECT_EQ(w.trace.aheadRuns, n == 1 ? 0 : 2);
    EXPECT_EQ(w.trace.pickInputs, 0);
    EXPECT_EQ(w.trace.capacities.size(), n == 1 ? 0u : 2u);
  }
}

TEST_F(GenerateTest, PositionTableBoundsTheSequence) {
  const std::string prompt = "kvpage";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  positions = 10;
  const std::string table =
      "the 10 positions of the model's position table 'pos.weight' (12 rows)";
  for (bool device : {false, true}) {
    // The default --max-seq-len is the table's bound.
    MainResult r = generate(device, /*ahead=*/device,
                            {"--prompt", prompt, "--max-new-tokens", "30"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, bytesOf(reference(seq, 4)));
    EXPECT_NE(r.err.find("stopped at " + table), std::string::npos) << r.err;
    // A shorter one still applies.
    r = generate(device, device,
                 {"--prompt", prompt, "--max-new-tokens", "30", "--max-seq-len", "8"});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out, bytesOf(reference(seq, 2)));
    EXPECT_NE(r.err.find("stopped at --max-seq-len 8"), std::string::npos) << r.err;
    // A longer one is refused before anything runs.
    r = generate(device, device,
                 {"--prompt", prompt, "--max-new-tokens", "30", "--max-seq-len", "11"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("error: --max-seq-len 11 exceeds " + table),
              std::string::npos) << r.err;
    EXPECT_EQ(w.trace.runs, 0);
    // So is a prompt past the table.
    r = generate(device, device, {"--prompt", "0123456789a"});
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.err.find("error: the prompt has 11 tokens, more than " + table),
              std::string::npos) << r.err;
  }
}

TEST_F(GenerateTest, HostCacheTooLargeToReserve) {
  // 128 rows x 2^30 positions x 2 floats: 1 TiB a cache tensor.
  std::vector<std::vector<int64_t>> rows(128, std::vector<int64_t>{'a', 'b'});
  MainResult r = generate(/*device=*/false, false,
                          {"--prompt-ids", promptFile(rows), "--max-seq-len",
                           std::to_string(int64_t(1) << 30)});
  // Refused before the reservation (more than the machine's memory), so
  // also where the system would overcommit it.
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("error: cannot reserve the KV cache for --max-seq-len "
                       "1073741824: 1099511627776 bytes for 'present.0.key' "
                       "alone, more than this machine's "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(" bytes of memory; lower --max-seq-len"),
            std::string::npos)
      << r.err;
}

TEST_F(GenerateTest, HostCacheTooLargeInAll) {
  // Each cache tensor (128 rows x 2 floats a position) 3/4 of the memory,
  // the key and value together more than all of it.
  const long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || size <= 0)
    GTEST_SKIP() << "the machine's memory is unknown";
  const int64_t memory = int64_t(pages) * int64_t(size);
  const int64_t positions = memory / 4 * 3 / (128 * 2 * 4);
  std::vector<std::vector<int64_t>> rows(128, std::vector<int64_t>{'a', 'b'});
  MainResult r = generate(/*device=*/false, false,
                          {"--prompt-ids", promptFile(rows), "--max-seq-len",
                           std::to_string(positions)});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("error: cannot reserve the KV cache for --max-seq-len " +
                       std::to_string(positions) + ": " +
                       std::to_string(2 * positions * 128 * 2 * 4) +
                       " bytes for 2 tensors, more than this machine's " +
                       std::to_string(memory) +
                       " bytes of memory; lower --max-seq-len"),
            std::string::npos)
      << r.err;
}

TEST_F(GenerateTest, PositionIdsFollowTheTokens) {
  // A model with position_ids gets each token's index on every path: the
  // host cache, the padded device cache (waited for and launched ahead),
  // the warm-up runs, one row and three.
  const std::string prompt = "rotary";
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  const std::string want = bytesOf(reference(seq, 12));
  withPositions = true;
  for (auto [device, ahead] : {std::pair{false, false}, std::pair{true, false},
                               std::pair{true, true}}) {
    SCOPED_TRACE(std::string(device ? "device" : "host") + (ahead ? ", ahead" : ""));
    for (bool warmup : {false, true}) {
      MainResult r = generate(device, ahead,
                              {"--prompt", prompt, "--max-new-tokens", "12"},
                              true, false, false, warmup);
      ASSERT_EQ(r.status, 0) << r.err;
      EXPECT_EQ(r.out, want);
      EXPECT_EQ(w.trace.positionChecks, w.trace.runs);
      EXPECT_GT(w.trace.runs, 0);
    }
    const std::string file = promptFile({seq, seq, seq});
    MainResult r = generate(device, ahead, {"--prompt-ids", file, "--max-new-tokens", "5"});
    ASSERT_EQ(r.status, 0) << r.err;
    const std::string row = rowLine(reference(seq, 5));
    EXPECT_EQ(r.out, row + row + row);
    EXPECT_EQ(w.trace.positionChecks, w.trace.runs);
  }
}

} // namespace
