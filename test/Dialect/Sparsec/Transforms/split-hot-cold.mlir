// RUN: sparsec-opt %s --split-input-file --sparsec-split-hot-cold --verify-diagnostics | FileCheck %s

// An exact FFN with 3 of its 8 (hot-first) neurons on the GPU: two FFNs
// over sliced weights, the CPU part tagged, the down bias on the GPU part
// only, and the partial sums added.
// CHECK-DAG: sparsec.global @w1.0_3 : tensor<4x3xf32> {permutation = array<i64: 7, 6, 5, 4, 3, 2, 1, 0>, source = "w1", transforms = ["permute_cols", "slice_cols:0:3"]}
// CHECK-DAG: sparsec.global @w1.3_8 : tensor<4x5xf32> {permutation = array<i64: 7, 6, 5, 4, 3, 2, 1, 0>, source = "w1", transforms = ["permute_cols", "slice_cols:3:8"]}
// CHECK-DAG: sparsec.global @b1.3_8 : tensor<5xf32> {source = "b1", transforms = ["slice_rows:3:8"]}
// CHECK-DAG: sparsec.global @w2.0_3 : tensor<3x4xf32> {source = "w2", transforms = ["slice_rows:0:3"]}
// CHECK-DAG: sparsec.global @w2.3_8 : tensor<5x4xf32> {source = "w2", transforms = ["slice_rows:3:8"]}
// CHECK-NOT: sparsec.global @w1 :
// CHECK-LABEL: func.func @exact
// CHECK: %[[HG:.*]] = sparsec.linear %arg0, %{{.*}}, %{{.*}} : tensor<?x4xf32>, tensor<4x3xf32>, tensor<3xf32> -> tensor<?x3xf32>
// CHECK-NEXT: %[[RG:.*]] = sparsec.relu %[[HG]] : tensor<?x3xf32>
// CHECK: %[[YG:.*]] = sparsec.sparse_linear %[[RG]], %{{.*}}, %{{.*}} {{{.*}}} : (tensor<?x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
// CHECK: %[[HC:.*]] = sparsec.linear %arg0, %{{.*}}, %{{.*}} {sparsec.device = "cpu"} : tensor<?x4xf32>, tensor<4x5xf32>, tensor<5xf32> -> tensor<?x5xf32>
// CHECK-NEXT: %[[RC:.*]] = sparsec.relu %[[HC]] {sparsec.device = "cpu"} : tensor<?x5xf32>
// CHECK: %[[YC:.*]] = sparsec.sparse_linear %[[RC]], %{{.*}} {{{.*}}sparsec.device = "cpu"} : (tensor<?x5xf32>, tensor<5x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT: %[[Y:.*]] = sparsec.add %[[YG]], %[[YC]]
// CHECK-NEXT: return %[[Y]]
sparsec.global @w1 : tensor<4x8xf32> {permutation = array<i64: 7, 6, 5, 4, 3, 2, 1, 0>, source = "w1", transforms = ["permute_cols"]}
sparsec.global @b1 : tensor<8xf32> {source = "b1"}
sparsec.global @w2 : tensor<8x4xf32> {source = "w2"}
sparsec.global @b2 : tensor<4xf32> {source = "b2"}
func.func @exact(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %w1 = sparsec.weight @w1 : tensor<4x8xf32>
  %b1 = sparsec.weight @b1 : tensor<8xf32>
  %w2 = sparsec.weight @w2 : tensor<8x4xf32>
  %b2 = sparsec.weight @b2 : tensor<4xf32>
  %h = sparsec.linear %x, %w1, %b1 : tensor<?x4xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %r = sparsec.relu %h {placement = #sparsec.placement<gpu_neurons = 3, total_neurons = 8, group = 1>} : tensor<?x8xf32>
  %y = sparsec.sparse_linear %r, %w2, %b2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// Predicted: one predictor per part (the CPU part's first), on the GPU,
// with the part's columns of the second matrix and its bias.
// CHECK-LABEL: func.func @predicted
// CHECK: %[[MC:.*]] = sparsec.predict %arg0, %[[P1:.*]], %{{.*}}, %{{.*}} : (tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x6xf32>, tensor<6xf32>) -> tensor<1x6xi1>
// CHECK: %[[MG:.*]] = sparsec.predict %arg0, %{{.*}}, %{{.*}}, %{{.*}} : (tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x2xf32>, tensor<2xf32>) -> tensor<1x2xi1>
// CHECK: sparsec.sparse_linear %arg0, %{{.*}} active %[[MG]] {{{.*}}} : (tensor<1x4xf32>, tensor<4x2xf32>, tensor<1x2xi1>) -> tensor<1x2xf32>
// CHECK: sparsec.sparse_linear %arg0, %{{.*}} active %[[MC]] {{{.*}}sparsec.device = "cpu"} : (tensor<1x4xf32>, tensor<4x6xf32>, tensor<1x6xi1>) -> tensor<1x6xf32>
// CHECK-NOT: sparsec.predict
sparsec.global @up : tensor<4x8xf32> {source = "up"}
sparsec.global @down : tensor<8x4xf32> {source = "down"}
sparsec.global @p1 : tensor<4x2xf32> {source = "", value = dense<1.0> : tensor<4x2xf32>}
sparsec.global @p2 : tensor<2x8xf32> {source = "", value = dense<1.0> : tensor<2x8xf32>}
sparsec.global @pb : tensor<8xf32> {source = "", value = dense<0.0> : tensor<8xf32>}
func.func @predicted(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %p1 = sparsec.weight @p1 : tensor<4x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x8xf32>
  %pb = sparsec.weight @pb : tensor<8xf32>
  %m = sparsec.predict %x, %p1, %p2, %pb : (tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x8xf32>, tensor<8xf32>) -> tensor<1x8xi1>
  %w = sparsec.weight @up : tensor<4x8xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<1x4xf32>, tensor<4x8xf32>, tensor<1x8xi1>) -> tensor<1x8xf32>
  %r = sparsec.relu %h {placement = #sparsec.placement<gpu_neurons = 2, total_neurons = 8, group = 2>} : tensor<1x8xf32>
  %w2 = sparsec.weight @down : tensor<8x4xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  return %y : tensor<1x4xf32>
}

// -----

// Wholly on the CPU: the three ops are tagged; wholly on the GPU: untouched.
// CHECK-LABEL: func.func @whole
// CHECK: sparsec.linear {{.*}} {sparsec.device = "cpu"}
// CHECK: sparsec.relu {{.*}}sparsec.device = "cpu"
// CHECK: sparsec.linear {{.*}} {sparsec.device = "cpu"}
// CHECK: sparsec.linear
// CHECK-NOT: sparsec.device
// CHECK: return
sparsec.global @a : tensor<4x8xf32> {source = "a"}
sparsec.global @b : tensor<8x4xf32> {source = "b"}
func.func @whole(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %a = sparsec.weight @a : tensor<4x8xf32>
  %b = sparsec.weight @b : tensor<8x4xf32>
  %h = sparsec.linear %x, %a : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  %r = sparsec.relu %h {placement = #sparsec.placement<gpu_neurons = 0, total_neurons = 8, group = 4>} : tensor<?x8xf32>
  %y = sparsec.linear %r, %b : tensor<?x8xf32>, tensor<8x4xf32> -> tensor<?x4xf32>
  %h2 = sparsec.linear %y, %a : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  %r2 = sparsec.relu %h2 {placement = #sparsec.placement<gpu_neurons = 8, total_neurons = 8, group = 4>} : tensor<?x8xf32>
  %y2 = sparsec.linear %r2, %b : tensor<?x8xf32>, tensor<8x4xf32> -> tensor<?x4xf32>
  return %y2 : tensor<?x4xf32>
}

// -----

// A gated MLP (exact, after sparsec-sparsify-ffn), 2 of its 8 neurons on
// the GPU: each part has its own gate projection, mask, up projection over
// the mask, product and down projection, over the range's columns of the
// gate and up weights and rows of the down weight.
// CHECK-DAG: sparsec.global @wg.0_2 : tensor<4x2xf32> {source = "wg", transforms = ["slice_cols:0:2"]}
// CHECK-DAG: sparsec.global @wu.2_8 : tensor<4x6xf32> {source = "wu", transforms = ["slice_cols:2:8"]}
// CHECK-DAG: sparsec.global @wd.2_8 : tensor<6x4xf32> {source = "wd", transforms = ["slice_rows:2:8"]}
// CHECK-LABEL: func.func @gated
// CHECK: %[[G:.*]] = sparsec.linear %arg0, %{{.*}} : tensor<?x4xf32>, tensor<4x2xf32> -> tensor<?x2xf32>
// CHECK-NEXT: %[[R:.*]] = sparsec.relu %[[G]] : tensor<?x2xf32>
// CHECK-NEXT: %[[M:.*]] = sparsec.compare gt, %[[R]], %[[Z:.*]] : tensor<?x2xf32>, tensor<f32> -> tensor<?x2xi1>
// CHECK: %[[U:.*]] = sparsec.sparse_linear %arg0, %{{.*}} active %[[M]] {{{.*}}} : (tensor<?x4xf32>, tensor<4x2xf32>, tensor<?x2xi1>) -> tensor<?x2xf32>
// CHECK-NEXT: %[[P:.*]] = sparsec.mul %[[R]], %[[U]] : tensor<?x2xf32>
// CHECK: %[[YG:.*]] = sparsec.sparse_linear %[[P]], %{{.*}} {{{.*}}} : (tensor<?x2xf32>, tensor<2x4xf32>) -> tensor<?x4xf32>
// CHECK: %[[GC:.*]] = sparsec.linear %arg0, %{{.*}} {sparsec.device = "cpu"} : tensor<?x4xf32>, tensor<4x6xf32> -> tensor<?x6xf32>
// CHECK-NEXT: %[[RC:.*]] = sparsec.relu %[[GC]] {sparsec.device = "cpu"} : tensor<?x6xf32>
// CHECK-NEXT: %[[MC:.*]] = sparsec.compare gt, %[[RC]], %[[Z]] {sparsec.device = "cpu"} : tensor<?x6xf32>, tensor<f32> -> tensor<?x6xi1>
// CHECK: %[[UC:.*]] = sparsec.sparse_linear %arg0, %{{.*}} active %[[MC]] {{{.*}}sparsec.device = "cpu"} : (tensor<?x4xf32>, tensor<4x6xf32>, tensor<?x6xi1>) -> tensor<?x6xf32>
// CHECK-NEXT: %[[PC:.*]] = sparsec.mul %[[RC]], %[[UC]] {sparsec.device = "cpu"} : tensor<?x6xf32>
// CHECK: %[[YC:.*]] = sparsec.sparse_linear %[[PC]], %{{.*}} {{{.*}}sparsec.device = "cpu"} : (tensor<?x6xf32>, tensor<6x4xf32>) -> tensor<?x4xf32>
// CHECK-NEXT: %[[Y:.*]] = sparsec.add %[[YG]], %[[YC]]
// CHECK-NEXT: return %[[Y]]
sparsec.global @wg : tensor<4x8xf32> {source = "wg"}
sparsec.global @wu : tensor<4x8xf32> {source = "wu"}
sparsec.global @wd : tensor<8x4xf32> {source = "wd"}
func.func @gated(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %wg = sparsec.weight @wg : tensor<4x8xf32>
  %wu = sparsec.weight @wu : tensor<4x8xf32>
  %wd = sparsec.weight @wd : tensor<8x4xf32>
  %zero = sparsec.constant dense<0.0> : tensor<f32>
  %g = sparsec.linear %x, %wg : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  %r = sparsec.relu %g {placement = #sparsec.placement<gpu_neurons = 2, total_neurons = 8, group = 2>} : tensor<?x8xf32>
  %m = sparsec.compare gt, %r, %zero : tensor<?x8xf32>, tensor<f32> -> tensor<?x8xi1>
  %u = sparsec.sparse_linear %x, %wu active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>} : (tensor<?x4xf32>, tensor<4x8xf32>, tensor<?x8xi1>) -> tensor<?x8xf32>
  %p = sparsec.mul %r, %u : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  %y = sparsec.sparse_linear %p, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// A predicted SiLU-gated MLP with neuron-major ([neurons, d]) gate and up
// weights and a gate bias: the predictor drives the gate projection (one
// per part), the mask is not(gate == 0), rows are sliced.
// CHECK-DAG: sparsec.global @bg.4_8 : tensor<4xf32> {source = "bg", transforms = ["slice_rows:4:8"]}
// CHECK-DAG: sparsec.global @wg.4_8 : tensor<4x4xf32> {source = "wg", transforms = ["slice_rows:4:8"]}
// CHECK-LABEL: func.func @predicted_silu
// CHECK: %[[MC:.*]] = sparsec.predict %arg0, %{{.*}} -> tensor<1x4xi1>
// CHECK: %[[MG:.*]] = sparsec.predict %arg0, %{{.*}} -> tensor<1x4xi1>
// CHECK: %[[G:.*]] = sparsec.sparse_linear %arg0, %{{.*}}, %{{.*}} active %[[MG]] {{{.*}}transpose_weight} : (tensor<1x4xf32>, tensor<4x4xf32>, tensor<4xf32>, tensor<1x4xi1>) -> tensor<1x4xf32>
// CHECK-NEXT: %[[S:.*]] = sparsec.silu %[[G]] : tensor<1x4xf32>
// CHECK-NEXT: %[[E:.*]] = sparsec.compare eq, %[[S]]
// CHECK-NEXT: %[[N:.*]] = sparsec.not %[[E]] : tensor<1x4xi1>
// CHECK: sparsec.sparse_linear %arg0, %{{.*}} active %[[N]]
// CHECK: %[[GC:.*]] = sparsec.sparse_linear %arg0, %{{.*}}, %{{.*}} active %[[MC]] {{{.*}}sparsec.device = "cpu", transpose_weight}
// CHECK-NEXT: sparsec.silu %[[GC]] {sparsec.device = "cpu"}
// CHECK-NEXT: sparsec.compare eq, {{.*}}sparsec.device = "cpu"
// CHECK-NEXT: sparsec.not {{.*}}sparsec.device = "cpu"
// CHECK: sparsec.add
// CHECK-NOT: sparsec.predict
sparsec.global @wg : tensor<8x4xf32> {source = "wg"}
sparsec.global @bg : tensor<8xf32> {source = "bg"}
sparsec.global @wu : tensor<8x4xf32> {source = "wu"}
sparsec.global @wd : tensor<8x4xf32> {source = "wd"}
sparsec.global @p1 : tensor<4x2xf32> {source = "", value = dense<1.0> : tensor<4x2xf32>}
sparsec.global @p2 : tensor<2x8xf32> {source = "", value = dense<1.0> : tensor<2x8xf32>}
func.func @predicted_silu(%x: tensor<1x4xf32>) -> tensor<1x4xf32> {
  %p1 = sparsec.weight @p1 : tensor<4x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x8xf32>
  %pm = sparsec.predict %x, %p1, %p2 : (tensor<1x4xf32>, tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<1x8xi1>
  %wg = sparsec.weight @wg : tensor<8x4xf32>
  %bg = sparsec.weight @bg : tensor<8xf32>
  %wu = sparsec.weight @wu : tensor<8x4xf32>
  %wd = sparsec.weight @wd : tensor<8x4xf32>
  %zero = sparsec.constant dense<0.0> : tensor<f32>
  %g = sparsec.sparse_linear %x, %wg, %bg active %pm {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, transpose_weight} : (tensor<1x4xf32>, tensor<8x4xf32>, tensor<8xf32>, tensor<1x8xi1>) -> tensor<1x8xf32>
  %s = sparsec.silu %g {placement = #sparsec.placement<gpu_neurons = 4, total_neurons = 8, group = 4>} : tensor<1x8xf32>
  %e = sparsec.compare eq, %s, %zero : tensor<1x8xf32>, tensor<f32> -> tensor<1x8xi1>
  %n = sparsec.not %e : tensor<1x8xi1>
  %u = sparsec.sparse_linear %x, %wu active %n {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>, transpose_weight} : (tensor<1x4xf32>, tensor<8x4xf32>, tensor<1x8xi1>) -> tensor<1x8xf32>
  %p = sparsec.mul %u, %s : tensor<1x8xf32>, tensor<1x8xf32> -> tensor<1x8xf32>
  %y = sparsec.sparse_linear %p, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<1x8xf32>, tensor<8x4xf32>) -> tensor<1x4xf32>
  return %y : tensor<1x4xf32>
}

// -----

// A squared ReLU (pow(r, 2)): the power's constant is shared by the parts.
// CHECK-LABEL: func.func @squared
// CHECK: %[[C:.*]] = sparsec.constant dense<2.000000e+00>
// CHECK: %[[R:.*]] = sparsec.relu %{{.*}} : tensor<?x3xf32>
// CHECK-NEXT: %[[S:.*]] = sparsec.pow %[[R]], %[[C]] : tensor<?x3xf32>, tensor<f32> -> tensor<?x3xf32>
// CHECK: sparsec.sparse_linear %[[S]], %{{.*}} : (tensor<?x3xf32>, tensor<3x4xf32>) -> tensor<?x4xf32>
// CHECK: %[[RC:.*]] = sparsec.relu %{{.*}} {sparsec.device = "cpu"} : tensor<?x5xf32>
// CHECK-NEXT: sparsec.pow %[[RC]], %[[C]] {sparsec.device = "cpu"} : tensor<?x5xf32>, tensor<f32> -> tensor<?x5xf32>
// CHECK: sparsec.add
sparsec.global @w1 : tensor<4x8xf32> {source = "w1"}
sparsec.global @w2 : tensor<8x4xf32> {source = "w2"}
func.func @squared(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %w1 = sparsec.weight @w1 : tensor<4x8xf32>
  %w2 = sparsec.weight @w2 : tensor<8x4xf32>
  %two = sparsec.constant dense<2.0> : tensor<f32>
  %h = sparsec.linear %x, %w1 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  %r = sparsec.relu %h {placement = #sparsec.placement<gpu_neurons = 3, total_neurons = 8, group = 1>} : tensor<?x8xf32>
  %s = sparsec.pow %r, %two : tensor<?x8xf32>, tensor<f32> -> tensor<?x8xf32>
  %y = sparsec.sparse_linear %s, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}

// -----

// A placed activation that is no longer an FFN (its result gained a second
// user): a clear error, no crash.
sparsec.global @a : tensor<4x8xf32> {source = "a"}
sparsec.global @b : tensor<8x4xf32> {source = "b"}
func.func @not_ffn(%x: tensor<?x4xf32>) -> (tensor<?x4xf32>, tensor<?x8xf32>) {
  %a = sparsec.weight @a : tensor<4x8xf32>
  %b = sparsec.weight @b : tensor<8x4xf32>
  %h = sparsec.linear %x, %a : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  // expected-error @+1 {{cannot split this placed FFN: its activation has other users}}
  %r = sparsec.relu %h {placement = #sparsec.placement<gpu_neurons = 4, total_neurons = 8, group = 4>} : tensor<?x8xf32>
  %y = sparsec.linear %r, %b : tensor<?x8xf32>, tensor<8x4xf32> -> tensor<?x4xf32>
  return %y, %r : tensor<?x4xf32>, tensor<?x8xf32>
}

// -----

// A placement that does not fit the FFN: an error.
sparsec.global @a : tensor<4x8xf32> {source = "a"}
sparsec.global @b : tensor<8x4xf32> {source = "b"}
func.func @wrong_count(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
  %a = sparsec.weight @a : tensor<4x8xf32>
  %b = sparsec.weight @b : tensor<8x4xf32>
  %h = sparsec.linear %x, %a : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  // expected-error @+1 {{cannot split this placed FFN: its placement counts 16 neurons (4 on the GPU), the FFN has 8}}
  %r = sparsec.relu %h {placement = #sparsec.placement<gpu_neurons = 4, total_neurons = 16, group = 4>} : tensor<?x8xf32>
  %y = sparsec.linear %r, %b : tensor<?x8xf32>, tensor<8x4xf32> -> tensor<?x4xf32>
  return %y : tensor<?x4xf32>
}
