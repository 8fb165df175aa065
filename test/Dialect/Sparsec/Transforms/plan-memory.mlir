// RUN: sparsec-opt %s --sparsec-plan-memory -split-input-file | FileCheck %s

// Values whose live ranges do not overlap share a slot; a slot is never
// reused by the op that reads its last value.
// CHECK: module attributes {sparsec.slot_bytes = array<i64: -1, 128, 128>}
// CHECK-LABEL: func.func @chain
func.func @chain(%x: tensor<4x8xf32>, %d: tensor<?x8xf32>) -> (tensor<4x8xf32>, tensor<?x8xf32>) {
  // CHECK: sparsec.relu %arg0 {sparsec.slots = array<i64: 0>}
  %0 = sparsec.relu %x : tensor<4x8xf32>
  // CHECK: sparsec.neg %{{.*}} {sparsec.slots = array<i64: 1>}
  %1 = sparsec.neg %0 : tensor<4x8xf32>
  // %0 is still live (read by the add): a third slot.
  // CHECK: sparsec.exp %{{.*}} {sparsec.slots = array<i64: 2>}
  %2 = sparsec.exp %1 : tensor<4x8xf32>
  // %1 died at the exp: its slot is reused. Function results stay live to
  // the end.
  // CHECK: sparsec.add %{{.*}}, %{{.*}} {sparsec.slots = array<i64: 1>}
  %3 = sparsec.add %2, %0 : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  // %0 died at the add; a dynamic value takes its slot, which is then sized
  // at run time.
  // CHECK: sparsec.relu %arg1 {sparsec.slots = array<i64: 0>}
  %4 = sparsec.relu %d : tensor<?x8xf32>
  return %3, %4 : tensor<4x8xf32>, tensor<?x8xf32>
}

// -----

// Reshapes are views: the result shares its input's slot, which stays live
// until the last of them is dead (here the unsqueeze's use by the add, after
// the relu itself died at the flatten). A reshape of an argument copies.
// CHECK-LABEL: func.func @views
func.func @views(%x: tensor<4x8xf32>) -> tensor<1x32xf32> {
  // CHECK: sparsec.relu %arg0 {sparsec.slots = array<i64: [[R:[0-9]+]]>}
  %0 = sparsec.relu %x : tensor<4x8xf32>
  // CHECK: sparsec.flatten %{{.*}} {axis = 0 : i64, sparsec.slots = array<i64: [[R]]>}
  %1 = sparsec.flatten %0 {axis = 0 : i64} : tensor<4x8xf32> -> tensor<1x32xf32>
  // CHECK: sparsec.neg %{{.*}} {sparsec.slots = array<i64: [[N:[0-9]+]]>}
  %2 = sparsec.neg %1 : tensor<1x32xf32>
  // The flatten's slot is still live: the exp may not take it.
  // CHECK-NOT: sparsec.slots = array<i64: [[R]]>
  // CHECK: sparsec.exp %{{.*}} {sparsec.slots = array<i64: {{[0-9]+}}>}
  %3 = sparsec.exp %2 : tensor<1x32xf32>
  // CHECK: sparsec.add
  %4 = sparsec.add %3, %1 : tensor<1x32xf32>, tensor<1x32xf32> -> tensor<1x32xf32>
  // CHECK: sparsec.flatten %arg0 {axis = 0 : i64, sparsec.slots = array<i64: {{[0-9]+}}>}
  %5 = sparsec.flatten %x {axis = 0 : i64} : tensor<4x8xf32> -> tensor<1x32xf32>
  %6 = sparsec.add %4, %5 : tensor<1x32xf32>, tensor<1x32xf32> -> tensor<1x32xf32>
  return %6 : tensor<1x32xf32>
}

// -----

// A transpose may be a view at run time (only unit dims move), so its input
// stays live as long as the transpose's result and the reshape of it: the
// relu's slot is not reused by the exp before the add that reads %2.
// CHECK-LABEL: func.func @transpose_views
func.func @transpose_views(%x: tensor<1x4x1x8xf32>) -> tensor<1x32xf32> {
  // CHECK: sparsec.relu %arg0 {sparsec.slots = array<i64: [[R:[0-9]+]]>}
  %0 = sparsec.relu %x : tensor<1x4x1x8xf32>
  // CHECK: sparsec.transpose %{{.*}} {permutation = array<i64: 0, 2, 1, 3>, sparsec.slots = array<i64: [[T:[0-9]+]]>}
  %1 = sparsec.transpose %0 {permutation = array<i64: 0, 2, 1, 3>} : tensor<1x4x1x8xf32> -> tensor<1x1x4x8xf32>
  // CHECK: sparsec.reshape
  %s = sparsec.constant dense<[1, 32]> : tensor<2xi64>
  %2 = sparsec.reshape %1, %s : tensor<1x1x4x8xf32>, tensor<2xi64> -> tensor<1x32xf32>
  %3 = sparsec.flatten %x {axis = 0 : i64} : tensor<1x4x1x8xf32> -> tensor<1x32xf32>
  // CHECK-NOT: sparsec.slots = array<i64: [[R]]>
  // CHECK: sparsec.exp %{{.*}} {sparsec.slots = array<i64: {{[0-9]+}}>}
  %4 = sparsec.exp %3 : tensor<1x32xf32>
  // CHECK: sparsec.add
  %5 = sparsec.add %4, %2 : tensor<1x32xf32>, tensor<1x32xf32> -> tensor<1x32xf32>
  return %5 : tensor<1x32xf32>
}

// -----

