// RUN: sparsec-opt %s | FileCheck %s
// Round trip: print, parse again, print the same.
// RUN: sparsec-opt %s | sparsec-opt | FileCheck %s
// RUN: sparsec-opt %s --mlir-print-op-generic | sparsec-opt | FileCheck %s

// CHECK: sparsec.global @w : tensor<8x16xf32> {source = "onnx::MatMul_1"}
sparsec.global @w : tensor<8x16xf32> {source = "onnx::MatMul_1"}
// CHECK: sparsec.global @b : tensor<16xf32> {source = "b", transforms = ["transpose"]}
sparsec.global @b : tensor<16xf32> {source = "b", transforms = ["transpose"]}
sparsec.global @emb : tensor<32x8xf32> {source = "emb"}

// CHECK-LABEL: func.func @layers
func.func @layers(%x: tensor<?x?x8xf32>, %ids: tensor<?x?xi64>) -> tensor<?x?x16xf32> {
  // CHECK: %[[W:.*]] = sparsec.weight @w : tensor<8x16xf32>
  %w = sparsec.weight @w : tensor<8x16xf32>
  %b = sparsec.weight @b : tensor<16xf32>
  %t = sparsec.weight @emb : tensor<32x8xf32>
  // CHECK: sparsec.embedding %{{.*}}, %{{.*}} : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %e = sparsec.embedding %t, %ids : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  // CHECK: sparsec.embedding %{{.*}}, %{{.*}} plus %{{.*}}, %{{.*}} : tensor<32x8xf32>, tensor<?x?xi64>, tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %e2 = sparsec.embedding %t, %ids plus %t, %ids : tensor<32x8xf32>, tensor<?x?xi64>, tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  // CHECK: sparsec.linear %{{.*}}, %[[W]], %{{.*}} : tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
  %y = sparsec.linear %e, %w, %b : tensor<?x?x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
  // CHECK: sparsec.relu %{{.*}} {sparsity = #sparsec.act_sparsity<zero_fraction = 9.000000e-01, granularity = neuron, source = profile, tokens = 128, top20_share = 3.000000e-01>} : tensor<?x?x16xf32>
  %r = sparsec.relu %y {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 128, top20_share = 0.3>} : tensor<?x?x16xf32>
  // CHECK: sparsec.gelu %{{.*}} {tanh_approx} : tensor<?x?x16xf32>
  %g = sparsec.gelu %r {tanh_approx} : tensor<?x?x16xf32>
  %s = sparsec.silu %g : tensor<?x?x16xf32>
  %sm = sparsec.softmax %s {axis = -1 : i64} : tensor<?x?x16xf32>
  // CHECK: sparsec.layer_norm %{{.*}}, %{{.*}}, %{{.*}} {epsilon = 9.99999974E-5 : f32} : tensor<?x?x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
  %ln = sparsec.layer_norm %sm, %b, %b {epsilon = 1.0e-4 : f32} : tensor<?x?x16xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
  // CHECK: sparsec.rms_norm
  %rms = sparsec.rms_norm %ln, %b : tensor<?x?x16xf32>, tensor<16xf32> -> tensor<?x?x16xf32>
  return %rms : tensor<?x?x16xf32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%q: tensor<1x4x1x64xf32>, %k: tensor<1x4x1x64xf32>, %v: tensor<1x4x1x64xf32>,
                     %m: tensor<1x1x1x9xf32>, %pk: tensor<1x4x8x64xf32>, %pv: tensor<1x4x8x64xf32>,
                     %shape: tensor<4xi64>)
    -> (tensor<1x4x1x64xf32>, tensor<1x4x9x64xf32>, tensor<1x4x9x64xf32>) {
  // CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} mask %{{.*}} past(%{{.*}}, %{{.*}}) {causal, resultSegmentSizes = array<i32: 1, 1, 1>, scale = 1.250000e-01 : f32}
  %o, %ck, %cv = sparsec.attention %q, %k, %v mask %m past(%pk, %pv) {causal, resultSegmentSizes = array<i32: 1, 1, 1>, scale = 0.125 : f32}
      : (tensor<1x4x1x64xf32>, tensor<1x4x1x64xf32>, tensor<1x4x1x64xf32>, tensor<1x1x1x9xf32>, tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>)
      -> (tensor<1x4x1x64xf32>, tensor<1x4x9x64xf32>, tensor<1x4x9x64xf32>)
  // CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} {resultSegmentSizes = array<i32: 1, 0, 0>}
  %o2 = sparsec.attention %q, %k, %v {resultSegmentSizes = array<i32: 1, 0, 0>}
      : (tensor<1x4x1x64xf32>, tensor<1x4x1x64xf32>, tensor<1x4x1x64xf32>) -> tensor<1x4x1x64xf32>
  // Token-major: q, k, v and the result [B, S, H, D] (one new token and
  // heads of 4 here), the past and present [B, H, P, D].
  // CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} past(%{{.*}}, %{{.*}}) {resultSegmentSizes = array<i32: 1, 1, 1>, token_major} : (tensor<1x1x4x64xf32>
  %t = sparsec.reshape %q, %shape : tensor<1x4x1x64xf32>, tensor<4xi64> -> tensor<1x1x4x64xf32>
  %o3, %tk, %tv = sparsec.attention %t, %t, %t past(%pk, %pv) {resultSegmentSizes = array<i32: 1, 1, 1>, token_major}
      : (tensor<1x1x4x64xf32>, tensor<1x1x4x64xf32>, tensor<1x1x4x64xf32>, tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>)
      -> (tensor<1x1x4x64xf32>, tensor<1x4x9x64xf32>, tensor<1x4x9x64xf32>)
  return %o, %ck, %cv : tensor<1x4x1x64xf32>, tensor<1x4x9x64xf32>, tensor<1x4x9x64xf32>
}

