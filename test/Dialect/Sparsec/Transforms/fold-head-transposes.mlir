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

// -----

// LLaMA's layer: q and k are rotary embeddings of the head-split
// projections. The rotations move before the head swap, over the tables
// seen token-major ([B, 1, S, D] -> [B, S, 1, D], a view at run time; a
// rank-2 [S, D] table is first given unit leading dims).
// CHECK-LABEL: func.func @rotary
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<?x?x4x8xf32>, %[[K:[a-z0-9]+]]: tensor<?x?x4x8xf32>, %[[V:[a-z0-9]+]]: tensor<?x?x4x8xf32>, %[[C:[a-z0-9]+]]: tensor<?x1x?x8xf32>, %[[S:[a-z0-9]+]]: tensor<?x1x?x8xf32>, %[[T:[a-z0-9]+]]: tensor<5x8xf32>)
// CHECK-DAG: %[[CT:.*]] = sparsec.transpose %[[C]] {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x1x?x8xf32> -> tensor<?x?x1x8xf32>
// CHECK-DAG: %[[ST:.*]] = sparsec.transpose %[[S]] {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x1x?x8xf32> -> tensor<?x?x1x8xf32>
// CHECK-DAG: %[[QR:.*]] = sparsec.rotary %[[Q]], %[[CT]], %[[ST]] : tensor<?x?x4x8xf32>, tensor<?x?x1x8xf32> -> tensor<?x?x4x8xf32>
// CHECK-DAG: %[[TU:.*]] = sparsec.unsqueeze %[[T]] {axes = array<i64: 0, 1>} : tensor<5x8xf32> -> tensor<1x1x5x8xf32>
// CHECK-DAG: %[[TT:.*]] = sparsec.transpose %[[TU]] {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x1x5x8xf32> -> tensor<1x5x1x8xf32>
// CHECK-DAG: %[[KR:.*]] = sparsec.rotary %[[K]], %[[TT]], %[[TT]] : tensor<?x?x4x8xf32>, tensor<1x5x1x8xf32> -> tensor<?x?x4x8xf32>
// CHECK: %[[O:.*]] = sparsec.attention %[[QR]], %[[KR]], %[[V]] {{{.*}}token_major} : (tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>) -> tensor<?x?x4x8xf32>
// CHECK-NOT: sparsec.transpose %[[Q]]
// CHECK-NOT: sparsec.transpose %[[K]]
// CHECK: return %[[O]]
func.func @rotary(%qs: tensor<?x?x4x8xf32>, %ks: tensor<?x?x4x8xf32>,
                  %vs: tensor<?x?x4x8xf32>, %cos: tensor<?x1x?x8xf32>,
                  %sin: tensor<?x1x?x8xf32>, %t: tensor<5x8xf32>)
    -> tensor<?x?x4x8xf32> {
  %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %k = sparsec.transpose %ks {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %v = sparsec.transpose %vs {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %qr = sparsec.rotary %q, %cos, %sin : tensor<?x4x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x4x?x8xf32>
  %kr = sparsec.rotary %k, %t, %t : tensor<?x4x?x8xf32>, tensor<5x8xf32> -> tensor<?x4x?x8xf32>
  %a = sparsec.attention %qr, %kr, %v {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x4x?x8xf32> -> tensor<?x?x4x8xf32>
  return %o : tensor<?x?x4x8xf32>
}

// -----

// Left alone: a table that varies by head ([B, H, S, D]) would need a
// real copy; a rotary with another use; a rotated value.
// CHECK-LABEL: func.func @rotary_kept
// CHECK-NOT: token_major
// CHECK: return
func.func @rotary_kept(%qs: tensor<?x?x4x8xf32>, %ks: tensor<?x?x4x8xf32>,
                       %vs: tensor<?x?x4x8xf32>, %cos: tensor<?x4x?x8xf32>,
                       %c1: tensor<?x1x?x8xf32>)
    -> (tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x4x?x8xf32>, tensor<?x?x4x8xf32>) {
  %q = sparsec.transpose %qs {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %k = sparsec.transpose %ks {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %v = sparsec.transpose %vs {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x4x8xf32> -> tensor<?x4x?x8xf32>
  %qr = sparsec.rotary %q, %cos, %cos : tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32> -> tensor<?x4x?x8xf32>
  %a = sparsec.attention %qr, %k, %v {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  %o = sparsec.transpose %a {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x4x?x8xf32> -> tensor<?x?x4x8xf32>
  %kr = sparsec.rotary %k, %c1, %c1 : tensor<?x4x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x4x?x8xf32>
  %b = sparsec.attention %q, %kr, %v {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  %p = sparsec.transpose %b {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x4x?x8xf32> -> tensor<?x?x4x8xf32>
  %vr = sparsec.rotary %v, %c1, %c1 : tensor<?x4x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x4x?x8xf32>
  %c = sparsec.attention %q, %k, %vr {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>, tensor<?x4x?x8xf32>) -> tensor<?x4x?x8xf32>
  %r = sparsec.transpose %c {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x4x?x8xf32> -> tensor<?x?x4x8xf32>
  return %o, %p, %kr, %r : tensor<?x?x4x8xf32>, tensor<?x?x4x8xf32>, tensor<?x4x?x8xf32>, tensor<?x?x4x8xf32>
}
