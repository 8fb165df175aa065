// RUN: sparsec-opt %s --split-input-file --sparsec-fuse-linear | FileCheck %s

sparsec.global @w : tensor<8x16xf32> {source = "w"}
sparsec.global @b : tensor<16xf32> {source = "b"}
// CHECK-LABEL: func.func @matmul_add
// CHECK-SAME: (%[[X:.*]]: tensor<?x?x8xf32>)
func.func @matmul_add(%x: tensor<?x?x8xf32>) -> tensor<?x?x16xf32> {
  // CHECK-DAG: %[[W:.*]] = sparsec.weight @w
  // CHECK-DAG: %[[B:.*]] = sparsec.weight @b
  // CHECK: %[[Y:.*]] = sparsec.linear %[[X]], %[[W]], %[[B]] : tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
  // CHECK-NOT: sparsec.matmul
  // CHECK-NOT: sparsec.add
  // CHECK: return %[[Y]]
  %w = sparsec.weight @w : tensor<8x16xf32>
  %b = sparsec.weight @b : tensor<16xf32>
  %m = sparsec.matmul %x, %w : tensor<?x?x8xf32>, tensor<8x16xf32> -> tensor<?x?x16xf32>
  %y = sparsec.add %b, %m : tensor<16xf32>, tensor<?x?x16xf32> -> tensor<?x?x16xf32>
  return %y : tensor<?x?x16xf32>
}

// -----

sparsec.global @w : tensor<8x16xf32> {source = "w"}
// No bias: a bare linear.
// CHECK-LABEL: func.func @no_bias
// CHECK: sparsec.linear %{{.*}}, %{{.*}} : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
func.func @no_bias(%x: tensor<2x8xf32>) -> tensor<2x16xf32> {
  %w = sparsec.weight @w : tensor<8x16xf32>
  %m = sparsec.matmul %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  return %m : tensor<2x16xf32>
}

// -----

// Activation times activation (attention scores) is not a linear.
// CHECK-LABEL: func.func @not_a_weight
// CHECK: sparsec.matmul
// CHECK-NOT: sparsec.linear
func.func @not_a_weight(%a: tensor<2x8xf32>, %b: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %m = sparsec.matmul %a, %b : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  return %m : tensor<2x16xf32>
}

// -----

sparsec.global @w : tensor<8x16xf32> {source = "w"}
// An addend that is an activation stays a separate add (residual).
// CHECK-LABEL: func.func @residual
// CHECK: %[[L:.*]] = sparsec.linear %{{.*}}, %{{.*}} : tensor<2x8xf32>
// CHECK: sparsec.add %[[L]], %{{.*}}
func.func @residual(%x: tensor<2x8xf32>, %r: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %w = sparsec.weight @w : tensor<8x16xf32>
  %m = sparsec.matmul %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %y = sparsec.add %m, %r : tensor<2x16xf32>, tensor<2x16xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}
