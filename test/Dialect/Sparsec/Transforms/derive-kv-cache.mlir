// RUN: sparsec-opt %s --split-input-file --sparsec-derive-kv-cache -verify-diagnostics | FileCheck %s

// Each attention gets past key/value inputs and present outputs in the
// Optimum naming; the mask and the positions already follow attention_mask.
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[IDS:[a-z0-9]+]]: tensor<?x?xi64> {sparsec.name = "input_ids"}
// CHECK-SAME: %[[MASK:[a-z0-9]+]]: tensor<?x?xi64> {sparsec.name = "attention_mask"}
// CHECK-SAME: %[[PK:[a-z0-9]+]]: tensor<?x2x?x4xf32> {sparsec.dims = ["batch", "", "past_seq", ""], sparsec.name = "past_key_values.0.key"}
// CHECK-SAME: %[[PV:[a-z0-9]+]]: tensor<?x2x?x4xf32> {sparsec.dims = ["batch", "", "past_seq", ""], sparsec.name = "past_key_values.0.value"}
// CHECK-SAME: -> (tensor<?x2x?x4xf32> {sparsec.name = "logits"}, tensor<?x2x?x4xf32> {sparsec.dims = ["batch", "", "past_seq + seq", ""], sparsec.name = "present.0.key"}, tensor<?x2x?x4xf32> {sparsec.dims = ["batch", "", "past_seq + seq", ""], sparsec.name = "present.0.value"})
// CHECK: %[[O:[a-z0-9_]+]], %[[K:[a-z0-9_]+]], %[[V:[a-z0-9_]+]] = sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} past(%[[PK]], %[[PV]])
// CHECK: return %[[O]], %[[K]], %[[V]]
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.name = "attention_mask"},
                %table: tensor<16x8xf32>, %q: tensor<?x2x?x4xf32>)
    -> (tensor<?x2x?x4xf32> {sparsec.name = "logits"}) {
  %pos = sparsec.cumsum %mask {axis = 1 : i64} : tensor<?x?xi64>
  %e = sparsec.embedding %table, %pos : tensor<16x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %b = sparsec.cast %mask : tensor<?x?xi64> -> tensor<?x?xi1>
  %zero = sparsec.constant dense<0.0> : tensor<f32>
  %neg = sparsec.constant dense<-1.0e4> : tensor<f32>
  %m = sparsec.where %b, %zero, %neg : tensor<?x?xi1>, tensor<f32>, tensor<f32> -> tensor<?x?xf32>
  %o = sparsec.attention %q, %q, %q mask %m {resultSegmentSizes = array<i32: 1, 0, 0>, scale = 0.5 : f32} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x?xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

// Positions from the token count alone would restart at 0 with a cache.
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.name = "attention_mask"},
                %table: tensor<16x8xf32>, %q: tensor<?x2x?x4xf32>,
                %pos: tensor<?x?xi64>) -> tensor<?x2x?x4xf32> {
  // expected-error @+1 {{these embedding ids (positions?) do not depend on attention_mask or position_ids: with a KV cache they would restart at 0}}
  %e = sparsec.embedding %table, %pos : tensor<16x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %o = sparsec.attention %q, %q, %q {causal, resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.name = "attention_mask"},
                %q: tensor<?x2x?x4xf32>, %m: tensor<?x?xf32>) -> tensor<?x2x?x4xf32> {
  // expected-error @+1 {{the attention mask does not depend on attention_mask: it would not cover past tokens}}
  %o = sparsec.attention %q, %q, %q mask %m {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x?xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %mask: tensor<?x?xi64> {sparsec.name = "attention_mask"},
                %q: tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32> {
  // expected-error @+1 {{an unmasked, non-causal attention is not a causal decoder's: no KV cache can be derived}}
  %o = sparsec.attention %q, %q, %q {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

// expected-error @+1 {{deriving a KV cache needs a decoder with an input_ids input and an attention_mask or position_ids input}}
func.func @main(%x: tensor<?x8xf32>) -> tensor<?x8xf32> {
  return %x : tensor<?x8xf32>
}

// -----

// A LLaMA-style decoder: no attention_mask, causal attention, rotary angles
// from position_ids. The cache inputs come after the original ones.
// CHECK-LABEL: func.func @main
// CHECK-SAME: {sparsec.name = "position_ids"}
// CHECK-SAME: {sparsec.dims = ["batch", "", "past_seq", ""], sparsec.name = "past_key_values.0.key"}
// CHECK: sparsec.attention {{.*}} past(
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %pos: tensor<?x?xi64> {sparsec.name = "position_ids"},
                %q: tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32> {
  %p = sparsec.cast %pos : tensor<?x?xi64> -> tensor<?x?xf32>
  %s = sparsec.sin %p : tensor<?x?xf32>
  %c = sparsec.cos %p : tensor<?x?xf32>
  %o = sparsec.attention %q, %q, %q {causal, resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

// Rotary angles from the token count alone would restart at 0.
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %pos: tensor<?x?xi64> {sparsec.name = "position_ids"},
                %q: tensor<?x2x?x4xf32>, %t: tensor<?x?xf32>) -> tensor<?x2x?x4xf32> {
  // expected-error @+1 {{these rotary angles do not depend on attention_mask or position_ids: with a KV cache they would restart at 0}}
  %s = sparsec.sin %t : tensor<?x?xf32>
  %o = sparsec.attention %q, %q, %q {causal, resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

// Without attention_mask, a mask cannot cover past tokens.
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %pos: tensor<?x?xi64> {sparsec.name = "position_ids"},
                %q: tensor<?x2x?x4xf32>, %m: tensor<?x?xf32>) -> tensor<?x2x?x4xf32> {
  // expected-error @+1 {{the attention mask does not depend on attention_mask: it would not cover past tokens}}
  %o = sparsec.attention %q, %q, %q mask %m {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x?xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

// A causal mask built from the token count (LLaMA-style exports without an
// attention_mask): with past tokens it would cover only the new ones, so
// the attention takes the causal flag instead (offset for the past).
// CHECK-LABEL: func.func @main
// CHECK: sparsec.attention %{{[a-z0-9]+}}, %{{[a-z0-9]+}}, %{{[a-z0-9]+}} past(
// CHECK-SAME: causal
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %pos: tensor<?x?xi64> {sparsec.name = "position_ids"},
                %q: tensor<?x2x?x4xf32>, %n: tensor<i64>) -> tensor<?x2x?x4xf32> {
  %zero = sparsec.constant dense<0> : tensor<i64>
  %one = sparsec.constant dense<1> : tensor<i64>
  %big = sparsec.constant dense<-1.0e4> : tensor<f32>
  %z = sparsec.constant dense<0.0> : tensor<f32>
  %r = sparsec.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %rows = sparsec.unsqueeze %r {axes = array<i64: 1>} : tensor<?xi64> -> tensor<?x1xi64>
  %cols = sparsec.unsqueeze %r {axes = array<i64: 0>} : tensor<?xi64> -> tensor<1x?xi64>
  %future = sparsec.compare gt, %cols, %rows : tensor<1x?xi64>, tensor<?x1xi64> -> tensor<?x?xi1>
  %m = sparsec.where %future, %big, %z : tensor<?x?xi1>, tensor<f32>, tensor<f32> -> tensor<?x?xf32>
  %o = sparsec.attention %q, %q, %q mask %m {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x?xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}

// -----

// The same with the rows and columns swapped (an anti-causal mask) is not.
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "input_ids"},
                %pos: tensor<?x?xi64> {sparsec.name = "position_ids"},
                %q: tensor<?x2x?x4xf32>, %n: tensor<i64>) -> tensor<?x2x?x4xf32> {
  %zero = sparsec.constant dense<0> : tensor<i64>
  %one = sparsec.constant dense<1> : tensor<i64>
  %big = sparsec.constant dense<-1.0e4> : tensor<f32>
  %z = sparsec.constant dense<0.0> : tensor<f32>
  %r = sparsec.range %zero, %n, %one : (tensor<i64>, tensor<i64>, tensor<i64>) -> tensor<?xi64>
  %rows = sparsec.unsqueeze %r {axes = array<i64: 1>} : tensor<?xi64> -> tensor<?x1xi64>
  %cols = sparsec.unsqueeze %r {axes = array<i64: 0>} : tensor<?xi64> -> tensor<1x?xi64>
  %past = sparsec.compare gt, %rows, %cols : tensor<?x1xi64>, tensor<1x?xi64> -> tensor<?x?xi1>
  %m = sparsec.where %past, %big, %z : tensor<?x?xi1>, tensor<f32>, tensor<f32> -> tensor<?x?xf32>
  // expected-error @+1 {{the attention mask does not depend on attention_mask: it would not cover past tokens}}
  %o = sparsec.attention %q, %q, %q mask %m {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x2x?x4xf32>, tensor<?x?xf32>) -> tensor<?x2x?x4xf32>
  return %o : tensor<?x2x?x4xf32>
}
