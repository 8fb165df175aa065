//===- Passes.td - sparsec graph passes --------------------*- tablegen -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_TRANSFORMS_PASSES_TD
#define SPARSEC_DIALECT_SPARSEC_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Raise phase
//===----------------------------------------------------------------------===//

def InferShapesPass : Pass<"sparsec-infer-shapes", "mlir::ModuleOp"> {
  let summary = "Refine dynamic result dimensions from operand shapes";
  let description = [{
    Walks every function in order and, for each op implementing
    `InferShapedTypeOpInterface`, replaces a result type by the inferred one
    where the inferred type is more static and compatible. Function result
    types follow the returned values. With `dims`, named dynamic input
    dimensions are first pinned to constants (specialization), e.g.
    `dims=batch=1,seq=71` makes every `?` that comes from those inputs
    static. Before:
    ```mlir
    %0 = sparsec.transpose %x {permutation = array<i64: 1, 0>}
         : tensor<2x3xf32> -> tensor<?x?xf32>
    ```
    After:
    ```mlir
    %0 = sparsec.transpose %x {permutation = array<i64: 1, 0>}
         : tensor<2x3xf32> -> tensor<3x2xf32>
    ```
  }];
  let options = [
    ListOption<"dims", "dims", "std::string",
               "Pin named input dimensions: name=value (names come from the "
               "sparsec.dim_names argument attribute)">,
  ];
  let statistics = [
    Statistic<"numRefined", "num-refined", "Number of result types refined">,
  ];
}

def FoldConstantsPass : Pass<"sparsec-fold-constants", "mlir::ModuleOp"> {
  let summary = "Evaluate shape, mask and position arithmetic on constants";
  let description = [{
    Runs the sparsec folders to a fixed point, interleaved with shape
    inference so that a folded shape vector makes the ops it feeds static,
    and erases dead ops. Folding is bounded to small tensors (shape math);
    weights are never materialised. Before:
    ```mlir
    %s = sparsec.shape %x : tensor<1x71x256xf32> -> tensor<3xi64>
    ```
    After:
    ```mlir
    %s = sparsec.constant dense<[1, 71, 256]> : tensor<3xi64>
    ```
  }];
  let statistics = [
    Statistic<"numFolded", "num-folded", "Number of ops folded away">,
  ];
}

def GatherToSlicePass : Pass<"sparsec-gather-to-slice", "mlir::ModuleOp"> {
  let summary = "Gather of a constant run of indices -> sparsec.slice";
  let description = [{
    A gather whose indices are a constant run of consecutive positions (a
    1-D run, or one scalar index) selects a slice of its axis: exporters
    write `x[..., [i], :]` (Falcon's fused q/k/v projection picking its one
    key and value head) and `x[..., i, :]` so. The gather becomes a slice,
    followed for a scalar index by a squeeze of the axis. Negative indices
    count from the end; a run mixing signs needs the axis's size. Only
    floating-point data is rewritten (integer gathers are shape arithmetic).
    ```mlir
    %k = sparsec.gather %qkv, %c {axis = 2 : i64} : tensor<?x?x6x4xf32>, tensor<1xi64> -> tensor<?x?x1x4xf32>
    ```
    with `%c = dense<[-2]>` becomes
    ```mlir
    %k = sparsec.slice %qkv, %start, %end, %axes, %steps : (...) -> tensor<?x?x1x4xf32>
    ```
    with starts [4], ends [5], axes [2] and steps [1] (the size 6 is known).
  }];
  let dependentDialects = ["::sparsec::SparsecDialect"];
}

