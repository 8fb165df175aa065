// RUN: not sparsec-translate --sparsec-to-cpp %s -split-input-file 2>&1 | FileCheck %s

// CHECK: error: has no memory slot: run sparsec-plan-memory first
func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
  %r = sparsec.relu %x : tensor<4xf32>
  return %r : tensor<4xf32>
}

// -----

// CHECK: error: the output side of sparse_linear needs a neuron-major ([N, K]) weight: run sparsec-weight-layout first
func.func @main(%x: tensor<1x8xf32>, %w: tensor<8x16xf32>, %m: tensor<1x16xi1>) -> tensor<1x16xf32> {
  %y = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, sparsec.slots = array<i64: 0>} : (tensor<1x8xf32>, tensor<8x16xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

// CHECK: error: expected exactly one function to emit, found 2
func.func @a() { return }
func.func @b() { return }

// -----

// CHECK: error: the input side of sparse_linear takes its active neurons from the input's zeros and a [K, N] weight (run sparsec-weight-layout)
func.func @main(%x: tensor<1x16xf32>, %w: tensor<16x8xf32>, %m: tensor<1x16xi1>) -> tensor<1x8xf32> {
  %y = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode predicted>, sparsec.slots = array<i64: 0>} : (tensor<1x16xf32>, tensor<16x8xf32>, tensor<1x16xi1>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}
