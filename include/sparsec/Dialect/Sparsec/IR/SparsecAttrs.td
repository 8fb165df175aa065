//===- SparsecAttrs.td - sparsec attributes and enums ------*- tablegen -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_IR_SPARSECATTRS_TD
#define SPARSEC_DIALECT_SPARSEC_IR_SPARSECATTRS_TD

include "sparsec/Dialect/Sparsec/IR/SparsecBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enums
//===----------------------------------------------------------------------===//

def Sparsec_Granularity : I32EnumAttr<"Granularity",
    "unit at which activation sparsity is exploited", [
      I32EnumAttrCase<"element", 0>,
      I32EnumAttrCase<"neuron", 1>,
      I32EnumAttrCase<"tile", 2>,
    ]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_GranularityAttr : EnumAttr<Sparsec_Dialect, Sparsec_Granularity,
                                       "granularity">;

def Sparsec_SparsitySource : I32EnumAttr<"SparsitySource",
    "where a sparsity figure comes from", [
      I32EnumAttrCase<"static_fact", 0, "static">,
      I32EnumAttrCase<"profile", 1>,
    ]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}

def Sparsec_Device : I32EnumAttr<"Device", "execution device", [
      I32EnumAttrCase<"cpu", 0>,
      I32EnumAttrCase<"gpu", 1>,
    ]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}

def Sparsec_ComparePredicate : I32EnumAttr<"ComparePredicate",
    "elementwise comparison", [
      I32EnumAttrCase<"eq", 0>,
      I32EnumAttrCase<"lt", 1>,
      I32EnumAttrCase<"le", 2>,
      I32EnumAttrCase<"gt", 3>,
      I32EnumAttrCase<"ge", 4>,
    ]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_ComparePredicateAttr
    : EnumAttr<Sparsec_Dialect, Sparsec_ComparePredicate, "predicate">;

def Sparsec_SparseMode : I32EnumAttr<"SparseMode",
    "how the active neuron set of a sparse linear is obtained", [
      I32EnumAttrCase<"exact", 0>,
      I32EnumAttrCase<"predicted", 1>,
    ]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_SparseModeAttr
    : EnumAttr<Sparsec_Dialect, Sparsec_SparseMode, "sparse_mode">;

def Sparsec_SparseDim : I32EnumAttr<"SparseDim",
    "which side of a linear the active set indexes", [
      I32EnumAttrCase<"output", 0>,
      I32EnumAttrCase<"input", 1>,
    ]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_SparseDimAttr
    : EnumAttr<Sparsec_Dialect, Sparsec_SparseDim, "sparse_dim">;

def Sparsec_PoolKind : I32EnumAttr<"PoolKind", "pooling reduction", [
      I32EnumAttrCase<"max", 0>, I32EnumAttrCase<"avg", 1>]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_PoolKindAttr : EnumAttr<Sparsec_Dialect, Sparsec_PoolKind, "pool_kind">;

def Sparsec_Activation : I32EnumAttr<"Activation",
    "activation fused into a producer's epilogue", [
      I32EnumAttrCase<"relu", 0>, I32EnumAttrCase<"gelu", 1>,
      I32EnumAttrCase<"gelu_tanh", 2>, I32EnumAttrCase<"silu", 3>,
      I32EnumAttrCase<"sigmoid", 4>,
      // min(max(x, 0), 6): a ReLU capped at 6 (ONNX Clip(x, 0, 6)).
      I32EnumAttrCase<"relu6", 5>]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_ActivationAttr
    : EnumAttr<Sparsec_Dialect, Sparsec_Activation, "activation">;

def Sparsec_ReduceKind : I32EnumAttr<"ReduceKind", "reduction", [
      I32EnumAttrCase<"sum", 0>, I32EnumAttrCase<"mean", 1>,
      I32EnumAttrCase<"max", 2>, I32EnumAttrCase<"min", 3>]> {
  let cppNamespace = "::sparsec";
  let genSpecializedAttr = 0;
}
def Sparsec_ReduceKindAttr
    : EnumAttr<Sparsec_Dialect, Sparsec_ReduceKind, "reduce_kind">;

//===----------------------------------------------------------------------===//
// Attributes
//===----------------------------------------------------------------------===//

class Sparsec_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Sparsec_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

// A double-precision value, printed and parsed as a float literal.
class Sparsec_DoubleParameter<string default = "">
    : APFloatParameter<"a floating-point value"> {
  let defaultValue = default;
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
      double v;
      if ($_parser.parseFloat(v))
        return ::mlir::failure();
      return ::llvm::APFloat(v);
    }() }];
  let printer = [{ $_printer << $_self.convertToDouble() }];
}

def Sparsec_ActSparsityAttr : Sparsec_Attr<"ActSparsity", "act_sparsity"> {
  let summary = "activation sparsity of the tensor an op produces";
  let description = [{
    Attached (as the `sparsity` attribute) to an op whose result is a
    ReLU-family activation feeding a linear op. `zero_fraction` is the
    measured (or statically known) fraction of zero elements,
    `granularity` the unit at which the zeros are exploited, `source` where
    the figure comes from. `tokens` counts the tokens the profile saw (0
    for static facts) and `top20_share` is the share of all activations
    carried by the 20 % most frequently active neurons (skew).

    ```mlir
    #sparsec.act_sparsity<zero_fraction = 0.92, granularity = neuron,
                          source = profile, tokens = 4096, top20_share = 0.31>
    ```
  }];
  let parameters = (ins
    Sparsec_DoubleParameter<>:$zero_fraction,
    EnumParameter<Sparsec_Granularity>:$granularity,
    EnumParameter<Sparsec_SparsitySource>:$source,
    DefaultValuedParameter<"int64_t", "0">:$tokens,
    Sparsec_DoubleParameter<"::llvm::APFloat(0.0)">:$top20_share
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Sparsec_PlacementAttr : Sparsec_Attr<"Placement", "placement"> {
  let summary = "hot/cold split of a layer's neurons between GPU and CPU";
  let description = [{
    The first `gpu_neurons` neurons (after the hot-first permutation applied
    at weight-pack time) live on the GPU, the remaining
    `total_neurons - gpu_neurons` on the CPU. `group` is the neuron group
    size the solver worked in; `gpu_neurons` is a multiple of it or equal to
    `total_neurons`.

    ```mlir
    #sparsec.placement<gpu_neurons = 512, total_neurons = 1024, group = 64>
    ```
  }];
  let parameters = (ins
    "int64_t":$gpu_neurons,
    "int64_t":$total_neurons,
    DefaultValuedParameter<"int64_t", "64">:$group
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // SPARSEC_DIALECT_SPARSEC_IR_SPARSECATTRS_TD
