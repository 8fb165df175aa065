// The PIT choice for down projections that read a product: a gated MLP's
// (relu(gate) * up, after sparsec-sparsify-ffn: the gate also feeds the up
// projection's mask) and a squared ReLU's. The product keeps the site's
// zeros, so the site's tile counts plan it: g1's and s1's neurons fire 1 %
// of the time (32-token tiles 27.5 % active, 55.0 us against dense 100):
// 32 x 1 tiles. The table and tokens are pit-tile.mlir's.
// RUN: %pyexe %S/Inputs/make_sprof.py %t.sprof 0x00000000000000ab "g1:100:1,1,1,1,1,1,1,1" "s1:100:1,1,1,1,1,1,1,1"
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table.json tokens=64" 2>&1 | FileCheck %s
// CHECK: remark: PIT at 64 tokens (g1): dense 100.0 us; 32 x 1: density 0.275 estimated, 55.0 us; 8 x 1: density 0.077 estimated, 61.8 us -> 32 x 1 tiles
// CHECK: remark: PIT at 64 tokens (s1): dense 100.0 us; 32 x 1: density 0.275 estimated, 55.0 us; 8 x 1: density 0.077 estimated, 61.8 us -> 32 x 1 tiles
// CHECK-COUNT-2: pit_tile = 32 : i64

module attributes {sparsec.model_hash = "0x00000000000000ab"} {
  sparsec.global @w1 : tensor<4x8xf32> {source = "w1"}
  sparsec.global @w2 : tensor<8x4xf32> {source = "w2"}
  func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
    %w1 = sparsec.weight @w1 : tensor<4x8xf32>
    %w2 = sparsec.weight @w2 : tensor<8x4xf32>
    %zero = sparsec.constant dense<0.0> : tensor<f32>
    %g = sparsec.linear %x, %w1 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %r = sparsec.relu %g : tensor<?x8xf32> loc("g1")
    %m = sparsec.compare gt, %r, %zero : tensor<?x8xf32>, tensor<f32> -> tensor<?x8xi1>
    %u = sparsec.sparse_linear %x, %w1 active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>} : (tensor<?x4xf32>, tensor<4x8xf32>, tensor<?x8xi1>) -> tensor<?x8xf32>
    %p = sparsec.mul %r, %u : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
    %y = sparsec.sparse_linear %p, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
    %h = sparsec.linear %y, %w1 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %s = sparsec.relu %h : tensor<?x8xf32> loc("s1")
    %sq = sparsec.mul %s, %s : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
    %y2 = sparsec.sparse_linear %sq, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
    return %y2 : tensor<?x4xf32>
  }
}