def GroupKVHeadsPass : Pass<"sparsec-group-kv-heads", "mlir::ModuleOp"> {
  let summary = "Keys and values broadcast over their group's query heads -> grouped-query attention";
  let description = [{
    Falcon-40B's layout splits its fused projection into `[B, S, G, R + 2,
    D]` (G groups of R query heads with one key and one value head each)
    and broadcasts each group's key and value over its R query heads
    (Expand) before the head transpose and the rotary embedding, so the
    attention, and a cache `sparsec-derive-kv-cache` makes for it, would
    hold R copies of every key and value head. Where an attention without
    a past reads keys and values of that form,
    ```mlir
    %e = sparsec.expand %k5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
    %r = sparsec.reshape %e, %c : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
    %t = sparsec.transpose %r {permutation = array<i64: 0, 2, 1, 3>} : ...
    %k = sparsec.rotary %t, %cos, %sin : ...
    ```
    and the broadcast provably keeps the batch and sequence dims (its
    shape a constant of 1s there, or the shape of a slice of the same data
    as the keys, cut on neither dim: Falcon's `broadcast_to(key,
    query.shape)`), it reads the G groups instead (`squeeze` of the unit axis, the head
    transpose, and the rotary over the G heads; its tables must not vary
    by head): grouped-query attention, each key/value head serving R
    consecutive query heads, exactly the heads the broadcast made. An
    attention with a past is a KV-cache export's, whose cache interface
    holds every head, and is left alone; a remark says how many such
    attentions cache all heads and how few the export without a cache
    would (compiled with `--kv-cache`).
  }];
  let dependentDialects = ["::sparsec::SparsecDialect"];
}

def WidenHalfPass : Pass<"sparsec-widen-half", "mlir::ModuleOp"> {
  let summary = "Run float16/bfloat16 matrix products and attention in float32";
  let description = [{
    The runtimes' linear, linear_group, matmul, conv and attention kernels
    compute in float32 (a linear may read a float16 weight as it is). For a
    model exported in half precision, each such op gets its half-precision
    operands cast to float32 and its half-precision results cast back, so
    the rest of the graph keeps the model's types (elementwise ops, norms,
    softmax, reshapes and lookups take float16 as it is). With `all`, every
    half-precision value becomes float32 instead, the function's inputs and
    outputs included.
    ```mlir
    %y = sparsec.matmul %a, %b : tensor<2x4xf16>, tensor<4x3xf16> -> tensor<2x3xf16>
    ```
    becomes
    ```mlir
    %a32 = sparsec.cast %a : tensor<2x4xf16> -> tensor<2x4xf32>
    %b32 = sparsec.cast %b : tensor<4x3xf16> -> tensor<4x3xf32>
    %y32 = sparsec.matmul %a32, %b32 : ... -> tensor<2x3xf32>
    %y = sparsec.cast %y32 : tensor<2x3xf32> -> tensor<2x3xf16>
    ```
  }];
  let dependentDialects = ["::sparsec::SparsecDialect"];
  let options = [
    Option<"all", "all", "bool", "false",
           "Widen every half-precision value instead: inputs, outputs, "
           "constants and weights become float32 (weights converted when "
           "packed, transform \"widen\"), except float16 weights read only "
           "by linears; the model is then a float32 model throughout (the "
           "CUDA target, and the sparsity passes, need that)">,
  ];
  let statistics = [
    Statistic<"numWidened", "num-widened",
              "Ops run in float32 (with all: values and weights widened)">,
  ];
}

def RaiseEmbeddingPass : Pass<"sparsec-raise-embedding", "mlir::ModuleOp"> {
  let summary = "Gather from a 2-D weight along axis 0 -> sparsec.embedding";
  let description = [{
    Before:
    ```mlir
    %t = sparsec.weight @emb : tensor<256x64xf32>
    %e = sparsec.gather %t, %ids {axis = 0 : i64} : ... -> tensor<?x?x64xf32>
    ```
    After:
    ```mlir
    %e = sparsec.embedding %t, %ids : ... -> tensor<?x?x64xf32>
    ```
  }];
  let dependentDialects = ["::sparsec::SparsecDialect"];
}

def FuseLinearPass : Pass<"sparsec-fuse-linear", "mlir::ModuleOp"> {
  let summary = "MatMul by a 2-D weight (+ bias) -> sparsec.linear";
  let description = [{
    Recognises `matmul(x, W)` with `W` a 2-D weight, optionally followed by
    an `add` of a 1-D weight bias (either operand order), and replaces it
    by one `sparsec.linear`. Before:
    ```mlir
    %m = sparsec.matmul %x, %w : ... -> tensor<?x?x1024xf32>
    %y = sparsec.add %b, %m : tensor<1024xf32>, ... -> tensor<?x?x1024xf32>
    ```
    After:
    ```mlir
    %y = sparsec.linear %x, %w, %b : ... -> tensor<?x?x1024xf32>
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "Number of linear ops formed">,
  ];
}

def FuseLayerNormPass : Pass<"sparsec-fuse-layer-norm", "mlir::ModuleOp"> {
  let summary = "Decomposed LayerNorm / RMSNorm -> sparsec.layer_norm / rms_norm";
  let description = [{
    Recognises the exported decomposition
    `(x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * g + b` over the last
    axis (and `x / sqrt(mean(x^2) + eps) * g` for RMSNorm). Before:
    ```mlir
    %m = sparsec.reduce mean, %x {axes = array<i64: -1>, keepdims = true} ...
    %d = sparsec.sub %x, %m ...
    %p = sparsec.pow %d, %two ...
    %v = sparsec.reduce mean, %p {axes = array<i64: -1>, keepdims = true} ...
    %a = sparsec.add %v, %eps ...
    %s = sparsec.sqrt %a ...
    %n = sparsec.div %d, %s ...
    %y = sparsec.mul %n, %g ...
    %z = sparsec.add %y, %b ...
    ```
    After:
    ```mlir
    %z = sparsec.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f32} ...
    ```
  }];
  let dependentDialects = ["::sparsec::SparsecDialect"];
  let statistics = [
    Statistic<"numFused", "num-fused", "Number of normalisations formed">,
  ];
}

def FuseEmbeddingSumPass : Pass<"sparsec-fuse-embedding-sum", "mlir::ModuleOp"> {
  let summary = "add of two embedding lookups -> one sparsec.embedding";
  let description = [{
    A decoder's input is the sum of its token and position embeddings: two
    lookups, each a kernel on a GPU, and an add. Where both lookups are
    used only by that add, have its type, read f32 tables and run on the
    same device, they become one lookup of both tables. Before:
    ```mlir
    %t = sparsec.embedding %tok, %ids : ... -> tensor<?x?x768xf32>
    %p = sparsec.embedding %pos, %positions : ... -> tensor<?x?x768xf32>
    %x = sparsec.add %t, %p : ...
    ```
    After:
    ```mlir
    %x = sparsec.embedding %tok, %ids plus %pos, %positions : ...
    ```
    Runs in the schedule phase, after the passes that read the separate
    lookups (the KV-cache derivation finds the position embedding).
  }];
}

