// RUN: sparsec-opt %s --sparsec-widen-half | FileCheck %s

// A half-precision matmul runs in float32 between casts.
// CHECK-LABEL: func.func @matmul
// CHECK: %[[A:.*]] = sparsec.cast %arg0 : tensor<2x4xf16> -> tensor<2x4xf32>
// CHECK: %[[B:.*]] = sparsec.cast %arg1 : tensor<4x3xf16> -> tensor<4x3xf32>
// CHECK: %[[Y:.*]] = sparsec.matmul %[[A]], %[[B]] : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
// CHECK: %[[H:.*]] = sparsec.cast %[[Y]] : tensor<2x3xf32> -> tensor<2x3xf16>
// CHECK: sparsec.relu %[[H]] : tensor<2x3xf16>
func.func @matmul(%a: tensor<2x4xf16>, %b: tensor<4x3xf16>) -> tensor<2x3xf16> {
  %y = sparsec.matmul %a, %b : tensor<2x4xf16>, tensor<4x3xf16> -> tensor<2x3xf16>
  %r = sparsec.relu %y : tensor<2x3xf16>
  return %r : tensor<2x3xf16>
}

// A linear reads its float16 weight as it is; the input and bias widen.
sparsec.global @w16 : tensor<3x4xf16> {source = "w16"}
// CHECK-LABEL: func.func @linear
// CHECK: %[[W:.*]] = sparsec.weight @w16
// CHECK: %[[X:.*]] = sparsec.cast %arg0 : tensor<2x4xf16> -> tensor<2x4xf32>
// CHECK: %[[BIAS:.*]] = sparsec.cast %arg1 : tensor<3xf16> -> tensor<3xf32>
// CHECK: %[[L:.*]] = sparsec.linear %[[X]], %[[W]], %[[BIAS]] {transpose_weight} : tensor<2x4xf32>, tensor<3x4xf16>, tensor<3xf32> -> tensor<2x3xf32>
// CHECK: sparsec.cast %[[L]] : tensor<2x3xf32> -> tensor<2x3xf16>
func.func @linear(%x: tensor<2x4xf16>, %b: tensor<3xf16>) -> tensor<2x3xf16> {
  %w = sparsec.weight @w16 : tensor<3x4xf16>
  %y = sparsec.linear %x, %w, %b {transpose_weight} : tensor<2x4xf16>, tensor<3x4xf16>, tensor<3xf16> -> tensor<2x3xf16>
  return %y : tensor<2x3xf16>
}

// Attention: every half operand and result (output, present key and
// value) crosses a cast.
// CHECK-LABEL: func.func @attention
// CHECK-COUNT-5: sparsec.cast %arg{{[0-9]}} : tensor<1x2x3x4xf16> -> tensor<1x2x3x4xf32>
// CHECK: %[[O:[a-z_0-9]+]], %[[K:[a-z_0-9]+]], %[[V:[a-z_0-9]+]] = sparsec.attention {{.*}} -> (tensor<1x2x3x4xf32>, tensor<1x2x6x4xf32>, tensor<1x2x6x4xf32>)
// CHECK: sparsec.cast %[[O]] : tensor<1x2x3x4xf32> -> tensor<1x2x3x4xf16>
// CHECK: sparsec.cast %[[K]] : tensor<1x2x6x4xf32> -> tensor<1x2x6x4xf16>
// CHECK: sparsec.cast %[[V]] : tensor<1x2x6x4xf32> -> tensor<1x2x6x4xf16>
func.func @attention(%q: tensor<1x2x3x4xf16>, %k: tensor<1x2x3x4xf16>, %v: tensor<1x2x3x4xf16>, %pk: tensor<1x2x3x4xf16>, %pv: tensor<1x2x3x4xf16>) -> (tensor<1x2x3x4xf16>, tensor<1x2x6x4xf16>, tensor<1x2x6x4xf16>) {
  %o, %k2, %v2 = sparsec.attention %q, %k, %v past(%pk, %pv) {causal, resultSegmentSizes = array<i32: 1, 1, 1>} : (tensor<1x2x3x4xf16>, tensor<1x2x3x4xf16>, tensor<1x2x3x4xf16>, tensor<1x2x3x4xf16>, tensor<1x2x3x4xf16>) -> (tensor<1x2x3x4xf16>, tensor<1x2x6x4xf16>, tensor<1x2x6x4xf16>)
  return %o, %k2, %v2 : tensor<1x2x3x4xf16>, tensor<1x2x6x4xf16>, tensor<1x2x6x4xf16>
}

// float32 and float64 products are left alone.
// CHECK-LABEL: func.func @wide
// CHECK-NOT: sparsec.cast
// CHECK: return
func.func @wide(%a: tensor<2x4xf32>, %b: tensor<4x3xf32>, %c: tensor<2x4xf64>, %d: tensor<4x3xf64>) -> (tensor<2x3xf32>, tensor<2x3xf64>) {
  %y = sparsec.matmul %a, %b : tensor<2x4xf32>, tensor<4x3xf32> -> tensor<2x3xf32>
  %z = sparsec.matmul %c, %d : tensor<2x4xf64>, tensor<4x3xf64> -> tensor<2x3xf64>
  return %y, %z : tensor<2x3xf32>, tensor<2x3xf64>
}
