// RUN: sparsec-opt %s --split-input-file --sparsec-bound-positions -verify-diagnostics | FileCheck %s

// OPT's learned positions: cumsum(mask) * mask - 1, offset by 2, into a
// table of 34 rows: ids reach S + 1, so 32 tokens fit.
// CHECK-LABEL: module attributes {sparsec.positions = {limit = 32 : i64, rows = 34 : i64, table = "pos.weight"}}
sparsec.global @tok : tensor<100x8xf32> {source = "tok.weight"}
sparsec.global @pos : tensor<34x8xf32> {source = "pos.weight"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.dims = ["batch", "total_seq"], sparsec.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {sparsec.name = "logits"}) {
  %one = sparsec.constant dense<1> : tensor<i64>
  %two = sparsec.constant dense<2> : tensor<i64>
  %max = sparsec.constant dense<9223372036854775807> : tensor<1xi64>
  %ax = sparsec.constant dense<1> : tensor<1xi64>
  %sid = sparsec.shape %ids : tensor<?x?xi64> -> tensor<2xi64>
  %seq = sparsec.gather %sid, %one : tensor<2xi64>, tensor<i64> -> tensor<i64>
  %smask = sparsec.shape %mask : tensor<?x?xi64> -> tensor<2xi64>
  %total = sparsec.gather %smask, %one : tensor<2xi64>, tensor<i64> -> tensor<i64>
  %past = sparsec.sub %total, %seq : tensor<i64>, tensor<i64> -> tensor<i64>
  %c = sparsec.cumsum %mask {axis = 1 : i64} : tensor<?x?xi64>
  %m = sparsec.mul %c, %mask : tensor<?x?xi64>, tensor<?x?xi64> -> tensor<?x?xi64>
  %p0 = sparsec.sub %m, %one : tensor<?x?xi64>, tensor<i64> -> tensor<?x?xi64>
  %start = sparsec.unsqueeze %past {axes = array<i64: 0>} : tensor<i64> -> tensor<1xi64>
  %p1 = sparsec.slice %p0, %start, %max, %ax, %ax : (tensor<?x?xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<?x?xi64>
  %p = sparsec.add %p1, %two : tensor<?x?xi64>, tensor<i64> -> tensor<?x?xi64>
  %tw = sparsec.weight @tok : tensor<100x8xf32>
  %te = sparsec.embedding %tw, %ids : tensor<100x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %pw = sparsec.weight @pos : tensor<34x8xf32>
  // expected-remark @+1 {{sequences of up to 32 tokens: longer ones index past the 34 rows of 'pos.weight'}}
  %pe = sparsec.embedding %pw, %p : tensor<34x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %x = sparsec.add %te, %pe : tensor<?x?x8xf32>, tensor<?x?x8xf32> -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

// Positions past .. past + seq from the cache's length, in the fused
// lookup's second table: one new token after S - 1 cached ones reads id
// S - 1, so 64 rows hold 64 tokens.
// CHECK-LABEL: module attributes {sparsec.positions = {limit = 64 : i64, rows = 64 : i64, table = "rope.table"}}
sparsec.global @tok : tensor<100x8xf32> {source = "tok.weight"}
sparsec.global @rope : tensor<64x8xf32> {source = "rope.table"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "input_ids"},
                %k: tensor<?x2x?x4xf32> {sparsec.dims = ["batch", "", "past_seq", ""], sparsec.name = "past_key_values.0.key"})
    -> (tensor<?x?x8xf32> {sparsec.name = "logits"}) {
  %one = sparsec.constant dense<1> : tensor<i64>
  %two = sparsec.constant dense<2> : tensor<i64>
  %sid = sparsec.shape %ids : tensor<?x?xi64> -> tensor<2xi64>
  %seq = sparsec.gather %sid, %one : tensor<2xi64>, tensor<i64> -> tensor<i64>
  %sk = sparsec.shape %k : tensor<?x2x?x4xf32> -> tensor<4xi64>
  %past = sparsec.gather %sk, %two : tensor<4xi64>, tensor<i64> -> tensor<i64>
  %end = sparsec.add %past, %seq : tensor<i64>, tensor<i64> -> tensor<i64>
  %r = sparsec.range %past, %end, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %p = sparsec.unsqueeze %r {axes = array<i64: 0>} : tensor<?xi64> -> tensor<1x?xi64>
  %tw = sparsec.weight @tok : tensor<100x8xf32>
  %rw = sparsec.weight @rope : tensor<64x8xf32>
  // expected-remark @+1 {{sequences of up to 64 tokens: longer ones index past the 64 rows of 'rope.table'}}
  %e = sparsec.embedding %tw, %ids plus %rw, %p : tensor<100x8xf32>, tensor<?x?xi64>, tensor<64x8xf32>, tensor<1x?xi64> -> tensor<?x?x8xf32>
  return %e : tensor<?x?x8xf32>
}

// -----

// The same positions computed in float32 (cast, cumsum, cast back).
// CHECK-LABEL: module attributes {sparsec.positions = {limit = 31 : i64, rows = 32 : i64, table = "pos.weight"}}
sparsec.global @pos : tensor<32x8xf32> {source = "pos.weight"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {sparsec.name = "logits"}) {
  %f = sparsec.cast %mask : tensor<?x?xi64> -> tensor<?x?xf32>
  %c = sparsec.cumsum %f {axis = 1 : i64} : tensor<?x?xf32>
  %i = sparsec.cast %c : tensor<?x?xf32> -> tensor<?x?xi64>
  %pw = sparsec.weight @pos : tensor<32x8xf32>
  // expected-remark @+1 {{sequences of up to 31 tokens}}
  %pe = sparsec.embedding %pw, %i : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  return %pe : tensor<?x?x8xf32>
}

// -----

// position_ids as an input: generate does not compute them, nothing bounds.
// CHECK-LABEL: module {
// CHECK-NEXT: sparsec.global @pos
sparsec.global @pos : tensor<32x8xf32> {source = "pos.weight"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "input_ids"},
                %positions: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "position_ids"})
    -> (tensor<?x?x8xf32> {sparsec.name = "logits"}) {
  %pw = sparsec.weight @pos : tensor<32x8xf32>
  %pe = sparsec.embedding %pw, %positions : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  return %pe : tensor<?x?x8xf32>
}

