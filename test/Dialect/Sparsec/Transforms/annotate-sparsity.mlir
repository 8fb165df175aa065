// 10 neurons, 100 tokens, 150 activations: zero fraction 0.85; the top 2
// neurons (20 %) carry 100 of the 150 activations.
// RUN: %pyexe %S/Inputs/make_sprof.py %t.sprof 0x00000000000000ab "/l0/Relu:100:60,40,10,10,10,5,5,5,5,0"
// RUN: sparsec-opt %s --split-input-file --sparsec-annotate-sparsity=profile=%t.sprof -verify-diagnostics | FileCheck %s

module attributes {sparsec.model_hash = "0x00000000000000ab"} {
// CHECK-LABEL: func.func @annotated
func.func @annotated(%x: tensor<?x8xf32>, %w1: tensor<8x10xf32>, %w2: tensor<10x8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x10xf32> -> tensor<?x10xf32>
  // CHECK: sparsec.relu %{{.*}} {sparsity = #sparsec.act_sparsity<zero_fraction = 8.500000e-01, granularity = neuron, source = profile, tokens = 100, top20_share = 0.66666666666666663>}
  %r = sparsec.relu %h : tensor<?x10xf32> loc("/l0/Relu")
  %y = sparsec.linear %r, %w2 : tensor<?x10xf32>, tensor<10x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
}

// -----

// expected-error @+1 {{was recorded for a different model (model hash 0x00000000000000ab, this model 0x0000000000000001)}}
module attributes {sparsec.model_hash = "0x0000000000000001"} {
}

