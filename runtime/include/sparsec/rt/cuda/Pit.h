//===- Pit.h - PIT micro-tiled sparse matmul kernels ------------*- C++ -*-===//
//
// Part of the sparsec project.
//
// y = act(x . W + bias) (+ residual) for many tokens (prefill, batches)
// when x [M, K] is activation-sparse, in PIT's permutation-invariant form:
// the rows of x are cut into blocks of `tile` tokens and, per block, the
// micro-tiles (tile tokens x 1 neuron) that hold a non-zero are found and
// gathered into a dense operand; the product is then dense tensor-core
// work over the gathered reduction axis only. Two kernels:
//
//   pitSRead   flags every column with a non-zero in a token block's rows,
//              compacts the flagged columns into idx and gathers their
//              values, rounded to W's 16-bit type (fp16 or bf16), into
//              xg [block][j][tile] (k-major, so the
//              compute kernel stages them with 16-byte copies). Default:
//              a wide grid (token block x 256 columns) whose warps append
//              with one atomic each (any order, the same set); `sorted`
//              (deterministic): one block of threads per token block
//              placing the columns by a prefix sum over its flags, with
//              the same wide loads and no count to clear beforehand.
//   pitMatmul  one block per (token block, 128 or 256 output columns): a
//              cp.async pipeline (2-4 stages; by default 2 at 128 columns,
//              where 8 blocks fit an SM, 3 at 16-token tiles) stages 32
//              gathered rows of W
//              (whole row segments of the k-major W [K, N]) and the
//              matching xg rows in shared memory, zero-filling past the
//              set (with 2 stages a set of up to 2 chunks is copied at
//              once); mma.sync m16n8k16 (fp16 or bf16 in, fp32
//              accumulation) through
//              ldmatrix (4 warps of 32 columns; at 32-token tiles with the
//              default pipeline 2 warps of 64); the epilogue goes through
//              shared memory so every
//              store is a coalesced 16-byte write (fp16 outputs without a
//              residual at 8- and 16-token tiles: each warp its own
//              columns, stored by stmatrix, with no block barrier). By
//              default, where the
//              grid stays large enough, a block sweeps several output
//              blocks of its token block (pitSweepTiles), reading the set
//              once and keeping a short set's x in shared memory.
//
// Because the micro-tile spans the reduction axis, the output tile is
// dense: SWrite is the direct (coalesced) store of each block's rows.
// Nothing is synchronised with the host (counts stay on the device), so a
// step with PIT matmuls can be captured into a CUDA graph.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_PIT_H
#define SPARSEC_RT_CUDA_PIT_H

#include "sparsec/rt/Ops.h"

#include <cstddef>
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <string>