// -----

// Ids through an op the intervals do not follow (a power): no bound.
// CHECK-LABEL: module {
// CHECK-NEXT: sparsec.global @pos
sparsec.global @pos : tensor<32x8xf32> {source = "pos.weight"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {sparsec.name = "logits"}) {
  %c = sparsec.cumsum %mask {axis = 1 : i64} : tensor<?x?xi64>
  %p = sparsec.pow %c, %c : tensor<?x?xi64>, tensor<?x?xi64> -> tensor<?x?xi64>
  %pw = sparsec.weight @pos : tensor<32x8xf32>
  %pe = sparsec.embedding %pw, %p : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  return %pe : tensor<?x?x8xf32>
}

// -----

// Ids that do not grow with the sequence (the mask itself, 0 or 1) fit any
// length: no bound.
// CHECK-LABEL: module {
// CHECK-NEXT: sparsec.global @types
sparsec.global @types : tensor<2x8xf32> {source = "token_type.weight"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "attention_mask"})
    -> (tensor<?x?x8xf32> {sparsec.name = "logits"}) {
  %zero = sparsec.constant dense<0> : tensor<i64>
  %p = sparsec.add %mask, %zero : tensor<?x?xi64>, tensor<i64> -> tensor<?x?xi64>
  %tw = sparsec.weight @types : tensor<2x8xf32>
  %te = sparsec.embedding %tw, %p : tensor<2x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  return %te : tensor<?x?x8xf32>
}

// -----

// Not a decoder (no input_ids): nothing to bound.
// CHECK-LABEL: module {
// CHECK-NEXT: sparsec.global @pos
sparsec.global @pos : tensor<4x8xf32> {source = "pos.weight"}
func.func @main(%x: tensor<?x?xi64> {sparsec.dims = ["batch", "seq"], sparsec.name = "x"})
    -> (tensor<?x?x8xf32> {sparsec.name = "y"}) {
  %c = sparsec.cumsum %x {axis = 1 : i64} : tensor<?x?xi64>
  %pw = sparsec.weight @pos : tensor<4x8xf32>
  %pe = sparsec.embedding %pw, %c : tensor<4x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  return %pe : tensor<?x?x8xf32>
}
