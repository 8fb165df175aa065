//===- Device.cu - device state, staging and CUDA graphs of a model -------===//
//
// Part of the sparsec project.
//
// See sparsec/rt/cuda/Ops.h for the execution model.
//
//===----------------------------------------------------------------------===//

#include "Device.h"
#include "DeviceMath.cuh"
#include "Switches.h"
#include "sparsec/rt/cuda/DenseDecode.h"
#include "sparsec/rt/cuda/Ops.h"
#include "sparsec/rt/cuda/SparseDecode.h"

#include <algorithm>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace sparsec::rt::cuda {

bool check(Context &ctx, cudaError_t e, const char *what) {
  if (e == cudaSuccess)
    return true;
  cudaGetLastError(); // clear a sticky launch error
  return ctx.fail(std::string("CUDA: ") + what + ": " + cudaGetErrorString(e));
}

bool checkBlas(Context &ctx, cublasStatus_t s, const char *what) {
  if (s == CUBLAS_STATUS_SUCCESS)
    return true;
  return ctx.fail(std::string("cuBLAS: ") + what + ": status " +
                  std::to_string(int(s)));
}

Device::~Device() {
  if (stream)
    cudaStreamSynchronize(stream);
  if (profile) {
    static const char *kinds[] = {"eager", "captured", "replayed"};
    for (int k = 0; k < 3; ++k) {
      const StepTimes &t = times[k];
      if (t.steps == 0)
        continue;
      std::fprintf(stderr,
                   "sparsec cuda profile: %d %s steps: wall %.1f us, host "
                   "before launch %.1f us, GPU %.1f us per step\n",
                   t.steps, kinds[k], t.wallUs / t.steps, t.hostUs / t.steps,
                   t.gpuUs / t.steps);
    }
    if (launchSteps > 0) {
      std::string at;
      for (double us : launchUs)
        at += " " + std::to_string(int(us / launchSteps + 0.5));
      std::fprintf(stderr,
                   "sparsec cuda profile: replayed steps: graph launches "
                   "reached after%s us of GPU time\n",
                   at.c_str());
    }
    if (idleGaps > 0) {
      std::string first;
      for (double us : firstGaps)
        first += " " + std::to_string(int(us + 0.5));
      std::fprintf(stderr,
                   "sparsec cuda profile: GPU idle between steps: %.1f us in "
                   "all over %d gaps, %.1f us a replayed step; the first gaps"
                   "%s us\n",
                   idleUs, idleGaps,
                   replayIdleGaps ? replayIdleUs / replayIdleGaps : 0.0,
                   first.c_str());
    }
    for (size_t i = 0; i < firstSteps.size(); ++i) {
      const StepRecord &r = firstSteps[i];
      const StepRecord z{};
      const StepRecord &b = i ? firstSteps[i - 1] : z;
      std::fprintf(stderr,
                   "sparsec cuda profile: step %zu (%s): wall %.1f us, host "
                   "before launch %.1f us, GPU %.1f us; host in %d "
                   "reallocations %.1f us, %d weight uploads %.1f us, %d "
                   "cuBLAS calls %.1f us\n",
                   i + 1, kinds[r.kind], r.wallUs, r.hostUs, r.gpuUs,
                   r.allocs - b.allocs, r.allocUs - b.allocUs,
                   r.weightUploads - b.weightUploads, r.uploadsUs - b.uploadsUs,
                   r.blasCalls - b.blasCalls, r.blasUs - b.blasUs);
    }
    if (fusedEpilogues + separateEpilogues > 0)
      std::fprintf(stderr,
                   "sparsec cuda profile: prompt GEMMs with a bias, ReLU or "
                   "residual: %d with it inside (cuBLASLt, %zu plans made, "
                   "%zu kept), %d after the GEMM (a copy or a kernel of its "
                   "own)\n",
                   fusedEpilogues, lt.plansMade(), lt.plans(),
                   separateEpilogues);
    size_t cacheCount = 0, halfCaches = 0, cacheBytes = 0;
    for (const Cache &c : caches)
      if (c.ptr) {
        ++cacheCount;
        halfCaches += c.dtype == DType::f16;
        cacheBytes += c.bytes;
      }
    if (cacheCount > 0)
      std::fprintf(stderr,
                   "sparsec cuda profile: KV caches: %zu, %zu of them float16, "
                   "%.1f MB\n",
                   cacheCount, halfCaches, double(cacheBytes) / 1e6);
    const HybridTimes &h = hybrid;
    if (h.steps > 0)
      std::fprintf(stderr,
                   "sparsec cuda profile: %d hybrid steps: CPU parts busy "
                   "%.1f us, host waiting for GPU copies %.1f us, GPU idle "
                   "waiting for the CPU parts %.1f us per step\n",
                   h.steps, h.cpuUs / h.steps, h.waitUs / h.steps,
                   h.gpuIdleUs / h.steps);
  }
  for (auto &e : hybrid.idle) {
    cudaEventDestroy(e.first);
    cudaEventDestroy(e.second);
  }
  if (epoch)
    cudaEventDestroy(epoch);
  for (int p = 0; p < 2; ++p) {
    for (cudaEvent_t e : launchEvents[p])
      cudaEventDestroy(e);
    for (cudaEvent_t e : {stepStart[p], stepEnd[p], stepDone[p]})
      if (e)
        cudaEventDestroy(e);
  }
  if (join)
    cudaEventDestroy(join);
  dropGraphs();
  for (void *w : weights)
    cudaFree(w);
  auto freeDev = [](DeviceBuffer &b) {
    if (b.ptr)
      cudaFree(b.ptr);
  };
  for (auto &b : slots)
    freeDev(b);
  for (auto &b : uploads)
    freeDev(b);
  for (auto &c : caches)
    if (c.ptr)
      cudaFree(c.ptr);
  for (auto &s : indexSets) {
    freeDev(s.idx);
    freeDev(s.count);
    freeDev(s.list);
    freeDev(s.listCount);
    freeDev(s.scratch);
    freeDev(s.prefill);
  }
  for (auto &t : normTerms)
    freeDev(t.second);
  freeDev(gemvPartials);
  if (gemvCounters)
    cudaFree(gemvCounters);
  if (densityCounts)
    cudaFree(densityCounts);
  if (densityHost)
    cudaFreeHost(densityHost);
  freeDev(halfInput);
  freeDev(normalisedInput);
  freeDev(attentionScratch);
  freeDev(widePast);
  freeDev(argmaxIds);
  freeDev(argmaxScratch);
  for (PinnedBuffer &b : argmaxHost)
    if (b.ptr)
      cudaFreeHost(b.ptr);
  freeDev(pitIdx);
  freeDev(pitCount);
  freeDev(pitGather);
  freeDev(blasWorkspace);
  for (int p = 0; p < 2; ++p) {
    for (auto &b : staging[p])
      if (b.ptr)
        cudaFreeHost(b.ptr);
    for (auto &b : outputs[p])
      if (b.ptr)
        cudaFreeHost(b.ptr);
  }
  for (auto &c : hostCopies) {
    if (c.buffer.ptr)
      cudaFreeHost(c.buffer.ptr);
    if (c.produced)
      cudaEventDestroy(c.produced);
    if (c.copied)
      cudaEventDestroy(c.copied);
  }
  if (copyStream)
    cudaStreamDestroy(copyStream);
  if (blas)
    cublasDestroy(blas);
  if (stream)
    cudaStreamDestroy(stream);
}

namespace {
void dropSegments(GraphEntry &g) {
  for (cudaGraphExec_t e : g.segments)
    if (e)
      cudaGraphExecDestroy(e);
  g.segments.clear();
  g.captured = false;
  g.appendNodes.clear();
  if (g.headGraph)
    cudaGraphDestroy(g.headGraph);
  g.headGraph = nullptr;
}
} // namespace

namespace {
/// SPARSEC_CUDA_PROFILE: the step's GPU time starts at its first launch.
void markLaunch(Device &d) {
  d.launched = true;
  d.launchTime = std::chrono::steady_clock::now();
  cudaEventRecord(d.stepStart[d.parity], d.stream);
}

/// Ends the open GPU idle interval of a hybrid step (a CPU part's result
/// is about to reach the stream, or the step ends).
void closeIdle(Device &d) {
  Device::HybridTimes &h = d.hybrid;
  if (h.pending && h.used > 0)
    cudaEventRecord(h.idle[h.used - 1].second, d.stream);
  h.pending = false;
}

/// Capture: the copy stream rejoins the model's stream (a capture must end
/// joined).
cudaError_t joinCopies(Device &d) {
  d.forked = false;
  cudaError_t e = cudaEventRecord(d.join, d.copyStream);
  return e != cudaSuccess ? e : cudaStreamWaitEvent(d.stream, d.join, 0);
}
} // namespace

void Device::dropGraphs() {
  for (auto &[key, g] : graphs) {
    dropSegments(g);
    g.allocs.clear();
  }
}

namespace {
/// With SPARSEC_CUDA_PROFILE: why a capture or replay is given up (its
/// first cause, before `mismatch` is set; the first 20 times a process), on
/// stderr.
void graphNote(Device &d, const char *fmt, ...) {
  static int notes = 0;
  if (!d.profile || d.mismatch || notes >= 20)
    return;
  ++notes;
  std::fprintf(stderr, "sparsec cuda graphs: %s: ",
               d.mode == Mode::capture ? "capture" : "replay");
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
}

/// Records (capture) or compares (replay) one allocation size.
bool trackAlloc(Device &d, size_t bytes) {
  if (!d.current)
    return true;
  if (d.mode == Mode::capture) {
    d.current->allocs.push_back(bytes);
  } else if (d.mode == Mode::replay) {
    if (d.allocCursor >= d.current->allocs.size() ||
        d.current->allocs[d.allocCursor] != bytes) {
      graphNote(d, "allocation %zu of the step asks for %zu bytes, the "
                   "captured step asked for %zu",
                d.allocCursor, bytes,
                d.allocCursor < d.current->allocs.size()
                    ? d.current->allocs[d.allocCursor]
                    : size_t(0));
      d.mismatch = true;
    }
    ++d.allocCursor;
  }
  return true;
}
} // namespace

