// Three FFN down projections of 8 neurons into 4 outputs. The test table
// (Inputs/pit-table.json) is measured at exactly 64 x 8 x 4: dense 100 us,
// 32 x 1 tiles 200 us x density, 8 x 1 tiles 800 us x density (no 16 x 1
// entries), so at tokens=64 nothing is rescaled. Profile (100 tokens):
// f1's neurons fire 1 % of the time (32-token tiles active 1 - 0.99^32 =
// 27.5 %: 55.0 us; 8-token tiles 7.7 %: 61.8 us): 32 x 1 tiles. f2's fire
// half the time (tiles ~100 % active): dense. f3 is a hybrid CPU part:
// untouched. f4 is placed (hybrid) with its 2 hottest neurons on the GPU:
// the whole layer (one neuron at 50 %, seven at 1 %) would take 32 x 1
// tiles (36.6 % active, 73.1 us), but its GPU part (50 % and 1 %: 63.8 %
// active) is planned alone, at 2 of 8 neurons' cost: 31.9 us against
// dense 25.0: dense.
// RUN: %pyexe %S/Inputs/make_sprof.py %t.sprof 0x00000000000000ab "f1:100:1,1,1,1,1,1,1,1" "f2:100:50,50,50,50,50,50,50,50" "f3:100:1,1,1,1,1,1,1,1" "f4:100:50,1,1,1,1,1,1,1"
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table.json tokens=64" 2>&1 | FileCheck %s
// CHECK: remark: PIT at 64 tokens (f1): dense 100.0 us; 32 x 1: density 0.275 estimated, 55.0 us; 8 x 1: density 0.077 estimated, 61.8 us -> 32 x 1 tiles
// CHECK: remark: PIT at 64 tokens (f2): dense 100.0 us; 32 x 1: density 1.000 estimated, 200.0 us; 8 x 1: density 0.996 estimated, 796.9 us -> dense
// CHECK: remark: PIT at 64 tokens (f4, GPU part of 2 neurons): dense 25.0 us; 32 x 1: density 0.638 estimated, 31.9 us; 8 x 1: density 0.537 estimated, 107.3 us -> dense
// CHECK: sparsec.sparse_linear %{{.*}}pit_tile = 32 : i64
// CHECK: sparsec.sparse_linear %{{.*}}pit_tile = 0 : i64
// CHECK: sparsec.sparse_linear %{{[0-9]+}}, %{{[0-9]+}} {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>, sparsec.device = "cpu"}
// CHECK: sparsec.sparse_linear %{{.*}}pit_tile = 0 : i64
// CHECK: return
//
// A profile with tile counts measured on consecutive tokens (version 3):
// f2's neurons fire half the time but in bursts, so only 10 % of its
// 32-row blocks (12.5 % of the 8-row ones) are active: measured densities
// replace the independent-token estimate and f2 takes 32 x 1 tiles. f4's
// GPU part (neurons 0 and 1) is active in 4 and 0 of 4 blocks: 0.5, at 2
// of 8 neurons' cost 25.0 us, still not below dense (25.0 x 0.9); its 8-row
// tiles have no counts and stay estimated.
// RUN: %pyexe %S/Inputs/make_sprof.py %t.v3.sprof 0x00000000000000ab "f1:100:1,1,1,1,1,1,1,1" "f2:100:50,50,50,50,50,50,50,50" "f3:100:1,1,1,1,1,1,1,1" "f4:100:50,1,1,1,1,1,1,1" "tiles:f2:32:10:1,1,1,1,1,1,1,1" "tiles:f2:8:40:5,5,5,5,5,5,5,5" "tiles:f4:32:4:4,0,1,1,1,1,1,1"
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.v3.sprof table=%S/Inputs/pit-table.json tokens=64" 2>&1 | FileCheck %s --check-prefix=TILES
// TILES: remark: PIT at 64 tokens (f1): dense 100.0 us; 32 x 1: density 0.275 estimated, 55.0 us; 8 x 1: density 0.077 estimated, 61.8 us -> 32 x 1 tiles
// TILES: remark: PIT at 64 tokens (f2): dense 100.0 us; 32 x 1: density 0.100 measured, 20.0 us; 8 x 1: density 0.125 measured, 100.0 us -> 32 x 1 tiles
// TILES: remark: PIT at 64 tokens (f4, GPU part of 2 neurons): dense 25.0 us; 32 x 1: density 0.500 measured, 25.0 us; 8 x 1: density 0.537 estimated, 107.3 us -> dense
// TILES-COUNT-2: pit_tile = 32 : i64
//
// Twice the tokens: every time doubles, the choices stay.
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table.json tokens=128" 2>&1 | FileCheck %s --check-prefix=T128
// T128: remark: PIT at 128 tokens (f1): dense 200.0 us; 32 x 1: density 0.275 estimated, 110.0 us; 8 x 1: density 0.077 estimated, 123.6 us -> 32 x 1 tiles
//
// A margin of 0.5 needs PIT under 50 us: f1 stays dense too.
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table.json tokens=64 margin=0.5" 2>&1 | FileCheck %s --check-prefix=MARGIN
// MARGIN: (f1): {{.*}} -> dense
//
// The built-in (H200) table runs without a table option.
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof" 2>&1 | FileCheck %s --check-prefix=BUILTIN
// BUILTIN: remark: PIT at 512 tokens (f1): dense
// BUILTIN: pit_tile = {{(0|8|16|32)}} : i64
//
// force-tile needs no profile and sets every GPU-side input sparse linear.
// RUN: sparsec-opt %s "--sparsec-pit-tile=force-tile=16" 2>&1 | FileCheck %s --check-prefix=FORCE
// FORCE-NOT: remark
// FORCE-COUNT-2: pit_tile = 16 : i64
// FORCE: sparsec.sparse_linear %{{[0-9]+}}, %{{[0-9]+}} {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>, sparsec.device = "cpu"}
// FORCE: pit_tile = 16 : i64
// FORCE-NOT: pit_tile
//
// Errors.
// RUN: not sparsec-opt %s "--sparsec-pit-tile=force-tile=12" 2>&1 | FileCheck %s --check-prefix=BADTILE
// BADTILE: error: sparsec-pit-tile: force-tile must be -1, 0, 8, 16 or 32, got 12
// RUN: not sparsec-opt %s "--sparsec-pit-tile=table=%S/Inputs/pit-table.json" 2>&1 | FileCheck %s --check-prefix=NOPROF
// NOPROF: error: sparsec-pit-tile needs profile=<file.sprof>
// RUN: not sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%t.missing.json" 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: error: cannot read PIT latency table '{{.*}}missing.json'
// RUN: not sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%t.sprof" 2>&1 | FileCheck %s --check-prefix=NOTJSON
// NOTJSON: error: PIT latency table '{{.*}}.sprof': not JSON
// RUN: not sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table-v2.json" 2>&1 | FileCheck %s --check-prefix=VERSION
// VERSION: error: PIT latency table '{{.*}}pit-table-v2.json': not a sparsec PIT table (format sparsec-pit-table, version 1)

