//===- Device.h - device state of a CUDA model (internal) -------*- C++ -*-===//
//
// Part of the sparsec project.
//
// The Context::Backend of `--target cuda` models: stream, cuBLAS handle,
// device weights, device slots, upload/download staging, index-set buffers
// and the CUDA graph cache. Shared by Device.cu and Ops.cu.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RUNTIME_CUDA_DEVICE_H
#define SPARSEC_RUNTIME_CUDA_DEVICE_H

#include "Switches.h"
#include "sparsec/rt/Runtime.h"
#include "sparsec/rt/cuda/LtGemm.h"

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <array>
#include <chrono>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace sparsec::rt::cuda {

enum class Mode { eager, capture, replay };

/// Column tiles a split-K GEMV may have (its per-tile counters).
constexpr int kGemvCounters = 1 << 16;

/// SPARSEC_CUDA_PROFILE: adds the host time of its scope to `us` and
/// counts one call in `calls` when `on`.
class ProfileTimer {
public:
  ProfileTimer(bool on, double &us, int &calls)
      : on_(on), us_(us), calls_(calls),
        start_(on ? std::chrono::steady_clock::now()
                  : std::chrono::steady_clock::time_point{}) {
    calls += on ? 1 : 0;
  }
  /// The timed work launched nothing (a fused GEMM that fell back): its
  /// host time still counts, the call does not.
  void uncount() {
    if (on_ && counted_) {
      --calls_;
      counted_ = false;
    }
  }
  ~ProfileTimer() {
    if (on_)
      us_ += std::chrono::duration<double, std::micro>(
                 std::chrono::steady_clock::now() - start_)
                 .count();
  }
  ProfileTimer(const ProfileTimer &) = delete;
  ProfileTimer &operator=(const ProfileTimer &) = delete;

private:
  bool on_, counted_ = true;
  double &us_;
  int &calls_;
  std::chrono::steady_clock::time_point start_;
};

/// A grow-only device allocation.
struct DeviceBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
};

/// A grow-only pinned host allocation.
struct PinnedBuffer {
  void *ptr = nullptr;
  size_t bytes = 0;
};

/// One index site's device buffers: the segmented set (idx, count: see
/// IndexView), the same set as one list (list, listCount; written by
/// sparseFfn's up kernel), the decode predictor's scratch (zeroed when
/// allocated: it ends with counters) and the prefill predictor's logits.
struct IndexBuffers {
  DeviceBuffer idx, count, list, listCount, scratch, prefill;
};

/// The greedy pick a step's last graph makes itself (argmaxRows as its last
/// node, launched early behind the GEMV before it): the logits, their shape
/// and the buffers the node writes. `src` null: none.
struct GraphPick {
  const float *src = nullptr;
  int64_t rows = 0, width = 0;
  int64_t *ids = nullptr, *host = nullptr;
  void *scratch = nullptr;
  bool operator==(const GraphPick &o) const {
    return src == o.src && rows == o.rows && width == o.width &&
           ids == o.ids && host == o.host && scratch == o.scratch;
  }
};

struct GraphEntry {
  /// The captured step as graphs, one per stretch of GPU work between the
  /// host's waits for a copy (a step without host copies has one); null
  /// where a stretch queued nothing.
  std::vector<cudaGraphExec_t> segments;
  bool captured = false; // `segments` hold the whole step
  /// Byte sizes of every allocation the captured step made, in order.
  std::vector<size_t> allocs;
  int seen = 0;
  bool broken = false; // capture failed once: stay eager
  /// Allocations the last eager run of this signature made (the step's
  /// length in ops, roughly), from which a capture places its splits.
  size_t eagerAllocs = 0;
  /// Allocation indices before which the captured step closed a segment
  /// and started the next (ascending; replays split at the same points).
  std::vector<size_t> splits;
  /// The pick the last segment makes (captured when the argmax buffers
  /// were already large enough; otherwise flushDownloads launches it).
  GraphPick pick;
  /// The cache appends the step starts with, as kernel nodes of its first
  /// graph: their rows change every step, so a replay sets the nodes'
  /// parameters in the executable graph before launching it. The handles
  /// belong to `headGraph`, the first segment's graph, kept for them.
  std::vector<cudaGraphNode_t> appendNodes;
  cudaGraph_t headGraph = nullptr;
};

