// RUN: sparsec-opt %s --sparsec-group-kv-heads | FileCheck %s

// Falcon-40B's layout: 2 groups of 4 query heads; each group's key and value
// head (slices of the fused projection on axis 3) broadcast over its 4 query
// heads to the shape of the query slice, flattened to 8 heads and
// transposed, the key rotated. The attention reads the 2 groups: the unit
// axis squeezed, the head transpose and the rotary over 2 heads; the
// broadcasts are gone.
// CHECK-LABEL: func.func @falcon40
// CHECK-NOT: sparsec.expand
// CHECK: %[[K5:.*]] = sparsec.slice %arg1, %{{.*}} -> tensor<?x?x2x1x4xf32>
// CHECK: %[[V5:.*]] = sparsec.slice %arg1, %{{.*}} -> tensor<?x?x2x1x4xf32>
// CHECK: %[[KS:.*]] = sparsec.squeeze %[[K5]] {axes = array<i64: 3>} : tensor<?x?x2x1x4xf32> -> tensor<?x?x2x4xf32>
// CHECK: %[[KT:.*]] = sparsec.transpose %[[KS]] {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x2x4xf32> -> tensor<?x2x?x4xf32>
// CHECK: %[[KR:.*]] = sparsec.rotary %[[KT]], %arg2, %arg3 : tensor<?x2x?x4xf32>, tensor<?x1x?x4xf32> -> tensor<?x2x?x4xf32>
// CHECK: %[[VS:.*]] = sparsec.squeeze %[[V5]] {axes = array<i64: 3>}
// CHECK: %[[VT:.*]] = sparsec.transpose %[[VS]] {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x2x4xf32> -> tensor<?x2x?x4xf32>
// CHECK: sparsec.attention %arg0, %[[KR]], %[[VT]] mask %arg4 {{{.*}}scale = 5.000000e-01 : f32} : (tensor<?x8x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x1x?x?xf32>) -> tensor<?x8x?x4xf32>
// CHECK-NOT: sparsec.expand
func.func @falcon40(%q: tensor<?x8x?x4xf32>, %qkv: tensor<?x?x2x6x4xf32>,
                    %cos: tensor<?x1x?x4xf32>, %sin: tensor<?x1x?x4xf32>,
                    %mask: tensor<?x1x?x?xf32>) -> tensor<?x8x?x4xf32> {
  %a3 = sparsec.constant dense<3> : tensor<1xi64>
  %one = sparsec.constant dense<1> : tensor<1xi64>
  %c0 = sparsec.constant dense<0> : tensor<1xi64>
  %m2 = sparsec.constant dense<-2> : tensor<1xi64>
  %m1 = sparsec.constant dense<-1> : tensor<1xi64>
  %big = sparsec.constant dense<9223372036854775807> : tensor<1xi64>
  %qg = sparsec.slice %qkv, %c0, %m2, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x4x4xf32>
  %k5 = sparsec.slice %qkv, %m2, %m1, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x1x4xf32>
  %v5 = sparsec.slice %qkv, %m1, %big, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x1x4xf32>
  %s = sparsec.shape %qg : tensor<?x?x2x4x4xf32> -> tensor<5xi64>
  %heads = sparsec.constant dense<[0, 0, 8, 4]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  %krot = sparsec.rotary %kt, %cos, %sin : tensor<?x8x?x4xf32>, tensor<?x1x?x4xf32> -> tensor<?x8x?x4xf32>
  %ve = sparsec.expand %v5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  %o = sparsec.attention %q, %krot, %vt mask %mask {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x8x?x4xf32>, tensor<?x8x?x4xf32>, tensor<?x8x?x4xf32>, tensor<?x1x?x?xf32>) -> tensor<?x8x?x4xf32>
  return %o : tensor<?x8x?x4xf32>
}

// Keys without a rotary (value-like): both operands grouped.
// CHECK-LABEL: func.func @no_rotary
// CHECK: sparsec.attention %arg0, %{{.*}}, %{{.*}} {causal{{.*}}} : (tensor<1x6x5x8xf32>, tensor<1x3x5x8xf32>, tensor<1x3x5x8xf32>) -> tensor<1x6x5x8xf32>
func.func @no_rotary(%q: tensor<1x6x5x8xf32>, %k5: tensor<1x5x3x1x8xf32>,
                     %v5: tensor<1x5x3x1x8xf32>) -> tensor<1x6x5x8xf32> {
  %s = sparsec.constant dense<[1, 5, 3, 2, 8]> : tensor<5xi64>
  %heads = sparsec.constant dense<[1, 5, 6, 8]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %ve = sparsec.expand %v5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %o = sparsec.attention %q, %kt, %vt {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>) -> tensor<1x6x5x8xf32>
  return %o : tensor<1x6x5x8xf32>
}