def BoundPositionsPass : Pass<"sparsec-bound-positions", "mlir::ModuleOp"> {
  let summary = "The longest sequence a decoder's position tables hold";
  let description = [{
    A decoder's position embedding is a lookup whose ids the model computes
    from the attention mask and the input shapes (OPT: `cumsum(mask) * mask
    - 1 + 2`), so a sequence longer than its table reads past it. For each
    lookup whose ids are computed (not an input), this pass evaluates the
    ids' computation at concrete lengths S (the prompt alone, S tokens; and,
    where the model takes `past_key_values.*`, one new token after S - 1
    cached ones), with the input shapes pinned and the shape arithmetic
    folded, the mask's values in [0, 1] and every value an interval.
    The largest S at which every such lookup stays inside its table (ONNX
    ids: -rows <= id < rows) is recorded on the module, with the table that
    bounds it, and reported as a remark:
    ```mlir
    module attributes {sparsec.positions = {limit = 1024 : i64,
        rows = 1026 : i64, table = "pos.weight"}} { ... }
    ```
    `generate` takes the limit as its default `--max-seq-len` and refuses a
    larger one. Lookups whose ids the intervals cannot bound (an input
    `position_ids`, an op the evaluation does not know) bound nothing.
  }];
}

def FuseGeluPass : Pass<"sparsec-fuse-gelu", "mlir::ModuleOp"> {
  let summary = "Erf-form GELU -> sparsec.gelu";
  let description = [{
    Recognises `x * 0.5 * (1 + erf(x / sqrt(2)))` in its exported orders
    (also with the multiplication by `1/sqrt(2)`). Before:
    ```mlir
    %d = sparsec.div %x, %sqrt2 ...
    %e = sparsec.erf %d ...
    %a = sparsec.add %e, %one ...
    %m = sparsec.mul %x, %a ...
    %y = sparsec.mul %m, %half ...
    ```
    After:
    ```mlir
    %y = sparsec.gelu %x ...
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "Number of gelu ops formed">,
  ];
}

def FuseRotaryPass : Pass<"sparsec-fuse-rotary", "mlir::ModuleOp"> {
  let summary = "x * cos + rotate_half(x) * sin -> sparsec.rotary";
  let description = [{
    Recognises the rotate-half rotary embedding of LLaMA-style exports:
    the halves of `x`'s last dimension (two slices, or one split), the
    second negated and concatenated before the first, times `sin`, plus
    `x * cos`, multiplications and the sum in either operand order. Six
    elementwise ops (and their intermediate tensors) become one. Before:
    ```mlir
    %a = sparsec.slice %x, %c0, %h, %last, %one ...
    %b = sparsec.slice %x, %h, %end, %last, %one ...
    %n = sparsec.neg %b ...
    %r = sparsec.concat %n, %a {axis = -1 : i64} ...
    %p = sparsec.mul %x, %cos ...
    %q = sparsec.mul %r, %sin ...
    %y = sparsec.add %p, %q ...
    ```
    After:
    ```mlir
    %y = sparsec.rotary %x, %cos, %sin ...
    ```
    The interleaved form (GPT-J's rotate-every-two) and partial rotary
    (over a slice of the head) are left as they are.
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "Number of rotary ops formed">,
  ];
}

def FuseAttentionPass : Pass<"sparsec-fuse-attention", "mlir::ModuleOp"> {
  let summary = "Score matmul, mask, softmax, context matmul -> sparsec.attention";
  let description = [{
    Recognises `softmax(q . transpose(k) [* s] [+ mask]) . v` over
    `[B, H, S, D]` tensors, absorbs a scalar scale applied to `q` before
    the head split, and folds `concat(past, new)` keys/values (the KV-cache
    export convention) into the op's `past` operands and `present`
    results. Keys and values repeated over groups of query heads
    (grouped-query attention, exported as LLaMA's repeat_kv: unsqueeze at
    axis 2, expand, reshape) are taken before the repeat, with their
    cache: the op reads each key/value head for its group. Before:
    ```mlir
    %kt = sparsec.transpose %k {permutation = array<i64: 0, 1, 3, 2>} ...
    %s = sparsec.matmul %q, %kt ...
    %sm = sparsec.add %s, %mask ...
    %p = sparsec.softmax %sm {axis = -1 : i64} ...
    %o = sparsec.matmul %p, %v ...
    ```
    After:
    ```mlir
    %o = sparsec.attention %q, %k, %v mask %mask {scale = 1.0 : f32} ...
    ```
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "Number of attention ops formed">,
  ];
}

//===----------------------------------------------------------------------===//
// Sparsify phase
//===----------------------------------------------------------------------===//

def InstrumentSparsityPass : Pass<"sparsec-instrument-sparsity",
                                  "mlir::ModuleOp"> {
  let summary = "Count active neurons at every ReLU-family site feeding a linear";
  let description = [{
    The profiling build of a model: after each relu/gelu/silu whose result
    is the input of a linear op, inserts a `sparsec.profile_count` naming the
    site after the activation's ONNX node. Sites are numbered in program
    order; the module gets `sparsec.profile_sites` (their names). Before:
    ```mlir
    %r = sparsec.relu %h : tensor<?x1024xf32>
    %y = sparsec.linear %r, %w : ...
    ```
    After:
    ```mlir
    %r = sparsec.relu %h : tensor<?x1024xf32>
    sparsec.profile_count %r {index = 0 : i64, site = "/layers.0/Relu"} : tensor<?x1024xf32>
    %y = sparsec.linear %r, %w : ...
    ```
  }];
  let statistics = [
    Statistic<"numSites", "num-sites", "Number of profiled sites">,
  ];
}

def AnnotateSparsityPass : Pass<"sparsec-annotate-sparsity", "mlir::ModuleOp"> {
  let summary = "Attach measured activation sparsity from a .sprof profile";
  let description = [{
    For every profiled site (a ReLU-family activation feeding a linear,
    named by its ONNX node), attaches
    `#sparsec.act_sparsity<zero_fraction, granularity = neuron,
    source = profile, tokens, top20_share>` as the op's `sparsity`
    attribute. `zero_fraction` is the share of (token, neuron) pairs that
    were zero; `top20_share` the share of all activations carried by the
    20 % most frequently active neurons. The profile must come from the same
    model (its model hash is checked) and cover every site with the same
    neuron count. Before:
    ```mlir
    %r = sparsec.relu %h : tensor<?x1024xf32> loc("/layers.0/Relu")
    ```
    After:
    ```mlir
    %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.83,
         granularity = neuron, source = profile, tokens = 4096, top20_share = 0.31>}
    ```
  }];
  let options = [
    Option<"profile", "profile", "std::string", "\"\"",
           "Path of the .sprof file">,
  ];
  let statistics = [
    Statistic<"numAnnotated", "num-annotated", "Number of sites annotated">,
  ];
}

def InsertPredictorsPass : Pass<"sparsec-insert-predictors", "mlir::ModuleOp"> {
  let summary = "Train DejaVu-style predictors and make FFN up projections sparse";
  let description = [{
    For every FFN `act(linear(x, W, b))` whose site has sampled
    (layer input, active mask) pairs in the profile, trains a rank-`r`
    classifier `(x . w1) . w2 + bias > 0` (the best rank-`r` approximation
    of the pre-activation on the samples, with a per-neuron margin set on a
    calibration split to reach `target-recall`), for each rank of `ranks`
    (default d/16, d/8, d/4, d/2), and keeps the one with the fewest
    multiply-adds per token (predictor + up and down projections over the
    predicted neurons). When even that is not cheaper than exact mode, the
    FFN is left alone (with a remark). For the hybrid target (`gpu-budget`
    > 0), the share of the FFN weights that cannot fit the budget (after
    every other weight, the KV caches and the workspace, counted as the
    placement counts them) will be read by the CPU, `cpu-cost` times slower per row: the up and down row
    reads of both modes are weighted by `(1 - share) + share * cpu-cost`
    (the predictor itself runs on the GPU), so that a predictor which only
    halves the rows read pays for itself once those rows are on the CPU. Otherwise the up projection becomes a
    `sparse_linear {sparse_dim = output, mode = predicted}` driven by a
    `sparsec.predict` whose weights are new globals holding the trained
    data. Weights come from the model's weight store (`sparsec.source`) or
    from a global's inline `value`. The predict op records its quality on
    held-out samples in `sparsec.predictor`. Before:
    ```mlir
    %h = sparsec.linear %x, %w, %b : ...
    %r = sparsec.relu %h {sparsity = ...} loc("/layers.0/Relu")
    ```
    After:
    ```mlir
    %m = sparsec.predict %x, %w1, %w2, %pb {sparsec.predictor = {rank = 64 : i64,
         recall = 0.99, ...}} : (...) -> tensor<?x?x1024xi1>
    %h = sparsec.sparse_linear %x, %w, %b active %m {mode = #sparsec<sparse_mode predicted>,
         sparse_dim = #sparsec<sparse_dim output>} : ...
    ```
    In a gated MLP the predicted set drives the gate projection; the up
    projection then reads the rows of the actual gate's non-zero neurons
    (sparsec-sparsify-ffn), which both modes' costs count. With
    `compound-sites=false` gated MLPs and squared activations get no
    predictor (a remark says so).
  }];
  let options = [
    Option<"profile", "profile", "std::string", "\"\"",
           "Path of the .sprof file (with samples)">,
    Option<"compound", "compound-sites", "bool", "true",
           "Train predictors for the gates of gated MLPs and for squared "
           "activations too">,
    Option<"targetRecall", "target-recall", "double", "0.999",
           "Share of active neurons the predictor must find (calibration split)">,
    ListOption<"ranks", "ranks", "int64_t",
               "Predictor ranks to try (default: d/16, d/8, d/4, d/2)">,
    Option<"gpuBudget", "gpu-budget", "int64_t", "0",
           "Hybrid target: GPU bytes granted (0: everything on the GPU). The "
           "weights that do not fit are taken out of the FFNs, and that share "
           "of each FFN's row reads is weighted by cpu-cost">,
    Option<"weightBytes", "weight-bytes", "int64_t", "2",
           "Hybrid target: bytes per weight element on the GPU">,
    Option<"cpuCost", "cpu-cost", "double", "1.0",
           "Hybrid target: cost of a weight row read on the CPU relative to "
           "the GPU (GPU over CPU bandwidth)">,
    Option<"maxSeqLen", "max-seq-len", "int64_t", "2048",
           "Hybrid target: tokens the KV cache must hold (as the placement)">,
    Option<"workspaceBytes", "workspace-bytes", "int64_t", "67108864",
           "Hybrid target: GPU bytes reserved for activations and workspace">,
  ];
  let statistics = [
    Statistic<"numInserted", "num-inserted", "Number of predictors inserted">,
    Statistic<"numSkipped", "num-skipped", "Number of sites left without one">,
  ];
}

def SparsifyFFNPass : Pass<"sparsec-sparsify-ffn", "mlir::ModuleOp"> {
  let summary = "Rewrite linears fed by a sparse activation into sparse_linear";
  let description = [{
    Exact mode: a `linear` whose input is a profiled ReLU-family activation
    becomes a `sparse_linear {sparse_dim = input, mode = exact}`: the
    kernel skips the rows of the weight whose input neuron is zero, so the
    result equals the dense one. Sites whose measured zero fraction is below
    `min-zero-fraction` (or that carry no measurement) stay dense: the
    sparse kernel would not be faster there. Before:
    ```mlir
    %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, ...>}
    %y = sparsec.linear %r, %w, %b : ...
    ```
    After:
    ```mlir
    %y = sparsec.sparse_linear %r, %w, %b {mode = #sparsec<sparse_mode exact>,
         sparse_dim = #sparsec<sparse_dim input>} : ...
    ```
    A gated MLP, `down(act(gate(x)) * up(x))` (ReLU-fied LLaMA, ProSparse),
    has its down projection made input-sparse the same way (the product is 0
    wherever the gate is), and its up projection output-sparse over the
    neurons whose gate is not 0 (`compare gt %gate, 0` after a ReLU), so
    only the gate projection stays dense:
    ```mlir
    %g = sparsec.relu %hg {sparsity = ...}
    %m = sparsec.compare gt, %g, %zero : ...
    %u = sparsec.sparse_linear %x, %wu active %m {mode = #sparsec<sparse_mode exact>,
         sparse_dim = #sparsec<sparse_dim output>} : ...
    %p = sparsec.mul %g, %u : ...
    %y = sparsec.sparse_linear %p, %wd {... sparse_dim = #sparsec<sparse_dim input>} : ...
    ```
    A squared activation (`mul(%r, %r)` or `pow(%r, c > 0)`, ReLU^2) before
    the down projection makes it input-sparse the same way. With
    `compound-sites=false` gated MLPs and squared activations stay dense,
    with a remark.
  }];
  let options = [
    Option<"minZeroFraction", "min-zero-fraction", "double", "0.5",
           "Keep a site dense below this measured zero fraction">,
    Option<"compound", "compound-sites", "bool", "true",
           "Sparsify gated MLPs (activation(gate) * up, then down) and "
           "squared activations too">,
  ];
  let statistics = [
    Statistic<"numSparse", "num-sparse", "Number of linears made sparse">,
    Statistic<"numDense", "num-dense", "Number of sites kept dense">,
  ];
}

def PitTilePass : Pass<"sparsec-pit-tile", "mlir::ModuleOp"> {
  let summary = "Choose the PIT micro-tile (or dense) for batched sparse linears";
  let description = [{
    For the batched regime (prefill, decode batches above 8 tokens) of each
    input-side `sparse_linear` (an FFN down projection fed by a profiled
    ReLU-family activation), chooses between the dense GPU kernel and PIT
    micro-tiles of 8, 16 or 32 tokens x 1 neuron, and records the choice as
    `pit_tile` (0: dense). The CUDA backend then gathers, per block of
    `pit_tile` tokens, the neurons any of them activates (SRead) and runs
    dense tensor-core tiles over those rows only.

    The cost model: the fraction of active micro-tiles for a block of T
    tokens is estimated from the profile's per-neuron frequencies p as
    mean(1 - (1 - p)^T) (independent tokens: an upper bound when tokens
    that share neurons cluster, so the estimate errs towards dense); the
    time of each choice is read from a latency table measured on the GPU
    (`sparsec tune --target cuda`; the H200 table ships built in), linear in
    the density between measured points, and scaled from the table's
    problem to this op's `tokens` x K x N by the multiply-add count. PIT is
    chosen only when its estimate beats dense by `margin`. Each decision is
    printed as a remark with the densities and estimates. After
    `sparsec-partition-hot-cold` (hybrid builds) the estimate covers the
    GPU part only: the layer's `gpu_neurons` most frequent neurons (none:
    dense, the FFN runs on the CPU).

    Where the table also measures 256 output columns a block (Hopper's
    two-warpgroup kernel at 32-token tiles, docs/GPU.md), each (tile,
    columns) pair is a candidate of its own; choosing 256 records
    `pit_columns = 256` (128, the runtime's default, records nothing).

    `force-tile` skips the model (tests, experiments): 0 keeps every such
    op dense, 8/16/32 uses that tile. `force-columns` (128 or 256) fixes
    the width: every op given a tile records it, and the model considers
    only that width's measurements.
  }];
  let options = [
    Option<"profile", "profile", "std::string", "\"\"",
           "Activation profile (.sprof) with per-neuron counts">,
    Option<"table", "table", "std::string", "\"\"",
           "Latency table from `sparsec tune --target cuda` (default: the "
           "built-in H200 table)">,
    Option<"tokens", "tokens", "int64_t", "512",
           "Tokens per batched call to plan for (the prompt length)">,
    Option<"margin", "margin", "double", "0.9",
           "PIT must be estimated at most this fraction of dense">,
    Option<"forceTile", "force-tile", "int64_t", "-1",
           "Use this tile (0 = dense, 8, 16, 32) for every op; -1: the cost "
           "model">,
    Option<"forceColumns", "force-columns", "int64_t", "0",
           "Output columns a PIT block computes (128, 256) for every op "
           "given a tile; 0: the cost model's choice">,
  ];
  let statistics = [
    Statistic<"numPit", "num-pit", "Sparse linears given a PIT tile">,
    Statistic<"numDense", "num-dense", "Sparse linears kept dense when batched">,
  ];
}

def DeriveKVCachePass : Pass<"sparsec-derive-kv-cache", "mlir::ModuleOp"> {
  let summary = "Incremental decoding for a decoder exported without a KV cache";
  let description = [{
    A decoder LM exported without a cache recomputes every token's keys and
    values at each step. This pass gives each raised `attention` (in block
    order) a past key/value input and a present output, in the Optimum
    naming (`past_key_values.{i}.key/value` arguments `[batch, H, past_seq,
    D]`, `present.{i}.key/value` results), so the model takes only the new
    tokens and the runtime's cache (`model generate`) holds the rest: the
    same interface as a KV-cache export.

    The rest of the model must already follow the tokens' absolute
    positions: the mask must be computed from `attention_mask` (whose
    length is then past + new tokens), as Hugging Face's OPT exports do, or
    the attentions be causal without a mask; the positions must come from
    `attention_mask` or a `position_ids` input (LLaMA-style exports, whose
    rotary angles are computed from it). The pass checks that every
    attention mask depends on `attention_mask`, that every attention is
    masked or causal, and that every embedding lookup other than the token
    one and every sin and cos depend on `attention_mask` or `position_ids`;
    otherwise it fails with the reason (a decoder whose positions come from
    the token count alone would silently restart them at 0).
  }];
  let statistics = [
    Statistic<"numCached", "num-cached", "Attentions given a KV cache">,
  ];
}

def FoldHeadTransposesPass : Pass<"sparsec-fold-head-transposes",
                                  "mlir::ModuleOp"> {
  let summary = "The transposes around an attention folded into its layout";
  let description = [{
    A transformer splits each projection into heads, `[B, S, H, D]`, and
    transposes it to `[B, H, S, D]` for the attention, whose output it
    transposes back before the output projection. On a prompt each of the
    four transposes is a copy of a whole activation. Where an attention's
    query, key and value are all `transpose` with permutation `[0, 2, 1,
    3]` and its result's only use is such a transpose, the attention is
    made `token_major` over the transposes' inputs and its result replaces
    the last transpose; transposes left without uses are erased. Before:
    ```mlir
    %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : ...
    %k = sparsec.transpose %ks {permutation = array<i64: 0, 2, 1, 3>} : ...
    %v = sparsec.transpose %vs {permutation = array<i64: 0, 2, 1, 3>} : ...
    %a = sparsec.attention %q, %k, %v mask %m : ...
    %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : ...
    ```
    After:
    ```mlir
    %o = sparsec.attention %qs, %ks, %vs mask %m {token_major} : ...
    ```
    A query or key that is the `sparsec.rotary` of such a transpose (a
    LLaMA-style layer; its only use the attention) folds too: the rotation
    moves before the head swap, over its cos and sin tables seen
    token-major (`[B, 1, S, D]` transposed to `[B, S, 1, D]`, a view at run
    time; a table that varies by head is left alone). The past and present
    keys and values keep `[B, H, P, D]`. Attentions matched only in part,
    or whose operations are placed on different devices, are left as they
    are.
  }];
  let statistics = [
    Statistic<"numFolded", "num-folded", "Attentions made token-major">,
  ];
}

def PartitionHotColdPass : Pass<"sparsec-partition-hot-cold", "mlir::ModuleOp"> {
  let summary = "Place each FFN's hot neurons on the GPU and the rest on the CPU under a memory budget";
  let description = [{
    For models larger than the GPU memory a user grants (`gpu-budget`
    bytes), decides per FFN how many of its neurons live on the GPU, as
    PowerInfer does, but at compile time and exactly. Neurons are ordered
    hot-first by the profile's per-neuron frequencies and grouped
    (`group-size`); the GPU part of a layer is always a prefix. The budget
    first pays for what must live on the GPU: every weight outside the
    partitioned FFNs' up/down projections (predictors included), the KV
    cache of every attention for `max-seq-len` tokens and `workspace-bytes`;
    a budget below that fails with the minimum needed. The rest is shared
    out by an exact dynamic program (docs/HotCold.md) maximising the
    activation mass (expected active neurons per token) the GPU serves,
    where a layer is either whole on one device or split with at least as
    many GPU neurons as save the CPU `sync-us` of row reads at
    `cpu-bandwidth` GB/s (PowerInfer's communication constraint).

    An FFN is linear -> activation -> linear, a gated MLP
    (`down(act(gate(x)) * up(x))`: a neuron is its gate row, up row and down
    row) or a squared activation before the down projection.

    Results: every neuron-indexed weight of each FFN (up projection
    columns or rows, a gated MLP's gate projection's, their biases, down
    projection rows, the predictor's second matrix and bias) gets a `permute_*` transform to hot-first order,
    applied at weight-pack time, so each device's part is contiguous; the
    FFN's activation op (and its `sparse_linear` ops) get
    `#sparsec.placement<gpu_neurons = ..., total_neurons = ..., group = ...>`;
    the module gets `sparsec.hot_cold` (budget, bytes, objective, LP bound,
    solve time), also printed as a remark. Outputs are unchanged: a
    permutation of an FFN's neurons does not change its result.
  }];
  let options = [
    Option<"profile", "profile", "std::string", "",
           "Activation profile (.sprof) with per-neuron counts">,
    Option<"gpuBudget", "gpu-budget", "int64_t", "0",
           "GPU memory granted to the model, in bytes">,
    Option<"groupSize", "group-size", "int64_t", "64",
           "Neurons per placement group">,
    Option<"weightBytes", "weight-bytes", "int64_t", "2",
           "Bytes per weight element on the GPU (2: fp16)">,
    Option<"maxSeqLen", "max-seq-len", "int64_t", "2048",
           "Tokens the KV cache must hold">,
    Option<"workspaceBytes", "workspace-bytes", "int64_t", "67108864",
           "GPU bytes reserved for activations and workspace">,
    Option<"cpuBandwidth", "cpu-bandwidth", "double", "20.0",
           "GB/s the CPU reads cold weight rows at">,
    Option<"syncUs", "sync-us", "double", "20.0",
           "Microseconds one split layer costs in synchronisation">,
    Option<"mode", "mode", "std::string", "\"neurons\"",
           "neurons (the exact hot/cold placement) or layers (the layer-offload "
           "baseline: the first FFNs wholly on the GPU while they fit, the "
           "rest on the CPU)">,
  ];
  let statistics = [
    Statistic<"numLayers", "num-layers", "FFNs placed">,
    Statistic<"numSplit", "num-split", "FFNs split between GPU and CPU">,
    Statistic<"numGpu", "num-gpu", "FFNs wholly on the GPU">,
    Statistic<"numCpu", "num-cpu", "FFNs wholly on the CPU">,
  ];
}

def SplitHotColdPass : Pass<"sparsec-split-hot-cold", "mlir::ModuleOp"> {
  let summary = "Split each placed FFN into a GPU part and a CPU part (hybrid target)";
  let description = [{
    For every FFN whose activation carries a `#sparsec.placement` (from
    sparsec-partition-hot-cold) with `0 < gpu_neurons < total_neurons`, the
    FFN (up projection, activation and down projection; a gated MLP's gate
    and up projections, mask and product; a square) becomes two FFNs over the
    hot-first neuron ranges `[0, gpu_neurons)` and `[gpu_neurons, total)`,
    with weights sliced at pack time (`slice_rows:lo:hi`, `slice_cols:lo:hi`
    transforms), a predictor per part (same first matrix, its second matrix
    and bias sliced: predictors stay on the GPU), and an `add` of the two
    partial results (the down projection's bias on the GPU part only). The
    CPU part's ops get `sparsec.device = "cpu"`; the emitter runs them on
    the host with the x86 kernels while the GPU part runs, and moves their
    inputs to the host as soon as they are produced. FFNs placed wholly on
    the CPU get the attribute on all their ops; wholly on the GPU, nothing.
  }];
  let statistics = [
    Statistic<"numSplit", "num-split", "FFNs split between GPU and CPU">,
    Statistic<"numCpu", "num-cpu", "FFNs moved wholly to the CPU">,
  ];
}

//===----------------------------------------------------------------------===//
// Schedule phase
//===----------------------------------------------------------------------===//

def FuseEpiloguePass : Pass<"sparsec-fuse-epilogue", "mlir::ModuleOp"> {
  let summary = "Fold a single-use activation into the producing linear or convolution";
  let description = [{
    Runs after the sparsity passes, on what remains dense. Before:
    ```mlir
    %y = sparsec.linear %x, %w, %b : ...
    %r = sparsec.relu %y : tensor<?x1024xf32>
    ```
    After:
    ```mlir
    %r = sparsec.linear %x, %w, %b {activation = #sparsec<activation relu>} : ...
    ```
    Annotated activations (`sparsity`) fuse too: the sparsify phase has
    run, and a down projection skips the same zeros of the fused result.
    A `sparsec.conv` takes relu, silu, sigmoid and gelu the same way (its
    epilogue adds the bias and applies them in one pass), and so does a
    `sparsec.batch_norm` (a Conv + BatchNormalization + Relu block then
    makes two passes over the feature map instead of three). For those
    two, `min(x, 6)` of a ReLU epilogue (ONNX `Clip(x, 0, 6)`, ReLU6)
    becomes the `relu6` epilogue; a linear keeps the min as its own op,
    since the sparsity passes and the CUDA emitter read a capped ReLU's
    zeros through it.
  }];
  let statistics = [
    Statistic<"numFused", "num-fused", "Number of activations fused">,
  ];
}

def WeightLayoutPass : Pass<"sparsec-weight-layout", "mlir::ModuleOp"> {
  let summary = "Give every linear weight the layout and storage its kernel reads";
  let description = [{
    A `linear {transpose_weight}` whose weight is a `sparsec.global` gets a
    new global with `transforms = ["transpose"]` (applied when the weights
    are packed, so the IR never holds data) and loses the flag. A
    transposed weight computed at run time gets an explicit
    `sparsec.transpose`. Before:
    ```mlir
    sparsec.global @w : tensor<16x8xf32> {source = "w"}
    %y = sparsec.linear %x, %w {transpose_weight} : tensor<2x8xf32>, tensor<16x8xf32> -> tensor<2x16xf32>
    ```
    After:
    ```mlir
    sparsec.global @w.T : tensor<8x16xf32> {source = "w", transforms = ["transpose"]}
    %y = sparsec.linear %x, %wt : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
    ```
    The output side of a `sparse_linear` (a predicted up projection) is the
    exception: its kernel reads one contiguous row per selected neuron, so
    its weight becomes neuron-major `[N, K]` and the op keeps (or gains)
    `transpose_weight`. With `sparse-weights=f16`, the weights of
    `sparse_linear` and `predict` ops are stored as float16 (transform
    `"f16"`; the kernels convert with F16C), halving their memory traffic.
    `bf16` in any of these options stores bfloat16 instead (transform
    `"bf16"`, round to nearest even; the kernels widen it by a shift).
    With `dense-weights=f16`, the weights of `linear` ops are float16 too
    (the CUDA target's GEMV and cuBLAS kernels read them with fp32
    accumulation; the x86 linear kernel converts them with F16C as it loads
    them).
    With `conv-weights=f16` (the CUDA target), the weights of `conv` ops are
    float16 as well: the device convolutions feed them to tensor-core GEMMs
    (fp16 operands, fp32 accumulation) or read them in the depthwise
    kernel. Where `dense-weights=f16` leaves convolutions at float32 (the
    x86 and hybrid targets), a remark says so.
    With `dense-layout=nk` (the CUDA and hybrid targets), every `linear`
    that runs on the GPU (all but a hybrid FFN's CPU part, marked
    `sparsec.device = "cpu"`) gets a neuron-major `[N, K]` weight and
    `transpose_weight`: the decode GEMV then streams one contiguous row per
    output neuron (16-byte loads, no split-K), and cuBLAS reads the same
    layout transposed for prefill.
  }];
  let options = [
    Option<"sparseWeights", "sparse-weights", "std::string", "\"f32\"",
           "Storage of sparse-kernel weights: f32, f16 or bf16">,
    Option<"denseWeights", "dense-weights", "std::string", "\"f32\"",
           "Storage of linear weights: f32, f16 or bf16">,
    Option<"convWeights", "conv-weights", "std::string", "\"f32\"",
           "Storage of convolution weights: f32, f16 or bf16 (CUDA target)">,
    Option<"denseLayout", "dense-layout", "std::string", "\"kn\"",
           "Layout of linear weights: kn ([K, N], the x86 kernels) or nk "
           "(neuron-major [N, K] for device linears, the CUDA target)">,
  ];
}

def GroupLinearsPass : Pass<"sparsec-group-linears", "mlir::ModuleOp"> {
  let summary = "Group linears that read the same input into one linear_group "
                "and fold the norm that feeds them";
  let description = [{
    Runs after `sparsec-weight-layout` for the CUDA and hybrid targets.
    Linears with neuron-major weights (`transpose_weight`) that read the
    same value, with weights of one element type, all with or all without a
    bias and with the same activation, become one `sparsec.linear_group`
    (at most 4 weights a group) at the first one's position; the weights
    move there. Before:
    ```mlir
    %h = sparsec.layer_norm %x, %g, %b {epsilon = 1.0e-05 : f32} : ...
    %q = sparsec.linear %h, %wq, %bq {transpose_weight} : ...
    %k = sparsec.linear %h, %wk, %bk {transpose_weight} : ...
    ```
    After:
    ```mlir
    %q, %k = sparsec.linear_group %x norm(%g, %b) weights(%wq, %wk)
        biases(%bq, %bk) {norm_epsilon = 1.0e-05 : f32} : ...
    ```
    With `fold-norms` (off by default, and not used by the driver), a
    `layer_norm` over the last dimension or an `rms_norm` whose every user
    is a group without a norm or a groupable linear is folded into them (a
    lone linear becomes a group of one): the kernel normalises its input
    itself and the norm's result is never stored. On the H200 the CUDA
    decode GEMV's blocks each normalising x cost more than the norm kernel
    they replace (docs/GPU.md), so the driver leaves the norms apart. Not grouped: a linear whose only user is an add (the CUDA
    emitter makes that add the linear's residual epilogue), a hybrid FFN's
    CPU part (`sparsec.device`), annotated (`sparsity`) linears, and weights
    that are computed rather than `sparsec.weight` ops.
  }];
  let options = [
    Option<"foldNorms", "fold-norms", "bool", "false",
           "Fold a layer_norm / rms_norm into the groups and linears it "
           "feeds (off: measured slower on the H200, docs/GPU.md)">,
  ];
  let statistics = [
    Statistic<"numGroups", "num-groups", "Number of linear groups built">,
    Statistic<"numLinears", "num-linears", "Number of linears grouped">,
    Statistic<"numNorms", "num-norms", "Number of norms folded">,
  ];
}

def PlanMemoryPass : Pass<"sparsec-plan-memory", "mlir::ModuleOp"> {
  let summary = "Assign every intermediate tensor a memory slot by liveness";
  let description = [{
    Walks the function in execution order (the block order), computes each
    value's live range (definition to last use; function results live to
    the end) and assigns slots greedily: a value takes a free slot whose
    size class fits best, or a new one. Weights, constants and arguments
    take no slot. Each op gets `sparsec.slots` (one entry per result); the
    module gets `sparsec.slot_bytes`: a slot's size when every value in it
    has a static shape (so the arena is laid out at compile time), -1 when
    it depends on dynamic dimensions (the runtime sizes it on first use).
    Reshapes (`reshape`, `unsqueeze`, `squeeze`, `flatten`) of a value that
    has a slot are views: the result shares the input's slot, which stays
    live until both are dead, and the runtimes skip the copy. A `transpose`
    gets a slot of its own but keeps its input live as long as its result:
    when only unit dims move (the head transposes of a decode step) the
    runtimes return a view of the input instead of copying. Where the CUDA
    backend computes a sparse FFN's up and down projections in one call
    (an output-sparse `sparse_linear` read only by an input-sparse one,
    and a gated MLP's product), the FFN's input and the up projection's
    result stay live until the down projection and a residual add after
    it, whose result then never takes their memory.
    ```mlir
    %0 = sparsec.relu %x {sparsec.slots = [0]} : tensor<4x8xf32>
    %1 = sparsec.neg %0 {sparsec.slots = [1]} : tensor<4x8xf32>
    %2 = sparsec.exp %1 {sparsec.slots = [0]} : tensor<4x8xf32>
    ```
  }];
  let statistics = [
    Statistic<"numSlots", "num-slots", "Number of slots">,
    Statistic<"numValues", "num-values", "Number of values placed">,
    Statistic<"numViews", "num-views", "Reshapes sharing their input's slot">,
    Statistic<"staticBytes", "static-bytes", "Bytes of statically sized slots">,
  ];
}

#endif // SPARSEC_DIALECT_SPARSEC_TRANSFORMS_PASSES_TD
