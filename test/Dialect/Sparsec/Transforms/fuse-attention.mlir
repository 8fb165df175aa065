// RUN: sparsec-opt %s --split-input-file --sparsec-fuse-attention | FileCheck %s

// CHECK-LABEL: func.func @sdpa
// CHECK-SAME: (%[[Q:.*]]: tensor<1x4x8x16xf32>, %[[K:.*]]: tensor<1x4x8x16xf32>, %[[V:.*]]: tensor<1x4x8x16xf32>, %[[M:.*]]: tensor<1x1x8x8xf32>)
// CHECK: %[[O:.*]] = sparsec.attention %[[Q]], %[[K]], %[[V]] mask %[[M]] {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 2.500000e-01 : f32}
// CHECK-NOT: sparsec.softmax
// CHECK: return %[[O]]
func.func @sdpa(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x8x16xf32>, %m: tensor<1x1x8x8xf32>) -> tensor<1x4x8x16xf32> {
  %kt = sparsec.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = sparsec.matmul %q, %kt : tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32> -> tensor<1x4x8x8xf32>
  %c = sparsec.constant dense<4.0> : tensor<f32>
  %ss = sparsec.div %s, %c : tensor<1x4x8x8xf32>, tensor<f32> -> tensor<1x4x8x8xf32>
  %sm = sparsec.add %ss, %m : tensor<1x4x8x8xf32>, tensor<1x1x8x8xf32> -> tensor<1x4x8x8xf32>
  %p = sparsec.softmax %sm {axis = -1 : i64} : tensor<1x4x8x8xf32>
  %o = sparsec.matmul %p, %v : tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// The OPT export: q scaled before the head split, k transposed straight
// from [B, S, H, D], keys/values concatenated with the cache.
// CHECK-LABEL: func.func @opt_kv
// CHECK: %[[QS:.*]] = sparsec.reshape %arg0,
// CHECK: %[[QT:.*]] = sparsec.transpose %[[QS]] {permutation = array<i64: 0, 2, 1, 3>}
// CHECK: %[[KT:.*]] = sparsec.transpose %arg1 {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x1x4x16xf32> -> tensor<1x4x1x16xf32>
// CHECK: %[[O:.*]], %[[PK:.*]], %[[PV:.*]] = sparsec.attention %[[QT]], %[[KT]], %arg2 past(%arg3, %arg4) {resultSegmentSizes = array<i32: 1, 1, 1>, scale = 1.250000e-01 : f32}
// CHECK-NOT: sparsec.concat
// CHECK: return %[[O]], %[[PK]], %[[PV]]
func.func @opt_kv(%xq: tensor<1x1x64xf32>, %kn: tensor<1x1x4x16xf32>, %vn: tensor<1x4x1x16xf32>,
                  %pk: tensor<1x4x7x16xf32>, %pv: tensor<1x4x7x16xf32>)
    -> (tensor<1x4x1x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) {
  %c = sparsec.constant dense<0.125> : tensor<f32>
  %qs = sparsec.mul %xq, %c : tensor<1x1x64xf32>, tensor<f32> -> tensor<1x1x64xf32>
  %shape = sparsec.constant dense<[1, 1, 4, 16]> : tensor<4xi64>
  %qr = sparsec.reshape %qs, %shape : tensor<1x1x64xf32>, tensor<4xi64> -> tensor<1x1x4x16xf32>
  %q = sparsec.transpose %qr {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x1x4x16xf32> -> tensor<1x4x1x16xf32>
  %knt = sparsec.transpose %kn {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x1x4x16xf32> -> tensor<1x4x1x16xf32>
  %k = sparsec.concat %pk, %knt {axis = 2 : i64} : (tensor<1x4x7x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x8x16xf32>
  %v = sparsec.concat %pv, %vn {axis = 2 : i64} : (tensor<1x4x7x16xf32>, tensor<1x4x1x16xf32>) -> tensor<1x4x8x16xf32>
  %kt = sparsec.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = sparsec.matmul %q, %kt : tensor<1x4x1x16xf32>, tensor<1x4x16x8xf32> -> tensor<1x4x1x8xf32>
  %p = sparsec.softmax %s {axis = 3 : i64} : tensor<1x4x1x8xf32>
  %o = sparsec.matmul %p, %v : tensor<1x4x1x8xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x1x16xf32>
  return %o, %k, %v : tensor<1x4x1x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>
}

// -----

// Softmax over the wrong axis is not attention.
// CHECK-LABEL: func.func @wrong_axis
// CHECK-NOT: sparsec.attention
func.func @wrong_axis(%q: tensor<1x4x8x16xf32>, %k: tensor<1x4x8x16xf32>, %v: tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %kt = sparsec.transpose %k {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = sparsec.matmul %q, %kt : tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32> -> tensor<1x4x8x8xf32>
  %p = sparsec.softmax %s {axis = 2 : i64} : tensor<1x4x8x8xf32>
  %o = sparsec.matmul %p, %v : tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// Grouped-query attention (LLaMA's repeat_kv): the cache and the new keys
// have 2 heads, repeated to the 4 query heads by unsqueeze, expand and
// reshape after the concatenation. The attention takes the 2-head keys
// and values and their cache; the repeats go.
// CHECK-LABEL: func.func @gqa_kv
// CHECK-SAME: (%[[Q:[a-z0-9]+]]: tensor<1x4x1x16xf32>, %[[K:[a-z0-9]+]]: tensor<1x2x1x16xf32>, %[[V:[a-z0-9]+]]: tensor<1x2x1x16xf32>, %[[PK:[a-z0-9]+]]: tensor<1x2x7x16xf32>, %[[PV:[a-z0-9]+]]: tensor<1x2x7x16xf32>)
// CHECK: %[[O:.*]], %[[NK:.*]], %[[NV:.*]] = sparsec.attention %[[Q]], %[[K]], %[[V]] past(%[[PK]], %[[PV]]) {{.*}} : (tensor<1x4x1x16xf32>, tensor<1x2x1x16xf32>, tensor<1x2x1x16xf32>, tensor<1x2x7x16xf32>, tensor<1x2x7x16xf32>) -> (tensor<1x4x1x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
// CHECK-NOT: sparsec.expand
// CHECK: return %[[O]], %[[NK]], %[[NV]]
func.func @gqa_kv(%q: tensor<1x4x1x16xf32>, %kn: tensor<1x2x1x16xf32>, %vn: tensor<1x2x1x16xf32>,
                  %pk: tensor<1x2x7x16xf32>, %pv: tensor<1x2x7x16xf32>)
    -> (tensor<1x4x1x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) {
  %k = sparsec.concat %pk, %kn {axis = 2 : i64} : (tensor<1x2x7x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x8x16xf32>
  %v = sparsec.concat %pv, %vn {axis = 2 : i64} : (tensor<1x2x7x16xf32>, tensor<1x2x1x16xf32>) -> tensor<1x2x8x16xf32>
  %rep = sparsec.constant dense<[1, 2, 2, 1, 16]> : tensor<5xi64>
  %back = sparsec.constant dense<[0, 4, -1, 16]> : tensor<4xi64>
  %ku = sparsec.unsqueeze %k {axes = array<i64: 2>} : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %ke = sparsec.expand %ku, %rep : tensor<1x2x1x8x16xf32>, tensor<5xi64> -> tensor<1x2x2x8x16xf32>
  %kr = sparsec.reshape %ke, %back : tensor<1x2x2x8x16xf32>, tensor<4xi64> -> tensor<1x4x8x16xf32>
  %vu = sparsec.unsqueeze %v {axes = array<i64: 2>} : tensor<1x2x8x16xf32> -> tensor<1x2x1x8x16xf32>
  %ve = sparsec.expand %vu, %rep : tensor<1x2x1x8x16xf32>, tensor<5xi64> -> tensor<1x2x2x8x16xf32>
  %vr = sparsec.reshape %ve, %back : tensor<1x2x2x8x16xf32>, tensor<4xi64> -> tensor<1x4x8x16xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = sparsec.matmul %q, %kt : tensor<1x4x1x16xf32>, tensor<1x4x16x8xf32> -> tensor<1x4x1x8xf32>
  %p = sparsec.softmax %s {axis = 3 : i64} : tensor<1x4x1x8xf32>
  %o = sparsec.matmul %p, %vr : tensor<1x4x1x8xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x1x16xf32>
  return %o, %k, %v : tensor<1x4x1x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>
}

// -----

// A repeat that interleaves (the expanded dim is not the one after the
// heads) is not repeat_kv: the keys stay repeated and the cache outside.
// CHECK-LABEL: func.func @not_repeat_kv
// CHECK: sparsec.expand
// CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} {{{.*}}} : (tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32>
func.func @not_repeat_kv(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %rep = sparsec.constant dense<[1, 2, 1, 8, 16]> : tensor<5xi64>
  %back = sparsec.constant dense<[0, 4, -1, 16]> : tensor<4xi64>
  %ku = sparsec.unsqueeze %k {axes = array<i64: 1>} : tensor<1x2x8x16xf32> -> tensor<1x1x2x8x16xf32>
  %ke = sparsec.expand %ku, %rep : tensor<1x1x2x8x16xf32>, tensor<5xi64> -> tensor<1x2x2x8x16xf32>
  %kr = sparsec.reshape %ke, %back : tensor<1x2x2x8x16xf32>, tensor<4xi64> -> tensor<1x4x8x16xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 1, 3, 2>} : tensor<1x4x8x16xf32> -> tensor<1x4x16x8xf32>
  %s = sparsec.matmul %q, %kt : tensor<1x4x8x16xf32>, tensor<1x4x16x8xf32> -> tensor<1x4x8x8xf32>
  %p = sparsec.softmax %s {axis = 3 : i64} : tensor<1x4x8x8xf32>
  %o = sparsec.matmul %p, %kr : tensor<1x4x8x8xf32>, tensor<1x4x8x16xf32> -> tensor<1x4x8x16xf32>
  return %o : tensor<1x4x8x16xf32>
}

// -----

// repeat_kv whose expand takes its batch and length from an unrelated
// tensor (dynamic): a batch of 1 could be broadcast, so the keys are not
// taken as 2 groups; the attention reads the repeated 4 heads.
// CHECK-LABEL: func.func @repeat_shape_unrelated
// CHECK: sparsec.expand
// CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} {{{.*}}} : (tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>, tensor<?x4x?x16xf32>) -> tensor<?x4x?x16xf32>
func.func @repeat_shape_unrelated(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>,
                                  %other: tensor<?x2x2x?x16xf32>) -> tensor<?x4x?x16xf32> {
  %rep = sparsec.shape %other : tensor<?x2x2x?x16xf32> -> tensor<5xi64>
  %back = sparsec.constant dense<[0, 4, -1, 16]> : tensor<4xi64>
  %ku = sparsec.unsqueeze %k {axes = array<i64: 2>} : tensor<?x2x?x16xf32> -> tensor<?x2x1x?x16xf32>
  %ke = sparsec.expand %ku, %rep : tensor<?x2x1x?x16xf32>, tensor<5xi64> -> tensor<?x2x2x?x16xf32>
  %kr = sparsec.reshape %ke, %back : tensor<?x2x2x?x16xf32>, tensor<4xi64> -> tensor<?x4x?x16xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 1, 3, 2>} : tensor<?x4x?x16xf32> -> tensor<?x4x16x?xf32>
  %s = sparsec.matmul %q, %kt : tensor<?x4x?x16xf32>, tensor<?x4x16x?xf32> -> tensor<?x4x?x?xf32>
  %p = sparsec.softmax %s {axis = 3 : i64} : tensor<?x4x?x?xf32>
  %o = sparsec.matmul %p, %kr : tensor<?x4x?x?xf32>, tensor<?x4x?x16xf32> -> tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}

// -----

// repeat_kv as transformers writes it (`x[:, :, None].expand(batch, hk, n,
// slen, hd).reshape(batch, hk * n, slen, hd)`, batch and slen read from
// the keys' own shape): the dims are provably the keys', so the attention
// reads the 2 key heads.
// CHECK-LABEL: func.func @repeat_shape_own
// CHECK-NOT: sparsec.expand
// CHECK: sparsec.attention %{{.*}}, %arg1, %arg1 {{{.*}}} : (tensor<?x4x?x16xf32>, tensor<?x2x?x16xf32>, tensor<?x2x?x16xf32>) -> tensor<?x4x?x16xf32>
func.func @repeat_shape_own(%q: tensor<?x4x?x16xf32>, %k: tensor<?x2x?x16xf32>) -> tensor<?x4x?x16xf32> {
  %sh = sparsec.shape %k : tensor<?x2x?x16xf32> -> tensor<4xi64>
  %i0 = sparsec.constant dense<0> : tensor<i64>
  %i2 = sparsec.constant dense<2> : tensor<i64>
  %b = sparsec.gather %sh, %i0 : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %l = sparsec.gather %sh, %i2 : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %bu = sparsec.unsqueeze %b {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %lu = sparsec.unsqueeze %l {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %c2 = sparsec.constant dense<2> : tensor<1xi64>
  %c4 = sparsec.constant dense<4> : tensor<1xi64>
  %c16 = sparsec.constant dense<16> : tensor<1xi64>
  %rep = sparsec.concat %bu, %c2, %c2, %lu, %c16 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<5xi64>
  %back = sparsec.concat %bu, %c4, %lu, %c16 {axis = 0 : i64} : (tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4xi64>
  %ku = sparsec.unsqueeze %k {axes = array<i64: 2>} : tensor<?x2x?x16xf32> -> tensor<?x2x1x?x16xf32>
  %ke = sparsec.expand %ku, %rep : tensor<?x2x1x?x16xf32>, tensor<5xi64> -> tensor<?x2x2x?x16xf32>
  %kr = sparsec.reshape %ke, %back : tensor<?x2x2x?x16xf32>, tensor<4xi64> -> tensor<?x4x?x16xf32>
  %kt = sparsec.transpose %kr {permutation = array<i64: 0, 1, 3, 2>} : tensor<?x4x?x16xf32> -> tensor<?x4x16x?xf32>
  %s = sparsec.matmul %q, %kt : tensor<?x4x?x16xf32>, tensor<?x4x16x?xf32> -> tensor<?x4x?x?xf32>
  %p = sparsec.softmax %s {axis = 3 : i64} : tensor<?x4x?x?xf32>
  %o = sparsec.matmul %p, %kr : tensor<?x4x?x?xf32>, tensor<?x4x?x16xf32> -> tensor<?x4x?x16xf32>
  return %o : tensor<?x4x?x16xf32>
}