// A predicted gated MLP: the gate projection is output-sparse over the
// predictor's mask, the up projection over the gate's. The up projection is
// the factor whose mask compares the other factor, so the gate's mask (not
// the predictor's) stays live through the down projection, and neither the
// product nor the result takes its slot (cuda::gatedFfn would fall back to
// three launches). The predictor's mask is free after the gate projection.
// CHECK-LABEL: func.func @predicted_gated
// CHECK: sparsec.predict {{.*}}sparsec.slots = array<i64: 0>
// CHECK: sparsec.sparse_linear {{.*}}sparsec.slots = array<i64: 1>
// CHECK: sparsec.compare {{.*}}sparsec.slots = array<i64: 0>
// CHECK: sparsec.sparse_linear {{.*}}sparsec.slots = array<i64: 2>
// CHECK: sparsec.mul {{.*}}sparsec.slots = array<i64: 3>
// CHECK: sparsec.sparse_linear {{.*}}sparsec.slots = array<i64: 4>
sparsec.global @wg : tensor<8x16xf32> {source = "wg"}
sparsec.global @wu : tensor<8x16xf32> {source = "wu"}
sparsec.global @wd : tensor<16x8xf32> {source = "wd"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
func.func @predicted_gated(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wg = sparsec.weight @wg : tensor<8x16xf32>
  %wu = sparsec.weight @wu : tensor<8x16xf32>
  %wd = sparsec.weight @wd : tensor<16x8xf32>
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x16xf32>
  %zero = sparsec.constant dense<0.0> : tensor<f32>
  %pm = sparsec.predict %x, %p1, %p2 {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<?x16xi1>
  %r = sparsec.sparse_linear %x, %wg active %pm {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, activation = #sparsec<activation relu>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %m = sparsec.compare gt, %r, %zero : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xi1>
  %u = sparsec.sparse_linear %x, %wu active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %p = sparsec.mul %r, %u : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.sparse_linear %p, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// -----

// A predicted ReLU FFN with a residual add: the CUDA backend computes the
// up and down projections and the add in one call, whose kernels write the
// result's base while x (slot 1) and the up projection's result (slot 3)
// are still read. Both stay live through the add, whose result takes a slot
// of its own (4); without that it would take one of theirs (free after the
// up and the down projection) and the call would split in two.
// CHECK-LABEL: func.func @predicted_ffn
// CHECK: sparsec.relu {{.*}}sparsec.slots = array<i64: 0>
// CHECK: sparsec.layer_norm {{.*}}sparsec.slots = array<i64: 1>
// CHECK: sparsec.predict {{.*}}sparsec.slots = array<i64: 2>
// CHECK: sparsec.sparse_linear {{.*}}sparsec.slots = array<i64: 3>
// CHECK: sparsec.sparse_linear {{.*}}sparsec.slots = array<i64: 2>
// CHECK: sparsec.add {{.*}}sparsec.slots = array<i64: 4>
sparsec.global @fu : tensor<8x16xf32> {source = "fu"}
sparsec.global @fd : tensor<16x8xf32> {source = "fd"}
sparsec.global @q1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @q2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
sparsec.global @s : tensor<8xf32> {source = "s"}
func.func @predicted_ffn(%in: tensor<?x8xf32>) -> tensor<?x8xf32> {
  %wu = sparsec.weight @fu : tensor<8x16xf32>
  %wd = sparsec.weight @fd : tensor<16x8xf32>
  %p1 = sparsec.weight @q1 : tensor<8x2xf32>
  %p2 = sparsec.weight @q2 : tensor<2x16xf32>
  %s = sparsec.weight @s : tensor<8xf32>
  %r = sparsec.relu %in : tensor<?x8xf32>
  %x = sparsec.layer_norm %r, %s, %s : tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %pm = sparsec.predict %x, %p1, %p2 {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<?x16xi1>
  %h = sparsec.sparse_linear %x, %wu active %pm {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, activation = #sparsec<activation relu>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %y = sparsec.sparse_linear %h, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %z = sparsec.add %y, %r : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %z : tensor<?x8xf32>
}

// -----

// A batch norm computed with the convolution before it (its only user, no
// activation between): the convolution's input stays live until the norm,
// so the norm, which the backends write while the convolution reads that
// input, takes other memory (slot 2, not 0). After a convolution with an
// activation the norm is an op of its own and may take any free slot.
// CHECK-LABEL: func.func @conv_norm
func.func @conv_norm(%x: tensor<1x4x8x8xf32>, %w: tensor<4x4x3x3xf32>, %s: tensor<4xf32>) -> tensor<1x4x8x8xf32> {
  // CHECK: sparsec.relu %arg0 {sparsec.slots = array<i64: 0>}
  %a = sparsec.relu %x : tensor<1x4x8x8xf32>
  // CHECK: sparsec.conv {{.*}}sparsec.slots = array<i64: 1>
  %c = sparsec.conv %a, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x8x8xf32>
  // CHECK: sparsec.batch_norm {{.*}}sparsec.slots = array<i64: 2>
  %n = sparsec.batch_norm %c, %s, %s, %s, %s : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  // CHECK: sparsec.conv {{.*}}sparsec.slots = array<i64: 0>
  %r = sparsec.conv %n, %w {activation = #sparsec<activation relu>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x8x8xf32>
  // CHECK: sparsec.batch_norm {{.*}}sparsec.slots = array<i64: 1>
  %n2 = sparsec.batch_norm %r, %s, %s, %s, %s : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  return %n2 : tensor<1x4x8x8xf32>
}