struct Device : Context::Backend {
  ~Device() override;
  bool keepsResidentOutputs() const override { return true; }
  bool initCache(Context &ctx, int id, const Tensor &present, int64_t count,
                 int64_t capacity, bool narrow, Tensor &cache) override;
  bool appendCache(Context &ctx, int id, const Tensor &present, int64_t src,
                   int64_t dst) override;
  bool growCache(Context &ctx, int id, int64_t valid, int64_t capacity,
                 Tensor &cache) override;
  bool deviceArgmax(Context &ctx, int index, Tensor &ids) override;
  bool finishStep(Context &ctx, int64_t run) override;
  /// Waits for the oldest outstanding step and completes it.
  bool finishOldest(Context &ctx);

  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  DeviceBuffer blasWorkspace; // cuBLAS's, shared with `lt` (one stream)
  /// The prompt GEMMs' bias and ReLU inside the GEMM (cuBLASLt's
  /// epilogues); SPARSEC_CUDA_FUSED_EPILOGUE=0: a separate kernel.
  LtGemm lt;
  bool fuseEpilogue = true;
  /// Prompt GEMMs (eager runs and captures; not replays) whose epilogue ran
  /// inside them, and after them (SPARSEC_CUDA_PROFILE reports both).
  int fusedEpilogues = 0, separateEpilogues = 0;
  /// Attention over more query rows than a decode step's (a prompt): the
  /// flash kernels of Attention.cu (head sizes up to 128), on the tensor
  /// cores where the model's weights are 16-bit (`automatic`) or in fp32
  /// (SPARSEC_CUDA_PROMPT_ATTN=fp32); `rows` (=0): one block a query row,
  /// the kernel before them.
  enum class PromptAttention { automatic, fp32, rows };
  PromptAttention promptAttention = PromptAttention::automatic;
  std::vector<void *> weights; // one device copy per weight segment
  std::vector<DeviceBuffer> slots;
  std::vector<DeviceBuffer> uploads;
  /// Host-side buffers a step writes during its walk or its downloads
  /// land in, per parity: a step launched ahead (Context::launchAhead)
  /// takes the parity the step still running does not, so that its walk
  /// never overwrites what that step's uploads have yet to read, nor its
  /// downloads what the host has yet to read. 0 outside launch-ahead.
  std::vector<PinnedBuffer> staging[2];
  std::vector<PinnedBuffer> outputs[2];
  int parity = 0;
  /// Steps launched ahead whose completion the host has not yet waited
  /// for (oldest first; finishStep).
  struct Outstanding {
    int64_t run = 0; // Context::runs
    int parity = 0, kind = 0;
    bool launched = false;
    size_t segments = 0;
    std::chrono::steady_clock::time_point start, launchTime;
  };
  std::deque<Outstanding> outstanding;
  cudaEvent_t stepDone[2] = {nullptr, nullptr};
  /// The current step waited on the host inside (a hybrid model's CPU
  /// part): it is never left outstanding.
  bool hostWaited = false;
  /// Fixed-capacity KV caches (initCache), passed back as inputs without
  /// a copy; `cacheShape` is [B, H, capacity, D] per cache.
  struct Cache {
    void *ptr = nullptr;
    size_t bytes = 0; // allocated (initCache reuses a buffer large enough)
    int64_t shape[4] = {};
    DType dtype = DType::f32; // or f16 (halfCache)
  };
  /// SPARSEC_CUDA_KV_CACHE=f16: a cache the model also reads in float16
  /// (initCache's `narrow`) is kept in float16 where the weights are fp16
  /// (half the memory; a prompt's attention on the tensor cores rounds its
  /// keys and values to fp16 too; a bf16 build's keys need float32's
  /// range). Off by default: the decode attention over a float16 past was
  /// measured slower than over a float32 one (docs/GPU.md, "A float16 KV
  /// cache").
  bool halfCache = false;
  std::vector<Cache> caches;
  /// appendCache's row moves, made by one kernel launch when the next step
  /// starts (flushAppends) instead of one copy each: a decode step appends
  /// to every layer's K and V cache.
  struct PendingAppend {
    void *dst = nullptr; // float, or __half where dstHalf
    const float *src = nullptr;
    int64_t dstPitch = 0, srcPitch = 0; // elements between rows
    int width = 0, rows = 0;            // elements per row, rows
    bool dstHalf = false;               // rounded to float16
  };
  std::vector<PendingAppend> pendingAppends;
  /// Launches the pending appends on `stream` (in order before anything
  /// queued after); in a capture, records their kernel nodes in `nodes`.
  /// `keep`: they stay pending (a capture's first graph moves them when it
  /// is launched).
  bool flushAppends(Context &ctx, std::vector<cudaGraphNode_t> *nodes = nullptr,
                    bool keep = false);
  /// A replay: the pending appends as the parameters of `g`'s nodes.
  bool setAppendNodes(Context &ctx, GraphEntry &g);
  /// A step's outputs to copy to the host, queued after the step's work
  /// (the copies outside its graphs; an output's argmax may be the last
  /// node of its graph: GraphPick, and the graph's signature holds
  /// Context::argmaxOutput).
  struct PendingDownload {
    const float *src = nullptr;
    void *dst = nullptr;         // pinned (a whole copy)
    size_t bytes = 0;
    int64_t rows = 0, width = 0; // argmax: rows of width floats,
    Tensor *out = nullptr;       // whose ids land in argmaxHost
    bool argmax = false;
    bool whole = false; // argmax kept on the device, the output copied whole
    int index = -1;     // the output
    Tensor picks;       // argmax: the ids' dtype and shape (no data yet)
    // Context::lastPositionOutput: `rows` pieces of `bytes`, `pitch` apart
    // from src (0: one copy of `bytes`).
    size_t pitch = 0;
  };
  std::vector<PendingDownload> pendingDownloads;
  std::vector<IndexBuffers> indexSets;
  /// Folding terms of a norm folded into a linear group (W scale, then W
  /// bias), by (weight, scale, bias) data pointers; made by the first eager
  /// call, freed with the device.
  std::map<std::array<const void *, 3>, DeviceBuffer> normTerms;
  /// Hybrid models: host copies of device values for the CPU parts.
  cudaStream_t copyStream = nullptr;
  struct HostCopy {
    PinnedBuffer buffer;
    cudaEvent_t produced = nullptr, copied = nullptr;
  };
  std::vector<HostCopy> hostCopies;
  /// Capture: the copy stream joined the capture (a fork to rejoin before
  /// the segment ends), through `join`.
  bool forked = false;
  cudaEvent_t join = nullptr;
  DeviceBuffer gemvPartials, halfInput, attentionScratch;
  /// A float16 past that is not a device cache read by the decode kernel
  /// (attention over a prompt after it, or a float16 input), widened.
  DeviceBuffer widePast;
  /// Convolutions' im2col columns (Conv.cu), shared by the step's
  /// convolutions, which run one after another.
  DeviceBuffer convColumns;
  /// The argmax of Context::argmaxOutput's rows on the device and their
  /// host copy (per parity; the kernel writes it), with the kernel's
  /// scratch (zeroed when it grows): they grow after the step's graphs
  /// (not allocations of the step), and drop the graphs then, which may
  /// hold them (GraphPick). `argmaxLast` views the
  /// ids of the last step that picked (deviceArgmax; output `argmaxIndex`,
  /// rows `argmaxWidth` wide).
  DeviceBuffer argmaxIds, argmaxScratch;
  /// The rows and width of the last argmax that used the scratch's
  /// counters ({0, 0}: none since it was allocated).
  std::array<int64_t, 2> argmaxScratchShape{0, 0};
  PinnedBuffer argmaxHost[2];
  /// The pick the current step's graphs made (flushDownloads skips that
  /// launch).
  GraphPick graphPick;
  Tensor argmaxLast;
  int argmaxIndex = -1;
  int64_t argmaxWidth = 0;
  /// A linear group's normalised input where its norm is not folded into
  /// the GEMV (prefill, or a capture that found no folding terms).
  DeviceBuffer normalisedInput;
  /// PIT workspace (index sets, counts, gathered activations), shared by
  /// the batched sparse linears of a step, which run one after another.
  DeviceBuffer pitIdx, pitCount, pitGather;
  bool pitSorted = false; // SPARSEC_PIT_SORTED=1: deterministic index order
  /// Per column tile: blocks of a split-K GEMV done so far (zero between
  /// launches; the last block resets its tile's counter).
  int *gemvCounters = nullptr;
  /// Neurons the sparse decode kernels computed and could have (two device
  /// counters the down-projection kernel adds to), read after each step
  /// into Context::sparseActive / sparseTotal once a sparse kernel ran
  /// (densityHost: two per parity).
  unsigned long long *densityCounts = nullptr, *densityHost = nullptr;
  unsigned long long densitySeen[2] = {0, 0};
  bool countsDensity = false;