namespace {
bool splitBefore(Context &ctx, Device &d);

/// Grows `buf` (grow-only, with headroom) through `alloc`/`release`; during
/// a capture or replay a growth only marks the step for an eager rerun
/// (it would free memory a graph uses, or allocate inside a capture).
template <typename Buf, typename Alloc, typename Release, typename Message>
bool grow(Context &ctx, Device &d, Buf &buf, size_t bytes, Alloc alloc,
          Release release, Message failure) {
  if (!splitBefore(ctx, d))
    return false;
  trackAlloc(d, bytes);
  if (bytes <= buf.bytes)
    return true;
  if (d.mode != Mode::eager) {
    graphNote(d, "a buffer of %zu bytes must grow to %zu", buf.bytes, bytes);
    d.mismatch = true;
    return true;
  }
  d.dropGraphs();
  ProfileTimer timer(d.profile, d.allocUs, d.allocs);
  const bool regrowth = buf.ptr != nullptr;
  if (buf.ptr && !check(ctx, release(buf.ptr), "freeing a buffer"))
    return false;
  buf.ptr = nullptr;
  buf.bytes = 0;
  // A buffer that grows again is rounded up, so that slowly growing
  // sequences do not reallocate every step; a first allocation is not (a
  // prompt's buffers would hold a quarter more than it needs: 4.3 GB of
  // OPT-6.7B's presents at 16 prompts of 1024 tokens).
  size_t want = bytes < 4096 ? 4096 : regrowth ? bytes + bytes / 4 : bytes;
  if (alloc(&buf.ptr, want) != cudaSuccess) {
    cudaGetLastError();
    buf.ptr = nullptr;
    return ctx.fail(failure());
  }
  buf.bytes = want;
  return true;
}
} // namespace

namespace {
/// What the device has left, for an out-of-memory error: " (F of T GiB
/// free)", or nothing where CUDA cannot say.
std::string freeMemoryNote() {
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return "";
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, " (%.2f of %.2f GiB free)",
                double(free) / double(1 << 30), double(total) / double(1 << 30));
  return buf;
}
/// The out-of-memory error for `bytes` of `what`.
std::string outOfMemory(size_t bytes, const char *what) {
  return "CUDA: out of device memory: cannot allocate " +
         std::to_string(bytes) + " bytes for " + what + freeMemoryNote();
}
} // namespace

bool Device::ensure(Context &ctx, DeviceBuffer &buf, size_t bytes,
                    const char *what) {
  return grow(ctx, *this, buf, bytes,
              [](void **p, size_t n) { return cudaMalloc(p, n); },
              [](void *p) { return cudaFree(p); },
              [&] { return outOfMemory(bytes, what); });
}

bool Device::ensurePinned(Context &ctx, PinnedBuffer &buf, size_t bytes,
                          const char *what) {
  return grow(ctx, *this, buf, bytes,
              [](void **p, size_t n) { return cudaMallocHost(p, n); },
              [](void *p) { return cudaFreeHost(p); },
              [&] {
                return "CUDA: cannot allocate " + std::to_string(bytes) +
                       " bytes of pinned host memory for " + what;
              });
}

Device *device(Context &ctx) {
  if (ctx.backend)
    return static_cast<Device *>(ctx.backend.get());
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    ctx.fail(std::string("no usable CUDA device (") +
             (e != cudaSuccess ? cudaGetErrorString(e) : "none found") +
             "): this model was compiled for a GPU (--target cuda or hybrid)");
    return nullptr;
  }
  auto d = std::make_unique<Device>();
  if (!check(ctx, cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking),
             "cudaStreamCreate") ||
      !checkBlas(ctx, cublasCreate(&d->blas), "cublasCreate") ||
      !checkBlas(ctx, cublasSetStream(d->blas, d->stream), "cublasSetStream"))
    return nullptr;
  // A fixed cuBLAS workspace keeps GEMMs capturable into graphs.
  const size_t workspace = size_t(32) << 20;
  if (!check(ctx, cudaMalloc(&d->blasWorkspace.ptr, workspace),
             "cudaMalloc (cuBLAS workspace)") ||
      !checkBlas(ctx, cublasSetWorkspace(d->blas, d->blasWorkspace.ptr, workspace),
                 "cublasSetWorkspace"))
    return nullptr;
  d->blasWorkspace.bytes = workspace;
  if (!check(ctx, cudaMalloc(&d->gemvCounters, sizeof(int) * kGemvCounters),
             "cudaMalloc (GEMV counters)") ||
      !check(ctx,
             cudaMemsetAsync(d->gemvCounters, 0, sizeof(int) * kGemvCounters,
                             d->stream),
             "cudaMemset (GEMV counters)"))
    return nullptr;
  if (!check(ctx, cudaMalloc(&d->densityCounts, 2 * sizeof(unsigned long long)),
             "cudaMalloc (density counters)") ||
      !check(ctx,
             cudaMemsetAsync(d->densityCounts, 0, 2 * sizeof(unsigned long long),
                             d->stream),
             "cudaMemset (density counters)") ||
      !check(ctx,
             cudaHostAlloc(reinterpret_cast<void **>(&d->densityHost),
                           4 * sizeof(unsigned long long), cudaHostAllocDefault),
             "cudaHostAlloc (density counters)") ||
      !check(ctx, cudaEventCreateWithFlags(&d->stepDone[0], cudaEventDisableTiming),
             "cudaEventCreate") ||
      !check(ctx, cudaEventCreateWithFlags(&d->stepDone[1], cudaEventDisableTiming),
             "cudaEventCreate"))
    return nullptr;
  for (int i = 0; i < 4; ++i)
    d->densityHost[i] = 0;
  // Exact fp32 GEMMs (no TF32): the fp32 mode is the accuracy reference.
  cublasSetMathMode(d->blas, CUBLAS_DEFAULT_MATH);
  if (const char *p = std::getenv("SPARSEC_PIT_SORTED"))
    d->pitSorted = std::strcmp(p, "1") == 0;
  if (const char *g = std::getenv("SPARSEC_CUDA_GRAPHS"))
    d->graphsEnabled = std::strcmp(g, "0") != 0;
  // Programmatic dependent launches need Hopper and kernels built for it:
  // by default every kind: the norms and decode attention, the dense
  // decode GEMVs, the sparse decode kernels (Switches.h: SPARSEC_CUDA_PDL).
  EarlyKinds kinds;
  if (const char *p = std::getenv("SPARSEC_CUDA_PDL")) {
    std::vector<std::string> unknown;
    kinds = parseEarlyKinds(p, unknown);
    for (const std::string &k : unknown)
      std::fprintf(stderr,
                   "sparsec: warning: SPARSEC_CUDA_PDL: unknown kind '%s' "
                   "(0, 1, or a list of small, gemv, sparse)\n",
                   k.c_str());
  }
  const bool early = earlyLaunchSupported();
  d->earlySmall = kinds.small && early;
  d->earlyGemv = kinds.gemv && early;
  d->earlySparse = kinds.sparse && early;
  // SPARSEC_CUDA_ATTN_PREFETCH=0: the decode attention reads a cached
  // past only after its wait, like the rest of its inputs.
  if (const char *p = std::getenv("SPARSEC_CUDA_ATTN_PREFETCH"))
    d->prefetchPast = std::strcmp(p, "0") != 0;
  // SPARSEC_CUDA_ARGMAX=0: an output the caller needs only the argmax of
  // (Context::argmaxOutput, greedy decoding) comes back whole all the same
  // (by default only its argmax does).
  if (const char *p = std::getenv("SPARSEC_CUDA_ARGMAX"))
    d->argmaxOnDevice = std::strcmp(p, "0") != 0;
  // SPARSEC_CUDA_AHEAD=0: the device's picks are not offered as the next
  // step's input, so `generate` waits for each step before it launches the
  // next (by default it launches each before the one before has finished).
  if (const char *p = std::getenv("SPARSEC_CUDA_AHEAD"))
    d->picksAsInputs = std::strcmp(p, "0") != 0;
  // SPARSEC_CUDA_UP=row: the up projections of 1-2 tokens take a whole
  // row a warp (by default the split kernels share a row among a block's
  // warps where the rows are fp16 and 2048-8192 columns long).
  if (const char *p = std::getenv("SPARSEC_CUDA_UP")) {
    bool row = false;
    if (!parseUpKernel(p, row))
      std::fprintf(stderr,
                   "sparsec: warning: SPARSEC_CUDA_UP='%s' ignored (row or "
                   "split)\n",
                   p);
    setUpKernel(row ? UpKernel::kWarpPerRow : UpKernel::kAuto);
  }
  // SPARSEC_CUDA_FUSED_EPILOGUE=0: the prompt GEMMs' bias and ReLU in a
  // kernel of their own after the GEMM (by default cuBLASLt computes them
  // inside it).
  if (const char *p = std::getenv("SPARSEC_CUDA_FUSED_EPILOGUE"))
    d->fuseEpilogue = std::strcmp(p, "0") != 0;
  if (const char *p = std::getenv("SPARSEC_CUDA_PROMPT_ATTN")) {
    using P = Device::PromptAttention;
    if (!std::strcmp(p, "0"))
      d->promptAttention = P::rows;
    else if (!std::strcmp(p, "fp32"))
      d->promptAttention = P::fp32;
    else if (std::strcmp(p, "1") != 0)
      std::fprintf(stderr,
                   "sparsec: warning: SPARSEC_CUDA_PROMPT_ATTN='%s' ignored "
                   "(1, fp32 or 0)\n",
                   p);
  }
  if (const char *p = std::getenv("SPARSEC_CUDA_NORM_FUSE"))
    d->fuseNorms = std::strcmp(p, "0") != 0;
  if (const char *p = std::getenv("SPARSEC_CUDA_GATED_FUSE"))
    d->fuseGated = std::strcmp(p, "0") != 0;
  if (const char *p = std::getenv("SPARSEC_CUDA_BATCHED_PREDICT"))
    d->batchedPredict = std::strcmp(p, "0") != 0;
  if (const char *p = std::getenv("SPARSEC_CUDA_KV_CACHE")) {
    if (!parseKvCache(p, d->halfCache))
      std::fprintf(stderr,
                   "sparsec: warning: SPARSEC_CUDA_KV_CACHE='%s' ignored (f16 "
                   "or f32)\n",
                   p);
  }
  if (const char *p = std::getenv("SPARSEC_CUDA_PIT")) {
    if (!parsePitUse(p, d->pitUse))
      std::fprintf(stderr,
                   "sparsec: warning: SPARSEC_CUDA_PIT='%s' ignored (fill, "
                   "always or 0)\n",
                   p);
  }
  if (const char *p = std::getenv("SPARSEC_CUDA_SPLIT"))
    if (!(d->splitsSet = parseSplitDivisors(p, d->splitDivisors)))
      std::fprintf(stderr,
                   "sparsec: warning: SPARSEC_CUDA_SPLIT='%s' ignored (0, 1, "
                   "or decreasing divisors above 1, such as 32,4)\n",
                   p);
  if (const char *p = std::getenv("SPARSEC_CUDA_PROFILE"))
    d->profile = std::strcmp(p, "0") != 0 &&
                 cudaEventCreate(&d->stepStart[0]) == cudaSuccess &&
                 cudaEventCreate(&d->stepEnd[0]) == cudaSuccess &&
                 cudaEventCreate(&d->stepStart[1]) == cudaSuccess &&
                 cudaEventCreate(&d->stepEnd[1]) == cudaSuccess &&
                 cudaEventCreate(&d->epoch) == cudaSuccess &&
                 cudaEventRecord(d->epoch, d->stream) == cudaSuccess;
  d->slots.resize(size_t(ctx.desc.numSlots > 0 ? ctx.desc.numSlots : 0));
  // Weights are uploaded on first use by a device op (the first step):
  // a hybrid model's CPU parts never reach the device.
  if (ctx.weights)
    d->weights.assign(ctx.weights->count(), nullptr);
  ctx.backend = std::move(d);
  return static_cast<Device *>(ctx.backend.get());
}