// A KV-cache export's attention: its past and present hold every head (the
// export's cache interface), so it is left alone.
// CHECK-LABEL: func.func @with_past
// CHECK-COUNT-2: sparsec.expand
// CHECK: sparsec.attention %arg0, %{{.*}}, %{{.*}} past(%arg3, %arg4)
func.func @with_past(%q: tensor<1x6x5x8xf32>, %k5: tensor<1x5x3x1x8xf32>,
                     %v5: tensor<1x5x3x1x8xf32>, %pk: tensor<1x6x?x8xf32>,
                     %pv: tensor<1x6x?x8xf32>)
    -> (tensor<1x6x5x8xf32>, tensor<1x6x?x8xf32>, tensor<1x6x?x8xf32>) {
  %s = sparsec.constant dense<[1, 5, 3, 2, 8]> : tensor<5xi64>
  %heads = sparsec.constant dense<[1, 5, 6, 8]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %ve = sparsec.expand %v5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %o, %pk2, %pv2 = sparsec.attention %q, %kt, %vt past(%pk, %pv) {causal, resultSegmentSizes = array<i32: 1, 1, 1>, scale = 1.0 : f32} : (tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x?x8xf32>, tensor<1x6x?x8xf32>) -> (tensor<1x6x5x8xf32>, tensor<1x6x?x8xf32>, tensor<1x6x?x8xf32>)
  return %o, %pk2, %pv2 : tensor<1x6x5x8xf32>, tensor<1x6x?x8xf32>, tensor<1x6x?x8xf32>
}

// Left alone: the broadcast is of the group axis (2), not of a unit axis
// inside the group, so the flattened heads are not group-major.
// CHECK-LABEL: func.func @wrong_axis
// CHECK-COUNT-2: sparsec.expand
func.func @wrong_axis(%q: tensor<1x6x5x8xf32>, %k5: tensor<1x5x1x3x8xf32>,
                      %v5: tensor<1x5x1x3x8xf32>) -> tensor<1x6x5x8xf32> {
  %s = sparsec.constant dense<[1, 5, 2, 3, 8]> : tensor<5xi64>
  %heads = sparsec.constant dense<[1, 5, 6, 8]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<1x5x1x3x8xf32>, tensor<5xi64> -> tensor<1x5x2x3x8xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<1x5x2x3x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %ve = sparsec.expand %v5, %s : tensor<1x5x1x3x8xf32>, tensor<5xi64> -> tensor<1x5x2x3x8xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<1x5x2x3x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %o = sparsec.attention %q, %kt, %vt {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>) -> tensor<1x6x5x8xf32>
  return %o : tensor<1x6x5x8xf32>
}

// Left alone: the rotary's tables differ by head (a grouped rotation
// would apply one head's angles to the whole group).
// CHECK-LABEL: func.func @per_head_table
// CHECK-COUNT-2: sparsec.expand
func.func @per_head_table(%q: tensor<1x6x5x8xf32>, %k5: tensor<1x5x3x1x8xf32>,
                          %v5: tensor<1x5x3x1x8xf32>, %cos: tensor<1x6x5x8xf32>,
                          %sin: tensor<1x6x5x8xf32>) -> tensor<1x6x5x8xf32> {
  %s = sparsec.constant dense<[1, 5, 3, 2, 8]> : tensor<5xi64>
  %heads = sparsec.constant dense<[1, 5, 6, 8]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %krot = sparsec.rotary %kt, %cos, %sin : tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32> -> tensor<1x6x5x8xf32>
  %ve = sparsec.expand %v5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %o = sparsec.attention %q, %krot, %vt {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>) -> tensor<1x6x5x8xf32>
  return %o : tensor<1x6x5x8xf32>
}

