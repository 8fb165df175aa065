// RUN: sparsec-opt %s --sparsec-sparsify-ffn | FileCheck %s
// RUN: sparsec-opt %s --sparsec-sparsify-ffn=min-zero-fraction=0.95 | FileCheck %s --check-prefix=STRICT

// CHECK-LABEL: func.func @ffn
func.func @ffn(%x: tensor<?x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>, %b2: tensor<8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  // CHECK: %[[R:.*]] = sparsec.relu
  // CHECK: sparsec.sparse_linear %[[R]], %arg2, %arg3 {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>} : (tensor<?x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // Too dense for the threshold: the dense linear stays.
  // STRICT-NOT: sparsec.sparse_linear
  %y = sparsec.linear %r, %w2, %b2 : tensor<?x16xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// No measurement: dense.
// CHECK-LABEL: func.func @unmeasured
// CHECK-NOT: sparsec.sparse_linear
func.func @unmeasured(%x: tensor<?x16xf32>, %w2: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %r = sparsec.relu %x : tensor<?x16xf32>
  %y = sparsec.linear %r, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