bool allocate(Context &ctx, Device &d, int slot, Tensor &t, DType dtype,
              int rank, const int64_t *shape) {
  if (slot < 0 || size_t(slot) >= d.slots.size())
    return ctx.fail("internal error: device slot " + std::to_string(slot) +
                    " out of range");
  Tensor r;
  r.dtype = dtype;
  r.rank = rank;
  for (int i = 0; i < rank; ++i) {
    if (shape[i] < 0)
      return ctx.fail("internal error: negative dimension");
    r.shape[i] = shape[i];
  }
  if (!d.ensure(ctx, d.slots[size_t(slot)], r.bytes(), "a tensor"))
    return false;
  r.data = d.slots[size_t(slot)].ptr;
  t = r;
  return true;
}

Tensor weight(Context &ctx, uint32_t index, DType dtype, int rank,
              const int64_t *shape) {
  Tensor t;
  t.dtype = dtype;
  t.rank = rank;
  for (int i = 0; i < rank; ++i)
    t.shape[i] = shape[i];
  ctx.bf16Weights |= dtype == DType::bf16;
  ctx.f16Weights |= dtype == DType::f16;
  auto *d = static_cast<Device *>(ctx.backend.get());
  if (!d || !ctx.weights || index >= d->weights.size())
    return t;
  if (!d->weights[index]) {
    size_t bytes = ctx.weights->segmentBytes(index);
    if (bytes == 0)
      return t;
    if (d->mode != Mode::eager) {
      graphNote(*d, "weight %u is not on the device yet", unsigned(index));
      d->mismatch = true; // not during a capture
      return t;
    }
    ProfileTimer timer(d->profile, d->uploadsUs, d->weightUploads);
    if (cudaMalloc(&d->weights[index], bytes) != cudaSuccess) {
      cudaGetLastError();
      d->weights[index] = nullptr;
      ctx.fail("CUDA: out of device memory: cannot hold weight segment " +
               std::to_string(index) + " (" + std::to_string(bytes) +
               " bytes)" + freeMemoryNote());
      return t;
    }
    // On the model's stream: a plain cudaMemcpy from pageable memory may
    // return before its DMA lands, and the legacy stream it runs on does not
    // order the (non-blocking) model stream's kernels after it.
    if (!check(ctx,
               cudaMemcpyAsync(d->weights[index], ctx.weights->segment(index),
                               bytes, cudaMemcpyHostToDevice, d->stream),
               "uploading weights")) {
      cudaFree(d->weights[index]);
      d->weights[index] = nullptr;
      return t;
    }
  }
  t.data = d->weights[index];
  return t;
}

namespace {
/// Uploads up to kKernelUploadMax bytes are a kernel reading the pinned
/// staging buffer (host memory that kernels can address, unified
/// addressing) instead of a copy-engine transfer. In replayed decode steps
/// traced on an H200 (bench/gpu/step_trace.py) a kernel started about 0.1
/// us after the kernel before it but 4-10 us after a copy node, and the
/// first attention waited far longer after the mask's copy; untraced, an
/// OPT-1.3B step took 1150.2 us with upload kernels against 1171.5 us with
/// copies (uploads of 8, 8 and 676 bytes). 4 KB is one 16-byte load a
/// thread of one block, so the host memory is one round trip (a thread
/// looping over more pieces would wait for each in turn); larger uploads
/// (batched masks, the CPU parts' results of hybrid builds) stay copies.
constexpr size_t kKernelUploadMax = 4096;
constexpr int kUploadThreads = 256;
static_assert(kKernelUploadMax <= 16 * kUploadThreads,
              "one 16-byte load a thread");

__global__ void uploadKernel(const unsigned char *__restrict__ src,
                             unsigned char *__restrict__ dst, size_t bytes) {
  pdlTrigger();
  // 16-byte pieces (staging and device buffers are 64-byte aligned), then
  // the tail: one piece a thread at most. The staging buffer is written by
  // the host before the launch and by no kernel, so an early launch reads
  // it before its wait (the host-memory round trip overlaps the kernel
  // before) and writes only after it.
  const size_t quads = bytes / 16;
  const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
  uint4 *d4 = reinterpret_cast<uint4 *>(dst);
  // Thread i moves piece i and the tail's byte i (under 16 of them).
  const size_t i = threadIdx.x, tail = quads * 16 + i;
  uint4 q{};
  unsigned char c = 0;
  if (i < quads)
    q = s4[i];
  if (tail < bytes)
    c = src[tail];
  pdlWait();
  if (i < quads)
    d4[i] = q;
  if (tail < bytes)
    dst[tail] = c;
}

/// Records that the current step asked for `bytes` of pinned memory at
/// slot `i` (an upload site or an output: Device::stepStaging and
/// stepOutputs, what an EagerRun keeps).
void noteNeed(std::vector<size_t> &needs, int i, size_t bytes) {
  if (size_t(i) >= needs.size())
    needs.resize(size_t(i) + 1, 0);
  needs[size_t(i)] = std::max(needs[size_t(i)], bytes);
}
} // namespace

bool upload(Context &ctx, const Tensor &x, int site, Tensor &out) {
  Device &d = *static_cast<Device *>(ctx.backend.get());
  if (site < 0)
    return ctx.fail("internal error: negative upload site");
  // A device cache passed back as an input: already here.
  for (const Device::Cache &c : d.caches)
    if (c.ptr && x.data == c.ptr) {
      if (x.rank != 4 || x.dtype != c.dtype || x.shape[0] != c.shape[0] ||
          x.shape[1] != c.shape[1] || x.shape[2] > c.shape[2] ||
          x.shape[3] != c.shape[3])
        return ctx.fail("internal error: a device cache passed as " +
                        x.describe() + " does not match its buffer");
      out = x;
      return true;
    }
  // The ids an earlier step picked on the device (deviceArgmax), passed
  // as an input whose values only device ops read.
  if (x.data && x.data == d.argmaxIds.ptr) {
    if (x.dtype != DType::i64 || x.bytes() > d.argmaxIds.bytes)
      return ctx.fail("internal error: the device's picks passed as " +
                      x.describe() + " do not fit their buffer");
    out = x;
    return true;
  }
  std::vector<PinnedBuffer> &staging = d.staging[d.parity];
  if (size_t(site) >= d.uploads.size())
    d.uploads.resize(size_t(site) + 1);
  if (size_t(site) >= staging.size())
    staging.resize(size_t(site) + 1);
  size_t bytes = x.bytes();
  noteNeed(d.stepStaging, site, bytes);
  if (!d.ensurePinned(ctx, staging[size_t(site)], bytes, "an upload") ||
      !d.ensure(ctx, d.uploads[size_t(site)], bytes, "an upload"))
    return false;
  out = x;
  out.data = d.uploads[size_t(site)].ptr;
  if (d.profile && d.hybrid.cpuBusy) {
    // The CPU part's result: the host's CPU work ends, and in an eager step
    // the GPU's wait too (a captured segment closes it at its launch).
    Device::HybridTimes &h = d.hybrid;
    h.cpuBusy = false;
    h.cpuUs += std::chrono::duration<double, std::micro>(
                   std::chrono::steady_clock::now() - h.cpuStart)
                   .count();
    if (d.mode == Mode::eager)
      closeIdle(d);
  }
  if (bytes == 0 || d.mismatch)
    return true;
  // The host value is copied into pinned memory now (replays read the same
  // address); the transfer itself is a stream operation (a graph node).
  std::memcpy(staging[size_t(site)].ptr, x.data, bytes);
  if (!d.launching())
    return true;
  if (bytes <= kKernelUploadMax)
    return check(ctx,
                 launchKernel(uploadKernel, 1, kUploadThreads, 0, d.stream,
                              d.earlySmall,
                              static_cast<const unsigned char *>(
                                  staging[size_t(site)].ptr),
                              static_cast<unsigned char *>(out.data), bytes),
                 "upload");
  return check(ctx,
               cudaMemcpyAsync(out.data, staging[size_t(site)].ptr, bytes,
                               cudaMemcpyHostToDevice, d.stream),
               "upload");
}

