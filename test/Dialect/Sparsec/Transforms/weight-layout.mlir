// RUN: sparsec-opt %s --split-input-file --sparsec-weight-layout | FileCheck %s

sparsec.global @w : tensor<16x8xf32> {source = "w"}
sparsec.global @b : tensor<16xf32> {source = "b"}
// CHECK-NOT: sparsec.global @w :
// CHECK: sparsec.global @w.T : tensor<8x16xf32> {source = "w", transforms = ["transpose"]}
// CHECK-LABEL: func.func @transposed
// CHECK: %[[WT:.*]] = sparsec.weight @w.T : tensor<8x16xf32>
// CHECK: sparsec.linear %arg0, %[[WT]], %{{.*}} : tensor<2x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<2x16xf32>
// CHECK-NOT: transpose_weight
func.func @transposed(%x: tensor<2x8xf32>) -> tensor<2x16xf32> {
  %w = sparsec.weight @w : tensor<16x8xf32>
  %b = sparsec.weight @b : tensor<16xf32>
  %y = sparsec.linear %x, %w, %b {transpose_weight} : tensor<2x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// A transposed weight computed at run time gets an explicit transpose.
// CHECK-LABEL: func.func @runtime_weight
// CHECK: %[[T:.*]] = sparsec.transpose %arg1 {permutation = array<i64: 1, 0>} : tensor<16x8xf32> -> tensor<8x16xf32>
// CHECK: sparsec.linear %arg0, %[[T]] : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
func.func @runtime_weight(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w {transpose_weight} : tensor<2x8xf32>, tensor<16x8xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

// A weight used both ways keeps its original global and gains a transposed one.
sparsec.global @w : tensor<8x8xf32> {source = "w"}
// CHECK: sparsec.global @w : tensor<8x8xf32> {source = "w"}
// CHECK: sparsec.global @w.T : tensor<8x8xf32> {source = "w", transforms = ["transpose"]}
// CHECK-LABEL: func.func @both
func.func @both(%x: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %w = sparsec.weight @w : tensor<8x8xf32>
  %a = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x8xf32> -> tensor<2x8xf32>
  %b = sparsec.linear %x, %w {transpose_weight} : tensor<2x8xf32>, tensor<8x8xf32> -> tensor<2x8xf32>
  return %a, %b : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// The output side of a sparse_linear reads neuron-major [N, K] rows: its
// [K, N] weight is transposed and the op gains transpose_weight. An
// input-side sparse_linear keeps [K, N].
sparsec.global @up : tensor<8x16xf32> {source = "up"}
sparsec.global @down : tensor<16x8xf32> {source = "down"}
// CHECK: sparsec.global @up.T : tensor<16x8xf32> {source = "up", transforms = ["transpose"]}
// CHECK: sparsec.global @down : tensor<16x8xf32> {source = "down"}
// CHECK-LABEL: func.func @sparse_sides
// CHECK: %[[UT:.*]] = sparsec.weight @up.T : tensor<16x8xf32>
// CHECK: sparsec.sparse_linear %arg0, %[[UT]] active %arg1 {mode = #sparsec<sparse_mode predicted>, sparse_dim = #sparsec<sparse_dim output>, transpose_weight}
// CHECK: %[[D:.*]] = sparsec.weight @down : tensor<16x8xf32>
// CHECK: sparsec.sparse_linear %{{.*}}, %[[D]] {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>}
func.func @sparse_sides(%x: tensor<1x8xf32>, %m: tensor<1x16xi1>) -> tensor<1x8xf32> {
  %w = sparsec.weight @up : tensor<8x16xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<1x8xf32>, tensor<8x16xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  %r = sparsec.relu %h : tensor<1x16xf32>
  %w2 = sparsec.weight @down : tensor<16x8xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// Already neuron-major ([N, K] with transpose_weight): left alone.
sparsec.global @upT : tensor<16x8xf32> {source = "upT"}
// CHECK: sparsec.global @upT : tensor<16x8xf32> {source = "upT"}
// CHECK-NOT: sparsec.global
// CHECK-LABEL: func.func @already_nk
// CHECK: sparsec.sparse_linear %arg0, %{{.*}} active %arg1 {{.*}}transpose_weight
func.func @already_nk(%x: tensor<1x8xf32>, %m: tensor<1x16xi1>) -> tensor<1x16xf32> {
  %w = sparsec.weight @upT : tensor<16x8xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, transpose_weight} : (tensor<1x8xf32>, tensor<16x8xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  return %h : tensor<1x16xf32>
}