// CHECK-LABEL: func.func @elementwise
func.func @elementwise(%a: tensor<2x3xf32>, %b: tensor<3xf32>, %i: tensor<2x3xi64>) -> tensor<2x3xf32> {
  %0 = sparsec.add %a, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  %1 = sparsec.sub %0, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  %2 = sparsec.mul %1, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %3 = sparsec.div %2, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %4 = sparsec.pow %3, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %5 = sparsec.max %4, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  %6 = sparsec.min %5, %a : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  // CHECK: sparsec.compare ge, %{{.*}}, %{{.*}} : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xi1>
  %c = sparsec.compare ge, %6, %b : tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xi1>
  %n = sparsec.not %c : tensor<2x3xi1>
  %an = sparsec.and %c, %n : tensor<2x3xi1>, tensor<2x3xi1> -> tensor<2x3xi1>
  %o = sparsec.or %an, %n : tensor<2x3xi1>, tensor<2x3xi1> -> tensor<2x3xi1>
  %w = sparsec.where %o, %6, %b : tensor<2x3xi1>, tensor<2x3xf32>, tensor<3xf32> -> tensor<2x3xf32>
  // CHECK: sparsec.cast %{{.*}} : tensor<2x3xi64> -> tensor<2x3xf32>
  %f = sparsec.cast %i : tensor<2x3xi64> -> tensor<2x3xf32>
  %e = sparsec.exp %w : tensor<2x3xf32>
  %l = sparsec.log %e : tensor<2x3xf32>
  %t = sparsec.tanh %l : tensor<2x3xf32>
  %s = sparsec.sigmoid %t : tensor<2x3xf32>
  %r = sparsec.erf %s : tensor<2x3xf32>
  %q = sparsec.sqrt %r : tensor<2x3xf32>
  %rc = sparsec.reciprocal %q : tensor<2x3xf32>
  %ab = sparsec.abs %rc : tensor<2x3xf32>
  %ng = sparsec.neg %ab : tensor<2x3xf32>
  // CHECK: sparsec.sin %{{.*}} : tensor<2x3xf32>
  // CHECK: sparsec.cos %{{.*}} : tensor<2x3xf32>
  %sn = sparsec.sin %ng : tensor<2x3xf32>
  %cs = sparsec.cos %sn : tensor<2x3xf32>
  %sum = sparsec.add %cs, %f : tensor<2x3xf32>, tensor<2x3xf32> -> tensor<2x3xf32>
  return %sum : tensor<2x3xf32>
}

