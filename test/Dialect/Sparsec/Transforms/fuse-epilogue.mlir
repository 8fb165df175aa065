// RUN: sparsec-opt %s --sparsec-fuse-epilogue | FileCheck %s

// CHECK-LABEL: func.func @relu
// CHECK: %[[Y:.*]] = sparsec.linear %arg0, %arg1 {activation = #sparsec<activation relu>}
// CHECK-NOT: sparsec.relu
// CHECK: return %[[Y]]
func.func @relu(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.relu %y : tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}

// CHECK-LABEL: func.func @gelu_tanh
// CHECK: sparsec.linear %arg0, %arg1 {activation = #sparsec<activation gelu_tanh>}
func.func @gelu_tanh(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.gelu %y {tanh_approx} : tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}

// The linear's plain result is used elsewhere: no fusion.
// CHECK-LABEL: func.func @two_uses
// CHECK: sparsec.linear %arg0, %arg1 :
// CHECK: sparsec.relu
func.func @two_uses(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.relu %y : tensor<2x16xf32>
  return %y, %r : tensor<2x16xf32>, tensor<2x16xf32>
}

// An annotated sparse activation belongs to the sparsify phase.
// CHECK-LABEL: func.func @annotated
// CHECK: sparsec.relu %{{.*}} {sparsity
func.func @annotated(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.relu %y {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile>} : tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}