bool download(Context &ctx, const Tensor &x, int index, Tensor &out) {
  Device &d = *static_cast<Device *>(ctx.backend.get());
  if (size_t(index) < ctx.residentOutputs.size() &&
      ctx.residentOutputs[size_t(index)]) {
    // Left in its device slot; the caller moves it with the cache calls
    // before the next run.
    out = x;
    return true;
  }
  std::vector<PinnedBuffer> &outputs = d.outputs[d.parity];
  if (size_t(index) >= outputs.size())
    outputs.resize(size_t(index) + 1);
  // The copy itself is queued after the step's last graph (runStep,
  // flushDownloads), in every mode: a replay's graphs hold no downloads.
  // The whole output's pinned buffer in either case: the step makes the
  // same allocations whether the argmax or the output comes back, so one
  // captured graph replays for both.
  noteNeed(d.stepOutputs, index, x.bytes());
  if (!d.ensurePinned(ctx, outputs[size_t(index)], x.bytes(), "an output"))
    return false;
  Device::PendingDownload p;
  p.src = x.as<float>();
  const bool picks = d.argmaxOnDevice && x.dtype == DType::f32 &&
                     x.rank >= 1 && x.shape[x.rank - 1] > 0 &&
                     (index == ctx.argmaxOutput ||
                      (index == ctx.argmaxAlso && d.picksAsInputs));
  if (picks) {
    p.argmax = true;
    p.index = index;
    p.width = x.shape[x.rank - 1];
    p.rows = x.numel() / p.width;
    p.picks = Tensor{nullptr, DType::i64, x.rank - 1, {}};
    for (int r = 0; r + 1 < x.rank; ++r)
      p.picks.shape[r] = x.shape[r];
  }
  if (picks && index != ctx.argmaxOutput) {
    // The whole output comes back, and each row's argmax stays on the
    // device for deviceArgmax (Context::argmaxAlso).
    p.whole = true;
    p.bytes = x.bytes();
    out = x;
    out.data = outputs[size_t(index)].ptr;
  } else if (picks) {
    // Only each row's argmax comes back (greedy decoding): one int64 a
    // row instead of the row. Its buffers grow in flushDownloads, which
    // points `out` at the ids.
    p.bytes = sizeof(int64_t) * size_t(p.rows);
    p.out = &out;
    out = p.picks;
  } else if (index == ctx.lastPositionOutput && x.rank == 3 &&
             x.shape[1] > 1) {
    // Each row's last position only: [B, 1, V], copied from every
    // row's last n-th.
    const size_t row = dtypeSize(x.dtype) * size_t(x.shape[2]);
    p.rows = x.shape[0];
    p.bytes = row;
    p.pitch = row * size_t(x.shape[1]);
    p.src = reinterpret_cast<const float *>(
        static_cast<const char *>(x.data) + row * size_t(x.shape[1] - 1));
    out = x;
    out.shape[1] = 1;
    out.data = outputs[size_t(index)].ptr;
  } else {
    p.bytes = x.bytes();
    out = x;
    out.data = outputs[size_t(index)].ptr;
  }
  p.dst = out.data;
  if (p.bytes > 0 && !d.mismatch)
    d.pendingDownloads.push_back(p);
  return true;
}

namespace {
cudaError_t deviceAlloc(void **p, size_t n) { return cudaMalloc(p, n); }
cudaError_t deviceFree(void *p) { return cudaFree(p); }
cudaError_t pinnedAlloc(void **p, size_t n) { return cudaMallocHost(p, n); }
cudaError_t pinnedFree(void *p) { return cudaFreeHost(p); }

/// Replaces `buf` with `bytes` of new memory from `alloc`, `release`
/// freeing the old one: the caller has made sure that no queued work and no
/// graph still uses it. Unlike `grow`, not an allocation of the step.
template <typename Buf>
bool reallocate(Context &ctx, Buf &buf, size_t bytes,
                cudaError_t (*alloc)(void **, size_t),
                cudaError_t (*release)(void *), const char *what) {
  if (buf.ptr)
    release(buf.ptr);
  buf = Buf{};
  if (alloc(&buf.ptr, bytes) != cudaSuccess) {
    cudaGetLastError();
    buf.ptr = nullptr;
    return ctx.fail("CUDA: cannot allocate " + std::to_string(bytes) +
                    " bytes " + what);
  }
  buf.bytes = bytes;
  return true;
}

/// Grows one of the argmax's buffers to `bytes`, after the step's graphs
/// and outside any capture. A buffer in use may still be read by the
/// stream's earlier work, so the stream is waited for first, and where a
/// graph may take it as an input (`inGraphs`: the ids, deviceArgmax) the
/// graphs are dropped. The first allocation needs neither (each wait costs
/// an OPT-6.7B decode step about 1.5 ms).
template <typename Buf>
bool growArgmaxBuffer(Context &ctx, Device &d, Buf &buf, size_t bytes,
                      cudaError_t (*alloc)(void **, size_t),
                      cudaError_t (*release)(void *), bool inGraphs) {
  if (bytes <= buf.bytes)
    return true;
  if (buf.ptr) {
    if (!check(ctx, cudaStreamSynchronize(d.stream), "argmax buffers"))
      return false;
    if (inGraphs)
      d.dropGraphs();
  }
  return reallocate(ctx, buf, bytes, alloc, release, "for an output's argmax");
}

/// The pick of argmax download `p` with the device's argmax buffers as
/// they are: the ids, this parity's host copy (none where the output comes
/// back whole), the scratch.
GraphPick pickOf(const Device &d, const Device::PendingDownload &p) {
  return GraphPick{
      p.src, p.rows, p.width, static_cast<int64_t *>(d.argmaxIds.ptr),
      p.whole ? nullptr : static_cast<int64_t *>(d.argmaxHost[d.parity].ptr),
      d.argmaxScratch.ptr};
}

/// Queues argmaxRows for `pick` on the device's stream.
bool launchPick(Context &ctx, Device &d, const GraphPick &pick, bool early) {
  return check(ctx,
               argmaxRows(pick.src, pick.rows, pick.width, pick.ids,
                          pick.scratch, pick.host, d.stream, early),
               "argmax of an output");
}

/// The argmax scratch's counters laid out for rows x width: zeroed (queued,
/// so after the calls before) where the last argmax that used them had
/// another shape, as the kernel's layout follows the shape.
bool argmaxScratchFor(Context &ctx, Device &d, int64_t rows, int64_t width) {
  const size_t bytes = argmaxScratchBytes(rows, width);
  if (bytes == 0 || d.argmaxScratchShape == std::array<int64_t, 2>{rows, width})
    return true;
  if (!check(ctx, cudaMemsetAsync(d.argmaxScratch.ptr, 0, bytes, d.stream),
             "argmax buffers"))
    return false;
  d.argmaxScratchShape = {rows, width};
  return true;
}

/// In a capture, after the step's body: the greedy pick of its (first)
/// argmax download as the last node of the graph, where the buffers it
/// writes are already large enough and the scratch's counters are laid out
/// for its shape (the steady state of a decode). Launched early behind the
/// LM head's GEMV, it saves the gap between the graph and a launch after
/// it (flushDownloads then skips that launch: Device::graphPick).
bool capturePick(Context &ctx, Device &d, GraphEntry &g) {
  g.pick = GraphPick{};
  if (d.mismatch)
    return true;
  for (const Device::PendingDownload &p : d.pendingDownloads) {
    if (!p.argmax)
      continue;
    const size_t idsBytes = sizeof(int64_t) * size_t(p.rows);
    const size_t scratchBytes = argmaxScratchBytes(p.rows, p.width);
    if (idsBytes > d.argmaxIds.bytes ||
        (!p.whole && idsBytes > d.argmaxHost[d.parity].bytes) ||
        scratchBytes > d.argmaxScratch.bytes ||
        (scratchBytes > 0 && d.argmaxScratchShape !=
                                 std::array<int64_t, 2>{p.rows, p.width}))
      return true;
    const GraphPick pick = pickOf(d, p);
    if (!launchPick(ctx, d, pick, d.earlySmall))
      return false;
    g.pick = pick;
    return true;
  }
  return true;
}

/// Queues the step's downloads (after its last graph launch, outside any
/// capture): an argmax kernel that writes the ids to the host itself (and
/// the whole output's copy where it comes back too), or the whole output.
bool flushDownloads(Context &ctx, Device &d) {
  d.argmaxLast = Tensor{};
  d.argmaxIndex = -1;
  for (const Device::PendingDownload &p : d.pendingDownloads) {
    if (p.argmax) {
      // The ids, their host copy and the kernel's scratch grow here.
      PinnedBuffer &host = d.argmaxHost[d.parity];
      const size_t idsBytes = sizeof(int64_t) * size_t(p.rows);
      const size_t scratchBytes = argmaxScratchBytes(p.rows, p.width);
      if (scratchBytes > d.argmaxScratch.bytes)
        d.argmaxScratchShape = {0, 0}; // new memory: zeroed below
      // A graph may hold all three (its pick, GraphPick).
      if (!growArgmaxBuffer(ctx, d, d.argmaxIds, idsBytes, deviceAlloc,
                            deviceFree, true) ||
          (!p.whole && !growArgmaxBuffer(ctx, d, host, idsBytes, pinnedAlloc,
                                         pinnedFree, true)) ||
          !growArgmaxBuffer(ctx, d, d.argmaxScratch, scratchBytes, deviceAlloc,
                            deviceFree, true))
        return false;
      // The kernel's counters reset themselves where its layout, which
      // follows the rows and width, put them: a call of another shape
      // zeroes the scratch first.
      if (!argmaxScratchFor(ctx, d, p.rows, p.width))
        return false;
      // Only the ids come back: the kernel writes them to the host too
      // (here, or as the last node of the step's graph).
      const GraphPick pick = pickOf(d, p);
      if ((!(d.graphPick.src && d.graphPick == pick) &&
           !launchPick(ctx, d, pick, false)) ||
          (p.whole &&
           !check(ctx,
                  cudaMemcpyAsync(p.dst, p.src, p.bytes,
                                  cudaMemcpyDeviceToHost, d.stream),
                  "download")))
        return false;
      if (!p.whole)
        p.out->data = host.ptr;
      d.argmaxLast = p.picks;
      d.argmaxLast.data = pick.ids;
      d.argmaxIndex = p.index;
      d.argmaxWidth = p.width;
    } else if (p.pitch) {
      if (p.rows > 0 &&
          !check(ctx,
                 cudaMemcpy2DAsync(p.dst, p.bytes, p.src, p.pitch, p.bytes,
                                   size_t(p.rows), cudaMemcpyDeviceToHost,
                                   d.stream),
                 "download"))
        return false;
    } else if (!check(ctx,
                      cudaMemcpyAsync(p.dst, p.src, p.bytes,
                                      cudaMemcpyDeviceToHost, d.stream),
                      "download")) {
      return false;
    }
  }
  d.pendingDownloads.clear();
  return true;
}
} // namespace

