//===- SparsecOps.td - sparsec operations ------------------*- tablegen -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_IR_SPARSECOPS_TD
#define SPARSEC_DIALECT_SPARSEC_IR_SPARSECOPS_TD

include "sparsec/Dialect/Sparsec/IR/SparsecBase.td"
include "sparsec/Dialect/Sparsec/IR/SparsecAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"

def Sparsec_Tensor : RankedTensorOf<[AnyType]>;
def Sparsec_FloatTensor : RankedTensorOf<[AnyFloat]>;
def Sparsec_IntTensor : RankedTensorOf<[AnySignlessInteger]>;

// Ops whose result shape can be computed from operand types (and constant
// shape operands) implement InferShapedTypeOpInterface; the
// `sparsec-infer-shapes` pass uses it to refine dynamic dimensions.
defvar InferShape = InferShapedTypeOpAdaptor;

//===----------------------------------------------------------------------===//
// Constants and weights
//===----------------------------------------------------------------------===//

def Sparsec_ConstantOp : Sparsec_Op<"constant",
    [ConstantLike, Pure, AllTypesMatch<["value", "result"]>]> {
  let summary = "small constant tensor (shapes, axes, scalars)";
  let description = [{
    A constant small enough to live in the IR: shape vectors, axes, scalar
    factors. Model weights are never constants; they are `sparsec.weight`.
    ```mlir
    %0 = sparsec.constant dense<[0, 2, 1, 3]> : tensor<4xi64>
    ```
  }];
  let arguments = (ins ElementsAttr:$value);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "attr-dict $value";
  let builders = [
    OpBuilder<(ins "::mlir::ElementsAttr":$value), [{
      build($_builder, $_state, value.getType(), value);
    }]>
  ];
  let hasFolder = 1;
}

