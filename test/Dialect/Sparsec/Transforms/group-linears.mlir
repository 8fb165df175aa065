// RUN: sparsec-opt %s --split-input-file "--sparsec-group-linears=fold-norms=1" | FileCheck %s
// RUN: sparsec-opt %s --split-input-file --sparsec-group-linears | FileCheck %s --check-prefix=NOFOLD

// q, k and v of an attention block: one group at q's position; the weights
// of k and v move up to it; the users see the group's results.
sparsec.global @wq : tensor<16x8xf16> {source = "wq"}
sparsec.global @wk : tensor<16x8xf16> {source = "wk"}
sparsec.global @wv : tensor<32x8xf16> {source = "wv"}
sparsec.global @bq : tensor<16xf32> {source = "bq"}
sparsec.global @bk : tensor<16xf32> {source = "bk"}
sparsec.global @bv : tensor<32xf32> {source = "bv"}
// CHECK-LABEL: func.func @qkv
// CHECK-DAG: %[[WQ:.*]] = sparsec.weight @wq
// CHECK-DAG: %[[WK:.*]] = sparsec.weight @wk
// CHECK-DAG: %[[WV:.*]] = sparsec.weight @wv
// CHECK-DAG: %[[BQ:.*]] = sparsec.weight @bq
// CHECK-DAG: %[[BK:.*]] = sparsec.weight @bk
// CHECK-DAG: %[[BV:.*]] = sparsec.weight @bv
// CHECK: %[[G:.*]]:3 = sparsec.linear_group %arg0 weights(%[[WQ]], %[[WK]], %[[WV]]) biases(%[[BQ]], %[[BK]], %[[BV]]) : tensor<1x8xf32>, (tensor<16x8xf16>, tensor<16x8xf16>, tensor<32x8xf16>), (tensor<16xf32>, tensor<16xf32>, tensor<32xf32>) -> tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x32xf32>
// CHECK-NOT: sparsec.linear %
// CHECK: %[[S:.*]] = sparsec.mul %[[G]]#0, %[[G]]#1
// CHECK: return %[[S]], %[[G]]#1, %[[G]]#2
func.func @qkv(%x: tensor<1x8xf32>) -> (tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x32xf32>) {
  %wq = sparsec.weight @wq : tensor<16x8xf16>
  %bq = sparsec.weight @bq : tensor<16xf32>
  %q = sparsec.linear %x, %wq, %bq {transpose_weight} : tensor<1x8xf32>, tensor<16x8xf16>, tensor<16xf32> -> tensor<1x16xf32>
  %wk = sparsec.weight @wk : tensor<16x8xf16>
  %bk = sparsec.weight @bk : tensor<16xf32>
  %k = sparsec.linear %x, %wk, %bk {transpose_weight} : tensor<1x8xf32>, tensor<16x8xf16>, tensor<16xf32> -> tensor<1x16xf32>
  %wv = sparsec.weight @wv : tensor<32x8xf16>
  %bv = sparsec.weight @bv : tensor<32xf32>
  %v = sparsec.linear %x, %wv, %bv {transpose_weight} : tensor<1x8xf32>, tensor<32x8xf16>, tensor<32xf32> -> tensor<1x32xf32>
  %s = sparsec.mul %q, %k : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
  return %s, %k, %v : tensor<1x16xf32>, tensor<1x16xf32>, tensor<1x32xf32>
}

// -----

// Not grouped: a [K, N] weight (x86 layout), a linear whose only user is an
// add (the residual epilogue), a hybrid CPU part, an annotated linear, a
// weight computed at run time, and a lone linear. Two that differ in bias
// or weight type form no group either.
sparsec.global @a : tensor<8x8xf32> {source = "a"}
sparsec.global @b : tensor<8x8xf32> {source = "b"}
sparsec.global @c : tensor<8x8xf16> {source = "c"}
// CHECK-LABEL: func.func @left_alone
// CHECK-NOT: linear_group
// CHECK: return
func.func @left_alone(%x: tensor<1x8xf32>, %r: tensor<1x8xf32>, %wr: tensor<8x8xf32>) -> (tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>) {
  %a = sparsec.weight @a : tensor<8x8xf32>
  %b = sparsec.weight @b : tensor<8x8xf32>
  %c = sparsec.weight @c : tensor<8x8xf16>
  %y0 = sparsec.linear %x, %a : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %y1 = sparsec.linear %x, %b {transpose_weight} : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %y1r = sparsec.add %y1, %r : tensor<1x8xf32>, tensor<1x8xf32> -> tensor<1x8xf32>
  %y2 = sparsec.linear %x, %b {transpose_weight, sparsec.device = "cpu"} : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %y3 = sparsec.linear %x, %a {transpose_weight, sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile>} : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %y4 = sparsec.linear %x, %wr {transpose_weight} : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  %y5 = sparsec.linear %x, %c {transpose_weight} : tensor<1x8xf32>, tensor<8x8xf16> -> tensor<1x8xf32>
  %y6 = sparsec.linear %x, %a {transpose_weight} : tensor<1x8xf32>, tensor<8x8xf32> -> tensor<1x8xf32>
  return %y0, %y1r, %y2, %y3, %y4, %y5 : tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>, tensor<1x8xf32>
}

// -----

