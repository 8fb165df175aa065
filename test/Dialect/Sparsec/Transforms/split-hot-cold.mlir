// RUN: sparsec-opt %s --split-input-file --sparsec-split-hot-cold | FileCheck %s

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
