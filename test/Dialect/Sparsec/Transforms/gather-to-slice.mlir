// RUN: sparsec-opt %s --sparsec-gather-to-slice | FileCheck %s

// Falcon's key and value heads: one-element index lists, negative, on an
// axis of known size 6: slices [4, 5) and [5, 6) that keep the axis.
// CHECK-LABEL: func.func @falcon_heads
// CHECK-DAG: %[[S4:.*]] = sparsec.constant dense<4> : tensor<1xi64>
// CHECK-DAG: %[[E5:.*]] = sparsec.constant dense<5> : tensor<1xi64>
// CHECK-DAG: %[[E6:.*]] = sparsec.constant dense<6> : tensor<1xi64>
// CHECK-DAG: %[[A2:.*]] = sparsec.constant dense<2> : tensor<1xi64>
// CHECK-DAG: %[[ONE:.*]] = sparsec.constant dense<1> : tensor<1xi64>
// CHECK: %[[K:.*]] = sparsec.slice %arg0, %[[S4]], %[[E5]], %[[A2]], %[[ONE]] : ({{.*}}) -> tensor<?x?x1x4xf32>
// CHECK: %[[V:.*]] = sparsec.slice %arg0, %[[E5]], %[[E6]], %[[A2]], %[[ONE]] : ({{.*}}) -> tensor<?x?x1x4xf32>
// CHECK-NOT: sparsec.gather
// CHECK: return %[[K]], %[[V]]
func.func @falcon_heads(%qkv: tensor<?x?x6x4xf32>) -> (tensor<?x?x1x4xf32>, tensor<?x?x1x4xf32>) {
  %k = sparsec.constant dense<[-2]> : tensor<1xi64>
  %v = sparsec.constant dense<[-1]> : tensor<1xi64>
  %gk = sparsec.gather %qkv, %k {axis = 2 : i64} : tensor<?x?x6x4xf32>, tensor<1xi64> -> tensor<?x?x1x4xf32>
  %gv = sparsec.gather %qkv, %v {axis = 2 : i64} : tensor<?x?x6x4xf32>, tensor<1xi64> -> tensor<?x?x1x4xf32>
  return %gk, %gv : tensor<?x?x1x4xf32>, tensor<?x?x1x4xf32>
}

// A scalar index drops the axis: a slice, then a squeeze of it. The axis is
// given from the end.
// CHECK-LABEL: func.func @scalar_index
// CHECK-DAG: %[[ONE:.*]] = sparsec.constant dense<1> : tensor<1xi64>
// CHECK-DAG: %[[TWO:.*]] = sparsec.constant dense<2> : tensor<1xi64>
// CHECK: %[[S:.*]] = sparsec.slice %arg0, %[[ONE]], %[[TWO]], %[[TWO]], %[[ONE]] : ({{.*}}) -> tensor<2x3x1xf32>
// CHECK: %[[Q:.*]] = sparsec.squeeze %[[S]] {axes = array<i64: 2>} : tensor<2x3x1xf32> -> tensor<2x3xf32>
// CHECK: return %[[Q]]
func.func @scalar_index(%x: tensor<2x3x5xf32>) -> tensor<2x3xf32> {
  %i = sparsec.constant dense<1> : tensor<i64>
  %g = sparsec.gather %x, %i {axis = -1 : i64} : tensor<2x3x5xf32>, tensor<i64> -> tensor<2x3xf32>
  return %g : tensor<2x3xf32>
}

// A run of three on a dynamic axis: [1, 4) with step 1.
// CHECK-LABEL: func.func @run
// CHECK-DAG: %[[S:.*]] = sparsec.constant dense<1> : tensor<1xi64>
// CHECK-DAG: %[[E:.*]] = sparsec.constant dense<4> : tensor<1xi64>
// CHECK-DAG: %[[A:.*]] = sparsec.constant dense<0> : tensor<1xi64>
// CHECK: sparsec.slice %arg0, %[[S]], %[[E]], %[[A]], %[[S]] : ({{.*}}) -> tensor<3x8xf32>
func.func @run(%x: tensor<?x8xf32>) -> tensor<3x8xf32> {
  %i = sparsec.constant dense<[1, 2, 3]> : tensor<3xi64>
  %g = sparsec.gather %x, %i : tensor<?x8xf32>, tensor<3xi64> -> tensor<3x8xf32>
  return %g : tensor<3x8xf32>
}

// The last index of a dynamic axis: up to the end (INT64_MAX).
// CHECK-LABEL: func.func @last_dynamic
// CHECK-DAG: %[[S:.*]] = sparsec.constant dense<-1> : tensor<1xi64>
// CHECK-DAG: %[[E:.*]] = sparsec.constant dense<9223372036854775807> : tensor<1xi64>
// CHECK-DAG: %[[A:.*]] = sparsec.constant dense<0> : tensor<1xi64>
// CHECK: sparsec.slice %arg0, %[[S]], %[[E]], %[[A]], {{.*}} -> tensor<1x?xf32>
func.func @last_dynamic(%x: tensor<?x?xf32>) -> tensor<1x?xf32> {
  %i = sparsec.constant dense<[-1]> : tensor<1xi64>
  %g = sparsec.gather %x, %i : tensor<?x?xf32>, tensor<1xi64> -> tensor<1x?xf32>
  return %g : tensor<1x?xf32>
}

// Left alone: indices out of order, a repeat, mixed signs on a dynamic
// axis, an index out of range (the runtime reports it), indices that are
// not constant, a 2-D index tensor, and integer data (shape arithmetic).
// CHECK-LABEL: func.func @left_alone
// CHECK-COUNT-7: sparsec.gather
// CHECK-NOT: sparsec.slice
func.func @left_alone(%x: tensor<?x8xf32>, %s: tensor<8xf32>, %ids: tensor<2xi64>,
                      %shape: tensor<4xi64>)
    -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<1xf32>,
        tensor<2x8xf32>, tensor<1x2x8xf32>, tensor<i64>) {
  %a = sparsec.constant dense<[2, 1]> : tensor<2xi64>
  %b = sparsec.constant dense<[1, 1]> : tensor<2xi64>
  %c = sparsec.constant dense<[-1, 0]> : tensor<2xi64>
  %d = sparsec.constant dense<[8]> : tensor<1xi64>
  %e = sparsec.constant dense<[[0, 1]]> : tensor<1x2xi64>
  %f = sparsec.constant dense<1> : tensor<i64>
  %g0 = sparsec.gather %x, %a : tensor<?x8xf32>, tensor<2xi64> -> tensor<2x8xf32>
  %g1 = sparsec.gather %x, %b : tensor<?x8xf32>, tensor<2xi64> -> tensor<2x8xf32>
  %g2 = sparsec.gather %x, %c : tensor<?x8xf32>, tensor<2xi64> -> tensor<2x8xf32>
  %g3 = sparsec.gather %s, %d : tensor<8xf32>, tensor<1xi64> -> tensor<1xf32>
  %g4 = sparsec.gather %x, %ids : tensor<?x8xf32>, tensor<2xi64> -> tensor<2x8xf32>
  %g5 = sparsec.gather %x, %e : tensor<?x8xf32>, tensor<1x2xi64> -> tensor<1x2x8xf32>
  %g6 = sparsec.gather %shape, %f : tensor<4xi64>, tensor<i64> -> tensor<i64>
  return %g0, %g1, %g2, %g3, %g4, %g5, %g6 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>, tensor<1xf32>, tensor<2x8xf32>, tensor<1x2x8xf32>, tensor<i64>
}
