// RUN: sparsec-opt %s --split-input-file --sparsec-fold-head-transposes | FileCheck %s

// The prompt form: q, k and v split into heads and transposed, the
// result transposed back. The attention takes the split projections and
// gives the result the output projection reads; no transpose is left.
// CHECK-LABEL: func.func @prompt
// CHECK-SAME: (%[[Q:.*]]: tensor<?x?x4x8xf32>, %[[K:.*]]: tensor<?x?x4x8xf32>, %[[V:.*]]: tensor<?x?x4x8xf32>, %[[M:.*]]: tensor<?x1x?x?xf32>)
// CHECK-NOT: sparsec.transpose
// CHECK: %[[O:.*]] = sparsec.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {{{.*}}scale = 5.000000e-01 : f32, token_major} : (tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x1x?x?xf32>) -> tensor<?x?x4x8xf32>
// CHECK-NOT: sparsec.transpose
// CHECK: return %[[O]] : tensor<?x?x4x8xf32>
func.func @prompt(%qs: tensor<?x?x4x8xf32>, %ks: tensor<?x?x4x8xf32>,
                  %vs: tensor<?x?x4x8xf32>, %m: tensor<?x1x?x?xf32>)
    -> tensor<?x?x4x8xf32> {
  %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %k = sparsec.transpose %ks {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %v = sparsec.transpose %vs {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %a = sparsec.attention %q, %k, %v mask %m {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x1x?x?xf32>) -> tensor<?x4x?x8xf32>
  %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x4x?x8xf32> -> tensor<?x?x4x8xf32>
  return %o : tensor<?x?x4x8xf32>
}

// -----

// With a cache: the past and present keep [B, H, P, D]; the causal flag, the scale and the discardable
// attributes carry over. A transpose with another use stays for it.
// CHECK-LABEL: func.func @cached
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<1x?x2x8xf32>, %[[K:[a-z0-9]+]]: tensor<1x?x2x8xf32>, %[[V:[a-z0-9]+]]: tensor<1x?x2x8xf32>, %[[PK:[a-z0-9]+]]: tensor<1x2x?x8xf32>, %[[PV:[a-z0-9]+]]: tensor<1x2x?x8xf32>)
// CHECK: %[[KT:.*]] = sparsec.transpose %[[K]]
// CHECK: %[[O:.*]], %[[NK:.*]], %[[NV:.*]] = sparsec.attention %[[Q]], %[[K]], %[[V]] past(%[[PK]], %[[PV]]) {causal, {{.*}}scale = 2.500000e-01 : f32, sparsec.tag = 7 : i64, token_major} : (tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32>, tensor<1x?x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x?x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
// CHECK: return %[[O]], %[[NK]], %[[NV]], %[[KT]]
func.func @cached(%qs: tensor<1x?x2x8xf32>, %ks: tensor<1x?x2x8xf32>,
                  %vs: tensor<1x?x2x8xf32>, %pk: tensor<1x2x?x8xf32>,
                  %pv: tensor<1x2x?x8xf32>)
    -> (tensor<1x?x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) {
  %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x?x2x8xf32> -> tensor<1x2x?x8xf32>
  %k = sparsec.transpose %ks {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x?x2x8xf32> -> tensor<1x2x?x8xf32>
  %v = sparsec.transpose %vs {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x?x2x8xf32> -> tensor<1x2x?x8xf32>
  %a, %nk, %nv = sparsec.attention %q, %k, %v past(%pk, %pv) {causal, resultSegmentSizes = array<i32: 1, 1, 1>, scale = 0.25 : f32, sparsec.tag = 7} : (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>) -> (tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>)
  %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x2x?x8xf32> -> tensor<1x?x2x8xf32>
  return %o, %nk, %nv, %k : tensor<1x?x2x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>, tensor<1x2x?x8xf32>
}

// -----

// Left alone: the result has a second use; the key is not transposed
// (already head-major); the result is transposed another way.
// CHECK-LABEL: func.func @partial
// CHECK-NOT: token_major
// CHECK: return
func.func @partial(%qs: tensor<1x?x4x8xf32>, %k: tensor<1x4x?x8xf32>,
                   %vs: tensor<1x?x4x8xf32>)
    -> (tensor<1x?x4x8xf32>, tensor<1x4x?x8xf32>, tensor<1x?x4x8xf32>, tensor<1x4x8x?xf32>) {
  %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x?x4x8xf32> -> tensor<1x4x?x8xf32>
  %kt = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x?x4x8xf32> -> tensor<1x4x?x8xf32>
  %v = sparsec.transpose %vs {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x?x4x8xf32> -> tensor<1x4x?x8xf32>
  // Two uses of the result.
  %a = sparsec.attention %q, %kt, %v {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32>
  %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x?x8xf32> -> tensor<1x?x4x8xf32>
  // A key that is no transpose.
  %b = sparsec.attention %q, %k, %v {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32>
  %p = sparsec.transpose %b {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x?x8xf32> -> tensor<1x?x4x8xf32>
  // The result transposed to [B, H, D, S].
  %c = sparsec.attention %q, %kt, %v {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32>
  %r = sparsec.transpose %c {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x4x?x8xf32> -> tensor<1x4x8x?xf32>
  return %o, %a, %p, %r : tensor<1x?x4x8xf32>, tensor<1x4x?x8xf32>, tensor<1x?x4x8xf32>, tensor<1x4x8x?xf32>
}

// -----

// Placed on different devices (the hybrid target): left alone.
// CHECK-LABEL: func.func @placed
// CHECK-NOT: token_major
// CHECK: return
func.func @placed(%qs: tensor<1x?x4x8xf32>) -> tensor<1x?x4x8xf32> {
  %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>, sparsec.device = "cpu"} : tensor<1x?x4x8xf32> -> tensor<1x4x?x8xf32>
  %a = sparsec.attention %q, %q, %q {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>, tensor<1x4x?x8xf32>) -> tensor<1x4x?x8xf32>
  %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x?x8xf32> -> tensor<1x?x4x8xf32>
  return %o : tensor<1x?x4x8xf32>
}
