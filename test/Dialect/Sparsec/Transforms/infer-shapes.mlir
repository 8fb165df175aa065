// RUN: sparsec-opt %s --sparsec-infer-shapes | FileCheck %s
// RUN: sparsec-opt %s --sparsec-infer-shapes="dims=batch=2,seq=5" | FileCheck %s --check-prefix=PIN

// CHECK-LABEL: func.func @refine
// CHECK-SAME: -> tensor<3x2xf32>
func.func @refine(%x: tensor<2x3xf32>) -> tensor<?x?xf32> {
  // CHECK: sparsec.transpose %{{.*}} : tensor<2x3xf32> -> tensor<3x2xf32>
  %0 = sparsec.transpose %x {permutation = array<i64: 1, 0>} : tensor<2x3xf32> -> tensor<?x?xf32>
  // CHECK: sparsec.relu %{{.*}} : tensor<3x2xf32>
  %1 = sparsec.relu %0 : tensor<?x?xf32>
  // CHECK: return %{{.*}} : tensor<3x2xf32>
  return %1 : tensor<?x?xf32>
}

// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<?x?xf32> {
  // CHECK: sparsec.linear {{.*}} -> tensor<4x16xf32>
  %0 = sparsec.linear %x, %w, %b : tensor<4x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<?x?xf32>
  // CHECK: sparsec.add {{.*}} -> tensor<4x16xf32>
  %1 = sparsec.add %0, %b : tensor<?x?xf32>, tensor<16xf32> -> tensor<?x?xf32>
  // CHECK: sparsec.unsqueeze {{.*}} -> tensor<4x1x16xf32>
  %2 = sparsec.unsqueeze %1 {axes = array<i64: 1>} : tensor<?x?xf32> -> tensor<?x1x?xf32>
  // CHECK: sparsec.reduce sum, {{.*}} -> tensor<4x16xf32>
  %3 = sparsec.reduce sum, %2 {axes = array<i64: 1>, keepdims = false} : tensor<?x1x?xf32> -> tensor<?x?xf32>
  return %3 : tensor<?x?xf32>
}

// Named dims pin function inputs, then everything downstream follows.
// PIN-LABEL: func.func @pinned
// PIN-SAME: (%{{.*}}: tensor<2x5xi64> {sparsec.dims = ["batch", "seq"]}, %{{.*}}: tensor<7x16xf32>) -> tensor<2x5x16xf32>
// PIN: sparsec.embedding {{.*}} -> tensor<2x5x16xf32>
// CHECK-LABEL: func.func @pinned
// CHECK-SAME: tensor<?x?xi64>
func.func @pinned(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"]}, %t: tensor<7x16xf32>) -> tensor<?x?x16xf32> {
  %e = sparsec.embedding %t, %ids : tensor<7x16xf32>, tensor<?x?xi64> -> tensor<?x?x16xf32>
  return %e : tensor<?x?x16xf32>
}

// A constant shape with a negative size is not a type (it was refined to
// tensor<-3x2xf32>, which later stages looped on): the dim stays dynamic
// and the runtime rejects the shape when it runs.
// CHECK-LABEL: func.func @negative_constant_shape
// CHECK-SAME: -> tensor<?x2xf32>
// CHECK: sparsec.constant_of_shape {{.*}} -> tensor<?x2xf32>
func.func @negative_constant_shape() -> tensor<?x2xf32> {
  %s = sparsec.constant dense<[-3, 2]> : tensor<2xi64>
  %y = sparsec.constant_of_shape %s, 0.000000e+00 : f32 : tensor<2xi64> -> tensor<?x2xf32>
  return %y : tensor<?x2xf32>
}
