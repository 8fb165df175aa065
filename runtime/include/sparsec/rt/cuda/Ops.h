//===- Ops.h - the CUDA op library generated code calls ---------*- C++ -*-===//
//
// Part of the sparsec project.
//
// The device half of a `--target cuda` model. The emitter places every
// value either on the host or on the device: weights and everything
// computed from them or from other device values live on the device; the
// integer shape and mask arithmetic that ONNX exports carry stays on the
// host (the x86 ops in sparsec/rt/Ops.h), and a host value a device op
// reads is uploaded once per step through a pinned staging buffer
// (`upload`). Device ops mirror the host ops' contracts (same shapes,
// broadcasting and errors) and allocate their results in device slots
// numbered like the host slots. Activations are float32 on the device;
// linear, sparse and predictor weights may be float16 (fp32 accumulation).
//
// A step (`runStep`) never synchronises the host with the device until its
// outputs are downloaded at the end. The first step with a new input
// signature (dtypes and shapes) runs eagerly; the second is captured into a
// CUDA graph; later ones replay it: host ops and uploads still run (they
// write the same pinned buffers), device ops only recompute their output
// views, and the graph is launched once. If a replayed step would allocate
// differently from the captured one, it is rerun eagerly. A hybrid step,
// whose host waits for copies of device values (`waitHost`) to compute its
// CPU parts, is captured as one graph per stretch of GPU work between
// those waits: each is launched when the host reaches the next wait (or
// the end), so the GPU part of an FFN still runs beside its CPU part.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_RT_CUDA_OPS_H
#define SPARSEC_RT_CUDA_OPS_H

#include "sparsec/rt/Ops.h"
#include "sparsec/rt/Runtime.h"

namespace sparsec::rt::cuda {

/// The generated body of one step: inputs are host tensors, outputs must be
/// downloaded (`download`) or host values.
using StepFn = bool (*)(Context &ctx, const Tensor *inputs, Tensor *outputs);

/// Runs one step of `body` on the device of `ctx` (creating the device
/// state and uploading the weights on first use), with CUDA graphs as
/// described above (disabled by SPARSEC_CUDA_GRAPHS=0).
bool runStep(Context &ctx, const Tensor *inputs, Tensor *outputs, StepFn body);

/// Weight segment `index` on the device (uploaded once per context).
Tensor weight(Context &ctx, uint32_t index, DType dtype, int rank,
              const int64_t *shape);

/// Copies host tensor `x` to the device buffer of upload site `site`.
bool upload(Context &ctx, const Tensor &x, int site, Tensor &out);
/// Copies device tensor `x` into the pinned host buffer of output `index`
/// (valid once the step has finished).
bool download(Context &ctx, const Tensor &x, int index, Tensor &out);

/// Hybrid models: starts copying device tensor `x` (as soon as the work
/// queued so far has produced it) into the pinned host buffer of copy site
/// `site`, on a copy stream, so the model's stream goes on with the GPU
/// part; `out` views the host buffer, valid after waitHost(site), which
/// ends the current graph segment of a captured or replayed step.
bool toHost(Context &ctx, const Tensor &x, int site, Tensor &out);
bool waitHost(Context &ctx, int site);

/// A set of neuron indices on the device (the union over the step's tokens)
/// produced by `predict` or `nonzeroIndex` and read by the sparse kernels.
struct IndexSet {
  int site = -1;  // the emitter's index site (device buffers)
  int neurons = 0;
  int tokens = 0; // rows the set was built for
  /// The set of the non-zeros of the input of the sparseLinearInput that
  /// reads it, built by that call (nonzeroIndex only reserves it).
  bool fromInput = false;
  /// The set is also a list in the site's list buffers (predict writes it).
  bool listed = false;
};

/// How an input-side sparse linear runs above a decode batch (the
/// compiler's sparsec-pit-tile choice, docs/GPU.md): PIT micro-tiles of
/// `tile` tokens (8, 16 or 32; 0: the dense GEMM) with `columns` output
/// columns a block (0: pitMatmul's default; 128 or 256, Pit.h).
struct PitPlan {
  int tile = 0;
  int columns = 0;
};

//===----------------------------------------------------------------------===//
// Dense ops (float32 activations)
//===----------------------------------------------------------------------===//

bool unary(Context &ctx, ops::Unary op, const Tensor &x, int outSlot,
           Tensor &out);
bool binary(Context &ctx, ops::Binary op, const Tensor &a, const Tensor &b,
            int outSlot, Tensor &out);
/// Float32 operands, broadcast; the result is a device bool tensor (b1),
/// which `where` reads.
bool compare(Context &ctx, ops::Compare op, const Tensor &a, const Tensor &b,
             int outSlot, Tensor &out);
bool where(Context &ctx, const Tensor &cond, const Tensor &x, const Tensor &y,
           int outSlot, Tensor &out);
/// w [K, N] float32 or float16; decode-sized inputs (at most 8 rows) use a
/// fused GEMV, larger ones cuBLAS with a bias/activation epilogue.
bool linear(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
            ops::Activation act, int outSlot, Tensor &out);
/// The same over a neuron-major weight w [N, K] (what the compiler packs
/// for device linears): decode-sized inputs use gemvRows (DenseDecode.h),
/// whose blocks stream whole weight rows; larger ones cuBLAS. `residual`
/// (same shape as the result, or null; act must then be none above 8 rows)
/// is added after the activation: the emitter folds `add(linear, r)` here.
bool linearNK(Context &ctx, const Tensor &x, const Tensor &w,
              const Tensor *bias, ops::Activation act, const Tensor *residual,
              int outSlot, Tensor &out);
/// `count` (at most 4) linears over the same x with neuron-major weights
/// w[g] [N_g, K], biases bias[g] (bias or an entry null: none) and one
/// activation; result g takes slot outSlots[g] and goes to out[g]. With
/// `normScale` (and `normBias`, or null), x is first normalised over its
/// last dimension: a layer norm, or an RMS norm (`normRms`), with
/// `normEpsilon` (the compiler folds the norm that feeds the group). At
/// most 8 rows of x with weights of one dtype: one gemvRowsGroup launch,
/// which also applies the norm (with per-weight folding terms made by the
/// first eager call); otherwise, and in a capture that finds no folding
/// terms, the norm kernel writes the normalised rows to a scratch buffer
/// first (then one linear after the other above 8 rows, with cuBLAS).
bool linearGroupNK(Context &ctx, const Tensor &x, const Tensor *normScale,
                   const Tensor *normBias, float normEpsilon, bool normRms,
                   int count, const Tensor *const *w,
                   const Tensor *const *bias, ops::Activation act,
                   const int *outSlots, Tensor *out);
bool matmul(Context &ctx, const Tensor &a, const Tensor &b, int outSlot,
            Tensor &out);
bool layerNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor *bias, int64_t axis, float epsilon, int outSlot,
               Tensor &out);
