//===- bench_persistent_chain.cu - a decode step's layers in one kernel ---===//
//
// Part of the sparsec project.
//
// An experiment on the question a batch-1 decode step leaves open: each
// GEMV is a kernel whose ramp and tail leave the DRAM idle for a few
// microseconds, and early launches only hide part of it (docs/GPU.md). Here
// L decoder layers run as ONE persistent kernel, one block an SM:
//
//   - a producer thread streams the weight rows of the block's tasks (a
//     GEMV task: whole rows of a neuron-major W [N, K], 8 KB, or one row
//     over several 8 KB pieces) and the attention's cached keys and values
//     into a ring of shared-memory slots with bulk copies (cp.async.bulk +
//     mbarrier). It never waits for activations, only for a free slot, so
//     while the consumers wait for the previous op to finish everywhere,
//     the next op's bytes keep arriving;
//   - eight consumer warps wait (one thread spinning on a device-wide
//     counter) until every block has published the previous op, copy its
//     output x into shared memory (with the layer norm applied there when
//     the op has one), and take the ring's pieces: each GEMV piece belongs
//     to one warp (the slots are dealt to the warps, so no warp can wait on
//     a slot two rounds ahead, which an mbarrier's phase parity cannot tell
//     apart), which sums its row segments and adds them to per-row sums in
//     shared memory; attention pieces are shared by all warps. After its
//     last task of an op the block writes the epilogues (ReLU, residual)
//     and publishes once (barrier, fence, one counter increment).
//
// Each layer is an OPT decoder layer at batch 1: norm + q/k/v (d -> 3d),
// attention over 191 cached positions and the new one (fp32 cache, the
// runtime's layout; tasks of 64 keys a head, then one merge task a head),
// out (-> d, + residual), norm + up (d -> 4d, ReLU), down (4d -> d, +
// residual); the cache append is left out. "GEMVs + norms" drops the
// attention (the out projection reads the v part of q/k/v). Layers have
// their own weights and caches (a whole model's worth: nothing stays in the
// L2). The peer, measured in the same run, is the runtime's own chain as a
// decode step launches it: normRows, gemvRowsGroup (q/k/v),
// decodeAttention, gemvRows x 3, every kernel an early launch. Both
// compute the same residual stream; the persistent kernel's output (every
// buffer it writes starts as NaN) is checked against the chain's (exit 1
// past a relative error of 1e-3). Times are medians of graph replays.
// docs/GPU.md has the results (slower than the chain so far).
//
//   sparsec-bench-persistent-chain [--shape 1.3b|6.7b|both] [--layers L]
//                                  [--slots S]
//
// --layers: layers a model (default 24 at 1.3B, 32 at 6.7B); --slots: ring
// slots of 8 KB (default: as many as fit beside x, 24 at 1.3B and 16 at
// 6.7B; rounded down to a multiple of the 8 consumer warps).
//
//===----------------------------------------------------------------------===//

#include "GpuBench.h"
#include "sparsec/rt/cuda/DenseDecode.h"

#include <cuda_fp16.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace sparsec::rt::cuda;
using namespace sparsec::bench;