namespace {
/// Starts capturing the next segment of the step.
bool beginSegment(Context &ctx, Device &d) {
  return check(ctx,
               cudaStreamBeginCapture(d.stream, cudaStreamCaptureModeThreadLocal),
               "cudaStreamBeginCapture");
}

/// Ends a capture that will not be used (after an error, or a restart).
void abandonCapture(Device &d) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(d.stream, &status) == cudaSuccess &&
      status != cudaStreamCaptureStatusNone) {
    if (d.forked)
      joinCopies(d);
    cudaGraph_t graph = nullptr;
    cudaStreamEndCapture(d.stream, &graph);
    if (graph)
      cudaGraphDestroy(graph);
  }
  d.forked = false;
  cudaGetLastError();
}

/// Closes the current segment of a captured or replayed step and launches
/// it: a capture ends and is instantiated, a replay takes the graph
/// captured for this segment. `last`: the step's end (every allocation and
/// segment must have been seen). Sets `restart` and returns false when the
/// step must be rerun eagerly.
bool endSegment(Context &ctx, Device &d, bool last) {
  GraphEntry &g = *d.current;
  cudaGraphExec_t exec = nullptr;
  if (d.mode == Mode::capture) {
    const bool ok =
        !d.forked || check(ctx, joinCopies(d), "joining the copy stream");
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(d.stream, &graph);
    size_t nodes = 0;
    if (ok && e == cudaSuccess && graph && !d.mismatch)
      e = cudaGraphGetNodes(graph, nullptr, &nodes);
    if (ok && e == cudaSuccess && graph && !d.mismatch && nodes > 0)
      e = cudaGraphInstantiate(&exec, graph, 0);
    // The first segment's graph stays while its append nodes are set in
    // each replay (their handles are its nodes).
    if (graph && e == cudaSuccess && exec && d.segment == 0 &&
        !g.appendNodes.empty())
      g.headGraph = graph;
    else if (graph)
      cudaGraphDestroy(graph);
    cudaGetLastError();
    if (!ok || e != cudaSuccess || !graph || d.mismatch) {
      if (e != cudaSuccess)
        graphNote(d, "segment %zu: %s", d.segment, cudaGetErrorString(e));
      if (exec)
        cudaGraphExecDestroy(exec);
      d.restart = true;
      return false;
    }
    g.segments.push_back(exec);
  } else {
    if (d.mismatch || d.segment >= g.segments.size() ||
        (last && (d.allocCursor != g.allocs.size() ||
                  d.segment + 1 != g.segments.size()))) {
      graphNote(d, "the step made %zu allocations and %zu segments, the "
                   "captured one %zu and %zu",
                d.allocCursor, d.segment + 1, g.allocs.size(),
                g.segments.size());
      d.restart = true;
      return false;
    }
    exec = g.segments[d.segment];
  }
  ++d.segment;
  if (!exec)
    return true;
  if (d.profile) {
    if (!d.launched)
      markLaunch(d);
    closeIdle(d); // a CPU part's idle interval ends with this launch
    if (d.mode == Mode::replay) {
      const size_t i = d.segment - 1;
      std::vector<cudaEvent_t> &events = d.launchEvents[d.parity];
      while (events.size() <= i) {
        cudaEvent_t e = nullptr;
        if (cudaEventCreate(&e) != cudaSuccess)
          break;
        events.push_back(e);
      }
      if (i < events.size())
        cudaEventRecord(events[i], d.stream);
    }
  }
  if (!check(ctx, cudaGraphLaunch(exec, d.stream), "cudaGraphLaunch"))
    return false;
  if (d.segment == 1)
    d.pendingAppends.clear(); // moved by the first graph's nodes
  return true;
}

// Where a capture cuts a step (Switches.h, splitPoints): by default before
// allocation n/32 and n/4 of the n its eager run made. A replay walks the
// whole step on the host (every op recomputes its views and checks its
// allocations) before it could launch one graph, and the GPU would sit
// idle meanwhile: about 0.3 us an op, 80-100 us of an OPT-6.7B decode
// step. Cut, the first graph launches after a thirty-second of the walk;
// the second covers the next quarter of the walk, the third the rest, each
// walked while the graph before it runs (allocations track ops, and an
// op's GPU time is far above its host time in the steps that are long
// enough to cut).

/// Called before each allocation of a step: at a split point of the
/// captured or replayed step, closes the segment (launching it) and opens
/// the next. Ops allocate before they launch, so every op before the
/// point is queued in the closed segment; one that allocates between two
/// launches has its later kernels in the next segment, which the stream
/// orders after.
bool splitBefore(Context &ctx, Device &d) {
  const size_t n = d.stepAllocs++;
  if (d.mode == Mode::eager || !d.current)
    return true;
  const std::vector<size_t> &splits = d.current->splits;
  if (d.nextSplit >= splits.size() || splits[d.nextSplit] != n)
    return true;
  ++d.nextSplit;
  if (!endSegment(ctx, d, false))
    return false;
  return d.mode != Mode::capture || beginSegment(ctx, d);
}
} // namespace

bool toHost(Context &ctx, const Tensor &x, int site, Tensor &out) {
  Device &d = *static_cast<Device *>(ctx.backend.get());
  if (site < 0)
    return ctx.fail("internal error: negative host copy site");
  if (size_t(site) >= d.hostCopies.size()) {
    if (d.mode != Mode::eager) {
      graphNote(d, "host copy site %d is new", site);
      d.mismatch = true; // created eagerly, never during a capture
      return true;
    }
    d.hostCopies.resize(size_t(site) + 1);
  }
  Device::HostCopy &c = d.hostCopies[size_t(site)];
  if (d.mode == Mode::eager &&
      ((!d.copyStream &&
        !check(ctx, cudaStreamCreateWithFlags(&d.copyStream, cudaStreamNonBlocking),
               "cudaStreamCreate (copies)")) ||
       (!d.join &&
        !check(ctx, cudaEventCreateWithFlags(&d.join, cudaEventDisableTiming),
               "cudaEventCreate")) ||
       (!c.produced &&
        !check(ctx, cudaEventCreateWithFlags(&c.produced, cudaEventDisableTiming),
               "cudaEventCreate")) ||
       (!c.copied &&
        !check(ctx, cudaEventCreateWithFlags(&c.copied, cudaEventDisableTiming),
               "cudaEventCreate"))))
    return false;
  if (!d.ensurePinned(ctx, c.buffer, x.bytes(), "a host copy"))
    return false;
  out = x;
  out.data = c.buffer.ptr;
  if (!d.launching() || d.mismatch)
    return true;
  if (!c.copied) {
    d.mismatch = true;
    return true;
  }
  // The copy stream forks from the model's stream once `x` is produced, so
  // the GPU part queued next runs beside the copy. In a capture the copy's
  // completion is an external event node: waitHost can wait for it while
  // the rest of the segment runs.
  bool ok = check(ctx, cudaEventRecord(c.produced, d.stream), "cudaEventRecord") &&
            check(ctx, cudaStreamWaitEvent(d.copyStream, c.produced, 0),
                  "cudaStreamWaitEvent") &&
            (x.bytes() == 0 ||
             check(ctx,
                   cudaMemcpyAsync(c.buffer.ptr, x.data, x.bytes(),
                                   cudaMemcpyDeviceToHost, d.copyStream),
                   "copying to the host")) &&
            check(ctx,
                  cudaEventRecordWithFlags(c.copied, d.copyStream,
                                           d.mode == Mode::capture
                                               ? cudaEventRecordExternal
                                               : cudaEventRecordDefault),
                  "cudaEventRecord");
  if (d.mode == Mode::capture)
    d.forked = true;
  return ok;
}

bool waitHost(Context &ctx, int site) {
  Device &d = *static_cast<Device *>(ctx.backend.get());
  d.hostWaited = true;
  // A captured or replayed step launches the GPU work queued so far (its
  // copies included) as one graph before the host waits.
  if (d.mode != Mode::eager && !endSegment(ctx, d, false))
    return false;
  if (site < 0 || size_t(site) >= d.hostCopies.size() ||
      !d.hostCopies[size_t(site)].copied)
    return ctx.fail("internal error: no host copy " + std::to_string(site));
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  if (!check(ctx, cudaEventSynchronize(d.hostCopies[size_t(site)].copied),
             "waiting for a host copy"))
    return false;
  if (d.profile) {
    Device::HybridTimes &h = d.hybrid;
    // The CPU part starts after the last of its waits; the GPU's idle
    // interval opens at the first.
    h.cpuStart = Clock::now();
    h.cpuBusy = true;
    h.waitUs +=
        std::chrono::duration<double, std::micro>(h.cpuStart - t0).count();
    if (!h.pending) {
      if (h.used == h.idle.size()) {
        std::pair<cudaEvent_t, cudaEvent_t> e{nullptr, nullptr};
        if (!check(ctx, cudaEventCreate(&e.first), "cudaEventCreate"))
          return false;
        if (!check(ctx, cudaEventCreate(&e.second), "cudaEventCreate")) {
          cudaEventDestroy(e.first);
          return false;
        }
        h.idle.push_back(e);
      }
      // Completes when the GPU has finished what was queued before the CPU
      // part started (the GPU part of the layer).
      cudaEventRecord(h.idle[h.used++].first, d.stream);
      h.pending = true;
    }
  }
  // The work after the CPU part (its upload first) is the next segment.
  return d.mode != Mode::capture || beginSegment(ctx, d);
}

namespace {
/// Copies `rows` rows of `width` bytes between pitched device buffers on
/// the model's stream.
bool copyRows(Context &ctx, Device &d, void *dst, size_t dpitch,
              const void *src, size_t spitch, size_t width, size_t rows) {
  if (width == 0 || rows == 0)
    return true;
  return check(ctx,
               cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows,
                                 cudaMemcpyDeviceToDevice, d.stream),
               "moving KV cache entries");
}

bool checkPresent(Context &ctx, const Tensor &t, bool orHalf = false) {
  if ((t.dtype != DType::f32 && !(orHalf && t.dtype == DType::f16)) ||
      t.rank != 4 || !t.data)
    return ctx.fail(std::string("KV cache: expected a float32") +
                    (orHalf ? " or float16" : "") +
                    " [B, H, T, D] device tensor, got " + t.describe());
  return true;
}

