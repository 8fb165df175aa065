// RUN: sparsec-opt %s --sparsec-instrument-sparsity | FileCheck %s

// CHECK: module attributes {sparsec.profile_sites = ["/layers.0/Relu", "site1", "gate"]}
// CHECK-LABEL: func.func @ffn
func.func @ffn(%x: tensor<?x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> tensor<?x16xf32> {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  // CHECK: %[[R:.*]] = sparsec.relu
  // The input of the producing linear is sampled with the mask.
  // CHECK-NEXT: sparsec.profile_count %[[R]] layer_input %arg0 {index = 0 : i64, site = "/layers.0/Relu"} : tensor<?x16xf32>, tensor<?x8xf32>
  %r = sparsec.relu %h : tensor<?x16xf32> loc("/layers.0/Relu")
  %y = sparsec.linear %r, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  // A gelu feeding a linear is a site too (positional name without a loc).
  // Its producer is not a linear: no layer input.
  // CHECK: %[[G:.*]] = sparsec.gelu
  // CHECK-NEXT: sparsec.profile_count %[[G]] {index = 1 : i64, site = "site1"} : tensor<?x8xf32>{{$}}
  %y2 = sparsec.neg %y : tensor<?x8xf32>
  %g = sparsec.gelu %y2 : tensor<?x8xf32>
  %z = sparsec.linear %g, %w1 : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  // A relu that feeds no linear is not.
  // CHECK: sparsec.relu
  // CHECK-NOT: sparsec.profile_count
  %o = sparsec.relu %z : tensor<?x16xf32>
  %n = sparsec.neg %o : tensor<?x16xf32>
  return %n : tensor<?x16xf32>
}

// The gate of a gated MLP (its ReLU feeds a product that feeds a linear) is
// a site; the layer input is the gate projection's input.
// CHECK-LABEL: func.func @gated
func.func @gated(%x: tensor<?x8xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>, %wd: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  // CHECK: %[[G:.*]] = sparsec.relu
  // CHECK-NEXT: sparsec.profile_count %[[G]] layer_input %arg0 {index = 2 : i64, site = "gate"}
  %g = sparsec.relu %h : tensor<?x16xf32> loc("gate")
  %u = sparsec.linear %x, %wu : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %p = sparsec.mul %g, %u : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %p, %wd : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}
