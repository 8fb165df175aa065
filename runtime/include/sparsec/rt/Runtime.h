//===- Runtime.h - sparsec runtime core -------------------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// The runtime that generated model code links against: tensors, owned
// buffers, .npy I/O, the memory-mapped weight pack, a thread pool, the
// execution context and the `run` / `bench` command line of a compiled
// model. Plain C++17, no MLIR/LLVM dependency.
//
// Error handling: functions that can fail on user input return bool and set
// a message (no exceptions); ops record the first error in the Context
// (ctx.fail(...)) and the generated code stops at the next check.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_RUNTIME_H
#define SPARSEC_RT_RUNTIME_H

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace sparsec::rt {

//===----------------------------------------------------------------------===//
// Element types and tensors
//===----------------------------------------------------------------------===//

/// Element types. `b1` (bool) is stored as one byte (0 or 1), like numpy.
/// `bf16` (bfloat16, the top half of a float32) holds weights stored with
/// `--weights bf16`: the ops that read them compute in float32.
enum class DType : uint8_t {
  f32,
  f64,
  f16,
  i64,
  i32,
  i16,
  i8,
  u8,
  u16,
  u32,
  u64,
  b1,
  bf16
};

size_t dtypeSize(DType t);
/// numpy's name: "float32", "int64", "bool", ...
const char *dtypeName(DType t);
/// The numpy array-protocol descriptor: "<f4", "<i8", "|b1", ...
const char *dtypeDescr(DType t);

constexpr int kMaxRank = 8;

/// A non-owning view of a dense row-major tensor.
struct Tensor {
  void *data = nullptr;
  DType dtype = DType::f32;
  int rank = 0;
  int64_t shape[kMaxRank] = {};

  int64_t numel() const;
  size_t bytes() const { return static_cast<size_t>(numel()) * dtypeSize(dtype); }
  template <typename T> T *as() const { return static_cast<T *>(data); }
  /// "float32[1, 71, 256]"
  std::string describe() const;
};

/// An owned, 64-byte aligned, growable allocation.
class Buffer {
public:
  Buffer() = default;
  Buffer(const Buffer &) = delete;
  Buffer &operator=(const Buffer &) = delete;
  Buffer(Buffer &&other) noexcept;
  Buffer &operator=(Buffer &&other) noexcept;
  ~Buffer();

  /// Grows to at least `bytes` (contents are not preserved on growth).
  /// Returns false if the allocation fails.
  bool ensure(size_t bytes);
  void *data() const { return data_; }
  size_t capacity() const { return capacity_; }

private:
  void *data_ = nullptr;
  size_t capacity_ = 0;
};

//===----------------------------------------------------------------------===//
// .npy files
//===----------------------------------------------------------------------===//

/// Reads a .npy file (format 1.0/2.0/3.0, little-endian, C order) into
/// `storage`; `out` views it. Errors name the file and the problem
/// ("cannot open", "not a .npy file", "unsupported dtype '<u2'",
/// "Fortran-ordered arrays are not supported", "truncated: expected N
/// bytes of data, found M").
bool readNpy(const std::string &path, Buffer &storage, Tensor &out,
             std::string &error);
/// Writes `t` as a .npy file (format 1.0).
bool writeNpy(const std::string &path, const Tensor &t, std::string &error);

//===----------------------------------------------------------------------===//
// Weight pack
//===----------------------------------------------------------------------===//

/// FNV-1a 64-bit hash (the weight pack checksum).
uint64_t fnv1a64(const void *data, size_t size, uint64_t seed = 0xcbf29ce484222325ULL);

/// The weight pack file: a 64-byte header
///   char magic[8] = "SPCWPACK"; uint32 version = 1; uint32 count;
///   uint64 tableOffset; uint64 payloadOffset; uint64 payloadBytes;
///   uint64 checksum (fnv1a64 of the payload); uint64 reserved;
/// then `count` entries {uint64 offset (from payloadOffset), uint64 bytes}
/// at tableOffset, then the payload at payloadOffset (64-byte aligned); each
/// segment starts at a 64-byte aligned offset.
class WeightPack {
public:
  /// Memory-maps `path` and validates the header, table bounds, that the
  /// pack holds `expectedCount` segments and that its checksum equals
  /// `expectedChecksum` (the value the compiler embedded in the model), and,
  /// when `verifyPayload`, that the payload hashes to it. Errors: "cannot
  /// open weight file '<path>': <reason>", "'<path>' is not a sparsec weight
  /// pack", "'<path>' is truncated", "'<path>' belongs to a different model
  /// (checksum ...)", "'<path>' is corrupt: checksum mismatch".
  static std::unique_ptr<WeightPack> open(const std::string &path,
                                          uint32_t expectedCount,
                                          uint64_t expectedChecksum,
                                          bool verifyPayload,
                                          std::string &error);
  ~WeightPack();
  const void *segment(uint32_t index) const;
  size_t segmentBytes(uint32_t index) const;
  uint32_t count() const { return count_; }
  /// Whether `p` points into the mapped pack (an immutable model weight).
  bool contains(const void *p) const {
    const char *c = static_cast<const char *>(p);
    return map_ && c >= static_cast<const char *>(map_) &&
           c < static_cast<const char *>(map_) + mapBytes_;
  }

private:
  WeightPack() = default;
  void *map_ = nullptr;
  size_t mapBytes_ = 0;
  uint32_t count_ = 0;
  const uint64_t *table_ = nullptr;
  const char *payload_ = nullptr;
};

/// Writes a weight pack one segment at a time, so a caller that computes
/// segments (transposed, converted) holds only one in memory: open with
/// the segment count, add each in order, finish (header, table and the
/// payload checksum). Errors name the file and the cause; an unfinished
/// or failed pack is removed.
class WeightPackWriter {
public:
  WeightPackWriter() = default;
  WeightPackWriter(const WeightPackWriter &) = delete;
  WeightPackWriter &operator=(const WeightPackWriter &) = delete;
  ~WeightPackWriter();
  bool open(const std::string &path, size_t count, std::string &error);
  bool add(const void *data, size_t bytes, std::string &error);
  bool finish(uint64_t &checksum, std::string &error);

private:
  bool fail(const std::string &what, std::string &error);
  std::FILE *f_ = nullptr;
  std::string path_;
  uint32_t count_ = 0, added_ = 0;
  uint64_t offset_ = 0, payloadOffset_ = 0, hash_ = 0;
  std::vector<uint64_t> table_;
};

/// Writes a weight pack from in-memory segments; returns false with a
/// message on I/O failure, and the payload checksum in `checksum`.
bool writeWeightPack(const std::string &path,
                     const std::vector<std::pair<const void *, size_t>> &segments,
                     uint64_t &checksum, std::string &error);

//===----------------------------------------------------------------------===//
// Threads
//===----------------------------------------------------------------------===//

/// A fixed pool of worker threads; parallelFor splits [0, n) into contiguous
/// chunks of at least `grain` items, runs them on the pool and the calling
/// thread, and returns when all are done. With one thread it runs inline.
class ThreadPool {
public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  int size() const { return threads_; }
  void parallelFor(int64_t n, int64_t grain,
                   const std::function<void(int64_t begin, int64_t end)> &fn);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int threads_ = 1;
};

//===----------------------------------------------------------------------===//
// Model description (generated) and execution context
//===----------------------------------------------------------------------===//

/// One model input or output. dims[i] == -1 marks a dynamic dimension whose
/// name is dimNames[i] and whose largest supported value is maxDims[i]
/// (<= 0: unbounded).
struct IODesc {
  const char *name;
  DType dtype;
  int rank;
  int64_t dims[kMaxRank];
  const char *dimNames[kMaxRank];
  int64_t maxDims[kMaxRank];
  /// CUDA models: only device ops read the input's values (embedding ids;
  /// Shape reads dims only), never the host's walk of a step, so a caller
  /// may pass device memory the backend wrote (Backend::deviceArgmax).
  bool deviceValues = false;
  /// With deviceValues: the rows of the smallest table a device embedding
  /// reads the input's values from (each value must be below it; a
  /// device's greedy picks wider than that are not passed), or 0 where
  /// unknown.
  int64_t valueLimit = 0;
  /// CUDA models: a float32 input that only device attention ops read, as
  /// their past keys or values (Shape reads dims only). Those take a
  /// float16 tensor too, so a runtime's KV cache passed back as this input
  /// may be kept in 16 bits (Backend::initCache's `narrow`).
  bool attentionPast = false;
};

struct Context;
using RunFn = bool (*)(Context &ctx, const Tensor *inputs, Tensor *outputs);

struct ModelDesc {
  const char *name;
  int numInputs;
  const IODesc *inputs;
  int numOutputs;
  const IODesc *outputs;
  /// Weight pack the model was compiled with (file name next to the
  /// binary), its segment count and checksum.
  const char *weightsFile;
  uint32_t numWeights;
  uint64_t weightsChecksum;
  /// Memory slots (liveness-shared buffers); slotBytes[i] is the size when
  /// known at compile time, -1 when it depends on dynamic dims.
  int numSlots;
  const int64_t *slotBytes;
  RunFn run;
  /// Profiling builds only: the activation sites the model counts (see
  /// Profile.h), and the hash of the ONNX file the profile belongs to.
  int numProfileSites = 0;
  const char *const *profileSites = nullptr;
  uint64_t modelHash = 0;
  /// Decoders: the longest sequence whose computed position ids stay in
  /// their table (sparsec-bound-positions), with the table's name and rows;
  /// 0 where nothing bounds it.
  int64_t maxPositions = 0;
  const char *positionTable = nullptr;
  int64_t positionRows = 0;
};

/// State of one execution: weights, slots, threads, the first error.
struct Context {
  Context(const ModelDesc &desc, const WeightPack *weights, int threads);

  const ModelDesc &desc;
  const WeightPack *weights;
  ThreadPool pool;
  std::vector<Buffer> slots;
  std::string error;
  /// Profiling builds: per site, tokens seen and per-neuron active counts.
  std::vector<int64_t> profileTokens;
  std::vector<std::vector<uint64_t>> profileCounts;
  /// Profiling builds: sampled (layer input, active mask) pairs per site,
  /// every `profileSampleEvery`-th token up to `profileMaxSamples`.
  struct Samples {
    int64_t count = 0, inputDim = 0;
    std::vector<float> inputs;
    std::vector<uint8_t> masks; // count * ceil(neurons / 8), LSB first
  };
  std::vector<Samples> profileSamples;
  /// Profiling builds: per site, the full blocks of kProfileTileRows[i]
  /// consecutive rows of a call seen, and per neuron the blocks where it
  /// was non-zero (counts[i * neurons + n]): the PIT tile densities.
  static constexpr int64_t kProfileTileRows[3] = {8, 16, 32};
  struct Tiles {
    int64_t blocks[3] = {0, 0, 0};
    std::vector<uint64_t> counts;
  };
  std::vector<Tiles> profileTiles;
  /// Sparse kernels: neurons (rows or output columns) computed and the
  /// neurons a dense kernel would have computed, summed over all calls
  /// (`generate` reports the ratio as the mean density).
  int64_t sparseActive = 0, sparseTotal = 0;
  int64_t profileSampleEvery = 1;
  int64_t profileMaxSamples = 0;
  /// Weights packed once for the blocked GEMM of batched calls (prefill),
  /// made by the first such call (an ops::detail::PackCache).
  std::shared_ptr<void> packCache;
  /// The state of a device backend (the CUDA runtime's streams, device
  /// memory and graphs), created by its first step; null for x86 models.
  struct Backend {
    virtual ~Backend() = default;
    /// Whether the outputs flagged in `residentOutputs` come back as views
    /// of device memory (valid until the next run; the host must not read
    /// them), and the cache calls below work.
    virtual bool keepsResidentOutputs() const { return false; }
    /// A fixed-capacity KV cache `id` in device memory, [B, H, capacity, D]
    /// float32, zero-filled, with its first `count` entries copied from
    /// `present` ([B, H, T, D], a resident output); `cache` views it and
    /// may be passed as an input (no copy). `narrow`: the input it is
    /// passed as takes float16 too (IODesc::attentionPast), so the backend
    /// may keep it in float16 (cache.dtype says which; appends round).
    virtual bool initCache(Context &ctx, int id, const Tensor &present,
                           int64_t count, int64_t capacity, bool narrow,
                           Tensor &cache);
    /// cache[:, :, dst] = present[:, :, src] (after the run that wrote it).
    virtual bool appendCache(Context &ctx, int id, const Tensor &present,
                             int64_t src, int64_t dst);
    /// Moves the first `valid` entries into a larger cache.
    virtual bool growCache(Context &ctx, int id, int64_t valid,
                           int64_t capacity, Tensor &cache);
    /// The last run's argmax of output `index` (see argmaxOutput) as a
    /// device tensor: int64, the output's shape without its last axis,
    /// holding that run's picks once it has run (in stream order), until
    /// the next run that picks. It may be passed as a later run's input
    /// whose IODesc has deviceValues. False where the last run made none.
    virtual bool deviceArgmax(Context &ctx, int index, Tensor &ids) {
      (void)ctx, (void)index, (void)ids;
      return false;
    }
    /// Waits for run `run` (the value of Context::runs when it returned)
    /// and every run before it, and completes their accounting: their host
    /// outputs are valid from then on. True at once when they are done.
    virtual bool finishStep(Context &ctx, int64_t run) {
      (void)ctx, (void)run;
      return true;
    }
  };
  std::unique_ptr<Backend> backend;
  /// Outputs the caller only reads through the cache calls above (a KV
  /// cache); x86 ignores it and returns host tensors as usual.
  std::vector<char> residentOutputs;
  /// The output (float logits) whose caller needs only the index of each
  /// row's largest value along the last axis (greedy decoding), or -1. A
  /// device backend may then return those indices instead, int64 with the
  /// last axis dropped (the values stay on the device); x86 ignores it.
  int argmaxOutput = -1;
  /// An output (float logits) that comes back whole, but whose rows'
  /// argmax a device backend also keeps on the device for
  /// Backend::deviceArgmax (so that the next run can take it as its ids
  /// although this run's caller read the values), or -1. Ignored where it
  /// is argmaxOutput, and by backends that keep no picks.
  int argmaxAlso = -1;
  /// An output [B, n, V] (float logits) of which the caller reads only the
  /// last position of each row, or -1. The linear that computes it then
  /// reads only that position where B is 1 (lastPosition, below), and the
  /// output is [1, 1, V]; otherwise a device backend copies back those rows
  /// alone and returns [B, 1, V] (for a 1024-token prompt at OPT's
  /// vocabulary, 206 KB instead of 206 MB). Ignored where it is
  /// argmaxOutput.
  int lastPositionOutput = -1;
  /// A device backend may return from a run once its work is queued,
  /// before it has finished, so that the host prepares the next run while
  /// the device works: the run's host outputs (downloads and argmax ids)
  /// are valid only after Backend::finishStep has waited for it. At most
  /// two runs are outstanding (a third waits for the first). x86 ignores
  /// it.
  bool launchAhead = false;
  /// Runs a device backend has started (a run's id for finishStep).
  int64_t runs = 0;
  /// A run bound bfloat16 weights (the CUDA backend sets it): its prompt
  /// GEMMs round their inputs to bfloat16's 8 bits where the decode GEMVs
  /// keep fp32, so `generate`'s check of the device cache (a prompt token
  /// re-run as a decode step) allows for bf16 rounding.
  bool bf16Weights = false;
  /// A run bound fp16 weights (the CUDA backend sets it; with bf16Weights,
  /// its prompt attention runs on the tensor cores in that type).
  bool f16Weights = false;
  /// The run only warms up (weight uploads, buffers, libraries' first
  /// calls at its shapes): a device backend runs it eagerly and does not
  /// count it as a sighting of its shapes when it decides which steps to
  /// capture as CUDA graphs. x86 ignores it.
  bool warmup = false;
  /// The run computes predicted FFNs exactly, without their predictors,
  /// whatever its rows (a device backend does so anyway above a decode
  /// batch: docs/GPU.md, "PIT on short inputs"). `generate` marks the
  /// prompt and its check of the device cache, which re-runs a prompt
  /// token as a decode step and compares it with the prompt's logits. On
  /// x86 (and a hybrid build's CPU part) `predict` then selects every
  /// neuron.
  bool exactFfn = false;

  /// Points `t` at slot `slot`, sized for `dtype` and `shape` (growing the
  /// slot if needed). Returns false (and records an error) on failure.
  bool allocate(int slot, Tensor &t, DType dtype, int rank, const int64_t *shape);
  /// The weight segment `index` as a tensor view of the given type/shape.
  Tensor weight(uint32_t index, DType dtype, int rank, const int64_t *shape) const;
  /// Records the first error ("<op location>: <message>"); returns false.
  bool fail(const std::string &message);
  /// A generated op call failed: names its ONNX node after the error the
  /// call recorded ("... (node '/Add_1')"); returns false.
  bool failAt(const char *node);
  bool ok() const { return error.empty(); }
};

/// The input of a linear whose result is the model's output `output`: `x`
/// itself, or where the caller reads only each row's last position of that
/// output (Context::lastPositionOutput) and `x` is [1, n, D] with n > 1, a
/// view of its last position, [1, 1, D] (the output then comes back as
/// [1, 1, V]). Emitted for the linears that compute an output.
inline Tensor lastPosition(const Context &ctx, const Tensor &x, int output) {
  if (ctx.lastPositionOutput != output || ctx.argmaxOutput == output ||
      x.rank != 3 || x.shape[0] != 1 || x.shape[1] <= 1)
    return x;
  Tensor v = x;
  v.data = static_cast<char *>(x.data) +
           dtypeSize(x.dtype) * size_t((x.shape[1] - 1) * x.shape[2]);
  v.shape[1] = 1;
  return v;
}

/// The command line of a compiled model (profiling builds also have
///   <model> profile --input-list FILE -o OUT.sprof [--threads N]
///                   [--samples N] [--sample-every K]
/// where each line of FILE is one run: NAME=FILE.npy ... separated by
/// spaces; the counters accumulate over all runs, and up to N (layer input,
/// active mask) pairs per site are kept, one every K tokens):
///   <model> run --input NAME=FILE.npy ... [--output-dir DIR] [--threads N]
///   <model> bench [--input NAME=FILE.npy ...] [--runs N] [--warmup N]
///                 [--threads N] [--json]
///   <model> info
/// `run` checks each input's name, dtype, rank and dims against the
/// description (dynamic dims against their maximum) with a message naming
/// the input, loads the weight pack from the binary's directory, runs, and
/// writes DIR/<output name>.npy per output (names made file-safe: any
/// character outside [A-Za-z0-9._-] becomes '_'). `bench` without inputs
/// uses zeros (ids) / deterministic pseudo-random values shaped by the
/// static dims and, for dynamic dims, their maximum (overridable with
/// --dim NAME=VALUE); it prints latency min/median/p90 in ms, the thread
/// count and the model name, as JSON with --json. Exit status 0 on
/// success, 1 on any error (message on stderr).
int modelMain(int argc, char **argv, const ModelDesc &desc);

} // namespace sparsec::rt

#endif // SPARSEC_RT_RUNTIME_H