  std::map<std::string, GraphEntry> graphs;
  /// What the last eager run of a signature needed, by the signature
  /// without its parity and picks flags: a sibling signature is captured at
  /// its first step, its pinned buffers grown to these sizes beforehand
  /// (not to the other parity's, which a prefill may have made far larger).
  struct EagerRun {
    size_t allocs = 0;
    std::vector<size_t> staging, outputs; // bytes by upload site / output
  };
  std::map<std::string, EagerRun> eagerRunsByBase;
  /// The pinned bytes the current step asked for, by upload site and by
  /// output (what an EagerRun records).
  std::vector<size_t> stepStaging, stepOutputs;
  bool graphsEnabled = true;
  /// SPARSEC_CUDA_PROFILE=1: per-step host / GPU / wall time by step kind,
  /// printed to stderr when the model is destroyed.
  struct StepTimes {
    int steps = 0;
    double hostUs = 0, gpuUs = 0, wallUs = 0;
  };
  bool profile = false;
  StepTimes times[3]; // eager, capture, replay
  /// The first steps one by one (kind, wall, host before launch, GPU).
  struct StepRecord {
    int kind;
    double wallUs, hostUs, gpuUs;
    /// Host time (us) and calls so far in buffer reallocations, weight
    /// uploads and cuBLAS calls (profile only; deltas are printed).
    double allocUs, uploadsUs, blasUs;
    int allocs, weightUploads, blasCalls;
  };
  double allocUs = 0, uploadsUs = 0, blasUs = 0;
  int allocs = 0, weightUploads = 0, blasCalls = 0;
  static constexpr size_t kFirstSteps = 6;
  std::vector<StepRecord> firstSteps;
  /// Hybrid steps: host time computing the CPU parts (from the last
  /// waitHost before an upload, which carries the CPU part's result back),
  /// host time blocked in waitHost, and GPU time the stream sat idle
  /// waiting for those uploads (events recorded after the GPU work queued
  /// at the first wait, and before the upload: eagerly, or before the
  /// launch of the graph segment that holds it).
  struct HybridTimes {
    int steps = 0;
    double cpuUs = 0, waitUs = 0, gpuIdleUs = 0;
    std::vector<std::pair<cudaEvent_t, cudaEvent_t>> idle; // event pool
    size_t used = 0;      // pairs recorded in the current step
    bool pending = false; // the GPU idle interval is open
    bool cpuBusy = false; // a CPU part runs (from its last wait to its upload)
    std::chrono::steady_clock::time_point cpuStart;
  } hybrid;
  cudaEvent_t stepStart[2] = {nullptr, nullptr}, stepEnd[2] = {nullptr, nullptr};
  Mode mode = Mode::eager;
  GraphEntry *current = nullptr;
  size_t allocCursor = 0;
  size_t segment = 0; // the next segment of the captured or replayed step
  /// Allocations of the current step so far (every mode), and the next
  /// entry of the current graph's `splits`.
  size_t stepAllocs = 0, nextSplit = 0;
  /// SPARSEC_CUDA_SPLIT=0: a captured step is one graph between host
  /// waits. By default a long step that the host waits for is cut into
  /// three graphs early on, so the GPU runs the first part while the host
  /// walks the rest of the replayed step (Device.cu, splitPoints): before
  /// allocation n/32 and n/4 of n; SPARSEC_CUDA_SPLIT=a,b,... cuts before
  /// n/a, n/b, ... A step launched ahead is one graph unless the switch
  /// is set (`splitsSet`): the GPU is still busy with the step before
  /// while the host walks it.
  std::vector<int> splitDivisors = defaultSplitDivisors();
  bool splitsSet = false;
  /// SPARSEC_CUDA_PROFILE: an event recorded before each graph launch of a
  /// replayed step, and the GPU time from the step's start to each, summed
  /// over the replays (segment i: launchUs[i]).
  std::vector<cudaEvent_t> launchEvents[2]; // per parity
  std::vector<double> launchUs;
  int launchSteps = 0;
  /// SPARSEC_CUDA_PROFILE: the GPU's idle time between steps (from a
  /// step's end to the next one's start, both timed against `epoch`),
  /// summed over every step and over the replayed ones, and the first gaps.
  cudaEvent_t epoch = nullptr;
  double lastEndMs = -1, idleUs = 0, replayIdleUs = 0;
  int idleGaps = 0, replayIdleGaps = 0;
  std::vector<double> firstGaps;
  /// Programmatic dependent launches (their launch overlaps the kernel
  /// before; docs/GPU.md), where supported, by kind: the one-block norms
  /// and the decode attention, the dense decode GEMVs, the sparse decode
  /// kernels. SPARSEC_CUDA_PDL: 0 none, 1 all, or a comma-separated list of
  /// small, gemv, sparse; by default all three.
  bool earlySmall = false, earlyGemv = false, earlySparse = false;
  /// A norm whose only readers are a predicted FFN's predictor and up
  /// projection runs inside the predictor's hidden-vector kernel (predictUp
  /// with a norm) where it can; SPARSEC_CUDA_NORM_FUSE=0 keeps it a kernel
  /// of its own.
  bool fuseNorms = true;
  /// A gated MLP's decode step (gatedFfn) launches the up projection (which
  /// also writes the down projection's base and the set as a list), the
  /// product and the down projection; SPARSEC_CUDA_GATED_FUSE=0 runs the
  /// three ops as separate calls (zero fill, base kernel, segmented set).
  bool fuseGated = true;
  /// A predicted FFN emitted with its predictor (predictFfn) computes
  /// exactly, without the predictor, over more rows than a decode batch
  /// (kMaxTokens; batchedFfnExact in Ops.cu); a predictor of its own (a
  /// hybrid build's CPU part) keeps selecting;
  /// SPARSEC_CUDA_BATCHED_PREDICT=1 runs the predictor's GEMMs and masks
  /// the up projection by its selection there too.
  bool batchedPredict = false;
  /// Where a down projection's PIT plan applies (Switches.h): by default
  /// where its grid fills the GPU at least once, else the dense GEMM;
  /// SPARSEC_CUDA_PIT=always wherever the plan says, =0 nowhere.
  PitUse pitUse = PitUse::fill;
  /// The decode attention over a KV cache requests its first pass's past
  /// rows before it waits for the kernel before (DecodeAttention::pastReady).
  bool prefetchPast = true;
  /// An output the caller needs only the argmax of comes back as that
  /// (Context::argmaxOutput); SPARSEC_CUDA_ARGMAX=0 brings the whole
  /// output back and leaves the pick to the host.
  bool argmaxOnDevice = true;
  /// deviceArgmax offers the picks as the next step's input, so `generate`
  /// launches each greedy decode step before the one before has finished
  /// (SPARSEC_CUDA_AHEAD=0 waits for each instead).
  bool picksAsInputs = true;
  /// A capture or replay was abandoned mid-step (an allocation differs, or
  /// a segment failed to capture): the step body returns false without an
  /// error and runStep reruns it eagerly.
  bool restart = false;
  /// SPARSEC_CUDA_PROFILE: the step's first launch (stepStart recorded).
  bool launched = false;
  std::chrono::steady_clock::time_point launchTime;
  /// A replayed or captured step allocated differently from the captured
  /// one (or would have had to grow a buffer): it is rerun eagerly.
  bool mismatch = false;

