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