bool rmsNorm(Context &ctx, const Tensor &x, const Tensor &scale, float epsilon,
             int outSlot, Tensor &out);
bool softmax(Context &ctx, const Tensor &x, int64_t axis, int outSlot,
             Tensor &out);
/// ops::rotary over float32 device tensors.
bool rotary(Context &ctx, const Tensor &x, const Tensor &cos, const Tensor &sin,
            int outSlot, Tensor &out);
/// A batch norm applied in a convolution's epilogue (ops::ConvNorm).
using ops::ConvNorm;
/// N-d convolution, NCHW, float32 (1 to 3 spatial dims, groups, pads,
/// strides, dilations, as ops::conv): a depthwise one (one input channel
/// per group) directly, a pointwise one without stride or padding as a
/// cuBLAS GEMM over the input in place, any other as im2col into a device
/// buffer and a (batched over groups or images) cuBLAS GEMM; the bias,
/// `norm` (or null) and `act` in one epilogue pass (the depthwise kernel's
/// own).
bool conv(Context &ctx, const Tensor &x, const Tensor &w, const Tensor *bias,
          const int64_t *strides, const int64_t *pads, const int64_t *dilations,
          int64_t group, const ConvNorm *norm, ops::Activation act, int outSlot,
          Tensor &out);
/// Inference batch normalisation over axis 1, `act` applied to each value.
bool batchNorm(Context &ctx, const Tensor &x, const Tensor &scale,
               const Tensor &bias, const Tensor &mean, const Tensor &var,
               float epsilon, ops::Activation act, int outSlot, Tensor &out);
/// Max / average pooling, 1-3 spatial dims (kernel == nullptr: global), with
/// ops::pool's semantics (NaN propagates through max; average excludes
/// padding unless countIncludePad).
bool pool(Context &ctx, ops::Pool kind, const Tensor &x, const int64_t *kernel,
          const int64_t *strides, const int64_t *pads, bool countIncludePad,
          int outSlot, Tensor &out);
/// Sum / mean / max / min over axes that are adjacent once size-1 dims are
/// dropped (a trailing block such as a CNN's spatial dims, or a middle
/// one); float32. naxes == 0 reduces over all dims.
bool reduce(Context &ctx, ops::Reduce kind, const Tensor &x, int naxes,
            const int64_t *axes, bool keepdims, int outSlot, Tensor &out);