// Five siblings: a group of 4 and a lone linear; the activation is shared.
sparsec.global @w : tensor<4x8xf32> {source = "w"}
// CHECK-LABEL: func.func @five
// CHECK: sparsec.linear_group %arg0 weights(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) {activation = #sparsec<activation relu>}
// CHECK: sparsec.linear %arg0, %{{.*}} {activation = #sparsec<activation relu>, transpose_weight}
func.func @five(%x: tensor<2x8xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>) {
  %w = sparsec.weight @w : tensor<4x8xf32>
  %y0 = sparsec.linear %x, %w {transpose_weight, activation = #sparsec<activation relu>} : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
  %y1 = sparsec.linear %x, %w {transpose_weight, activation = #sparsec<activation relu>} : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
  %y2 = sparsec.linear %x, %w {transpose_weight, activation = #sparsec<activation relu>} : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
  %y3 = sparsec.linear %x, %w {transpose_weight, activation = #sparsec<activation relu>} : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
  %y4 = sparsec.linear %x, %w {transpose_weight, activation = #sparsec<activation relu>} : tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x4xf32>
  return %y0, %y1, %y2, %y3, %y4 : tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>, tensor<2x4xf32>
}

// -----

// The layer norm that feeds q and k and the RMS norm that feeds a lone
// linear are folded: a group takes the norm's input, scale, bias and
// epsilon, and the lone linear becomes a group of one; a shape of the
// norm's result reads the input instead. A norm whose result also feeds an
// exp stays.
sparsec.global @wq : tensor<16x8xf16> {source = "wq"}
sparsec.global @wk : tensor<16x8xf16> {source = "wk"}
sparsec.global @wu : tensor<32x16xf16> {source = "wu"}
sparsec.global @wv : tensor<32x8xf16> {source = "wv"}
sparsec.global @g : tensor<8xf32> {source = "g"}
sparsec.global @b : tensor<8xf32> {source = "b"}
sparsec.global @gs : tensor<16xf32> {source = "gs"}
// CHECK-LABEL: func.func @norms
// CHECK-DAG: %[[G:.*]] = sparsec.weight @g
// CHECK-DAG: %[[B:.*]] = sparsec.weight @b
// CHECK: sparsec.shape %arg0
// CHECK: %[[QK:.*]]:2 = sparsec.linear_group %arg0 norm(%[[G]], %[[B]]) weights(%{{.*}}, %{{.*}}) {norm_epsilon = 9.99999974E-6 : f32} : tensor<1x8xf32> norm(tensor<8xf32>, tensor<8xf32>), (tensor<16x8xf16>, tensor<16x8xf16>) -> tensor<1x16xf32>, tensor<1x16xf32>
// CHECK: %[[S:.*]] = sparsec.mul %[[QK]]#0, %[[QK]]#1
// CHECK: %[[GS:.*]] = sparsec.weight @gs
// CHECK: sparsec.linear_group %[[S]] norm(%[[GS]]) weights(%{{.*}}) {activation = #sparsec<activation relu>, norm_epsilon = 9.99999974E-6 : f32, norm_rms} : tensor<1x16xf32> norm(tensor<16xf32>), (tensor<32x16xf16>) -> tensor<1x32xf32>
// CHECK: %[[N2:.*]] = sparsec.layer_norm %arg1
// CHECK: sparsec.linear %[[N2]]
// CHECK: sparsec.exp %[[N2]]
// CHECK-NOT: sparsec.layer_norm
// CHECK-NOT: sparsec.rms_norm
func.func @norms(%x: tensor<1x8xf32>, %x2: tensor<1x8xf32>) -> (tensor<1x32xf32>, tensor<1x32xf32>, tensor<1x8xf32>, tensor<2xi64>) {
  %g = sparsec.weight @g : tensor<8xf32>
  %b = sparsec.weight @b : tensor<8xf32>
  %h = sparsec.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f32} : tensor<1x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<1x8xf32>
  %shape = sparsec.shape %h : tensor<1x8xf32> -> tensor<2xi64>
  %wq = sparsec.weight @wq : tensor<16x8xf16>
  %q = sparsec.linear %h, %wq {transpose_weight} : tensor<1x8xf32>, tensor<16x8xf16> -> tensor<1x16xf32>
  %wk = sparsec.weight @wk : tensor<16x8xf16>
  %k = sparsec.linear %h, %wk {transpose_weight} : tensor<1x8xf32>, tensor<16x8xf16> -> tensor<1x16xf32>
  %s = sparsec.mul %q, %k : tensor<1x16xf32>, tensor<1x16xf32> -> tensor<1x16xf32>
  %gs = sparsec.weight @gs : tensor<16xf32>
  %h2 = sparsec.rms_norm %s, %gs {epsilon = 1.0e-5 : f32} : tensor<1x16xf32>, tensor<16xf32> -> tensor<1x16xf32>
  %wu = sparsec.weight @wu : tensor<32x16xf16>
  %u = sparsec.linear %h2, %wu {transpose_weight, activation = #sparsec<activation relu>} : tensor<1x16xf32>, tensor<32x16xf16> -> tensor<1x32xf32>
  %n2 = sparsec.layer_norm %x2, %g, %b {epsilon = 1.0e-5 : f32} : tensor<1x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<1x8xf32>
  %wv = sparsec.weight @wv : tensor<32x8xf16>
  %v = sparsec.linear %n2, %wv {transpose_weight} : tensor<1x8xf32>, tensor<32x8xf16> -> tensor<1x32xf32>
  %e = sparsec.exp %n2 : tensor<1x8xf32>
  return %u, %v, %e, %shape : tensor<1x32xf32>, tensor<1x32xf32>, tensor<1x8xf32>, tensor<2xi64>
}

// NOFOLD-LABEL: func.func @norms
// NOFOLD: sparsec.layer_norm %arg0
// NOFOLD: sparsec.linear_group %{{.*}} weights(
// NOFOLD: sparsec.rms_norm