def Sparsec_GlobalOp : Sparsec_Op<"global", [Symbol]> {
  let summary = "declares a model weight held by the weight store";
  let description = [{
    Declares a weight by symbol and type. `source` names the ONNX
    initializer (or Constant node output) whose bytes the weight store
    memory-maps; the IR never holds model data. Weights the compiler
    creates itself (trained predictors) carry their data in `value` and an
    empty `source`. `transforms` records layout and storage changes
    (`"transpose"`, `"f16"`, `"permute_rows"`, `"permute_cols"`) that are
    applied only when weights are packed, in order; the permutations take
    `permutation` (new index i holds old index permutation[i]), which
    sparsec-partition-hot-cold sets to order a layer's neurons hot-first.
    ```mlir
    sparsec.global @fc1_w : tensor<256x1024xf32> {source = "onnx::MatMul_480"}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name,
                       TypeAttrOf<Sparsec_Tensor>:$type,
                       StrAttr:$source,
                       OptionalAttr<StrArrayAttr>:$transforms,
                       OptionalAttr<ElementsAttr>:$value,
                       OptionalAttr<DenseI64ArrayAttr>:$permutation);
  let assemblyFormat = "$sym_name `:` $type attr-dict";
}

def Sparsec_WeightOp : Sparsec_Op<"weight",
    [Pure, DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let summary = "references a weight declared by sparsec.global";
  let arguments = (ins FlatSymbolRefAttr:$name);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

class Sparsec_UnaryOp<string mnemonic, string desc, list<Trait> traits = []>
    : Sparsec_Op<mnemonic, !listconcat([Pure, SameOperandsAndResultType],
                                       traits)> {
  let summary = desc;
  let arguments = (ins Sparsec_Tensor:$input);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Sparsec_ReluOp : Sparsec_UnaryOp<"relu", "max(x, 0)"> {
  let arguments = (ins Sparsec_FloatTensor:$input,
                       OptionalAttr<Sparsec_ActSparsityAttr>:$sparsity);
}
def Sparsec_GeluOp : Sparsec_UnaryOp<"gelu", "Gaussian error linear unit"> {
  let arguments = (ins Sparsec_FloatTensor:$input, UnitAttr:$tanh_approx,
                       OptionalAttr<Sparsec_ActSparsityAttr>:$sparsity);
}
def Sparsec_SiluOp : Sparsec_UnaryOp<"silu", "x * sigmoid(x)"> {
  let arguments = (ins Sparsec_FloatTensor:$input,
                       OptionalAttr<Sparsec_ActSparsityAttr>:$sparsity);
}
def Sparsec_SigmoidOp : Sparsec_UnaryOp<"sigmoid", "1 / (1 + exp(-x))">;
def Sparsec_TanhOp : Sparsec_UnaryOp<"tanh", "hyperbolic tangent">;
def Sparsec_ExpOp : Sparsec_UnaryOp<"exp", "e^x">;
def Sparsec_LogOp : Sparsec_UnaryOp<"log", "natural logarithm">;
def Sparsec_ErfOp : Sparsec_UnaryOp<"erf", "error function">;
def Sparsec_SinOp : Sparsec_UnaryOp<"sin", "sine (rotary position tables)">;
def Sparsec_CosOp : Sparsec_UnaryOp<"cos", "cosine (rotary position tables)">;
def Sparsec_SqrtOp : Sparsec_UnaryOp<"sqrt", "square root">;
def Sparsec_ReciprocalOp : Sparsec_UnaryOp<"reciprocal", "1 / x">;
def Sparsec_AbsOp : Sparsec_UnaryOp<"abs", "absolute value">;
def Sparsec_NegOp : Sparsec_UnaryOp<"neg", "-x"> { let hasFolder = 1; }
def Sparsec_NotOp : Sparsec_UnaryOp<"not", "logical not of i1">;

def Sparsec_CastOp : Sparsec_Op<"cast", [Pure, SameOperandsAndResultShape]> {
  let summary = "element type conversion";
  let arguments = (ins Sparsec_Tensor:$input);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

class Sparsec_BinaryOp<string mnemonic, string desc, list<Trait> traits = []>
    : Sparsec_Op<mnemonic, !listconcat([Pure, ResultsBroadcastableShape,
                                        InferShape], traits)> {
  let summary = desc # " (numpy broadcasting)";
  let arguments = (ins Sparsec_Tensor:$lhs, Sparsec_Tensor:$rhs);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasFolder = 1;
}

def Sparsec_AddOp : Sparsec_BinaryOp<"add", "elementwise sum", [Commutative]>;
def Sparsec_SubOp : Sparsec_BinaryOp<"sub", "elementwise difference">;
def Sparsec_MulOp : Sparsec_BinaryOp<"mul", "elementwise product", [Commutative]>;
def Sparsec_DivOp : Sparsec_BinaryOp<"div", "elementwise quotient">;
def Sparsec_PowOp : Sparsec_BinaryOp<"pow", "elementwise power">;
def Sparsec_MaxOp : Sparsec_BinaryOp<"max", "elementwise maximum", [Commutative]>;
def Sparsec_MinOp : Sparsec_BinaryOp<"min", "elementwise minimum", [Commutative]>;
def Sparsec_AndOp : Sparsec_BinaryOp<"and", "logical and of i1", [Commutative]>;
def Sparsec_OrOp : Sparsec_BinaryOp<"or", "logical or of i1", [Commutative]>;

def Sparsec_CompareOp : Sparsec_Op<"compare",
    [Pure, ResultsBroadcastableShape, InferShape]> {
  let summary = "elementwise comparison producing i1 (numpy broadcasting)";
  let arguments = (ins Sparsec_ComparePredicateAttr:$predicate,
                       Sparsec_Tensor:$lhs, Sparsec_Tensor:$rhs);
  let results = (outs RankedTensorOf<[I1]>:$result);
  let assemblyFormat = [{
    $predicate `,` $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs)
    `->` type($result)
  }];
  let hasFolder = 1;
}

def Sparsec_WhereOp : Sparsec_Op<"where", [Pure, InferShape]> {
  let summary = "select(cond, x, y) with numpy broadcasting";
  let arguments = (ins RankedTensorOf<[I1]>:$condition, Sparsec_Tensor:$x,
                       Sparsec_Tensor:$y);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $condition `,` $x `,` $y attr-dict `:` type($condition) `,` type($x) `,`
    type($y) `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Layers
//===----------------------------------------------------------------------===//

def Sparsec_MatMulOp : Sparsec_Op<"matmul", [Pure, InferShape]> {
  let summary = "numpy matmul (batched, broadcasting leading dimensions)";
  let arguments = (ins Sparsec_Tensor:$lhs, Sparsec_Tensor:$rhs);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs attr-dict `:` type($lhs) `,` type($rhs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_LinearOp : Sparsec_Op<"linear", [Pure, InferShape]> {
  let summary = "y = x . W (+ b) over the last dimension of x";
  let description = [{
    `weight` is `[K, N]` (ONNX MatMul layout) or, with `transpose_weight`,
    `[N, K]` (PyTorch / Gemm transB layout). `input` is `[..., K]`, the
    result `[..., N]`. Leading dimensions of `input` are batch/sequence.
    `activation`, set by `sparsec-fuse-epilogue`, applies an activation to
    the result in the kernel's epilogue.
    ```mlir
    %y = sparsec.linear %x, %w, %b : tensor<?x?x256xf32>, tensor<256x1024xf32>,
         tensor<1024xf32> -> tensor<?x?x1024xf32>
    ```
  }];
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$weight,
                       Optional<Sparsec_FloatTensor>:$bias,
                       UnitAttr:$transpose_weight,
                       OptionalAttr<Sparsec_ActivationAttr>:$activation);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_LinearGroupOp : Sparsec_Op<"linear_group",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "linears over one (optionally normalised) input, one kernel";
  let description = [{
    Result `i` is `n(input) . weights[i]^T (+ biases[i])`: every weight is
    neuron-major `[N_i, K]` (the layout `transpose_weight` names on
    `sparsec.linear`), `biases` is empty or has one bias per weight, and
    `activation` applies to all. `n` is the identity, or, with
    `norm_scale`, a normalisation over the last dimension folded in from a
    `layer_norm` (`norm_scale`, optional `norm_bias`, `norm_epsilon`) or an
    `rms_norm` (`norm_rms`; no bias). `sparsec-group-linears` builds it
    from sibling linears (q, k and v of an attention block) and folds the
    norm that feeds them; the CUDA target computes the group in one
    decode-GEMV launch whose blocks normalise the input themselves. Without
    a norm a group has at least 2 weights; with one, at least 1.
    ```mlir
    %q, %k = sparsec.linear_group %x norm(%g, %b) weights(%wq, %wk)
        biases(%bq, %bk) {norm_epsilon = 1.0e-5 : f32}
        : tensor<1x1x64xf32>, norm(tensor<64xf32>, tensor<64xf32>),
          (tensor<64x64xf16>, tensor<64x64xf16>),
          (tensor<64xf32>, tensor<64xf32>) -> tensor<1x1x64xf32>, tensor<1x1x64xf32>
    ```
  }];
  let arguments = (ins Sparsec_FloatTensor:$input,
                       Optional<Sparsec_FloatTensor>:$norm_scale,
                       Optional<Sparsec_FloatTensor>:$norm_bias,
                       Variadic<Sparsec_FloatTensor>:$weights,
                       Variadic<Sparsec_FloatTensor>:$biases,
                       OptionalAttr<F32Attr>:$norm_epsilon,
                       UnitAttr:$norm_rms,
                       OptionalAttr<Sparsec_ActivationAttr>:$activation);
  let results = (outs Variadic<Sparsec_FloatTensor>:$results);
  let assemblyFormat = [{
    $input (`norm` `(` $norm_scale^ (`,` $norm_bias^)? `)`)?
    `weights` `(` $weights `)` (`biases` `(` $biases^ `)`)? attr-dict
    `:` type($input) (`norm` `(` type($norm_scale)^ (`,` type($norm_bias)^)? `)`)?
    `,` `(` type($weights) `)`
    (`,` `(` type($biases)^ `)`)? `->` type($results)
  }];
  let hasVerifier = 1;
}

def Sparsec_LayerNormOp : Sparsec_Op<"layer_norm",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "layer normalisation over the trailing dimensions from axis";
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$scale,
                       Optional<Sparsec_FloatTensor>:$bias,
                       DefaultValuedAttr<I64Attr, "-1">:$axis,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale (`,` $bias^)? attr-dict `:` type($input) `,`
    type($scale) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_RmsNormOp : Sparsec_Op<"rms_norm",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "x / sqrt(mean(x^2) + eps) * scale over the last dimension";
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$scale,
                       DefaultValuedAttr<F32Attr, "1.0e-6">:$epsilon);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale attr-dict `:` type($input) `,` type($scale) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_RotaryOp : Sparsec_Op<"rotary",
    [Pure, AllTypesMatch<["input", "result"]>, AllTypesMatch<["cos", "sin"]>]> {
  let summary = "rotary position embedding, rotate-half form";
  let description = [{
    With `h` half the last dimension of `input`:
    `y[..., i] = x[..., i] * cos[..., i] - x[..., i + h] * sin[..., i]` for
    `i < h`, and `x[..., i] * cos[..., i] + x[..., i - h] * sin[..., i]`
    for `i >= h`. That is `x * cos + rotate_half(x) * sin`, the form of
    LLaMA, NeoX and most rotary exports (`sparsec-fuse-rotary` raises it).
    `cos` and `sin` broadcast to `input` (numpy rules), typically
    `[B, 1, S, D]` against queries or keys `[B, H, S, D]`.
    ```mlir
    %y = sparsec.rotary %q, %cos, %sin
         : tensor<?x32x?x128xf32>, tensor<?x1x?x128xf32> -> tensor<?x32x?x128xf32>
    ```
  }];
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$cos,
                       Sparsec_FloatTensor:$sin);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $cos `,` $sin attr-dict `:` type($input) `,` type($cos) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_SoftmaxOp : Sparsec_Op<"softmax", [Pure, SameOperandsAndResultType]> {
  let summary = "softmax along one axis";
  let arguments = (ins Sparsec_FloatTensor:$input,
                       DefaultValuedAttr<I64Attr, "-1">:$axis);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Sparsec_AttentionOp : Sparsec_Op<"attention",
    [Pure, AttrSizedOperandSegments, AttrSizedResultSegments]> {
  let summary = "scaled dot-product attention with mask and optional KV cache";
  let description = [{
    `query` is `[B, H, Sq, D]`, `key` and `value` `[B, Hk, Sk, D]` (the new
    tokens' keys and values); `H` is a multiple of `Hk`, each key/value
    head serving `H / Hk` consecutive query heads (grouped-query
    attention; `Hk == H` is the usual case). The cache has `Hk` heads. With `past_key`/`past_value` (`[B, H, P, D]`)
    the keys and values attended to are the concatenation along the
    sequence axis, returned as `present_key`/`present_value`
    (`[B, H, P + Sk, D]`). `mask` is additive and broadcasts to
    `[B, H, Sq, P + Sk]`; `causal` adds the causal mask. Scores are
    `scale * q . k^T`.

    With `token_major` the query, key, value and result are laid out
    `[B, S, H, D]` instead (a projection's output split into heads, before
    the transpose a model applies to it; `sparsec-fold-head-transposes`
    folds those transposes into the attention). The past and present keep
    `[B, H, P, D]`, the cache's layout.
    ```mlir
    %o = sparsec.attention %q, %k, %v mask %m {scale = 1.0 : f32}
         : (tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>, tensor<?x4x?x64xf32>,
            tensor<?x1x?x?xf32>) -> tensor<?x4x?x64xf32>
    ```
  }];
  let arguments = (ins Sparsec_FloatTensor:$query, Sparsec_FloatTensor:$key,
                       Sparsec_FloatTensor:$value,
                       Optional<Sparsec_FloatTensor>:$mask,
                       Optional<Sparsec_FloatTensor>:$past_key,
                       Optional<Sparsec_FloatTensor>:$past_value,
                       DefaultValuedAttr<F32Attr, "1.0">:$scale,
                       UnitAttr:$causal, UnitAttr:$token_major);
  let results = (outs Sparsec_FloatTensor:$result,
                      Optional<Sparsec_FloatTensor>:$present_key,
                      Optional<Sparsec_FloatTensor>:$present_value);
  let assemblyFormat = [{
    $query `,` $key `,` $value (`mask` $mask^)?
    (`past` `(` $past_key^ `,` $past_value `)`)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Sparsec_EmbeddingOp : Sparsec_Op<"embedding",
    [Pure, InferShape, AttrSizedOperandSegments]> {
  let summary = "rows of a [V, D] table selected by integer ids";
  let description = [{
    `table[ids]`: the result is `ids.shape + [D]`. With `plus`, the rows of
    a second `[V2, D]` table selected by `ids2` (of the ids' shape) are
    added, as a model's token and position embeddings are
    (`sparsec-fuse-embedding-sum` makes that form from an add of two
    lookups).
    ```mlir
    %e = sparsec.embedding %tok, %ids plus %pos, %positions
         : tensor<50272x768xf32>, tensor<?x?xi64>, tensor<2050x768xf32>,
           tensor<?x?xi64> -> tensor<?x?x768xf32>
    ```
  }];
  let arguments = (ins Sparsec_FloatTensor:$table, Sparsec_IntTensor:$ids,
                       Optional<Sparsec_FloatTensor>:$table2,
                       Optional<Sparsec_IntTensor>:$ids2);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $table `,` $ids (`plus` $table2^ `,` $ids2)? attr-dict `:` type($table)
    `,` type($ids) (`,` type($table2)^ `,` type($ids2))? `->` type($result)
  }];
  let builders = [
    OpBuilder<(ins "::mlir::Type":$result, "::mlir::Value":$table,
                   "::mlir::Value":$ids), [{
      build($_builder, $_state, result, table, ids, ::mlir::Value(),
            ::mlir::Value());
    }]>
  ];
  let hasVerifier = 1;
}

def Sparsec_ConvOp : Sparsec_Op<"conv", [Pure]> {
  let summary = "N-d convolution, NCHW layout (ONNX Conv)";
  let description = [{
    `activation` (set by `sparsec-fuse-epilogue`) is applied to the result
    with the bias, in the convolution's epilogue.
  }];
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$weight,
                       Optional<Sparsec_FloatTensor>:$bias,
                       DenseI64ArrayAttr:$strides, DenseI64ArrayAttr:$pads,
                       DenseI64ArrayAttr:$dilations,
                       DefaultValuedAttr<I64Attr, "1">:$group,
                       OptionalAttr<Sparsec_ActivationAttr>:$activation);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? attr-dict `:` type($input) `,`
    type($weight) (`,` type($bias)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_BatchNormOp : Sparsec_Op<"batch_norm",
    [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "inference batch normalisation over the channel axis (1)";
  let description = [{
    `activation` (set by `sparsec-fuse-epilogue`) is applied to each
    normalised value in the same pass. A norm whose input is a convolution
    with no activation and no other user (`getFoldableConv`) is computed
    with that convolution by both backends (folded into its weights on x86,
    in its epilogue on CUDA): `sparsec-plan-memory` keeps the
    convolution's input live until the norm, whose result is then written
    while that input is read.
  }];
  let extraClassDeclaration = [{
    /// The convolution this norm is computed with, or null.
    ConvOp getFoldableConv();
  }];
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$scale,
                       Sparsec_FloatTensor:$bias, Sparsec_FloatTensor:$mean,
                       Sparsec_FloatTensor:$variance,
                       DefaultValuedAttr<F32Attr, "1.0e-5">:$epsilon,
                       OptionalAttr<Sparsec_ActivationAttr>:$activation);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $scale `,` $bias `,` $mean `,` $variance attr-dict `:`
    functional-type(operands, results)
  }];
}

def Sparsec_PoolOp : Sparsec_Op<"pool", [Pure]> {
  let summary = "max / average pooling, NCHW (global when kernel is empty)";
  let arguments = (ins Sparsec_PoolKindAttr:$kind, Sparsec_FloatTensor:$input,
                       DenseI64ArrayAttr:$kernel, DenseI64ArrayAttr:$strides,
                       DenseI64ArrayAttr:$pads,
                       UnitAttr:$count_include_pad);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $kind `,` $input attr-dict `:` type($input) `->` type($result)
  }];
}

def Sparsec_ReduceOp : Sparsec_Op<"reduce", [Pure, InferShape]> {
  let summary = "reduction over a set of axes";
  let arguments = (ins Sparsec_ReduceKindAttr:$kind, Sparsec_Tensor:$input,
                       DenseI64ArrayAttr:$axes, BoolAttr:$keepdims);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $kind `,` $input attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Sparsec_CumSumOp : Sparsec_Op<"cumsum", [Pure, SameOperandsAndResultType]> {
  let summary = "cumulative sum along an axis";
  let arguments = (ins Sparsec_Tensor:$input, I64Attr:$axis,
                       UnitAttr:$exclusive, UnitAttr:$reverse);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Sparsec_TriluOp : Sparsec_Op<"trilu", [Pure, SameOperandsAndResultType]> {
  let summary = "keep the upper or lower triangle (offset k) of the last two dims";
  let arguments = (ins Sparsec_Tensor:$input, BoolAttr:$upper,
                       DefaultValuedAttr<I64Attr, "0">:$k);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Shape and data movement
//===----------------------------------------------------------------------===//

def Sparsec_ShapeOp : Sparsec_Op<"shape", [Pure, InferShape]> {
  let summary = "the dimensions of a tensor as a 1-D i64 tensor";
  let arguments = (ins Sparsec_Tensor:$input,
                       DefaultValuedAttr<I64Attr, "0">:$start,
                       OptionalAttr<I64Attr>:$end);
  let results = (outs RankedTensorOf<[I64]>:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
}

def Sparsec_GatherOp : Sparsec_Op<"gather", [Pure, InferShape]> {
  let summary = "ONNX Gather: select slices of data along an axis";
  let arguments = (ins Sparsec_Tensor:$data, Sparsec_IntTensor:$indices,
                       DefaultValuedAttr<I64Attr, "0">:$axis);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $indices attr-dict `:` type($data) `,` type($indices) `->`
    type($result)
  }];
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Sparsec_ReshapeOp : Sparsec_Op<"reshape", [Pure, InferShape]> {
  let summary = "ONNX Reshape (0 copies a dimension, -1 is inferred)";
  let arguments = (ins Sparsec_Tensor:$input, RankedTensorOf<[I64]>:$shape,
                       UnitAttr:$allowzero);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $shape attr-dict `:` type($input) `,` type($shape) `->`
    type($result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Sparsec_TransposeOp : Sparsec_Op<"transpose", [Pure, InferShape]> {
  let summary = "permute dimensions";
  let arguments = (ins Sparsec_Tensor:$input, DenseI64ArrayAttr:$permutation);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Sparsec_ConcatOp : Sparsec_Op<"concat", [Pure, InferShape]> {
  let summary = "concatenate along an axis";
  let arguments = (ins Variadic<Sparsec_Tensor>:$inputs, I64Attr:$axis);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` functional-type($inputs, $result)
  }];
  let hasVerifier = 1;
  let hasFolder = 1;
}

def Sparsec_SliceOp : Sparsec_Op<"slice", [Pure, InferShape]> {
  let summary = "ONNX Slice: strided slice with per-axis starts/ends/steps";
  let arguments = (ins Sparsec_Tensor:$data, Sparsec_IntTensor:$starts,
                       Sparsec_IntTensor:$ends, Sparsec_IntTensor:$axes,
                       Sparsec_IntTensor:$steps);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $data `,` $starts `,` $ends `,` $axes `,` $steps attr-dict `:`
    functional-type(operands, results)
  }];
  let hasFolder = 1;
}

def Sparsec_SplitOp : Sparsec_Op<"split", [Pure, InferShape]> {
  let summary = "split along an axis into pieces of the given sizes";
  let arguments = (ins Sparsec_Tensor:$input, I64Attr:$axis,
                       DenseI64ArrayAttr:$sizes);
  let results = (outs Variadic<Sparsec_Tensor>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

def Sparsec_UnsqueezeOp : Sparsec_Op<"unsqueeze", [Pure, InferShape]> {
  let summary = "insert unit dimensions at the given result axes";
  let arguments = (ins Sparsec_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Sparsec_SqueezeOp : Sparsec_Op<"squeeze", [Pure, InferShape]> {
  let summary = "remove unit dimensions at the given axes";
  let arguments = (ins Sparsec_Tensor:$input, DenseI64ArrayAttr:$axes);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasFolder = 1;
  let hasVerifier = 1;
}

def Sparsec_FlattenOp : Sparsec_Op<"flatten", [Pure, InferShape]> {
  let summary = "collapse to 2-D around an axis";
  let arguments = (ins Sparsec_Tensor:$input, DefaultValuedAttr<I64Attr, "1">:$axis);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($result)";
  let hasVerifier = 1;
}

def Sparsec_ExpandOp : Sparsec_Op<"expand", [Pure, InferShape]> {
  let summary = "broadcast to a shape (ONNX Expand)";
  let arguments = (ins Sparsec_Tensor:$input, RankedTensorOf<[I64]>:$shape);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $input `,` $shape attr-dict `:` type($input) `,` type($shape) `->`
    type($result)
  }];
}

def Sparsec_RangeOp : Sparsec_Op<"range", [Pure, InferShape]> {
  let summary = "[start, limit) with step delta (scalars)";
  let arguments = (ins Sparsec_Tensor:$start, Sparsec_Tensor:$limit,
                       Sparsec_Tensor:$delta);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $start `,` $limit `,` $delta attr-dict `:` functional-type(operands, results)
  }];
  let hasFolder = 1;
}

def Sparsec_ConstantOfShapeOp : Sparsec_Op<"constant_of_shape", [Pure, InferShape]> {
  let summary = "a tensor of the given shape filled with one value";
  let arguments = (ins RankedTensorOf<[I64]>:$shape, TypedAttrInterface:$value);
  let results = (outs Sparsec_Tensor:$result);
  let assemblyFormat = [{
    $shape `,` $value attr-dict `:` type($shape) `->` type($result)
  }];
  let hasFolder = 1;
}

//===----------------------------------------------------------------------===//
// Sparsity
//===----------------------------------------------------------------------===//

def Sparsec_PredictOp : Sparsec_Op<"predict", [Pure]> {
  let summary = "DejaVu-style low-rank predictor of active neurons";
  let description = [{
    `(x . w1) . w2 + bias > threshold` over the `N` neurons of a layer,
    `w1` `[D, R]`, `w2` `[R, N]`, `bias` `[N]`: a rank-`R` classifier whose
    result is the mask of predicted-active neurons, one row per token
    (`[..., N]`, i1). `sparsec-insert-predictors` trains it from the
    profile's samples. A predictor placed one layer ahead (`lookahead`)
    reads the previous layer's input so its work overlaps the current layer.
  }];
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$w1,
                       Sparsec_FloatTensor:$w2,
                       Optional<Sparsec_FloatTensor>:$bias,
                       DefaultValuedAttr<F32Attr, "0.0f">:$threshold,
                       UnitAttr:$lookahead);
  let results = (outs RankedTensorOf<[I1]>:$mask);
  let assemblyFormat = [{
    $input `,` $w1 `,` $w2 (`,` $bias^)? attr-dict `:` functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

def Sparsec_ProfileCountOp : Sparsec_Op<"profile_count",
    [MemoryEffects<[MemWrite]>]> {
  let summary = "count, per neuron, the tokens for which an activation is non-zero";
  let description = [{
    Inserted by `sparsec-instrument-sparsity` after every ReLU-family
    activation that feeds a linear op. The runtime accumulates, for profile
    site `site` (index `index`), the number of tokens seen and per neuron
    (last dimension) how often it was non-zero; `sparsec profile` writes
    them to a .sprof file. With `layer_input` (the input of the linear that
    produces the activation), the runtime also keeps a sample of
    (layer input, active mask) pairs per token for predictor training.
    ```mlir
    sparsec.profile_count %r layer_input %x {site = "/layers.0/Relu", index = 0 : i64}
        : tensor<?x?x1024xf32>, tensor<?x?x256xf32>
    ```
  }];
  let arguments = (ins Sparsec_FloatTensor:$input,
                       Optional<Sparsec_FloatTensor>:$layer_input,
                       StrAttr:$site, I64Attr:$index);
  let assemblyFormat = [{
    $input (`layer_input` $layer_input^)? attr-dict `:` type($input)
    (`,` type($layer_input)^)?
  }];
  let hasVerifier = 1;
}

def Sparsec_SparseLinearOp : Sparsec_Op<"sparse_linear",
    [Pure, AttrSizedOperandSegments]> {
  let summary = "linear restricted to an active set of neurons";
  let description = [{
    Same contract as `sparsec.linear`, but only the neurons enabled in
    `active` (a `[..., N]` or `[N]` i1 mask) contribute. With
    `sparse_dim = output` (the up projection) inactive output neurons are
    not computed (their result is 0 before the activation); with
    `sparse_dim = input` (the down projection) inactive input neurons are
    skipped. `mode = exact` takes the mask from the actual activation,
    `predicted` from a `sparsec.predict`. Without `active`, the zeros of the
    input itself drive the skipping (exact input sparsity). On the output
    side, `activation` (set by `sparsec-fuse-epilogue`; one with act(0) = 0)
    is applied to the computed neurons in the kernel's epilogue.

    `pit_tile` (set by `sparsec-pit-tile`, input side only) is the PIT
    micro-tile height in tokens (8, 16 or 32) the CUDA backend uses when a
    call has more tokens than a decode batch, or 0 for the dense kernel
    there; absent, such calls are dense. `pit_columns` (set with it, on
    a PIT tile only) is the output columns a PIT block computes, 128 or
    256; absent, the runtime's default.
  }];
  let arguments = (ins Sparsec_FloatTensor:$input, Sparsec_FloatTensor:$weight,
                       Optional<Sparsec_FloatTensor>:$bias,
                       Optional<RankedTensorOf<[I1]>>:$active,
                       Sparsec_SparseDimAttr:$sparse_dim,
                       Sparsec_SparseModeAttr:$mode,
                       DefaultValuedAttr<Sparsec_GranularityAttr,
                                         "::sparsec::Granularity::neuron">:$granularity,
                       UnitAttr:$transpose_weight,
                       OptionalAttr<Sparsec_PlacementAttr>:$placement,
                       OptionalAttr<Sparsec_ActivationAttr>:$activation,
                       OptionalAttr<I64Attr>:$pit_tile,
                       OptionalAttr<I64Attr>:$pit_columns);
  let results = (outs Sparsec_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? (`active` $active^)? attr-dict `:`
    functional-type(operands, results)
  }];
  let hasVerifier = 1;
}

#endif // SPARSEC_DIALECT_SPARSEC_IR_SPARSECOPS_TD
