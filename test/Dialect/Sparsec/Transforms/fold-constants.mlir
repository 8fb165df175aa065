// RUN: sparsec-opt %s --sparsec-fold-constants | FileCheck %s

// The exporters' shape chain folds to one constant once dims are static.
// CHECK-LABEL: func.func @shape_chain
func.func @shape_chain(%x: tensor<1x71x256xf32>) -> tensor<1x71x4x64xf32> {
  // CHECK-NOT: sparsec.shape
  // CHECK-NOT: sparsec.gather
  // CHECK-NOT: sparsec.concat
  // CHECK: %[[S:.*]] = sparsec.constant dense<[1, 71, 4, 64]> : tensor<4xi64>
  // CHECK: sparsec.reshape %{{.*}}, %[[S]]
  %s = sparsec.shape %x : tensor<1x71x256xf32> -> tensor<3xi64>
  %i0 = sparsec.constant dense<0> : tensor<i64>
  %i1 = sparsec.constant dense<1> : tensor<i64>
  %d0 = sparsec.gather %s, %i0 {axis = 0 : i64} : tensor<3xi64>, tensor<i64> -> tensor<i64>
  %d1 = sparsec.gather %s, %i1 {axis = 0 : i64} : tensor<3xi64>, tensor<i64> -> tensor<i64>
  %u0 = sparsec.unsqueeze %d0 {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %u1 = sparsec.unsqueeze %d1 {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %c4 = sparsec.constant dense<4> : tensor<1xi64>
  %c64 = sparsec.constant dense<64> : tensor<1xi64>
  %shape = sparsec.concat %u0, %u1, %c4, %c64 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %r = sparsec.reshape %x, %shape : tensor<1x71x256xf32>, tensor<4xi64> -> tensor<1x71x4x64xf32>
  return %r : tensor<1x71x4x64xf32>
}

// Integer arithmetic, comparisons, casts, where-free masks and ranges.
// CHECK-LABEL: func.func @arith
func.func @arith() -> (tensor<3xi64>, tensor<3xi1>, tensor<2xf32>, tensor<2x3xi64>) {
  // CHECK-DAG: sparsec.constant dense<[2, 4, 6]> : tensor<3xi64>
  // CHECK-DAG: sparsec.constant dense<[false, true, true]> : tensor<3xi1>
  // CHECK-DAG: sparsec.constant dense<[1.000000e+00, 3.000000e+00]> : tensor<2xf32>
  // CHECK-DAG: sparsec.constant dense<{{\[\[}}0, 1, 2], [1, 2, 3]]> : tensor<2x3xi64>
  // CHECK-NOT: sparsec.add
  // CHECK-NOT: sparsec.range
  %a = sparsec.constant dense<[1, 2, 3]> : tensor<3xi64>
  %two = sparsec.constant dense<2> : tensor<i64>
  %m = sparsec.mul %a, %two : tensor<3xi64>, tensor<i64> -> tensor<3xi64>
  %c = sparsec.compare gt, %a, %two : tensor<3xi64>, tensor<i64> -> tensor<3xi1>
  %ge = sparsec.compare ge, %a, %two : tensor<3xi64>, tensor<i64> -> tensor<3xi1>
  %f = sparsec.constant dense<[1, 3]> : tensor<2xi64>
  %ff = sparsec.cast %f : tensor<2xi64> -> tensor<2xf32>
  %z = sparsec.constant dense<0> : tensor<i64>
  %n = sparsec.constant dense<3> : tensor<i64>
  %one = sparsec.constant dense<1> : tensor<i64>
  %r = sparsec.range %z, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %row = sparsec.unsqueeze %r {axes = array<i64: 0>} : tensor<?xi64> -> tensor<1x?xi64>
  %col = sparsec.constant dense<[[0], [1]]> : tensor<2x1xi64>
  %sum = sparsec.add %row, %col : tensor<1x?xi64>, tensor<2x1xi64> -> tensor<2x?xi64>
  %cast = sparsec.cast %sum : tensor<2x?xi64> -> tensor<2x?xi64>
  %shape23 = sparsec.constant dense<[2, 3]> : tensor<2xi64>
  %out = sparsec.reshape %cast, %shape23 : tensor<2x?xi64>, tensor<2xi64> -> tensor<2x3xi64>
  return %m, %ge, %ff, %out : tensor<3xi64>, tensor<3xi1>, tensor<2xf32>, tensor<2x3xi64>
}

// Nothing to fold: weights and activations stay.
// CHECK-LABEL: func.func @keeps_dynamic
func.func @keeps_dynamic(%x: tensor<?x8xf32>) -> tensor<2xi64> {
  // CHECK: sparsec.shape
  %s = sparsec.shape %x : tensor<?x8xf32> -> tensor<2xi64>
  return %s : tensor<2xi64>
}

// Negative axes, start and end count from the back (ONNX keeps them
// negative through the importer); they used to be read unsigned, and a
// negative concat axis crashed the folder.
// CHECK-LABEL: func.func @negative_axes
func.func @negative_axes(%x: tensor<2x3x5xf32>) -> (tensor<2xi64>, tensor<2xi64>, tensor<2x2xi64>, tensor<2x3xi64>) {
  // CHECK-DAG: sparsec.constant dense<[3, 5]> : tensor<2xi64>
  // CHECK-DAG: sparsec.constant dense<[2, 3]> : tensor<2xi64>
  // CHECK-DAG: sparsec.constant dense<{{\[}}[3, 1], [6, 4]]> : tensor<2x2xi64>
  // CHECK-DAG: sparsec.constant dense<{{\[}}[7, 9, 10], [8, 11, 12]]> : tensor<2x3xi64>
  // CHECK-NOT: sparsec.shape
  // CHECK-NOT: sparsec.gather
  // CHECK-NOT: sparsec.concat
  %s = sparsec.shape %x {start = -2 : i64} : tensor<2x3x5xf32> -> tensor<2xi64>
  %s2 = sparsec.shape %x {start = 0 : i64, end = -1 : i64} : tensor<2x3x5xf32> -> tensor<2xi64>
  %c = sparsec.constant dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi64>
  %i = sparsec.constant dense<[2, 0]> : tensor<2xi64>
  %g = sparsec.gather %c, %i {axis = -1 : i64} : tensor<2x3xi64>, tensor<2xi64> -> tensor<2x2xi64>
  %a = sparsec.constant dense<[[7], [8]]> : tensor<2x1xi64>
  %b = sparsec.constant dense<[[9, 10], [11, 12]]> : tensor<2x2xi64>
  %k = sparsec.concat %a, %b {axis = -1 : i64} : (tensor<2x1xi64>, tensor<2x2xi64>) -> tensor<2x3xi64>
  return %s, %s2, %g, %k : tensor<2xi64>, tensor<2xi64>, tensor<2x2xi64>, tensor<2x3xi64>
}