namespace {

constexpr int kSlotBytes = 8192;
constexpr int kConsumers = 256; // 8 warps
constexpr int kThreadsAll = kConsumers + 32;
constexpr int kMaxRowSums = 256; // GEMV rows a block holds sums for, an op
constexpr int kWarps = kConsumers / 32;

/// Where piece `it` of the block's sequence goes: the ring's slots are
/// dealt to the consumer warps (slot w + 8 i belongs to warp w), piece it
/// to warp it % 8's next slot, so each slot is filled and emptied in one
/// warp's order and a warp never waits on a slot two rounds ahead (which
/// an mbarrier's phase parity could not tell apart). `parity`: the phase
/// of the piece's round.
struct SlotOf {
  int slot;
  uint32_t parity;
};
__device__ __forceinline__ SlotOf slotOf(uint32_t it, int slotsInRing) {
  const int perWarp = slotsInRing / kWarps;
  const uint32_t k = it / kWarps;
  return {int(it % kWarps) + kWarps * int(k % perWarp),
          uint32_t((k / perWarp) & 1)};
}

enum OpKind { kGemv = 0, kAttention = 1, kMerge = 2 };

/// One op of the chain. kGemv: y = act(norm(x) . W^T) (+ residual).
/// kAttention: task (head h, key block s) streams that block's cached keys
/// and values and writes softmax partials (max, sum, weighted values) of
/// q_h against them. kMerge: task h merges head h's partials with the new
/// key and value (from the q/k/v output) into out.
struct ChainOp {
  int kind;
  const __half *w;       // [N, K], neuron-major
  const float *x;        // [K]; attention: q (the q/k/v output)
  const float *residual; // [N] or null
  float *y;              // [N]; attention: the partials; merge: out
  int K, N;
  int rows;  // rows a task (R): a slot of rows, or 1 row over several slots
  int slots; // slots a task
  int tasks; // ceil(N / rows); attention: heads x blocks; merge: heads
  int relu;
  int norm; // layer norm of x (scale 1, bias 0, epsilon 1e-5)
  // Attention and merge.
  const float *pastK, *pastV; // [heads, P, D]
  const float *partial;       // merge: the attention's partials
  int heads, D, P, split, blocks;
  float scale;
};

__device__ __forceinline__ int loadAcquire(const int *p) {
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ void consumerSync() {
  asm volatile("bar.sync 1, %0;" ::"n"(kConsumers) : "memory");
}

/// Sum over the consumer warps (red: 8 floats of shared memory).
__device__ __forceinline__ float consumerSum(float v, float *red) {
#pragma unroll
  for (int o = 16; o; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5;
  consumerSync();
  if ((threadIdx.x & 31) == 0)
    red[warp] = v;
  consumerSync();
  float s = 0;
#pragma unroll
  for (int i = 0; i < kConsumers / 32; ++i)
    s += red[i];
  return s;
}

/// The pieces (one ring slot each) of task t: their count, and piece p's
/// source and size. The producer and the consumers walk the same list.
struct Piece {
  const void *src;
  uint32_t bytes;
};
__device__ __forceinline__ int attnKeys(const ChainOp &op, int t) {
  const int k0 = (t % op.blocks) * op.split;
  return min(op.split, op.P - k0);
}
__device__ __forceinline__ int pieceCount(const ChainOp &op, int t) {
  if (op.kind == kGemv)
    return op.slots;
  if (op.kind == kMerge)
    return 0;
  const int bytes = attnKeys(op, t) * op.D * 4;
  return 2 * ((bytes + kSlotBytes - 1) / kSlotBytes);
}
__device__ __forceinline__ Piece piece(const ChainOp &op, int t, int p) {
  if (op.kind == kGemv) {
    const int row0 = t * op.rows, rows = min(op.rows, op.N - row0);
    const size_t taskBytes = size_t(rows) * op.K * 2;
    const size_t off = size_t(p) * kSlotBytes;
    const size_t n = taskBytes - off < kSlotBytes ? taskBytes - off : kSlotBytes;
    return {reinterpret_cast<const char *>(op.w + size_t(row0) * op.K) + off,
            uint32_t(n)};
  }
  const int h = t / op.blocks, k0 = (t % op.blocks) * op.split;
  const int bytes = attnKeys(op, t) * op.D * 4;
  const int half = (bytes + kSlotBytes - 1) / kSlotBytes;
  const float *base = p < half ? op.pastK : op.pastV;
  const int q = p < half ? p : p - half;
  const int off = q * kSlotBytes;
  return {reinterpret_cast<const char *>(base + (size_t(h) * op.P + k0) * op.D) + off,
          uint32_t(min(kSlotBytes, bytes - off))};
}

/// After the block's last task of an op has written its outputs: every
/// consumer passes the barrier, then one thread publishes (release) that
/// the block is done with the op.
__device__ __forceinline__ void publish(int *counter) {
  consumerSync();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1);
  }
}

/// The block's attention tasks: (head h, key block) against the cached
/// keys and values that the producer streams into the ring. Partials:
/// [heads, blocks, 2 + D] = max score, sum of exp, sum of exp * v.
__device__ void attentionTasks(const ChainOp &op, int j, int *done,
                               unsigned char *ring, uint64_t *full,
                               uint64_t *empty, int slotsInRing, uint32_t &it,
                               float *xs) {
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int D = op.D, keysPerSlot = kSlotBytes / (D * 4);
  float *q = xs, *scores = xs + 256, *acc = xs + 512, *stats = xs + 1024;
  // The next `half` pieces of the ring (the task's keys, or its values),
  // each shared by all warps: body(slot, p, n) with n keys in piece p,
  // then the slot is released once every warp is done with it.
  auto sharedPieces = [&](int half, int nk, auto &&body) {
    for (int p = 0; p < half; ++p, ++it) {
      const SlotOf so = slotOf(it, slotsInRing);
      const int s = so.slot;
      mbarWait(full + s, so.parity);
      body(reinterpret_cast<const float *>(ring + size_t(s) * kSlotBytes), p,
           min(keysPerSlot, nk - p * keysPerSlot));
      consumerSync(); // every warp is done with the slot
      if (tid == 0)
        mbarArrive(empty + s);
    }
  };
  for (int t = blockIdx.x; t < op.tasks; t += gridDim.x) {
    const int h = t / op.blocks, nk = attnKeys(op, t);
    const int half = pieceCount(op, t) / 2;
    for (int d = tid; d < D; d += kConsumers)
      q[d] = __ldcg(op.x + size_t(h) * D + d) * op.scale;
    consumerSync();
    // Keys: warp w scores keys w, w + 8, ... of each slot.
    sharedPieces(half, nk, [&](const float *slot, int p, int n) {
      for (int k = warp; k < n; k += kConsumers / 32) {
        float v = 0;
        for (int d = lane; d < D; d += 32)
          v += slot[k * D + d] * q[d];
#pragma unroll
        for (int o = 16; o; o >>= 1)
          v += __shfl_xor_sync(0xffffffffu, v, o);
        if (lane == 0)
          scores[p * keysPerSlot + k] = v;
      }
    });
    consumerSync();
    if (warp == 0) {
      float m = -INFINITY;
      for (int k = lane; k < nk; k += 32)
        m = fmaxf(m, scores[k]);
#pragma unroll
      for (int o = 16; o; o >>= 1)
        m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
      float l = 0;
      for (int k = lane; k < nk; k += 32) {
        float e = __expf(scores[k] - m);
        scores[k] = e;
        l += e;
      }
#pragma unroll
      for (int o = 16; o; o >>= 1)
        l += __shfl_xor_sync(0xffffffffu, l, o);
      if (lane == 0) {
        stats[0] = m;
        stats[1] = l;
      }
    }
    consumerSync();
    // Values: thread (g, d) adds keys g, g + G, ... of each slot.
    const int groups = kConsumers / D, g = tid / D, d = tid % D;
    float a = 0;
    sharedPieces(half, nk, [&](const float *slot, int p, int n) {
      if (g < groups)
        for (int k = g; k < n; k += groups)
          a += scores[p * keysPerSlot + k] * slot[k * D + d];
    });
    if (g < groups)
      acc[g * D + d] = a;
    consumerSync();
    float *out = op.y + size_t(t) * (2 + D);
    if (tid < D) {
      float sum = 0;
      for (int i = 0; i < groups; ++i)
        sum += acc[i * D + tid];
      out[2 + tid] = sum;
    }
    if (tid == 0) {
      out[0] = stats[0];
      out[1] = stats[1];
    }
    consumerSync(); // q, scores and acc are rewritten by the next task
  }
  publish(done + j);
}

/// The block's merge tasks: head h's partials and its new key and value
/// (k and v of the q/k/v output, after q) into out[h * D ...].
__device__ void mergeTasks(const ChainOp &op, int j, int *done, float *red) {
  const int tid = threadIdx.x, D = op.D, d = tid < D ? tid : 0;
  const size_t width = size_t(op.heads) * D;
  for (int t = blockIdx.x; t < op.tasks; t += gridDim.x) {
    const float *q = op.x + size_t(t) * D;
    const float *kNew = op.x + width + size_t(t) * D;
    const float *vNew = op.x + 2 * width + size_t(t) * D;
    float part = tid < D ? __ldcg(q + d) * __ldcg(kNew + d) : 0.0f;
    const float sNew = consumerSum(part, red) * op.scale;
    const float *pt = op.partial + size_t(t) * op.blocks * (2 + D);
    float m = sNew;
    for (int i = 0; i < op.blocks; ++i)
      m = fmaxf(m, __ldcg(pt + i * (2 + D)));
    float l = __expf(sNew - m), num = l * (tid < D ? __ldcg(vNew + d) : 0.0f);
    for (int i = 0; i < op.blocks; ++i) {
      const float *pi = pt + i * (2 + D);
      const float e = __expf(__ldcg(pi) - m);
      l += __ldcg(pi + 1) * e;
      num += tid < D ? __ldcg(pi + 2 + d) * e : 0.0f;
    }
    if (tid < D)
      op.y[size_t(t) * D + d] = num / l;
  }
  publish(done + j);
}

__global__ void __launch_bounds__(kThreadsAll, 1)
    chainKernel(const ChainOp *__restrict__ ops, int numOps, int *done,
                int slotsInRing, int maxK) {
  extern __shared__ __align__(128) unsigned char smem[];
  unsigned char *ring = smem;
  float *xs = reinterpret_cast<float *>(smem + size_t(slotsInRing) * kSlotBytes);
  float *rowSum = xs + maxK;       // kMaxRowSums floats
  float *red = rowSum + kMaxRowSums; // 8 floats (16 reserved)
  uint64_t *full = reinterpret_cast<uint64_t *>(red + 16);
  uint64_t *empty = full + slotsInRing;
  const int tid = threadIdx.x, G = gridDim.x, b = blockIdx.x;

  if (tid == 0) {
    for (int s = 0; s < slotsInRing; ++s) {
      mbarInit(full + s, 1);
      mbarInit(empty + s, 1);
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  for (int i = tid; i < kMaxRowSums; i += blockDim.x)
    rowSum[i] = 0;
  __syncthreads();

  if (tid >= kConsumers) {
    // Producer: one thread walks the same (op, task, slot) sequence as the
    // consumers and fills the ring as far ahead as it has room.
    if (tid != kConsumers)
      return;
    uint32_t it = 0;
    for (int j = 0; j < numOps; ++j) {
      const ChainOp op = ops[j];
      for (int t = b; t < op.tasks; t += G) {
        const int pieces = pieceCount(op, t);
        for (int p = 0; p < pieces; ++p, ++it) {
          const SlotOf so = slotOf(it, slotsInRing);
          const int s = so.slot;
          mbarWait(empty + s, so.parity ^ 1);
          const Piece pc = piece(op, t, p);
          mbarExpectTx(full + s, pc.bytes);
          bulkCopy(ring + size_t(s) * kSlotBytes, pc.src, pc.bytes, full + s);
        }
      }
    }
    return;
  }

  // Consumers.
  const int lane = tid & 31, warp = tid >> 5;
  uint32_t it = 0;
  for (int j = 0; j < numOps; ++j) {
    const ChainOp op = ops[j];
    if (b >= op.tasks)
      continue;
    if (j > 0) {
      if (tid == 0) {
        // Every block with a task of the previous op publishes once.
        const int need = min(G, ops[j - 1].tasks);
        long spins = 0;
        while (loadAcquire(done + j - 1) < need)
          if (++spins > (1l << 26))
            __trap(); // a block that never ran: not all blocks resident
      }
      consumerSync();
    }
    if (op.kind == kAttention) {
      attentionTasks(op, j, done, ring, full, empty, slotsInRing, it, xs);
      continue;
    }
    if (op.kind == kMerge) {
      mergeTasks(op, j, done, red);
      continue;
    }
    // x into shared memory (L2 reads: other SMs wrote it), normalised.
    for (int k = tid * 4; k < op.K; k += kConsumers * 4)
      *reinterpret_cast<float4 *>(xs + k) =
          __ldcg(reinterpret_cast<const float4 *>(op.x + k));
    consumerSync();
    if (op.norm) {
      float s = 0;
      for (int k = tid; k < op.K; k += kConsumers)
        s += xs[k];
      const float mean = consumerSum(s, red) / float(op.K);
      float q = 0;
      for (int k = tid; k < op.K; k += kConsumers) {
        float v = xs[k] - mean;
        q += v * v;
      }
      const float rstd = rsqrtf(consumerSum(q, red) / float(op.K) + 1e-5f);
      for (int k = tid; k < op.K; k += kConsumers)
        xs[k] = (xs[k] - mean) * rstd;
      consumerSync();
    }
    const int chunksPerRow = op.K / 8;
    int local = 0; // the block's task number within the op
    for (int t = b; t < op.tasks; t += G, ++local) {
      const int row0 = t * op.rows;
      const int rows = min(op.rows, op.N - row0);
      // Each slot is one warp's (the ring's pieces dealt round the warps):
      // the warp sums the row segments in it and adds each to its row.
      for (int p = 0; p < op.slots; ++p, ++it) {
        if (int(it % kWarps) != warp)
          continue;
        const SlotOf so = slotOf(it, slotsInRing);
        const int s = so.slot;
        mbarWait(full + s, so.parity);
        const uint4 *slot =
            reinterpret_cast<const uint4 *>(ring + size_t(s) * kSlotBytes);
        const int e0 = p * (kSlotBytes / 16); // first chunk of the piece
        const int n = min(kSlotBytes / 16, rows * chunksPerRow - e0);
        for (int c0 = 0; c0 < n;) {
          const int r = (e0 + c0) / chunksPerRow;
          const int end = min(n, (r + 1) * chunksPerRow - e0);
          // x at chunk c of the piece (c in [c0, end)): xr + c * 8.
          const float *xr = xs + (e0 - r * chunksPerRow) * 8;
          // Four independent sums (two a chunk, two chunks a step).
          float acc0 = 0, acc1 = 0, acc2 = 0, acc3 = 0;
          auto dot = [&](int c, float &sa, float &sb) {
            uint4 wv = slot[c];
            const __half2 *h = reinterpret_cast<const __half2 *>(&wv);
            float4 x0 = *reinterpret_cast<const float4 *>(xr + c * 8);
            float4 x1 = *reinterpret_cast<const float4 *>(xr + c * 8 + 4);
            float2 w0 = __half22float2(h[0]), w1 = __half22float2(h[1]);
            float2 w2 = __half22float2(h[2]), w3 = __half22float2(h[3]);
            sa = fmaf(w0.x, x0.x, sa);
            sb = fmaf(w2.x, x1.x, sb);
            sa = fmaf(w0.y, x0.y, sa);
            sb = fmaf(w2.y, x1.y, sb);
            sa = fmaf(w1.x, x0.z, sa);
            sb = fmaf(w3.x, x1.z, sb);
            sa = fmaf(w1.y, x0.w, sa);
            sb = fmaf(w3.y, x1.w, sb);
          };
          int c = c0 + lane;
#pragma unroll 2
          for (; c + 32 < end; c += 64) {
            dot(c, acc0, acc1);
            dot(c + 32, acc2, acc3);
          }
          if (c < end)
            dot(c, acc0, acc1);
          float acc = (acc0 + acc1) + (acc2 + acc3);
#pragma unroll
          for (int o = 16; o; o >>= 1)
            acc += __shfl_xor_sync(0xffffffffu, acc, o);
          if (lane == 0)
            atomicAdd(rowSum + local * op.rows + r, acc);
          c0 = end;
        }
        __syncwarp();
        if (lane == 0)
          mbarArrive(empty + s);
      }
      (void)row0;
    }
    // The epilogue of every row the block summed, then one publication.
    consumerSync();
    for (int i = tid; i < local * op.rows; i += kConsumers) {
      const int n = (b + (i / op.rows) * G) * op.rows + i % op.rows;
      float v = rowSum[i];
      rowSum[i] = 0;
      if (n >= op.N)
        continue;
      if (op.relu)
        v = fmaxf(v, 0.0f);
      if (op.residual)
        v += __ldcg(op.residual + n);
      op.y[n] = v;
    }
    publish(done + j);
    (void)warp;
  }
}

struct Shape {
  const char *name;
  int d, layers;
};

constexpr int kPast = 191;     // cached positions (the new one is the 192nd)
constexpr int kKeyBlock = 64;  // keys a persistent attention task

/// One shape: the runtime's chain against the persistent kernel, with the
/// attention (whole layers but the cache append) or without (the GEMVs and
/// norms alone; the out projection reads the v part of q/k/v).
bool runShape(const Shape &sh, bool attention, int layersArg, int slotsArg,
              double readBw, int sms) {
  const int d = sh.d, f = 4 * d, L = layersArg > 0 ? layersArg : sh.layers;
  const int heads = 32, D = d / heads, P = kPast;
  const size_t layerW = size_t(3) * d * d + size_t(d) * d + 2 * size_t(f) * d;
  const size_t cacheN = size_t(heads) * P * D; // floats of K (or V) a layer
  __half *w = alloc<__half>(layerW * L);
  fillKernel<<<2048, 256, 0, stream>>>(w, layerW * L, 7, 1.0f / std::sqrt(float(d)));
  float *cache = nullptr;
  if (attention) {
    cache = alloc<float>(2 * cacheN * L);
    fillKernel<<<2048, 256, 0, stream>>>(cache, 2 * cacheN * L, 11, 1.0f);
  }
  CHECK_CUDA(cudaGetLastError());
  std::vector<float> x0(d);
  for (int i = 0; i < d; ++i)
    x0[i] = std::sin(0.37f * i) + 0.1f * (i % 7);
  float *dX0 = upload(x0);
  // Buffers: residual stream ping-pong, q/k/v, the attention's output, h
  // (after attention), the FFN's hidden vector, the chain's normalised x,
  // the persistent attention's partials.
  const int keyBlocks = (P + kKeyBlock - 1) / kKeyBlock;
  float *xa = alloc<float>(d), *xb = alloc<float>(d), *qkv = alloc<float>(3 * d),
        *att = alloc<float>(d), *h = alloc<float>(d), *a = alloc<float>(f),
        *xn = alloc<float>(d),
        *partials = alloc<float>(size_t(heads) * keyBlocks * (2 + D));
  std::vector<float> ones(d, 1.0f), zeros(d, 0.0f);
  float *dOnes = upload(ones), *dZeros = upload(zeros);
  struct LayerW {
    const __half *q, *o, *up, *down;
    const float *k, *v;
  };
  auto weights = [&](int l) {
    LayerW r;
    r.q = w + size_t(l) * layerW;
    r.o = r.q + size_t(3) * d * d;
    r.up = r.o + size_t(d) * d;
    r.down = r.up + size_t(f) * d;
    r.k = attention ? cache + size_t(2 * l) * cacheN : nullptr;
    r.v = attention ? r.k + cacheN : nullptr;
    return r;
  };
  const float scale = 1.0f / std::sqrt(float(D));
  DecodeAttention da;
  da.q = qkv;
  da.k = qkv + d;
  da.v = qkv + 2 * d;
  da.B = 1;
  da.Hq = da.Hk = heads;
  da.Sq = da.Sk = 1;
  da.P = P;
  da.D = da.Dv = D;
  da.scale = scale;
  da.out = att;
  da.pastReady = true; // a runtime cache, as a decode step has it
  float *scratch = nullptr;
  int *counters = nullptr;
  if (attention) {
    scratch = alloc<float>(decodeAttentionScratchBytes(da) / 4 + 1);
    counters = alloc<int>(size_t(decodeAttentionRows(da)));
    CHECK_CUDA(cudaMemsetAsync(counters, 0, sizeof(int) * decodeAttentionRows(da),
                               stream));
  }
  const auto kNone = sparsec::rt::ops::Activation::none;
  const auto kRelu = sparsec::rt::ops::Activation::relu;

  // The runtime's chain, every kernel early. Layer l reads x_l (xa for even
  // l) and writes x_{l+1}; the first layer reads x0.
  auto chain = [&]() {
    for (int l = 0; l < L; ++l) {
      LayerW W = weights(l);
      const float *in = l == 0 ? dX0 : (l % 2 ? xb : xa);
      float *out = l % 2 ? xa : xb;
      normRows(in, 1, d, dOnes, dZeros, 1e-5f, false, xn, stream, true);
      const __half *w3[] = {W.q, W.q + size_t(d) * d, W.q + size_t(2) * d * d};
      const int n3[] = {d, d, d};
      float *y3[] = {qkv, qkv + d, qkv + 2 * d};
      gemvRowsGroup<__half>(xn, 1, d, 3, w3, n3, nullptr, kNone, nullptr, y3,
                            stream, true);
      const float *outIn = qkv + 2 * d;
      if (attention) {
        DecodeAttention al = da;
        al.pastK = W.k;
        al.pastV = W.v;
        decodeAttention(al, scratch, counters, stream, true);
        outIn = att;
      }
      gemvRows<__half>(outIn, 1, W.o, d, d, nullptr, kNone, in, h, stream, true);
      normRows(h, 1, d, dOnes, dZeros, 1e-5f, false, xn, stream, true);
      gemvRows<__half>(xn, 1, W.up, d, f, nullptr, kRelu, nullptr, a, stream,
                       true);
      gemvRows<__half>(a, 1, W.down, f, d, nullptr, kNone, h, out, stream, true);
    }
  };

  // The persistent kernel's op list (same buffers and weights).
  std::vector<ChainOp> hops;
  auto gemv = [&](const __half *wt, const float *x, const float *res,
                  float *y, int K, int N, int relu, int norm) {
    ChainOp op{};
    op.kind = kGemv;
    op.w = wt;
    op.x = x;
    op.residual = res;
    op.y = y;
    op.K = K;
    op.N = N;
    const int rowBytes = 2 * K;
    op.rows = rowBytes <= kSlotBytes ? kSlotBytes / rowBytes : 1;
    op.slots = rowBytes <= kSlotBytes ? 1 : rowBytes / kSlotBytes;
    op.tasks = (N + op.rows - 1) / op.rows;
    op.relu = relu;
    op.norm = norm;
    hops.push_back(op);
  };
  for (int l = 0; l < L; ++l) {
    LayerW W = weights(l);
    const float *in = l == 0 ? dX0 : (l % 2 ? xb : xa);
    float *out = l % 2 ? xa : xb;
    gemv(W.q, in, nullptr, qkv, d, 3 * d, 0, 1);
    const float *outIn = qkv + 2 * d;
    if (attention) {
      ChainOp op{};
      op.kind = kAttention;
      op.x = qkv;
      op.y = partials;
      op.pastK = W.k;
      op.pastV = W.v;
      op.heads = heads;
      op.D = D;
      op.P = P;
      op.split = kKeyBlock;
      op.blocks = keyBlocks;
      op.scale = scale;
      op.tasks = heads * keyBlocks;
      hops.push_back(op);
      op.kind = kMerge;
      op.partial = partials;
      op.y = att;
      op.tasks = heads;
      hops.push_back(op);
      outIn = att;
    }
    gemv(W.o, outIn, in, h, d, d, 0, 0);
    gemv(W.up, h, nullptr, a, d, f, 1, 1);
    gemv(W.down, a, h, out, f, d, 0, 0);
  }
  ChainOp *dOps = upload(hops);
  int *done = alloc<int>(hops.size());
  const int maxK = f;
  int optin = 0;
  CHECK_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
  const size_t fixed = size_t(maxK) * 4 + (kMaxRowSums + 16) * 4 + 64;
  // What the kernel assumes of the ops.
  for (const ChainOp &op : hops) {
    bool fits = true;
    if (op.kind == kGemv)
      fits = op.K % 256 == 0 && (2 * op.K <= kSlotBytes || 2 * op.K % kSlotBytes == 0) &&
             (op.tasks + sms - 1) / sms * op.rows <= kMaxRowSums && op.K <= maxK;
    else
      fits = kSlotBytes % (4 * op.D) == 0 && op.D % 32 == 0 && op.D <= 128 &&
             op.split <= 256;
    if (!fits) {
      std::fprintf(stderr, "error: an op the persistent kernel does not handle\n");
      return false;
    }
  }
  int perSm = 0;
  int slots = int((size_t(optin) - fixed - 2 * 8 * 32) / kSlotBytes);
  if (slotsArg > 0 && slotsArg < slots)
    slots = slotsArg;
  slots -= slots % kWarps; // whole slots a consumer warp
  if (slots < kWarps) {
    std::fprintf(stderr, "error: --slots takes at least %d\n", kWarps);
    return false;
  }
  const size_t smemBytes = size_t(slots) * kSlotBytes + fixed + size_t(slots) * 16;
  CHECK_CUDA(cudaFuncSetAttribute(chainKernel,
                                  cudaFuncAttributeMaxDynamicSharedMemorySize,
                                  int(smemBytes)));
  // Blocks wait for each other: all of them must be resident at once.
  CHECK_CUDA(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm, chainKernel,
                                                           kThreadsAll, smemBytes));
  if (perSm < 1) {
    std::fprintf(stderr, "error: the persistent kernel does not fit an SM\n");
    return false;
  }
  auto persistent = [&]() {
    CHECK_CUDA(cudaMemsetAsync(done, 0, sizeof(int) * hops.size(), stream));
    chainKernel<<<sms, kThreadsAll, smemBytes, stream>>>(
        dOps, int(hops.size()), done, slots, maxK);
    CHECK_CUDA(cudaGetLastError());
  };

  // Layer l writes xb for even l: the last layer's output.
  float *last = L % 2 ? xb : xa;
  chain();
  std::vector<float> ref = download(last, d);
  std::vector<float> refAtt = download(att, d);
  // Every buffer the persistent kernel writes starts as NaN, so a value it
  // fails to write cannot pass for the chain's.
  for (auto [p, n] : {std::pair<float *, size_t>{xa, size_t(d)}, {xb, size_t(d)},
                      {qkv, size_t(3 * d)}, {att, size_t(d)}, {h, size_t(d)},
                      {a, size_t(f)},
                      {partials, size_t(heads) * keyBlocks * (2 + D)}})
    CHECK_CUDA(cudaMemsetAsync(p, 0xff, sizeof(float) * n, stream));
  persistent();
  std::vector<float> got = download(last, d);
  auto finite = [](const std::vector<float> &v) {
    for (float x : v)
      if (!std::isfinite(x))
        return false;
    return true;
  };
  const double err = finite(got) ? relErr(got, ref) : INFINITY;
  std::vector<float> gotAtt = download(att, d);
  const double errAtt =
      !attention ? 0.0 : finite(gotAtt) ? relErr(gotAtt, refAtt) : INFINITY;

  bool g1, g2;
  const double tChain = timeUs(chain, g1, 4);
  const double tPers = timeUs(persistent, g2, 4);
  const double bytes = 2.0 * double(layerW) * L + (attention ? 8.0 * cacheN * L : 0.0);
  const char *what = attention ? "whole layers" : "GEMVs + norms";
  auto row = [&](const char *kernels, double us) {
    std::printf("| %s | %s | %s | %d | %.1f | %.1f | %.2f | %.2f | %.0f %% |\n",
                sh.name, what, kernels, L, bytes / 1e6 / L, us, us / L,
                bytes / (us * 1e6), 100.0 * bytes / (us * 1e3) / readBw);
  };
  row("runtime kernels, early launches", tChain);
  char name[96];
  std::snprintf(name, sizeof name, "one persistent kernel, %d slots of %d KB",
                slots, kSlotBytes / 1024);
  row(name, tPers);
  const bool ok = err < 1e-3 && errAtt < 1e-3;
  std::printf("| %s | %s | relative error against the runtime's | | | | %.1e (attention %.1e) | | %s |\n",
              sh.name, what, err, errAtt, ok ? "ok" : "FAILED");
  std::fflush(stdout);
  cudaFree(w);
  if (cache)
    cudaFree(cache);
  return ok && g1 && g2;
}

} // namespace

int main(int argc, char **argv) {
  std::string shape = "both";
  int layers = 0, slots = 0;
  if (!Options("sparsec-bench-persistent-chain")
           .add("--shape", shape)
           .add("--layers", layers)
           .add("--slots", slots)
           .parse(argc, argv))
    return 1;
  if (shape != "1.3b" && shape != "6.7b" && shape != "both") {
    std::fprintf(stderr, "error: --shape takes 1.3b, 6.7b or both\n");
    return 1;
  }
  cudaDeviceProp prop;
  cublasHandle_t blas;
  cusparseHandle_t sp;
  setUp(prop, blas, sp);
  const double readBw = readBandwidth(prop); // GB/s
  std::printf("%s, %d SMs; read bandwidth %.0f GB/s (a reduction over 4 GiB)\n\n",
              prop.name, prop.multiProcessorCount, readBw);
  std::printf("| shape | ops | kernels | layers | MB a layer | us all | us a layer | TB/s | of read bw |\n"
              "|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  bool ok = true;
  for (bool attention : {false, true}) {
    if (shape != "6.7b")
      ok &= runShape({"1.3b", 2048, 24}, attention, layers, slots, readBw,
                     prop.multiProcessorCount);
    if (shape != "1.3b")
      ok &= runShape({"6.7b", 4096, 32}, attention, layers, slots, readBw,
                     prop.multiProcessorCount);
  }
  return ok ? 0 : 1;
}