/// Rows of `width` elements from src (float32, or float16 where srcHalf)
/// to dst (float16 where dstHalf), `pitch`es in elements: block (x, y)
/// moves elements x * 1024 .. of row y.
__global__ void cacheRowsKernel(void *dst, bool dstHalf, int64_t dstPitch,
                                const void *src, bool srcHalf, int64_t srcPitch,
                                int64_t width) {
  const int64_t row = blockIdx.y;
  for (int64_t e = int64_t(blockIdx.x) * 1024 + threadIdx.x;
       e < min(width, int64_t(blockIdx.x + 1) * 1024); e += blockDim.x) {
    const float v =
        srcHalf ? __half2float(static_cast<const __half *>(src)[row * srcPitch + e])
                : static_cast<const float *>(src)[row * srcPitch + e];
    if (dstHalf)
      static_cast<__half *>(dst)[row * dstPitch + e] = __float2half_rn(v);
    else
      static_cast<float *>(dst)[row * dstPitch + e] = v;
  }
}
} // namespace

bool Device::initCache(Context &ctx, int id, const Tensor &present,
                       int64_t count, int64_t capacity, bool narrow,
                       Tensor &cache) {
  // A float16 present: growCache's view of a float16 cache.
  if (!checkPresent(ctx, present, /*orHalf=*/true))
    return false;
  if (id < 0 || count < 0 || count > present.shape[2] || capacity < count)
    return ctx.fail("KV cache: invalid entry count or capacity");
  if (size_t(id) >= caches.size())
    caches.resize(size_t(id) + 1);
  Cache &c = caches[size_t(id)];
  const int64_t B = present.shape[0], H = present.shape[1], D = present.shape[3];
  // float16 where the model reads it so and the weights are fp16: the
  // prompt's attention rounds keys and values to fp16 already, so they
  // are in its range. (A bf16 build's are rounded to bf16, whose range is
  // float32's: beyond 65504 a float16 cache would hold infinities.)
  const bool half = narrow && halfCache && ctx.f16Weights;
  const DType type = half ? DType::f16 : DType::f32;
  const size_t es = dtypeSize(type);
  const size_t bytes = es * size_t(B * H * capacity * D);
  if (!flushAppends(ctx))
    return false;
  if (c.ptr)
    dropGraphs(); // they may read it
  // A buffer large enough is kept (generate reserves the caches in its
  // warm-up: 48 allocations took about 3 ms at OPT-1.3B).
  if (c.ptr && c.bytes < bytes) {
    cudaFree(c.ptr);
    c.ptr = nullptr;
  }
  if (!c.ptr) {
    if (cudaMalloc(&c.ptr, bytes) != cudaSuccess) {
      cudaGetLastError();
      c.ptr = nullptr;
      c.bytes = 0;
      return ctx.fail(outOfMemory(bytes, "a KV cache"));
    }
    c.bytes = bytes;
  }
  const int64_t shape[4] = {B, H, capacity, D};
  for (int i = 0; i < 4; ++i)
    c.shape[i] = shape[i];
  c.dtype = type;
  // Zeros past the copied entries, not garbage: masked entries get
  // probability 0, and 0 * NaN would still poison P.V.
  const size_t pitch = es * size_t(capacity * D);
  if (capacity > count &&
      !check(ctx,
             cudaMemset2DAsync(static_cast<char *>(c.ptr) + es * count * D,
                               pitch, 0, es * size_t((capacity - count) * D),
                               size_t(B * H), stream),
             "zeroing a KV cache"))
    return false;
  if (present.dtype == type) {
    if (!copyRows(ctx, *this, c.ptr, pitch, present.data,
                  es * present.shape[2] * D, es * count * D, size_t(B * H)))
      return false;
  } else if (count > 0 && B * H > 0) {
    if (B * H > 65535)
      return ctx.fail("KV cache: more than 65535 rows of heads");
    const int64_t width = count * D;
    cacheRowsKernel<<<dim3(unsigned((width + 1023) / 1024), unsigned(B * H)),
                      256, 0, stream>>>(
        c.ptr, half, capacity * D, present.data, present.dtype == DType::f16,
        present.shape[2] * D, width);
    if (!check(ctx, cudaGetLastError(), "moving KV cache entries"))
      return false;
  }
  cache = Tensor{c.ptr, type, 4, {B, H, capacity, D}};
  return true;
}

namespace {
constexpr int kAppendBatch = 64;
/// Up to kAppendBatch row moves; block b copies row b of the batch (the
/// moves' rows numbered one after another).
struct AppendBatch {
  void *dst[kAppendBatch]; // float, or __half where dstHalf
  const float *src[kAppendBatch];
  int64_t dstPitch[kAppendBatch], srcPitch[kAppendBatch];
  int width[kAppendBatch];
  bool dstHalf[kAppendBatch];
  int firstRow[kAppendBatch + 1];
  int count;
  int rowsEach; // every move's rows where they are equal (the caches of a
                // model are), else 0
};

/// Launched normally (it never lets the next kernel start early): the
/// decode attention reads the cache before its wait, so the step's kernels
/// launch only after the appends have finished.
__global__ void appendRowsKernel(AppendBatch b) {
  const int row = blockIdx.x;
  if (row >= b.firstRow[b.count])
    return; // an empty batch's one block
  // The block's move: at once where the moves' rows are equal, otherwise
  // by a search of the batch's first rows (each step a dependent load).
  int i = 0;
  if (b.rowsEach > 0) {
    i = row / b.rowsEach;
  } else {
    int hi = b.count - 1;
    while (i < hi) {
      const int mid = (i + hi + 1) / 2;
      if (row >= b.firstRow[mid])
        i = mid;
      else
        hi = mid - 1;
    }
  }
  const int r = row - b.firstRow[i];
  const float *s = b.src[i] + int64_t(r) * b.srcPitch[i];
  if (b.dstHalf[i]) {
    __half *d = static_cast<__half *>(b.dst[i]) + int64_t(r) * b.dstPitch[i];
    for (int e = threadIdx.x; e < b.width[i]; e += blockDim.x)
      d[e] = __float2half_rn(s[e]);
    return;
  }
  float *d = static_cast<float *>(b.dst[i]) + int64_t(r) * b.dstPitch[i];
  for (int e = threadIdx.x; e < b.width[i]; e += blockDim.x)
    d[e] = s[e];
}
} // namespace

namespace {
/// The pending appends from `at` on, up to kAppendBatch of them, as one
/// kernel's batch; `rows` its blocks.
AppendBatch appendBatch(const std::vector<Device::PendingAppend> &pending,
                        size_t at, int &rows) {
  AppendBatch b{};
  b.count = int(std::min<size_t>(kAppendBatch, pending.size() - at));
  rows = 0;
  for (int i = 0; i < b.count; ++i) {
    const Device::PendingAppend &p = pending[at + size_t(i)];
    b.dst[i] = p.dst;
    b.src[i] = p.src;
    b.dstPitch[i] = p.dstPitch;
    b.srcPitch[i] = p.srcPitch;
    b.width[i] = p.width;
    b.dstHalf[i] = p.dstHalf;
    b.firstRow[i] = rows;
    rows += p.rows;
  }
  b.firstRow[b.count] = rows;
  b.rowsEach = b.count > 0 ? pending[at].rows : 0;
  for (int i = 1; i < b.count; ++i)
    if (pending[at + size_t(i)].rows != b.rowsEach)
      b.rowsEach = 0;
  return b;
}

size_t appendKernels(const std::vector<Device::PendingAppend> &pending) {
  return (pending.size() + kAppendBatch - 1) / kAppendBatch;
}
} // namespace

bool Device::flushAppends(Context &ctx, std::vector<cudaGraphNode_t> *nodes,
                          bool keep) {
  for (size_t at = 0; at < pendingAppends.size(); at += kAppendBatch) {
    int rows = 0;
    const AppendBatch b = appendBatch(pendingAppends, at, rows);
    // Every batch is a node of a capture, even an empty one (one block
    // that copies nothing): a replay's batches may have rows.
    appendRowsKernel<<<unsigned(std::max(rows, 1)), 128, 0, stream>>>(b);
    if (!check(ctx, cudaGetLastError(), "moving KV cache entries")) {
      pendingAppends.clear();
      return false;
    }
    if (nodes) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      const cudaGraphNode_t *deps = nullptr;
      size_t n = 0;
      if (!check(ctx,
                 cudaStreamGetCaptureInfo(stream, &status, nullptr, nullptr,
                                          &deps, nullptr, &n),
                 "capturing the KV cache appends"))
        return false;
      if (status != cudaStreamCaptureStatusActive || n != 1)
        return ctx.fail("internal error: a cache append is not one node of "
                        "the capture");
      nodes->push_back(deps[0]);
    }
  }
  if (!keep)
    pendingAppends.clear();
  return true;
}

bool Device::setAppendNodes(Context &ctx, GraphEntry &g) {
  if (g.appendNodes.size() != appendKernels(pendingAppends) ||
      (!g.appendNodes.empty() && (g.segments.empty() || !g.segments[0])))
    return ctx.fail("internal error: a replay's cache appends do not match "
                    "its graph");
  for (size_t k = 0; k < g.appendNodes.size(); ++k) {
    int rows = 0;
    AppendBatch b = appendBatch(pendingAppends, k * kAppendBatch, rows);
    void *args[] = {&b};
    cudaKernelNodeParams params{};
    params.func = reinterpret_cast<void *>(appendRowsKernel);
    params.gridDim = dim3(unsigned(std::max(rows, 1)));
    params.blockDim = dim3(128);
    params.kernelParams = args;
    if (!check(ctx,
               cudaGraphExecKernelNodeSetParams(g.segments[0],
                                                g.appendNodes[k], &params),
               "setting the KV cache appends"))
      return false;
  }
  return true;
}

