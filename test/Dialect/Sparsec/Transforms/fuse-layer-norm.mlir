// RUN: sparsec-opt %s --split-input-file --sparsec-fuse-layer-norm | FileCheck %s

sparsec.global @g : tensor<16xf32> {source = "g"}
sparsec.global @b : tensor<16xf32> {source = "b"}
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<?x16xf32>)
// CHECK: %[[N:.*]] = sparsec.layer_norm %[[X]], %{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<?x16xf32>
// CHECK-NEXT: return %[[N]]
func.func @layer_norm(%x: tensor<?x16xf32>) -> tensor<?x16xf32> {
  %g = sparsec.weight @g : tensor<16xf32>
  %b = sparsec.weight @b : tensor<16xf32>
  %two = sparsec.constant dense<2.0> : tensor<f32>
  %eps = sparsec.constant dense<1.0e-5> : tensor<f32>
  %m = sparsec.reduce mean, %x {axes = array<i64: -1>, keepdims = true} : tensor<?x16xf32> -> tensor<?x1xf32>
  %d = sparsec.sub %x, %m : tensor<?x16xf32>, tensor<?x1xf32> -> tensor<?x16xf32>
  %p = sparsec.pow %d, %two : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xf32>
  %v = sparsec.reduce mean, %p {axes = array<i64: -1>, keepdims = true} : tensor<?x16xf32> -> tensor<?x1xf32>
  %a = sparsec.add %v, %eps : tensor<?x1xf32>, tensor<f32> -> tensor<?x1xf32>
  %s = sparsec.sqrt %a : tensor<?x1xf32>
  %n = sparsec.div %d, %s : tensor<?x16xf32>, tensor<?x1xf32> -> tensor<?x16xf32>
  %y = sparsec.mul %n, %g : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
  %z = sparsec.add %y, %b : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
  return %z : tensor<?x16xf32>
}

// -----

sparsec.global @g : tensor<16xf32> {source = "g"}
// CHECK-LABEL: func.func @rms_norm
// CHECK: sparsec.rms_norm %arg0, %{{.*}} : tensor<2x16xf32>, tensor<16xf32> -> tensor<2x16xf32>
// CHECK-NOT: sparsec.sqrt
func.func @rms_norm(%x: tensor<2x16xf32>) -> tensor<2x16xf32> {
  %g = sparsec.weight @g : tensor<16xf32>
  %eps = sparsec.constant dense<1.0e-6> : tensor<f32>
  %sq = sparsec.mul %x, %x : tensor<2x16xf32>, tensor<2x16xf32> -> tensor<2x16xf32>
  %v = sparsec.reduce mean, %sq {axes = array<i64: 1>, keepdims = true} : tensor<2x16xf32> -> tensor<2x1xf32>
  %a = sparsec.add %eps, %v : tensor<f32>, tensor<2x1xf32> -> tensor<2x1xf32>
  %s = sparsec.sqrt %a : tensor<2x1xf32>
  %n = sparsec.div %x, %s : tensor<2x16xf32>, tensor<2x1xf32> -> tensor<2x16xf32>
  %y = sparsec.mul %g, %n : tensor<16xf32>, tensor<2x16xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

sparsec.global @g : tensor<16xf32> {source = "g"}
// Mean over the wrong axis: not a layer norm.
// CHECK-LABEL: func.func @wrong_axis
// CHECK-NOT: sparsec.layer_norm
func.func @wrong_axis(%x: tensor<4x16xf32>) -> tensor<4x16xf32> {
  %g = sparsec.weight @g : tensor<16xf32>
  %two = sparsec.constant dense<2.0> : tensor<f32>
  %eps = sparsec.constant dense<1.0e-5> : tensor<f32>
  %m = sparsec.reduce mean, %x {axes = array<i64: 0>, keepdims = true} : tensor<4x16xf32> -> tensor<1x16xf32>
  %d = sparsec.sub %x, %m : tensor<4x16xf32>, tensor<1x16xf32> -> tensor<4x16xf32>
  %p = sparsec.pow %d, %two : tensor<4x16xf32>, tensor<f32> -> tensor<4x16xf32>
  %v = sparsec.reduce mean, %p {axes = array<i64: 0>, keepdims = true} : tensor<4x16xf32> -> tensor<1x16xf32>
  %a = sparsec.add %v, %eps : tensor<1x16xf32>, tensor<f32> -> tensor<1x16xf32>
  %s = sparsec.sqrt %a : tensor<1x16xf32>
  %n = sparsec.div %d, %s : tensor<4x16xf32>, tensor<1x16xf32> -> tensor<4x16xf32>
  %y = sparsec.mul %n, %g : tensor<4x16xf32>, tensor<16xf32> -> tensor<4x16xf32>
  return %y : tensor<4x16xf32>
}