/// ops::attention on the device: present = concat(past, new) written
/// first, then the decode kernel (a few query rows) or the prompt's.
bool attention(Context &ctx, const Tensor &q, const Tensor &k, const Tensor &v,
               const Tensor *mask, const Tensor *pastK, const Tensor *pastV,
               float scale, bool causal, ops::HeadLayout layout, int outSlot,
               Tensor &out, int presentKSlot, Tensor *presentK,
               int presentVSlot, Tensor *presentV);
/// `ids` is a host tensor (checked on the host, then uploaded at `site`).
bool embedding(Context &ctx, const Tensor &table, const Tensor &ids, int site,
               int outSlot, Tensor &out);
/// table[ids] + table2[ids2] in one kernel (tables of one type and width,
/// ids of one shape, each uploaded at its site): a decoder's token and
/// position embeddings (sparsec-fuse-embedding-sum).
bool embedding(Context &ctx, const Tensor &table, const Tensor &ids, int site,
               const Tensor &table2, const Tensor &ids2, int site2,
               int outSlot, Tensor &out);

/// A view of x with the new shape (no copy; the memory plan keeps x live as
/// long as the view). `outSlot` is the slot the plan gave the result.
bool reshapeTo(Context &ctx, const Tensor &x, int rank, const int64_t *shape,
               int outSlot, Tensor &out);
/// `shape` is a host int64 tensor.
bool reshape(Context &ctx, const Tensor &x, const Tensor &shape, bool allowzero,
             int outSlot, Tensor &out);
bool transpose(Context &ctx, const Tensor &x, const int64_t *perm, int outSlot,
               Tensor &out);
bool concat(Context &ctx, int n, const Tensor *const *inputs, int64_t axis,
            int outSlot, Tensor &out);
/// starts/ends/axes/steps are host tensors.
bool slice(Context &ctx, const Tensor &data, const Tensor &starts,
           const Tensor &ends, const Tensor &axes, const Tensor &steps,
           int outSlot, Tensor &out);
/// ONNX Expand: x broadcast to the host int64 `shape` (bidirectionally, as
/// ONNX's), as a copy.
bool expand(Context &ctx, const Tensor &x, const Tensor &shape, int outSlot,
            Tensor &out);

//===----------------------------------------------------------------------===//
// Activation sparsity (decode: at most 8 tokens use the neuron-granular
// kernels of SparseDecode.h; more tokens take the dense path)
//===----------------------------------------------------------------------===//

/// Predicted mask (b1 [..., N]) and, for decode-sized inputs, the union
/// index set of the predicted neurons.
bool predict(Context &ctx, const Tensor &x, const Tensor &w1, const Tensor &w2,
             const Tensor *bias, float threshold, int indexSite, int outSlot,
             Tensor &out, IndexSet &index);
/// Output-side sparse linear: computes the neurons of `index` (every
/// token computes the union of the tokens' predicted neurons: a superset of
/// its own, so never less accurate); larger inputs compute densely and
/// apply the per-token mask `active`. Fills `outIndex` with the computed
/// neurons for the down projection.
bool sparseLinearOutput(Context &ctx, const Tensor &x, const Tensor &w,
                        const Tensor *bias, const Tensor &active,
                        const IndexSet &index, ops::Activation act,
                        int outSlot, Tensor &out, IndexSet &outIndex);
/// The mask of a gated MLP's gate x: x > 0 (`positive`, after a ReLU) or
/// x != 0, as bytes of x's shape (b1), and for decode-sized inputs the
/// union index set of its neurons (last dim), in one kernel. The up
/// projection over that mask (sparseLinearOutput) computes the set's
/// neurons and hands the set on to the down projection after the product.
bool gateMask(Context &ctx, const Tensor &x, bool positive, int indexSite,
              int outSlot, Tensor &out, IndexSet &index);
/// A gated MLP after its gate mask (gateMask: `mask`, `index`): up =
/// sparseLinearOutput(x, wUp, bUp, mask, index) into upSlot, prod = gate *
/// up into prodSlot, out = sparseLinearInput(prod, wDown, bDown, pit)
/// (+ residual) into outSlot. A decode step launches three kernels: the up
/// projection over the set, which also writes out's base (bias, residual)
/// and the set as a list, the product, and the down projection over that
/// list; up outside the set is left unwritten (only the product reads it,
/// and the down projection reads only the set's rows of the product).
/// Other calls, and memory the fast path cannot share, run the three ops.
bool gatedFfn(Context &ctx, const Tensor &x, const Tensor &gate,
              const Tensor &mask, const IndexSet &index, const Tensor &wUp,
              const Tensor *bUp, int upSlot, Tensor &up, int prodSlot,
              Tensor &prod, const Tensor &wDown, const Tensor *bDown,
              PitPlan pit, const Tensor *residual, int outSlot, Tensor &out);