bool Device::appendCache(Context &ctx, int id, const Tensor &present,
                         int64_t src, int64_t dst) {
  if (!checkPresent(ctx, present))
    return false;
  if (id < 0 || size_t(id) >= caches.size() || !caches[size_t(id)].ptr)
    return ctx.fail("KV cache: no cache " + std::to_string(id));
  Cache &c = caches[size_t(id)];
  const int64_t D = c.shape[3];
  if (src < 0 || src >= present.shape[2] || dst < 0 || dst >= c.shape[2] ||
      present.shape[0] * present.shape[1] != c.shape[0] * c.shape[1] ||
      present.shape[3] != D)
    return ctx.fail("KV cache: entry " + std::to_string(src) + " of " +
                    present.describe() + " does not fit entry " +
                    std::to_string(dst));
  if (D > INT32_MAX || c.shape[0] * c.shape[1] > INT32_MAX)
    return ctx.fail("KV cache: rows too large");
  // Moved by the next step's flushAppends: the present stays untouched
  // until then (no device work runs between steps).
  PendingAppend a;
  a.dstHalf = c.dtype == DType::f16;
  a.dst = static_cast<char *>(c.ptr) + dtypeSize(c.dtype) * size_t(dst * D);
  a.src = static_cast<const float *>(present.data) + src * D;
  a.dstPitch = c.shape[2] * D;
  a.srcPitch = present.shape[2] * D;
  a.width = int(D);
  a.rows = int(c.shape[0] * c.shape[1]);
  pendingAppends.push_back(a);
  return true;
}

bool Device::growCache(Context &ctx, int id, int64_t valid, int64_t capacity,
                       Tensor &cache) {
  if (id < 0 || size_t(id) >= caches.size() || !caches[size_t(id)].ptr)
    return ctx.fail("KV cache: no cache " + std::to_string(id));
  Cache old = caches[size_t(id)];
  if (valid < 0 || valid > old.shape[2] || capacity < valid)
    return ctx.fail("KV cache: invalid growth");
  dropGraphs(); // they may read the old buffer
  caches[size_t(id)].ptr = nullptr; // initCache must not free the old one
  caches[size_t(id)].bytes = 0;
  Tensor view{old.ptr, old.dtype, 4,
              {old.shape[0], old.shape[1], old.shape[2], old.shape[3]}};
  // The same type again (a float16 cache is one the model reads so).
  bool ok = initCache(ctx, id, view, valid, capacity,
                      old.dtype == DType::f16, cache);
  // cudaFree waits for the copy.
  cudaFree(old.ptr);
  return ok;
}

namespace {
/// A step's graph key: the inputs' dtypes and shapes (and whether one is
/// the device's own picks, which it reads in place instead of uploading),
/// which outputs the caller leaves resident and the step's parity (its
/// graphs read that parity's staging), as raw bytes (a decoder step has
/// dozens of inputs; formatting them as text took microseconds the GPU
/// waited for).
std::string signature(const Context &ctx, const Device &d,
                      const Tensor *inputs, bool base = false) {
  std::string key;
  key.reserve(size_t(ctx.desc.numInputs) * 48 + ctx.residentOutputs.size() + 8);
  auto put = [&](int64_t v) {
    key.append(reinterpret_cast<const char *>(&v), sizeof v);
  };
  for (int i = 0; i < ctx.desc.numInputs; ++i) {
    const bool picks =
        !base && inputs[i].data && inputs[i].data == d.argmaxIds.ptr;
    put(int64_t(picks) << 16 | int64_t(inputs[i].dtype) << 8 | inputs[i].rank);
    for (int r = 0; r < inputs[i].rank; ++r)
      put(inputs[i].shape[r]);
  }
  key.append(ctx.residentOutputs.begin(), ctx.residentOutputs.end());
  // Which output comes back as its argmax (a graph may make the pick), and
  // how many cache appends the step starts with (its first graph's nodes).
  put(int64_t(ctx.argmaxOutput) << 32 | uint32_t(ctx.argmaxAlso));
  key.push_back(char(ctx.exactFfn)); // its FFNs' kernels differ
  put(int64_t(d.pendingAppends.size()));
  if (!base)
    key.push_back(char(d.parity));
  return key;
}

/// A step launched ahead in parity p, captured at once after its sibling
/// `run` ran eagerly: p's pinned buffers grow to what that run asked for
/// (outside any capture). Only to that: the other parity's may be far
/// larger (a prefill's logits), and pinning them cost a decode step's
/// first ahead launch 10-27 ms of GPU idle time.
bool mirrorPinned(Context &ctx, Device &d, const Device::EagerRun &run) {
  const int p = d.parity;
  // No step of this parity is outstanding (runStep waited for it).
  const std::pair<std::vector<PinnedBuffer> *, const std::vector<size_t> *>
      sets[] = {{&d.staging[p], &run.staging}, {&d.outputs[p], &run.outputs}};
  for (const auto &[mine, need] : sets) {
    if (mine->size() < need->size())
      mine->resize(need->size());
    for (size_t i = 0; i < need->size(); ++i) {
      PinnedBuffer &b = (*mine)[i];
      if (b.bytes >= (*need)[i])
        continue;
      // Smaller than needed: a graph of this parity may hold the old one.
      if (b.ptr)
        d.dropGraphs();
      if (!reallocate(ctx, b, (*need)[i], pinnedAlloc, pinnedFree,
                      "of pinned host memory for a step launched ahead"))
        return false;
    }
  }
  // The picks' host copy is in no graph: flushDownloads allocates it.
  return true;
}

/// Waits for every outstanding step and completes them in order.
bool finishAll(Context &ctx, Device &d) {
  while (!d.outstanding.empty())
    if (!d.finishOldest(ctx))
      return false;
  return true;
}

/// The density a step's CPU parts have counted so far, to undo an
/// abandoned capture or replay before its eager rerun.
struct StepMarks {
  int64_t sparseActive = 0, sparseTotal = 0;
  explicit StepMarks(const Context &ctx)
      : sparseActive(ctx.sparseActive), sparseTotal(ctx.sparseTotal) {}
};

/// Before rerunning an abandoned step eagerly: the CPU parts it ran count
/// again, and so do the device counters of the segments it launched (they
/// are taken as seen), and its open profile intervals are dropped.
bool undoPartialStep(Context &ctx, Device &d, const StepMarks &marks) {
  // Outstanding steps count first (their counters precede this step's),
  // and stay counted.
  const int64_t active = ctx.sparseActive, total = ctx.sparseTotal;
  if (!finishAll(ctx, d))
    return false;
  ctx.sparseActive = marks.sparseActive + (ctx.sparseActive - active);
  ctx.sparseTotal = marks.sparseTotal + (ctx.sparseTotal - total);
  Device::HybridTimes &h = d.hybrid;
  h.used = 0;
  h.pending = h.cpuBusy = false;
  if (!d.countsDensity)
    return true;
  return check(ctx,
               cudaMemcpyAsync(d.densitySeen, d.densityCounts,
                               2 * sizeof(unsigned long long),
                               cudaMemcpyDeviceToHost, d.stream),
               "reading the density counters") &&
         check(ctx, cudaStreamSynchronize(d.stream), "an abandoned step");
}

bool runEager(Context &ctx, Device &d, const Tensor *in, Tensor *out,
              StepFn body) {
  d.mode = Mode::eager;
  d.pendingDownloads.clear(); // a restarted attempt queues its own
  d.current = nullptr;
  d.mismatch = false;
  d.restart = false;
  if (d.profile && !d.launched)
    markLaunch(d);
  // Appends not moved yet (a graph's first segment that was launched moved
  // them: Device::pendingAppends is empty then).
  return d.flushAppends(ctx) && body(ctx, in, out);
}

/// Captures the step, segment by segment, launching each as it closes.
bool runCapture(Context &ctx, Device &d, GraphEntry &g, const Tensor *in,
                Tensor *out, StepFn body) {
  d.mode = Mode::capture;
  d.pendingDownloads.clear(); // a restarted attempt queues its own
  d.current = &g;
  d.mismatch = false;
  d.restart = false;
  d.segment = 0;
  d.nextSplit = 0;
  dropSegments(g);
  g.allocs.clear();
  // A step launched ahead is captured as one graph (unless
  // SPARSEC_CUDA_SPLIT says otherwise): the host walks a replay of it while
  // the GPU runs the step before, so cuts would only add graph launches
  // and break the early launches at them (OPT-6.7B dense on an H200: 9 us
  // a replayed step, docs/GPU.md).
  g.splits = stepCuts(g.eagerAllocs, d.splitDivisors, ctx.launchAhead,
                      d.splitsSet);
  g.pick = GraphPick{};
  // The picks' host copy of this parity, for a pick in the graph: the first
  // capture of a parity launched ahead follows an eager run of the other
  // (runStep), whose downloads grew only that parity's.
  PinnedBuffer &host = d.argmaxHost[d.parity];
  const PinnedBuffer &other = d.argmaxHost[d.parity ^ 1];
  if (!host.ptr && other.bytes > 0 &&
      !reallocate(ctx, host, other.bytes, pinnedAlloc, pinnedFree,
                  "for an output's argmax"))
    return false;
  const StepMarks marks(ctx);
  bool ok = beginSegment(ctx, d) &&
            d.flushAppends(ctx, &g.appendNodes, /*keep=*/true) &&
            body(ctx, in, out) && capturePick(ctx, d, g) &&
            endSegment(ctx, d, true);
  if (ok) {
    g.captured = true;
    d.graphPick = g.pick;
    return true;
  }
  g.pick = GraphPick{};
  abandonCapture(d);
  dropSegments(g);
  g.allocs.clear();
  if (!d.restart)
    return false;
  // Not capturable (or it allocated): this signature stays eager.
  g.broken = true;
  return undoPartialStep(ctx, d, marks) && runEager(ctx, d, in, out, body);
}

/// Replays a captured step: host ops run, device ops only recompute their
/// views, and each segment's graph is launched as it closes.
bool runReplay(Context &ctx, Device &d, GraphEntry &g, const Tensor *in,
               Tensor *out, StepFn body) {
  d.mode = Mode::replay;
  d.pendingDownloads.clear(); // a restarted attempt queues its own
  d.current = &g;
  d.allocCursor = 0;
  d.mismatch = false;
  d.restart = false;
  d.segment = 0;
  d.nextSplit = 0;
  if (!d.setAppendNodes(ctx, g))
    return false;
  // The graph's pick finds the scratch's counters laid out for its shape
  // (an argmax of another shape since, such as a prefill's, moved them).
  if (g.pick.src && !argmaxScratchFor(ctx, d, g.pick.rows, g.pick.width))
    return false;
  const StepMarks marks(ctx);
  if (body(ctx, in, out) && endSegment(ctx, d, true)) {
    d.graphPick = g.pick;
    return true;
  }
  // An allocation differs: segments launched so far are ordered before
  // the eager rerun on the same stream.
  return d.restart && undoPartialStep(ctx, d, marks) &&
         runEager(ctx, d, in, out, body);
}
} // namespace

