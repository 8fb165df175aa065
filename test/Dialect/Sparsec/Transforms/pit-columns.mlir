// The output width of a PIT block as a second choice. The table
// (Inputs/pit-table-columns.json, at exactly 64 x 8 x 4) has pit-tile.mlir's
// 32 x 1 and 8 x 1 series at 128 columns (the 8 x 1 one without a
// `columns` field: 128, as tables written before the field) and a 32 x 1
// series at 256 columns: 10 us + 140 us x density, cheaper than 128
// columns' 200 us x density above a density of 1/6. f1's 32-token tiles
// (27.5 % active, estimated) take 256 columns: 48.5 us against 55.0. f2's
// (10 % active, measured) keep 128: 20.0 us against 24.0, and record no
// width (128 is the runtime's default).
// RUN: %pyexe %S/Inputs/make_sprof.py %t.sprof 0x00000000000000ab "f1:100:1,1,1,1,1,1,1,1" "f2:100:50,50,50,50,50,50,50,50" "tiles:f2:32:10:1,1,1,1,1,1,1,1" "tiles:f2:8:40:5,5,5,5,5,5,5,5"
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table-columns.json tokens=64" 2>&1 | FileCheck %s
// CHECK: remark: PIT at 64 tokens (f1): dense 100.0 us; 32 x 1: density 0.275 estimated, 55.0 us; 32 x 1, 256 columns: density 0.275 estimated, 48.5 us; 8 x 1: density 0.077 estimated, 61.8 us -> 32 x 1 tiles, 256 columns
// CHECK: remark: PIT at 64 tokens (f2): dense 100.0 us; 32 x 1: density 0.100 measured, 20.0 us; 32 x 1, 256 columns: density 0.100 measured, 24.0 us; 8 x 1: density 0.125 measured, 100.0 us -> 32 x 1 tiles
// CHECK: sparsec.sparse_linear %{{.*}}pit_columns = 256 : i64, pit_tile = 32 : i64
// CHECK: sparsec.sparse_linear
// CHECK-NOT: pit_columns
// CHECK-SAME: pit_tile = 32 : i64
//
// force-columns=128 leaves the model only the 128-column series; f1 takes
// them and both record the width.
// RUN: sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table-columns.json tokens=64 force-columns=128" 2>&1 | FileCheck %s --check-prefix=ONLY128
// ONLY128: remark: PIT at 64 tokens (f1): dense 100.0 us; 32 x 1: density 0.275 estimated, 55.0 us; 8 x 1: density 0.077 estimated, 61.8 us -> 32 x 1 tiles
// ONLY128-COUNT-2: pit_columns = 128 : i64, pit_tile = 32 : i64
//
// With force-tile the width is recorded as given, on PIT tiles only.
// RUN: sparsec-opt %s "--sparsec-pit-tile=force-tile=16 force-columns=256" 2>&1 | FileCheck %s --check-prefix=FORCE
// FORCE-COUNT-2: pit_columns = 256 : i64, pit_tile = 16 : i64
// RUN: sparsec-opt %s "--sparsec-pit-tile=force-tile=0 force-columns=256" 2>&1 | FileCheck %s --check-prefix=FORCEDENSE
// FORCEDENSE-NOT: pit_columns
// FORCEDENSE-COUNT-2: pit_tile = 0 : i64
//
// Errors.
// RUN: not sparsec-opt %s "--sparsec-pit-tile=force-tile=32 force-columns=64" 2>&1 | FileCheck %s --check-prefix=BADCOLS
// BADCOLS: error: sparsec-pit-tile: force-columns must be 0, 128 or 256, got 64
// RUN: not sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table.json force-columns=256" 2>&1 | FileCheck %s --check-prefix=NOWIDTH
// NOWIDTH: error: PIT latency table '{{.*}}pit-table.json' has no measurements at 256 columns (force-columns)
// RUN: not sparsec-opt %s "--sparsec-pit-tile=profile=%t.sprof table=%S/Inputs/pit-table-bad-columns.json" 2>&1 | FileCheck %s --check-prefix=BADTABLE
// BADTABLE: error: PIT latency table '{{.*}}pit-table-bad-columns.json': a 'pit' entry's 'columns' must be 128 or 256

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
    return %y2 : tensor<?x4xf32>
  }
}