module attributes {sparsec.model_hash = "0x00000000000000ab"} {
  sparsec.global @w1 : tensor<4x8xf32> {source = "w1"}
  sparsec.global @w2 : tensor<8x4xf32> {source = "w2"}
  func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
    %w1 = sparsec.weight @w1 : tensor<4x8xf32>
    %w2 = sparsec.weight @w2 : tensor<8x4xf32>
    %h = sparsec.linear %x, %w1 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %r = sparsec.relu %h : tensor<?x8xf32> loc("f1")
    %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
    %h2 = sparsec.linear %y, %w1 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %r2 = sparsec.relu %h2 : tensor<?x8xf32> loc("f2")
    %y2 = sparsec.sparse_linear %r2, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
    %h3 = sparsec.linear %y2, %w1 {sparsec.device = "cpu"} : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %r3 = sparsec.relu %h3 {sparsec.device = "cpu"} : tensor<?x8xf32> loc("f3")
    %y3 = sparsec.sparse_linear %r3, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, sparsec.device = "cpu"} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
    %h4 = sparsec.linear %y3, %w1 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %r4 = sparsec.relu %h4 {placement = #sparsec.placement<gpu_neurons = 2, total_neurons = 8, group = 2>} : tensor<?x8xf32> loc("f4")
    %y4 = sparsec.sparse_linear %r4, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>) -> tensor<?x4xf32>
    return %y4 : tensor<?x4xf32>
  }
}