namespace {
/// After `rec`'s step has finished: the density its sparse kernels counted
/// and, with SPARSEC_CUDA_PROFILE, its times.
void completeStep(Context &ctx, Device &d, const Device::Outstanding &rec) {
  using Clock = std::chrono::steady_clock;
  if (d.countsDensity) {
    // Deltas: the CPU parts of a hybrid model count on the host themselves.
    const unsigned long long *seen = d.densityHost + 2 * rec.parity;
    ctx.sparseActive += int64_t(seen[0] - d.densitySeen[0]);
    ctx.sparseTotal += int64_t(seen[1] - d.densitySeen[1]);
    d.densitySeen[0] = seen[0];
    d.densitySeen[1] = seen[1];
  }
  if (!d.profile)
    return;
  const int p = rec.parity;
  float gpuMs = 0;
  if (rec.launched) {
    cudaEventElapsedTime(&gpuMs, d.stepStart[p], d.stepEnd[p]);
    // The GPU's idle time before this step: from the last step's end to
    // this one's start (the host queued it late, or waited in between).
    float startMs = 0, endMs = 0;
    if (cudaEventElapsedTime(&startMs, d.epoch, d.stepStart[p]) == cudaSuccess &&
        cudaEventElapsedTime(&endMs, d.epoch, d.stepEnd[p]) == cudaSuccess) {
      if (d.lastEndMs >= 0) {
        const double gapUs = std::max(0.0, 1e3 * (startMs - d.lastEndMs));
        d.idleUs += gapUs;
        ++d.idleGaps;
        if (rec.kind == 2) {
          d.replayIdleUs += gapUs;
          ++d.replayIdleGaps;
        }
        if (d.firstGaps.size() < 2 * Device::kFirstSteps)
          d.firstGaps.push_back(gapUs);
      }
      d.lastEndMs = endMs;
    }
  }
  cudaGetLastError();
  Device::StepTimes &t = d.times[rec.kind];
  const Clock::time_point now = Clock::now();
  const double hostUs =
      std::chrono::duration<double, std::micro>(
          (rec.launched ? rec.launchTime : now) - rec.start)
          .count();
  const double wallUs =
      std::chrono::duration<double, std::micro>(now - rec.start).count();
  if (rec.kind == 2 && rec.launched) {
    // Replays: the GPU time from the step's start to each graph launch.
    if (d.launchUs.size() < rec.segments)
      d.launchUs.resize(rec.segments, 0.0);
    for (size_t i = 0; i < rec.segments && i < d.launchEvents[p].size(); ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, d.stepStart[p], d.launchEvents[p][i]) ==
          cudaSuccess)
        d.launchUs[i] += 1e3 * ms;
    }
    cudaGetLastError();
    ++d.launchSteps;
  }
  ++t.steps;
  t.gpuUs += 1e3 * gpuMs;
  t.hostUs += hostUs;
  t.wallUs += wallUs;
  if (d.firstSteps.size() < Device::kFirstSteps)
    d.firstSteps.push_back({rec.kind, wallUs, hostUs, 1e3 * gpuMs, d.allocUs,
                            d.uploadsUs, d.blasUs, d.allocs, d.weightUploads,
                            d.blasCalls});
}

} // namespace

bool Device::finishStep(Context &ctx, int64_t run) {
  // Runs finish in order; one may already have finished early (a step
  // that waited for every outstanding one).
  while (!outstanding.empty() && outstanding.front().run <= run)
    if (!finishOldest(ctx))
      return false;
  return true;
}

bool Device::finishOldest(Context &ctx) {
  if (outstanding.empty())
    return true;
  const Outstanding rec = outstanding.front();
  outstanding.pop_front();
  if (!check(ctx, cudaEventSynchronize(stepDone[rec.parity]), "running the step"))
    return false;
  completeStep(ctx, *this, rec);
  return true;
}

bool Device::deviceArgmax(Context &ctx, int index, Tensor &ids) {
  (void)ctx;
  if (!picksAsInputs || !argmaxLast.data || index != argmaxIndex)
    return false;
  ids = argmaxLast;
  return true;
}

bool runStep(Context &ctx, const Tensor *in, Tensor *out, StepFn body) {
  Device *dp = device(ctx);
  if (!dp)
    return false;
  Device &d = *dp;
  bool ok = true;
  // Launched ahead (Context::launchAhead): the step takes the parity the
  // newest outstanding step does not, after waiting for any outstanding
  // step that holds it (at most two are outstanding). Otherwise every
  // earlier step finishes first and parity 0 serves.
  if (ctx.launchAhead) {
    const int p = d.outstanding.empty() ? d.parity ^ 1
                                        : d.outstanding.back().parity ^ 1;
    while (std::any_of(d.outstanding.begin(), d.outstanding.end(),
                       [&](const Device::Outstanding &o) { return o.parity == p; }))
      if (!d.finishOldest(ctx))
        return false;
    d.parity = p;
  } else {
    if (!finishAll(ctx, d))
      return false;
    d.parity = 0;
  }
  // SPARSEC_CUDA_PROFILE: the GPU time runs from `stepStart` (before the
  // first launch: of the step's kernels, or of its first graph) to the end
  // of the step.
  using Clock = std::chrono::steady_clock;
  const Clock::time_point t0 = Clock::now();
  d.launched = false;
  d.stepAllocs = 0;
  d.stepStaging.clear();
  d.stepOutputs.clear();
  d.hostWaited = false;
  d.graphPick = GraphPick{}; // set by a capture or replay that makes it
  // The cache rows the last step appended move first, in the step's first
  // graph (their nodes' parameters set for each replay) or eagerly before
  // it; the profile counts them in this step.
  int kind = 0;
  // A warm-up run (Context::warmup) is eager and leaves no trace in the
  // graph bookkeeping: its shapes count as not seen yet.
  if (!d.graphsEnabled || ctx.warmup) {
    ok = runEager(ctx, d, in, out, body);
  } else {
    if (d.graphs.size() > 256) {
      // Decoding with a growing cache sees a new signature per step: keep
      // only the captured graphs.
      for (auto it = d.graphs.begin(); it != d.graphs.end();)
        it = it->second.captured ? std::next(it) : d.graphs.erase(it);
    }
    GraphEntry &g = d.graphs[signature(ctx, d, in)];
    ++g.seen;
    if (ctx.launchAhead && g.seen == 1 && !g.captured && !g.broken) {
      // A sibling that differs only in parity or in taking the device's
      // picks as ids ran eagerly: its run grew every device buffer this
      // one uses (and mirrorPinned the pinned ones), so capture at once
      // (each eager or captured step of an OPT-6.7B decode costs 1-2 ms
      // more than a replay).
      auto it = d.eagerRunsByBase.find(signature(ctx, d, in, /*base=*/true));
      if (it != d.eagerRunsByBase.end()) {
        if (!mirrorPinned(ctx, d, it->second))
          return false;
        g.eagerAllocs = it->second.allocs;
        g.seen = 2;
      }
    }
    if (g.broken || (!g.captured && g.seen < 2)) {
      ok = runEager(ctx, d, in, out, body);
      if (ok) {
        g.eagerAllocs = d.stepAllocs;
        if (d.picksAsInputs) // only steps launched ahead look siblings up
          d.eagerRunsByBase[signature(ctx, d, in, /*base=*/true)] =
              Device::EagerRun{d.stepAllocs, d.stepStaging, d.stepOutputs};
      }
    } else if (!g.captured) {
      kind = 1;
      ok = runCapture(ctx, d, g, in, out, body);
    } else {
      kind = 2;
      ok = runReplay(ctx, d, g, in, out, body);
    }
    if (d.mode == Mode::eager)
      kind = 0; // rerun eagerly
  }
  d.mode = Mode::eager;
  d.current = nullptr;
  if (!ok || !flushDownloads(ctx, d))
    return false;
  if (d.profile) {
    closeIdle(d); // a CPU part whose result was never uploaded
    cudaEventRecord(d.stepEnd[d.parity], d.stream);
  }
  // The sparse kernels' neuron counts (outside any graph), for the density
  // `generate` and `bench` report.
  if (d.countsDensity &&
      !check(ctx,
             cudaMemcpyAsync(d.densityHost + 2 * d.parity, d.densityCounts,
                             2 * sizeof(unsigned long long),
                             cudaMemcpyDeviceToHost, d.stream),
             "reading the density counters"))
    return false;
  Device::Outstanding rec;
  rec.run = ++ctx.runs;
  rec.parity = d.parity;
  rec.kind = kind;
  rec.launched = d.launched;
  rec.segments = d.segment;
  rec.start = t0;
  rec.launchTime = d.launchTime;
  if (ctx.launchAhead && !d.hostWaited) {
    // Left outstanding: finishStep (or the next step that needs this
    // parity, or one not launched ahead) waits for it.
    if (!check(ctx, cudaEventRecord(d.stepDone[d.parity], d.stream),
               "cudaEventRecord"))
      return false;
    d.outstanding.push_back(rec);
    return true;
  }
  // The only host synchronisation of a step: its outputs are complete
  // (and those of every outstanding step before it).
  if (!check(ctx, cudaStreamSynchronize(d.stream), "running the step"))
    return false;
  while (!d.outstanding.empty()) {
    completeStep(ctx, d, d.outstanding.front());
    d.outstanding.pop_front();
  }
  if (d.profile && d.hybrid.used > 0) {
    Device::HybridTimes &h = d.hybrid;
    ++h.steps;
    for (size_t i = 0; i < h.used; ++i) {
      float ms = 0;
      if (cudaEventElapsedTime(&ms, h.idle[i].first, h.idle[i].second) == cudaSuccess)
        h.gpuIdleUs += 1e3 * ms;
    }
    cudaGetLastError();
    h.used = 0;
  }
  d.hybrid.pending = d.hybrid.cpuBusy = false;
  completeStep(ctx, d, rec);
  return true;
}

} // namespace sparsec::rt::cuda