/// The index set of x's non-zero neurons (last dim, any token) for the
/// sparseLinearInput over x that follows: that call builds it, in the kernel
/// that also writes the base of its result, so this launches nothing.
bool nonzeroIndex(Context &ctx, const Tensor &x, int indexSite,
                  IndexSet &index);
/// Input-side sparse linear over the rows of `index` (which must cover
/// x's non-zero neurons), plus `residual` (x's rows by N, or null: a
/// residual add folded in). Inputs of more than a decode batch run as `pit`
/// says (PIT micro-tiles, whose epilogue adds the bias and the residual,
/// when the weight is fp16 or bf16) where PIT's grid fills the GPU
/// (pitFillsGpu; SPARSEC_CUDA_PIT), else the dense GEMM with the residual
/// as its C. SPARSEC_PIT_SORTED=1 makes the PIT index order deterministic
/// (sorted).
bool sparseLinearInput(Context &ctx, const Tensor &x, const Tensor &w,
                       const Tensor *bias, const IndexSet &index, PitPlan pit,
                       const Tensor *residual, int outSlot, Tensor &out);
/// An FFN over a predicted set: h = sparseLinearOutput(x, wUp, bUp, active,
/// index, act) into hSlot, then out = sparseLinearInput(h, wDown, bDown,
/// pit) (+ residual) into outSlot. A decode step launches two kernels: the up
/// projection over the set, which also writes out's base (bias, residual),
/// then the down projection over the same set; h outside the set is left
/// unwritten (only the down projection reads it). Other calls run the two
/// ops as above.
bool sparseFfn(Context &ctx, const Tensor &x, const Tensor &wUp,
               const Tensor *bUp, const Tensor &active, const IndexSet &index,
               ops::Activation act, int hSlot, const Tensor &wDown,
               const Tensor *bDown, PitPlan pit, const Tensor *residual,
               int outSlot, Tensor &out, Tensor &h);
/// predict (into maskSlot: `mask`, `index`) followed by the sparseFfn over
/// its set, for an FFN whose predictor reads the up projection's input x:
/// a decode step of 1 or 2 tokens launches predictUp (the predictor's
/// selection and the up projection in one kernel) and the down projection,
/// three kernels instead of four; other decode steps run predict and
/// sparseFfn. More rows than a decode batch, or a run marked
/// Context::exactFfn, compute the FFN exactly without the predictor (the
/// up GEMM, then sparseLinearInput over its zeros), leaving `mask` and
/// `index` unwritten; SPARSEC_CUDA_BATCHED_PREDICT=1 runs predict and
/// sparseFfn there too.
bool predictFfn(Context &ctx, const Tensor &x, const Tensor &w1,
                const Tensor &w2, const Tensor *pBias, float threshold,
                int indexSite, int maskSlot, Tensor &mask, IndexSet &index,
                const Tensor &wUp, const Tensor *bUp, ops::Activation act,
                int hSlot, const Tensor &wDown, const Tensor *bDown,
                PitPlan pit, const Tensor *residual, int outSlot, Tensor &out,
                Tensor &h);
/// A layer norm (or, with `rms`, an RMS norm: normBias unused) of normIn
/// over dims [axis, rank) into normSlot (`x`) followed by predictFfn over
/// x, for a norm whose only readers are the predictor and the up
/// projection: a decode step of 1 or 2 tokens launches predictUp with the
/// norm in its hidden-vector kernel (which writes x) and the down
/// projection, three kernels instead of four, where the shapes allow
/// (predictUpNormFits); anything else runs the norm and then predictFfn.
/// SPARSEC_CUDA_NORM_FUSE=0 keeps the norm's own kernel.
bool predictFfnNorm(Context &ctx, const Tensor &normIn, const Tensor &scale,
                    const Tensor *normBias, int64_t axis, float epsilon,
                    bool rms, int normSlot, Tensor &x, const Tensor &w1,
                    const Tensor &w2, const Tensor *pBias, float threshold,
                    int indexSite, int maskSlot, Tensor &mask, IndexSet &index,
                    const Tensor &wUp, const Tensor *bUp, ops::Activation act,
                    int hSlot, const Tensor &wDown, const Tensor *bDown,
                    PitPlan pit, const Tensor *residual, int outSlot,
                    Tensor &out, Tensor &h);

} // namespace sparsec::rt::cuda

#endif // SPARSEC_RT_CUDA_OPS_H
