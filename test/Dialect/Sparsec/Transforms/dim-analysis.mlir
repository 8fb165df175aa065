// RUN: sparsec-opt %s --sparsec-fold-constants | FileCheck %s

// transformers' Falcon: `x.transpose(1, 2).reshape(batch, heads, q_len, hd)`
// with batch and q_len read from the query split's shape. The key's dims
// come from the same fused tensor (slices of axis 3, then a reshape that
// copies dims 0 and 1), so the reshape keeps the shape and folds away.
// CHECK-LABEL: func.func @falcon_heads
// CHECK-NOT: sparsec.reshape %{{.*}} -> tensor<?x8x?x4xf32>
// CHECK: %[[T:.*]] = sparsec.transpose %{{.*}} -> tensor<?x8x?x4xf32>
// CHECK: return %[[T]]
func.func @falcon_heads(%qkv: tensor<?x?x2x6x4xf32>) -> tensor<?x8x?x4xf32> {
  %a3 = sparsec.constant dense<3> : tensor<1xi64>
  %one = sparsec.constant dense<1> : tensor<1xi64>
  %c0 = sparsec.constant dense<0> : tensor<1xi64>
  %c4 = sparsec.constant dense<4> : tensor<1xi64>
  %c5 = sparsec.constant dense<5> : tensor<1xi64>
  %heads = sparsec.constant dense<[0, 0, 8, 4]> : tensor<4xi64>
  %qg = sparsec.slice %qkv, %c0, %c4, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x4x4xf32>
  %qs = sparsec.reshape %qg, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %k5 = sparsec.slice %qkv, %c4, %c5, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x1x4xf32>
  %s5 = sparsec.shape %qg : tensor<?x?x2x4x4xf32> -> tensor<5xi64>
  %ke = sparsec.expand %k5, %s5 : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %ks = sparsec.reshape %ke, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %kt = sparsec.transpose %ks {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  // (batch, 8, q_len, 4) from the query's shape.
  %qshape = sparsec.shape %qs : tensor<?x?x8x4xf32> -> tensor<4xi64>
  %i0 = sparsec.constant dense<0> : tensor<i64>
  %i1 = sparsec.constant dense<1> : tensor<i64>
  %b = sparsec.gather %qshape, %i0 : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %s = sparsec.gather %qshape, %i1 : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %bu = sparsec.unsqueeze %b {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %su = sparsec.unsqueeze %s {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %h = sparsec.constant dense<8> : tensor<1xi64>
  %target = sparsec.concat %bu, %h, %su, %c4 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %r = sparsec.reshape %kt, %target : tensor<?x8x?x4xf32>, tensor<4xi64> -> tensor<?x8x?x4xf32>
  return %r : tensor<?x8x?x4xf32>
}

// The same target read from the shape of another input: its batch and
// length are not known to be the key's, so the reshape stays.
// CHECK-LABEL: func.func @other_tensor
// CHECK: sparsec.reshape %arg0, %{{.*}} : tensor<?x8x?x4xf32>, tensor<4xi64> -> tensor<?x8x?x4xf32>
func.func @other_tensor(%k: tensor<?x8x?x4xf32>, %other: tensor<?x?x8x4xf32>) -> tensor<?x8x?x4xf32> {
  %qshape = sparsec.shape %other : tensor<?x?x8x4xf32> -> tensor<4xi64>
  %i0 = sparsec.constant dense<0> : tensor<i64>
  %i1 = sparsec.constant dense<1> : tensor<i64>
  %b = sparsec.gather %qshape, %i0 : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %s = sparsec.gather %qshape, %i1 : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %bu = sparsec.unsqueeze %b {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %su = sparsec.unsqueeze %s {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %h = sparsec.constant dense<8> : tensor<1xi64>
  %c4 = sparsec.constant dense<4> : tensor<1xi64>
  %target = sparsec.concat %bu, %h, %su, %c4 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %r = sparsec.reshape %k, %target : tensor<?x8x?x4xf32>, tensor<4xi64> -> tensor<?x8x?x4xf32>
  return %r : tensor<?x8x?x4xf32>
}

// Dims read from the input itself, swapped: [s, b] of a [b, s] input is
// no copy, even though the types agree.
// CHECK-LABEL: func.func @swapped
// CHECK: sparsec.reshape
func.func @swapped(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %sh = sparsec.shape %x : tensor<?x?xf32> -> tensor<2xi64>
  %i0 = sparsec.constant dense<0> : tensor<i64>
  %i1 = sparsec.constant dense<1> : tensor<i64>
  %b = sparsec.gather %sh, %i0 : tensor<2xi64>, tensor<i64> -> tensor<i64>
  %s = sparsec.gather %sh, %i1 : tensor<2xi64>, tensor<i64> -> tensor<i64>
  %bu = sparsec.unsqueeze %b {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %su = sparsec.unsqueeze %s {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %target = sparsec.concat %su, %bu {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %r = sparsec.reshape %x, %target : tensor<?x?xf32>, tensor<2xi64> -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// [b, -1] of a [b, s] input, b from its own shape: the -1 is s.
// CHECK-LABEL: func.func @inferred
// CHECK-NOT: sparsec.reshape
// CHECK: return %arg0
func.func @inferred(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %sh = sparsec.shape %x {end = 1 : i64} : tensor<?x?xf32> -> tensor<1xi64>
  %m1 = sparsec.constant dense<-1> : tensor<1xi64>
  %target = sparsec.concat %sh, %m1 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>) -> tensor<2xi64>
  %r = sparsec.reshape %x, %target : tensor<?x?xf32>, tensor<2xi64> -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// Two -1s cannot both be inferred: left alone.
// CHECK-LABEL: func.func @two_inferred
// CHECK: sparsec.reshape
func.func @two_inferred(%x: tensor<?x?xf32>) -> tensor<?x?xf32> {
  %target = sparsec.constant dense<[-1, -1]> : tensor<2xi64>
  %r = sparsec.reshape %x, %target : tensor<?x?xf32>, tensor<2xi64> -> tensor<?x?xf32>
  return %r : tensor<?x?xf32>
}

// torch's flatten(2, 3) of [batch, seq, 2, 4, 4]: a reshape to
// [batch, seq, -1, 4], batch and seq read from the input's own shape. The
// dynamic dims cancel, so the -1 is 8.
// CHECK-LABEL: func.func @flatten_heads
// CHECK: sparsec.reshape %arg0, %{{.*}} : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
func.func @flatten_heads(%x: tensor<?x?x2x4x4xf32>) -> tensor<?x?x?x4xf32> {
  %sh = sparsec.shape %x {end = 2 : i64} : tensor<?x?x2x4x4xf32> -> tensor<2xi64>
  %m1 = sparsec.constant dense<-1> : tensor<1xi64>
  %d = sparsec.constant dense<4> : tensor<1xi64>
  %t = sparsec.concat %sh, %m1, %d {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %r = sparsec.reshape %x, %t : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x?x4xf32>
  return %r : tensor<?x?x?x4xf32>
}

// The same with batch and seq from an unrelated tensor: the -1 stays
// unknown.
// CHECK-LABEL: func.func @flatten_other
// CHECK: sparsec.reshape %arg0, %{{.*}} -> tensor<?x?x?x4xf32>
func.func @flatten_other(%x: tensor<?x?x2x4x4xf32>, %y: tensor<?x?xf32>) -> tensor<?x?x?x4xf32> {
  %sh = sparsec.shape %y : tensor<?x?xf32> -> tensor<2xi64>
  %m1 = sparsec.constant dense<-1> : tensor<1xi64>
  %d = sparsec.constant dense<4> : tensor<1xi64>
  %t = sparsec.concat %sh, %m1, %d {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %r = sparsec.reshape %x, %t : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x?x4xf32>
  return %r : tensor<?x?x?x4xf32>
}