namespace sparsec::rt::cuda {

/// Gathered columns are processed in chunks of this.
constexpr int kPitChunk = 32;

/// Micro-tile heights (tokens x 1 neuron) the kernels are built for.
inline bool pitTileSupported(int tile) {
  return tile == 8 || tile == 16 || tile == 32;
}
/// Token blocks of M rows.
inline int64_t pitBlocks(int64_t M, int tile) { return (M + tile - 1) / tile; }
/// Per-block capacity of idx / xg: K rounded up to kPitChunk.
inline int64_t pitCapacity(int64_t K) {
  return (K + kPitChunk - 1) / kPitChunk * kPitChunk;
}
/// Device buffers one PIT matmul needs: idx [blocks, capacity] int32,
/// count [blocks] int32, xg [blocks, capacity, tile] of 16-bit values in
/// W's type (__half or __nv_bfloat16: pitSRead's E).
struct PitWorkspace {
  int32_t *idx = nullptr;
  int32_t *count = nullptr;
  void *xg = nullptr;
};
size_t pitIdxBytes(int64_t M, int64_t K, int tile);
size_t pitCountBytes(int64_t M, int tile);
size_t pitGatherBytes(int64_t M, int64_t K, int tile);

/// Whether pitMatmul handles this problem: a supported tile, N a multiple
/// of 8 (16-byte rows), W 16-byte aligned, K and N at most 2^30 and at
/// most 65535 token blocks. (y and residual must be 16-byte aligned too:
/// pitMatmul checks them.)
bool pitSupported(int64_t M, int64_t K, int64_t N, int tile, const void *w);

/// SRead: builds ws.idx / ws.count / ws.xg from x [M, K] (X: float or
/// __half), the gathered values rounded to nearest even in E, the type of
/// the W that pitMatmul then multiplies (__half, the default, or
/// __nv_bfloat16: pitSRead<__nv_bfloat16>(x, ...)). Rows past M count as
/// zero. With `early` a sorted SRead is a
/// programmatic dependent launch (docs/GPU.md): its launch overlaps the
/// kernel before it, and it waits for that kernel before reading x.
template <typename E = __half, typename X>
cudaError_t pitSRead(const X *x, int64_t M, int64_t K, int tile, bool sorted,
                     const PitWorkspace &ws, cudaStream_t stream,
                     bool early = false);

/// y [M, N] = act(xg . W[idx] + bias) + residual, W [K, N] of E (__half
/// or __nv_bfloat16, the type pitSRead gathered xg in), bias [N]
/// fp32 or null, residual [M, N] fp32 or null (may alias y only when Y is
/// float). Y: float or __half. `columns` (128 or 256) is the output columns
/// per block; 0 picks 128. `stages` (2 to 4) is the depth
/// of the cp.async pipeline: fewer stages take less shared memory, so more
/// blocks run on an SM, which pays when the gathered sets are short (high
/// micro-tile sparsity); 0 picks 2 for 128 columns (3 at 16-token tiles
/// where no sweep runs) and 4 for 256. With `stages` and `sweep` 0 and
/// `columns` 0 or 128, 32-token tiles take warpgroup MMAs where
/// pitWarpgroupMma() says so; with `columns` 256 there, two warpgroups a
/// block (faster than 128 columns where the gathered sets are long,
/// slower at 99 % micro-tile sparsity: docs/GPU.md).
/// `early`: a programmatic dependent launch, as pitSRead's.
/// `sweep` > 1: each block computes that many 128-column output blocks of
/// its token block in turn (128 columns, 2 stages; other settings are
/// refused), reading the set's count and row numbers once and, for a set
/// of at most 2 chunks, its gathered x once (W's rows are copied again for
/// each output block, after the previous one's epilogue). 1: no sweep.
/// 0 (the default): pitSweepTiles' choice where `columns` is 0 or 128 and
/// `stages` 0 (none for the warpgroup-MMA default), no sweep otherwise.
template <typename Y, typename E>
cudaError_t pitMatmul(const PitWorkspace &ws, int64_t M, int64_t K, const E *w,
                      int64_t N, int tile, const float *bias,
                      ops::Activation act, const float *residual, Y *y,
                      cudaStream_t stream, int columns = 0, int stages = 0,
                      bool early = false, int sweep = 0);

/// Whether pitMatmul's default at 32-token tiles (`columns` 0 or 128,
/// `stages` and `sweep` 0) multiplies on Hopper's warpgroup MMAs (4 warps of
/// 32 columns, 2 stages, no sweep; the runtime's sm_90a code): where they
/// are available (pitWarpgroupMmaAvailable: compute capability 9.0) and
/// neither setPitWarpgroupMma(false) nor, without a setPitWarpgroupMma
/// call, SPARSEC_CUDA_PIT_MMA=sync (read at the first query; docs/GPU.md)
/// has turned them off: on by default. Otherwise that
/// default is the mma.sync kernel of 2 warps of 64 columns, swept.
/// Process-wide, not thread-safe.
bool pitWarpgroupMma();
bool pitWarpgroupMmaAvailable();
void setPitWarpgroupMma(bool on);

/// The output blocks a block sweeps when pitMatmul picks (its `sweep` 0)
/// for an M x N product with `tile`-token micro-tiles on a GPU of
/// `multiprocessors` SMs: the largest of 8 (16-token tiles), 4 (32) or 2
/// (8), halved while the grid would hold fewer than 6 blocks an SM, down
/// to 1 (no sweep). On the H200 at 4096^3 these are the fastest sweeps at
/// 90-99 % micro-tile sparsity (docs/GPU.md, "Sweeps").
int pitSweepTiles(int64_t M, int64_t N, int tile, int multiprocessors);

/// Measures, on the current GPU, what the compiler's PIT cost model needs
/// (`sparsec tune --target cuda` runs this): for an m x k x n problem with
/// fp32 activations, the dense path (fp16 conversion + cuBLAS) and, per
/// tile and micro-tile density, pitSRead and pitMatmul at 128 and at 256
/// output columns a block (each width its own series); writes the latency
/// table (JSON, format in lib/Dialect/Sparsec/Transforms/PitTile.cpp) to
/// `path`. Progress goes to stderr. False with `error` set on failure.
bool pitTune(const std::string &path, int64_t m, int64_t k, int64_t n,
             std::string &error);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_PIT_H