// CHECK-LABEL: func.func @shapes
func.func @shapes(%x: tensor<2x3x4xf32>, %s: tensor<2xi64>) -> tensor<4x6xf32> {
  // CHECK: sparsec.constant dense<[4, 6]> : tensor<2xi64>
  %shape = sparsec.constant dense<[4, 6]> : tensor<2xi64>
  %sh = sparsec.shape %x {start = 1 : i64} : tensor<2x3x4xf32> -> tensor<2xi64>
  %idx = sparsec.constant dense<0> : tensor<i64>
  %g = sparsec.gather %sh, %idx {axis = 0 : i64} : tensor<2xi64>, tensor<i64> -> tensor<i64>
  %t = sparsec.transpose %x {permutation = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %r = sparsec.reshape %t, %shape : tensor<4x2x3xf32>, tensor<2xi64> -> tensor<4x6xf32>
  %u = sparsec.unsqueeze %r {axes = array<i64: 0>} : tensor<4x6xf32> -> tensor<1x4x6xf32>
  %sq = sparsec.squeeze %u {axes = array<i64: 0>} : tensor<1x4x6xf32> -> tensor<4x6xf32>
  %c = sparsec.concat %sq, %sq {axis = 0 : i64} : (tensor<4x6xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
  // CHECK: sparsec.split %{{.*}} {axis = 0 : i64, sizes = array<i64: 4, 4>} : tensor<8x6xf32> -> tensor<4x6xf32>, tensor<4x6xf32>
  %p:2 = sparsec.split %c {axis = 0 : i64, sizes = array<i64: 4, 4>} : tensor<8x6xf32> -> tensor<4x6xf32>, tensor<4x6xf32>
  %one = sparsec.constant dense<1> : tensor<1xi64>
  %three = sparsec.constant dense<3> : tensor<1xi64>
  %sl = sparsec.slice %p#0, %one, %three, %one, %one : (tensor<4x6xf32>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>, tensor<1xi64>) -> tensor<4x2xf32>
  %fl = sparsec.flatten %x {axis = 1 : i64} : tensor<2x3x4xf32> -> tensor<2x12xf32>
  %ex = sparsec.expand %sl, %s : tensor<4x2xf32>, tensor<2xi64> -> tensor<4x2xf32>
  %z = sparsec.constant dense<0> : tensor<i64>
  %n = sparsec.constant dense<5> : tensor<i64>
  %rg = sparsec.range %z, %n, %one : (tensor<i64>, tensor<i64>, tensor<1xi64>) -> tensor<5xi64>
  %cs = sparsec.cumsum %rg {axis = 0 : i64, exclusive} : tensor<5xi64>
  // CHECK: sparsec.constant_of_shape %{{.*}}, 1.000000e+00 : f32 : tensor<2xi64> -> tensor<4x6xf32>
  %cos = sparsec.constant_of_shape %shape, 1.0 : f32 : tensor<2xi64> -> tensor<4x6xf32>
  %tr = sparsec.trilu %cos {upper = true, k = 1 : i64} : tensor<4x6xf32>
  // CHECK: sparsec.reduce sum, %{{.*}} {axes = array<i64: 1>, keepdims = true} : tensor<4x6xf32> -> tensor<4x1xf32>
  %red = sparsec.reduce sum, %tr {axes = array<i64: 1>, keepdims = true} : tensor<4x6xf32> -> tensor<4x1xf32>
  %tt = sparsec.transpose %red {permutation = array<i64: 1, 0>} : tensor<4x1xf32> -> tensor<1x4xf32>
  // CHECK: sparsec.matmul %{{.*}}, %{{.*}} : tensor<1x4xf32>, tensor<4x6xf32> -> tensor<1x6xf32>
  %mm = sparsec.matmul %tt, %tr : tensor<1x4xf32>, tensor<4x6xf32> -> tensor<1x6xf32>
  return %tr : tensor<4x6xf32>
}

// CHECK-LABEL: func.func @cnn
func.func @cnn(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>) -> tensor<1x4x1x1xf32> {
  %c = sparsec.conv %x, %w, %b {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32> -> tensor<1x4x8x8xf32>
  %bn = sparsec.batch_norm %c, %b, %b, %b, %b {epsilon = 1.0e-5 : f32} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  // CHECK: sparsec.pool max, %{{.*}} {kernel = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>}
  %mp = sparsec.pool max, %bn {kernel = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : tensor<1x4x8x8xf32> -> tensor<1x4x4x4xf32>
  %gp = sparsec.pool avg, %mp {kernel = array<i64>, pads = array<i64>, strides = array<i64>} : tensor<1x4x4x4xf32> -> tensor<1x4x1x1xf32>
  return %gp : tensor<1x4x1x1xf32>
}

// CHECK-LABEL: func.func @sparsity
func.func @sparsity(%x: tensor<1x8xf32>, %w1: tensor<8x2xf32>, %w2: tensor<2x16xf32>, %pb: tensor<16xf32>,
                    %up: tensor<8x16xf32>, %down: tensor<16x8xf32>) -> tensor<1x8xf32> {
  // CHECK: %[[M:.*]] = sparsec.predict %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {lookahead, threshold = 5.000000e-01 : f32} : (tensor<1x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<1x16xi1>
  %m = sparsec.predict %x, %w1, %w2, %pb {threshold = 0.5 : f32, lookahead} : (tensor<1x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<1x16xi1>
  // CHECK: sparsec.sparse_linear %{{.*}}, %{{.*}} active %[[M]] {mode = #sparsec<sparse_mode predicted>, placement = #sparsec.placement<gpu_neurons = 8, total_neurons = 16, group = 8>, sparse_dim = #sparsec<sparse_dim output>}
  %h = sparsec.sparse_linear %x, %up active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, operandSegmentSizes = array<i32: 1, 1, 0, 1>, placement = #sparsec.placement<gpu_neurons = 8, total_neurons = 16, group = 8>} : (tensor<1x8xf32>, tensor<8x16xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  %r = sparsec.relu %h : tensor<1x16xf32>
  // CHECK: sparsec.profile_count %{{.*}} {index = 0 : i64, site = "/layers.0/Relu"} : tensor<1x16xf32>
  sparsec.profile_count %r {index = 0 : i64, site = "/layers.0/Relu"} : tensor<1x16xf32>
  // CHECK: sparsec.profile_count %{{.*}} layer_input %{{.*}} {index = 1 : i64, site = "s"} : tensor<1x16xf32>, tensor<1x8xf32>
  sparsec.profile_count %r layer_input %x {index = 1 : i64, site = "s"} : tensor<1x16xf32>, tensor<1x8xf32>
  // CHECK: sparsec.linear %{{.*}}, %{{.*}} {activation = #sparsec<activation gelu_tanh>} : tensor<1x16xf32>, tensor<16x8xf32> -> tensor<1x8xf32>
  %fused = sparsec.linear %r, %down {activation = #sparsec<activation gelu_tanh>} : tensor<1x16xf32>, tensor<16x8xf32> -> tensor<1x8xf32>
  // CHECK: sparsec.sparse_linear %{{.*}}, %{{.*}} {{{.*}}mode = #sparsec<sparse_mode exact>{{.*}}sparse_dim = #sparsec<sparse_dim input>}
  %y = sparsec.sparse_linear %r, %down {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, operandSegmentSizes = array<i32: 1, 1, 0, 0>} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// A normalized shape with a dynamic size verifies (its size marker is not
// multiplied into an element count).
// CHECK-LABEL: func.func @layer_norm_dynamic
func.func @layer_norm_dynamic(%x: tensor<2x?x16xf32>, %g: tensor<?x16xf32>) -> tensor<2x?x16xf32> {
  // CHECK: sparsec.layer_norm %{{.*}}, %{{.*}} {axis = 1 : i64} : tensor<2x?x16xf32>, tensor<?x16xf32> -> tensor<2x?x16xf32>
  %y = sparsec.layer_norm %x, %g {axis = 1 : i64} : tensor<2x?x16xf32>, tensor<?x16xf32> -> tensor<2x?x16xf32>
  return %y : tensor<2x?x16xf32>
}

// Rotary tables broadcast over heads ([B, 1, S, D]) or over batch and
// heads ([S, D]).
// CHECK-LABEL: func.func @rotary
func.func @rotary(%x: tensor<?x4x?x8xf32>, %c: tensor<?x1x?x8xf32>, %s: tensor<?x1x?x8xf32>, %t: tensor<5x8xf16>, %h: tensor<2x4x5x8xf16>) -> (tensor<?x4x?x8xf32>, tensor<2x4x5x8xf16>) {
  // CHECK: sparsec.rotary %{{.*}}, %{{.*}}, %{{.*}} : tensor<?x4x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x4x?x8xf32>
  %y = sparsec.rotary %x, %c, %s : tensor<?x4x?x8xf32>, tensor<?x1x?x8xf32> -> tensor<?x4x?x8xf32>
  // CHECK: sparsec.rotary %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4x5x8xf16>, tensor<5x8xf16> -> tensor<2x4x5x8xf16>
  %z = sparsec.rotary %h, %t, %t : tensor<2x4x5x8xf16>, tensor<5x8xf16> -> tensor<2x4x5x8xf16>
  return %y, %z : tensor<?x4x?x8xf32>, tensor<2x4x5x8xf16>
}

// Grouped-query attention: 8 query heads over 2 key/value heads, cached
// with the key/value heads, in both layouts.
// CHECK-LABEL: func.func @attention_gqa
func.func @attention_gqa(%q: tensor<1x8x?x64xf32>, %k: tensor<1x2x?x64xf32>, %pk: tensor<1x2x?x64xf32>, %qt: tensor<1x?x8x64xf32>, %kt: tensor<1x?x2x64xf32>) -> (tensor<1x8x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x?x8x64xf32>) {
  // CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} past(%{{.*}}, %{{.*}}) {{.*}} -> (tensor<1x8x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x2x?x64xf32>)
  %o, %nk, %nv = sparsec.attention %q, %k, %k past(%pk, %pk) {causal, resultSegmentSizes = array<i32: 1, 1, 1>} : (tensor<1x8x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x2x?x64xf32>) -> (tensor<1x8x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x2x?x64xf32>)
  // CHECK: sparsec.attention %{{.*}}, %{{.*}}, %{{.*}} {{.*}}token_major{{.*}} -> tensor<1x?x8x64xf32>
  %t = sparsec.attention %qt, %kt, %kt {causal, resultSegmentSizes = array<i32: 1, 0, 0>, token_major} : (tensor<1x?x8x64xf32>, tensor<1x?x2x64xf32>, tensor<1x?x2x64xf32>) -> tensor<1x?x8x64xf32>
  return %o, %nk, %t : tensor<1x8x?x64xf32>, tensor<1x2x?x64xf32>, tensor<1x?x8x64xf32>
}