  /// Device ops launch work only outside replay.
  bool launching() const { return mode != Mode::replay; }
  /// Grows `buf` to `bytes` (eager only: elsewhere a growth is a mismatch)
  /// and records/compares the size for graph capture/replay.
  bool ensure(Context &ctx, DeviceBuffer &buf, size_t bytes, const char *what);
  bool ensurePinned(Context &ctx, PinnedBuffer &buf, size_t bytes,
                    const char *what);
  /// Drops every instantiated graph (their pointers may be stale).
  void dropGraphs();
};

/// The device state of `ctx`, created on first use (null with an error in
/// ctx when there is no usable device).
Device *device(Context &ctx);

/// ctx.fail("CUDA: <what>: <error string>") unless e == cudaSuccess.
bool check(Context &ctx, cudaError_t e, const char *what);
bool checkBlas(Context &ctx, cublasStatus_t s, const char *what);

/// Points `t` at device slot `slot` sized for dtype/shape.
bool allocate(Context &ctx, Device &d, int slot, Tensor &t, DType dtype,
              int rank, const int64_t *shape);

/// The device state of a context whose backend is set (every op after
/// device() succeeded).
inline Device &dev(Context &ctx) {
  return *static_cast<Device *>(ctx.backend.get());
}

/// check() of the last kernel launch.
inline bool launched(Context &ctx, const char *what) {
  return check(ctx, cudaGetLastError(), what);
}

/// Launches y[0:n] = T(x[0:n]) (round to nearest even) on d's stream, T
/// __half or __nv_bfloat16: the 16-bit operand of a tensor-core GEMM.
bool toHalf(Context &ctx, Device &d, const float *x, __half *y, int64_t n);
bool toHalf(Context &ctx, Device &d, const float *x, __nv_bfloat16 *y,
            int64_t n);

/// Calls f(W()) with W the device type of a weight of dtype `t`: __half
/// (f16), __nv_bfloat16 (bf16) or float (anything else: callers check the
/// dtype first, see weightType in Ops.cu).
template <typename F> decltype(auto) withWeightType(DType t, F &&f) {
  if (t == DType::f16)
    return f(__half());
  if (t == DType::bf16)
    return f(__nv_bfloat16());
  return f(float());
}

/// cuBLAS's name of a 16-bit weight dtype (bf16, else f16).
inline cudaDataType_t halfDataType(DType t) {
  return t == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
}

/// Fails unless `t` is a valid float32 tensor (the CUDA backend keeps
/// activations in float32).
bool requireF32(Context &ctx, const char *op, const char *what,
                const Tensor &t);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RUNTIME_CUDA_DEVICE_H
