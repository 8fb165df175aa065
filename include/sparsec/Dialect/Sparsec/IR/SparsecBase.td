//===- SparsecBase.td - sparsec dialect definition ---------*- tablegen -*-===//
//
// Part of the sparsec project.
//
//===----------------------------------------------------------------------===//

#ifndef SPARSEC_DIALECT_SPARSEC_IR_SPARSECBASE_TD
#define SPARSEC_DIALECT_SPARSEC_IR_SPARSECBASE_TD

include "mlir/IR/OpBase.td"

def Sparsec_Dialect : Dialect {
  let name = "sparsec";
  let cppNamespace = "::sparsec";
  let summary = "Graph-level dialect of the sparsec sparse model compiler";
  let description = [{
    The `sparsec` dialect holds a model at layer granularity: ONNX nodes are
    imported one op per node, the raise phase fuses them into the layer
    vocabulary (linear, layer_norm, attention, embedding, activations), and
    the sparsify phase rewrites FFN blocks into sparse forms driven by the
    `#sparsec.act_sparsity` annotation.

    Operations work on ranked tensors whose dimensions may be dynamic
    (batch, sequence). Weights never appear as large constants: a
    `sparsec.global` declares each weight by name and type, and
    `sparsec.weight` references it by symbol; the bytes stay in the weight
    store that memory-maps the model file.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasConstantMaterializer = 1;
  let extraClassDeclaration = [{
    void registerAttributes();
  }];
}

class Sparsec_Op<string mnemonic, list<Trait> traits = []>
    : Op<Sparsec_Dialect, mnemonic, traits>;

#endif // SPARSEC_DIALECT_SPARSEC_IR_SPARSECBASE_TD