// Left alone: only the keys are broadcast groups (the values are plain
// heads), so the attention cannot read groups for both.
// CHECK-LABEL: func.func @values_not_grouped
// CHECK: sparsec.expand
// CHECK: sparsec.attention %arg0, %{{.*}}, %arg2
func.func @values_not_grouped(%q: tensor<1x6x5x8xf32>, %k5: tensor<1x5x3x1x8xf32>,
                              %v: tensor<1x6x5x8xf32>) -> tensor<1x6x5x8xf32> {
  %s = sparsec.constant dense<[1, 5, 3, 2, 8]> : tensor<5xi64>
  %heads = sparsec.constant dense<[1, 5, 6, 8]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<1x5x3x1x8xf32>, tensor<5xi64> -> tensor<1x5x3x2x8xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<1x5x3x2x8xf32>, tensor<4xi64> -> tensor<1x5x6x8xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x5x6x8xf32> -> tensor<1x6x5x8xf32>
  %o = sparsec.attention %q, %kt, %v {causal, resultSegmentSizes = array<i32: 1, 0, 0>, scale = 1.0 : f32} : (tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>, tensor<1x6x5x8xf32>) -> tensor<1x6x5x8xf32>
  return %o : tensor<1x6x5x8xf32>
}

// Left alone: the broadcast's shape comes from a tensor not known to share
// the keys' batch and sequence dims (a batch of 1 could be broadcast).
// CHECK-LABEL: func.func @unrelated_shape
// CHECK-COUNT-2: sparsec.expand
func.func @unrelated_shape(%q: tensor<?x8x?x4xf32>, %k5: tensor<?x?x2x1x4xf32>,
                           %v5: tensor<?x?x2x1x4xf32>, %other: tensor<?x?x2x4x4xf32>)
    -> tensor<?x8x?x4xf32> {
  %s = sparsec.shape %other : tensor<?x?x2x4x4xf32> -> tensor<5xi64>
  %heads = sparsec.constant dense<[0, 0, 8, 4]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  %ve = sparsec.expand %v5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  %o = sparsec.attention %q, %kt, %vt {causal, resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x8x?x4xf32>, tensor<?x8x?x4xf32>, tensor<?x8x?x4xf32>) -> tensor<?x8x?x4xf32>
  return %o : tensor<?x8x?x4xf32>
}

// The shape of a sibling slice of the same fused tensor, cut on axis 3
// only (the export's `broadcast_to(key, query.shape)`): grouped.
// CHECK-LABEL: func.func @sibling_slices
// CHECK-NOT: sparsec.expand
// CHECK: sparsec.attention {{.*}} : (tensor<?x8x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> tensor<?x8x?x4xf32>
func.func @sibling_slices(%q: tensor<?x8x?x4xf32>, %qkv: tensor<?x?x2x6x4xf32>)
    -> tensor<?x8x?x4xf32> {
  %a3 = sparsec.constant dense<3> : tensor<1xi64>
  %one = sparsec.constant dense<1> : tensor<1xi64>
  %c0 = sparsec.constant dense<0> : tensor<1xi64>
  %c4 = sparsec.constant dense<4> : tensor<1xi64>
  %c5 = sparsec.constant dense<5> : tensor<1xi64>
  %c6 = sparsec.constant dense<6> : tensor<1xi64>
  %qg = sparsec.slice %qkv, %c0, %c4, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x4x4xf32>
  %k5 = sparsec.slice %qkv, %c4, %c5, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x1x4xf32>
  %v5 = sparsec.slice %qkv, %c5, %c6, %a3, %one : (tensor<?x?x2x6x4xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?x2x1x4xf32>
  %s = sparsec.shape %qg : tensor<?x?x2x4x4xf32> -> tensor<5xi64>
  %heads = sparsec.constant dense<[0, 0, 8, 4]> : tensor<4xi64>
  %ke = sparsec.expand %k5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %kr = sparsec.reshape %ke, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  %ve = sparsec.expand %v5, %s : tensor<?x?x2x1x4xf32>, tensor<5xi64> -> tensor<?x?x2x4x4xf32>
  %vr = sparsec.reshape %ve, %heads : tensor<?x?x2x4x4xf32>, tensor<4xi64> -> tensor<?x?x8x4xf32>
  %vt = sparsec.transpose %vr {permutation = array<i64: 0, 2, 1, 3>} : tensor<?x?x8x4xf32> -> tensor<?x8x?x4xf32>
  %o = sparsec.attention %q, %kt, %vt {causal, resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x8x?x4xf32>, tensor<?x8x?x4xf32>, tensor<?x8x?x4xf32>) -> tensor<?x8x?x4xf32>
  return %o : tensor<?x8x?x4xf32>
}
