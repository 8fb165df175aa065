// RUN: sparsec-opt %s -split-input-file -verify-diagnostics

sparsec.global @w : tensor<8x16xf32> {source = "w"}
func.func @unknown_weight() -> tensor<8x16xf32> {
  // expected-error @+1 {{references unknown weight 'nope'}}
  %w = sparsec.weight @nope : tensor<8x16xf32>
  return %w : tensor<8x16xf32>
}

// -----

sparsec.global @w : tensor<8x16xf32> {source = "w"}
func.func @weight_type_mismatch() -> tensor<16x8xf32> {
  // expected-error @+1 {{result type 'tensor<16x8xf32>' does not match the declared weight type 'tensor<8x16xf32>'}}
  %w = sparsec.weight @w : tensor<16x8xf32>
  return %w : tensor<16x8xf32>
}

// -----

func.func @linear_k(%x: tensor<2x7xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{input feature dimension 7 does not match weight input dimension 8}}
  %y = sparsec.linear %x, %w : tensor<2x7xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @linear_transposed(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{input feature dimension 8 does not match weight input dimension 16}}
  %y = sparsec.linear %x, %w {transpose_weight} : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @group_one(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{needs at least 2 weights (or a norm), got 1}}
  %y = sparsec.linear_group %x weights(%w) : tensor<2x8xf32>, (tensor<16x8xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @group_biases(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %b: tensor<16xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{has 1 biases for 2 weights (one per weight, or none)}}
  %y:2 = sparsec.linear_group %x weights(%w, %w) biases(%b) : tensor<2x8xf32>, (tensor<16x8xf32>, tensor<16x8xf32>), (tensor<16xf32>) -> tensor<2x16xf32>, tensor<2x16xf32>
  return %y#0 : tensor<2x16xf32>
}

// -----

func.func @group_k(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %v: tensor<16x4xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{input feature dimension 8 does not match weight input dimension 4}}
  %y:2 = sparsec.linear_group %x weights(%w, %v) : tensor<2x8xf32>, (tensor<16x8xf32>, tensor<16x4xf32>) -> tensor<2x16xf32>, tensor<2x16xf32>
  return %y#0 : tensor<2x16xf32>
}

// -----

func.func @group_norm_eps(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %g: tensor<8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{needs norm_epsilon with a norm}}
  %y = sparsec.linear_group %x norm(%g) weights(%w) : tensor<2x8xf32> norm(tensor<8xf32>), (tensor<16x8xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @group_norm_rms_bias(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %g: tensor<8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{an RMS norm takes no bias}}
  %y = sparsec.linear_group %x norm(%g, %g) weights(%w) {norm_epsilon = 1.0e-5 : f32, norm_rms} : tensor<2x8xf32> norm(tensor<8xf32>, tensor<8xf32>), (tensor<16x8xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @group_norm_shape(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>, %g: tensor<4xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{norm scale and bias must be [K] with K = 8, got 'tensor<4xf32>'}}
  %y = sparsec.linear_group %x norm(%g) weights(%w) {norm_epsilon = 1.0e-5 : f32} : tensor<2x8xf32> norm(tensor<4xf32>), (tensor<16x8xf32>) -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @group_norm_attr(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{has norm attributes or a norm bias but no norm_scale}}
  %y:2 = sparsec.linear_group %x weights(%w, %w) {norm_epsilon = 1.0e-5 : f32} : tensor<2x8xf32>, (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>, tensor<2x16xf32>
  return %y#0 : tensor<2x16xf32>
}

// -----

func.func @group_five(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{takes at most 4 weights (the CUDA kernel's limit), got 5}}
  %y:5 = sparsec.linear_group %x weights(%w, %w, %w, %w, %w) : tensor<2x8xf32>, (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>
  return %y#0 : tensor<2x16xf32>
}

// -----

func.func @group_results(%x: tensor<2x8xf32>, %w: tensor<16x8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{has 3 results for 2 weights}}
  %y:3 = sparsec.linear_group %x weights(%w, %w) : tensor<2x8xf32>, (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<2x16xf32>, tensor<2x16xf32>, tensor<2x16xf32>
  return %y#0 : tensor<2x16xf32>
}

// -----

func.func @linear_bias(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>, %b: tensor<8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{bias must be [N] (or [1, N]) with N = 16}}
  %y = sparsec.linear %x, %w, %b : tensor<2x8xf32>, tensor<8x16xf32>, tensor<8xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @linear_weight_rank(%x: tensor<2x8xf32>, %w: tensor<8xf32>) -> tensor<2x16xf32> {
  // expected-error @+1 {{weight must be 2-D, got rank 1}}
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8xf32> -> tensor<2x16xf32>
  return %y : tensor<2x16xf32>
}

// -----

func.func @matmul(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{contracting dimensions differ: 3 vs 4}}
  %y = sparsec.matmul %a, %b : tensor<2x3xf32>, tensor<4x5xf32> -> tensor<2x5xf32>
  return %y : tensor<2x5xf32>
}

// -----

func.func @broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{operands don't have broadcast-compatible shapes}}
  %y = sparsec.add %a, %b : tensor<2x3xf32>, tensor<4xf32> -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @where(%c: tensor<2xi1>, %a: tensor<3xf32>, %b: tensor<3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{operand shapes are not broadcastable}}
  %y = sparsec.where %c, %a, %b : tensor<2xi1>, tensor<3xf32>, tensor<3xf32> -> tensor<3xf32>
  return %y : tensor<3xf32>
}

// -----

func.func @transpose(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{permutation is not a permutation of [0, 2)}}
  %y = sparsec.transpose %a {permutation = array<i64: 0, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  return %y : tensor<3x2xf32>
}

// -----

func.func @concat(%a: tensor<2x3xf32>, %b: tensor<4x3xf32>) -> tensor<2x6xf32> {
  // expected-error @+1 {{input dimension 0 (4) differs from the result's (2)}}
  %y = sparsec.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<4x3xf32>) -> tensor<2x6xf32>
  return %y : tensor<2x6xf32>
}

// -----

func.func @concat_sum(%a: tensor<2x3xf32>, %b: tensor<2x4xf32>) -> tensor<2x6xf32> {
  // expected-error @+1 {{inputs' sizes along axis 1 add up to 7 but the result's is 6}}
  %y = sparsec.concat %a, %b {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x4xf32>) -> tensor<2x6xf32>
  return %y : tensor<2x6xf32>
}

// -----

func.func @concat_huge(%a: tensor<1x140737488355329xf32>, %b: tensor<1x140737488355329xf32>) -> tensor<1x2xf32> {
  // expected-error @+1 {{inputs' sizes along axis 1 add up to more than 2^48}}
  %y = sparsec.concat %a, %b {axis = 1 : i64} : (tensor<1x140737488355329xf32>, tensor<1x140737488355329xf32>) -> tensor<1x2xf32>
  return %y : tensor<1x2xf32>
}

// -----

func.func @reshape(%a: tensor<2x3xf32>, %s: tensor<2xi64>) -> tensor<4x2xf32> {
  // expected-error @+1 {{cannot reshape 6 elements into 8}}
  %y = sparsec.reshape %a, %s : tensor<2x3xf32>, tensor<2xi64> -> tensor<4x2xf32>
  return %y : tensor<4x2xf32>
}

// -----

func.func @squeeze(%a: tensor<2x3xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{cannot squeeze dimension 0 of size 2}}
  %y = sparsec.squeeze %a {axes = array<i64: 0>} : tensor<2x3xf32> -> tensor<3xf32>
  return %y : tensor<3xf32>
}

// -----

func.func @split(%a: tensor<6xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{sizes add up to 5 but the split dimension is 6}}
  %y:2 = sparsec.split %a {axis = 0 : i64, sizes = array<i64: 2, 3>} : tensor<6xf32> -> tensor<2xf32>, tensor<3xf32>
  return %y#0 : tensor<2xf32>
}

// -----

func.func @softmax_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis 2 out of range for rank 2}}
  %y = sparsec.softmax %a {axis = 2 : i64} : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @layer_norm(%a: tensor<2x8xf32>, %g: tensor<4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{scale has 4 elements but the normalized shape has 8}}
  %y = sparsec.layer_norm %a, %g : tensor<2x8xf32>, tensor<4xf32> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @attention_heads(%q: tensor<1x4x1x64xf32>, %k: tensor<1x4x1x32xf32>) -> tensor<1x4x1x32xf32> {
  // expected-error @+1 {{query and key head sizes differ: 64 vs 32}}
  %o = sparsec.attention %q, %k, %k {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x4x1x64xf32>, tensor<1x4x1x32xf32>, tensor<1x4x1x32xf32>) -> tensor<1x4x1x32xf32>
  return %o : tensor<1x4x1x32xf32>
}

// -----

func.func @attention_rank(%q: tensor<4x1x64xf32>) -> tensor<4x1x64xf32> {
  // expected-error @+1 {{query, key and value must be [B, H, S, D]}}
  %o = sparsec.attention %q, %q, %q {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<4x1x64xf32>, tensor<4x1x64xf32>, tensor<4x1x64xf32>) -> tensor<4x1x64xf32>
  return %o : tensor<4x1x64xf32>
}

// -----

func.func @attention_token_major_result(%q: tensor<1x8x4x64xf32>) -> tensor<1x4x8x64xf32> {
  // expected-error @+1 {{result must be [B, Sq, H, Dv]}}
  %o = sparsec.attention %q, %q, %q {resultSegmentSizes = array<i32: 1, 0, 0>, token_major} : (tensor<1x8x4x64xf32>, tensor<1x8x4x64xf32>, tensor<1x8x4x64xf32>) -> tensor<1x4x8x64xf32>
  return %o : tensor<1x4x8x64xf32>
}

// -----

func.func @attention_token_major_heads(%q: tensor<1x8x3x64xf32>, %k: tensor<1x8x2x64xf32>) -> tensor<1x8x3x64xf32> {
  // expected-error @+1 {{query heads (3) must be a multiple of the key and value heads (2)}}
  %o = sparsec.attention %q, %k, %k {resultSegmentSizes = array<i32: 1, 0, 0>, token_major} : (tensor<1x8x3x64xf32>, tensor<1x8x2x64xf32>, tensor<1x8x2x64xf32>) -> tensor<1x8x3x64xf32>
  return %o : tensor<1x8x3x64xf32>
}

// -----

func.func @attention_kv_heads(%q: tensor<1x4x8x64xf32>, %k: tensor<1x2x8x64xf32>, %v: tensor<1x4x8x64xf32>) -> tensor<1x4x8x64xf32> {
  // expected-error @+1 {{query, key and value disagree on batch or heads}}
  %o = sparsec.attention %q, %k, %v {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x4x8x64xf32>, tensor<1x2x8x64xf32>, tensor<1x4x8x64xf32>) -> tensor<1x4x8x64xf32>
  return %o : tensor<1x4x8x64xf32>
}

// -----

// The cache stays [B, H, P, D] with token-major keys: a past laid out as
// the new keys are is refused.
func.func @attention_token_major_past(%q: tensor<1x1x4x64xf32>, %p: tensor<1x8x4x64xf32>) -> tensor<1x1x4x64xf32> {
  // expected-error @+1 {{past and present keys and values must be [B, H, P, D] with the new keys' batch, heads and head size}}
  %o, %pk, %pv = sparsec.attention %q, %q, %q past(%p, %p) {resultSegmentSizes = array<i32: 1, 1, 1>, token_major} : (tensor<1x1x4x64xf32>, tensor<1x1x4x64xf32>, tensor<1x1x4x64xf32>, tensor<1x8x4x64xf32>, tensor<1x8x4x64xf32>) -> (tensor<1x1x4x64xf32>, tensor<1x8x4x64xf32>, tensor<1x8x4x64xf32>)
  return %o : tensor<1x1x4x64xf32>
}

// -----

func.func @attention_present(%q: tensor<1x4x1x64xf32>, %p: tensor<1x4x8x64xf32>) -> tensor<1x4x1x64xf32> {
  // expected-error @+1 {{present_key/present_value results exist exactly when past is given}}
  %o = sparsec.attention %q, %q, %q past(%p, %p) {resultSegmentSizes = array<i32: 1, 0, 0>} : (tensor<1x4x1x64xf32>, tensor<1x4x1x64xf32>, tensor<1x4x1x64xf32>, tensor<1x4x8x64xf32>, tensor<1x4x8x64xf32>) -> tensor<1x4x1x64xf32>
  return %o : tensor<1x4x1x64xf32>
}

// -----

func.func @embedding(%t: tensor<32x8xf32>, %ids: tensor<2xi64>) -> tensor<2x4xf32> {
  // expected-error @+1 {{result must be ids shape + [8]}}
  %e = sparsec.embedding %t, %ids : tensor<32x8xf32>, tensor<2xi64> -> tensor<2x4xf32>
  return %e : tensor<2x4xf32>
}

// -----

func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  // expected-error @+1 {{strides/dilations need 2 values and pads 4}}
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  return %c : tensor<1x4x8x8xf32>
}

// -----

func.func @reduce_axes(%a: tensor<2x3xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{axis 1 repeated}}
  %r = sparsec.reduce sum, %a {axes = array<i64: 1, 1>, keepdims = false} : tensor<2x3xf32> -> tensor<2xf32>
  return %r : tensor<2xf32>
}

// -----

func.func @predict(%x: tensor<1x8xf32>, %w1: tensor<8x2xf32>, %w2: tensor<3x16xf32>) -> tensor<1x16xi1> {
  // expected-error @+1 {{predictor shapes do not chain}}
  %m = sparsec.predict %x, %w1, %w2 : (tensor<1x8xf32>, tensor<8x2xf32>, tensor<3x16xf32>) -> tensor<1x16xi1>
  return %m : tensor<1x16xi1>
}

// -----

func.func @predict_bias(%x: tensor<1x8xf32>, %w1: tensor<8x2xf32>, %w2: tensor<2x16xf32>, %b: tensor<8xf32>) -> tensor<1x16xi1> {
  // expected-error @+1 {{bias must be 1-D over the 16 neurons of w2}}
  %m = sparsec.predict %x, %w1, %w2, %b : (tensor<1x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<8xf32>) -> tensor<1x16xi1>
  return %m : tensor<1x16xi1>
}

// -----

func.func @profile_layer_input(%r: tensor<4x16xf32>, %x: tensor<3x8xf32>) {
  // expected-error @+1 {{disagree on the number of tokens}}
  sparsec.profile_count %r layer_input %x {site = "s", index = 0 : i64} : tensor<4x16xf32>, tensor<3x8xf32>
  return
}

// -----

func.func @predict_threshold(%x: tensor<1x8xf32>, %w1: tensor<8x2xf32>, %w2: tensor<2x16xf32>) -> tensor<1x16xi1> {
  // expected-error @+1 {{threshold must be finite}}
  %m = sparsec.predict %x, %w1, %w2 {threshold = 0x7F800000 : f32} : (tensor<1x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<1x16xi1>
  return %m : tensor<1x16xi1>
}

// -----

func.func @sparse_mask(%x: tensor<1x8xf32>, %w: tensor<8x16xf32>, %m: tensor<1x8xi1>) -> tensor<1x16xf32> {
  // expected-error @+1 {{active mask covers 8 neurons but the output side has 16}}
  %y = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>} : (tensor<1x8xf32>, tensor<8x16xf32>, tensor<1x8xi1>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

func.func @predicted_needs_mask(%x: tensor<1x8xf32>, %w: tensor<8x16xf32>) -> tensor<1x16xf32> {
  // expected-error @+1 {{predicted mode needs an active mask operand}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<1x8xf32>, tensor<8x16xf32>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

func.func @bad_sparsity(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{zero_fraction must be in [0, 1], got 1.5}}
  %y = sparsec.relu %x {sparsity = #sparsec.act_sparsity<zero_fraction = 1.5, granularity = neuron, source = profile>} : tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

func.func @bad_placement(%x: tensor<1x8xf32>, %w: tensor<8x16xf32>) -> tensor<1x16xf32> {
  // expected-error @+1 {{gpu_neurons (12) must be a multiple of group (8) or equal total_neurons}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>, placement = #sparsec.placement<gpu_neurons = 12, total_neurons = 16, group = 8>} : (tensor<1x8xf32>, tensor<8x16xf32>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

func.func @bad_placement_range(%x: tensor<1x8xf32>, %w: tensor<8x16xf32>) -> tensor<1x16xf32> {
  // expected-error @+1 {{gpu_neurons must be in [0, total_neurons = 16], got 32}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>, placement = #sparsec.placement<gpu_neurons = 32, total_neurons = 16>} : (tensor<1x8xf32>, tensor<8x16xf32>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

func.func @sparse_epilogue_input_side(%x: tensor<1x16xf32>, %w: tensor<16x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{an activation epilogue needs sparse_dim = output}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, activation = #sparsec<activation relu>} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @sparse_epilogue_sigmoid(%x: tensor<1x8xf32>, %w: tensor<16x8xf32>, %m: tensor<1x16xi1>) -> tensor<1x16xf32> {
  // expected-error @+1 {{the activation epilogue must map 0 to 0}}
  %y = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, transpose_weight, activation = #sparsec<activation sigmoid>} : (tensor<1x8xf32>, tensor<16x8xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

func.func @pit_output_side(%x: tensor<1x8xf32>, %w: tensor<16x8xf32>, %m: tensor<1x16xi1>) -> tensor<1x16xf32> {
  // expected-error @+1 {{pit_tile needs sparse_dim = input}}
  %y = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, transpose_weight, pit_tile = 32 : i64} : (tensor<1x8xf32>, tensor<16x8xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  return %y : tensor<1x16xf32>
}

// -----

func.func @pit_bad_tile(%x: tensor<1x16xf32>, %w: tensor<16x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{pit_tile must be 0 (dense), 8, 16 or 32, got 12}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, pit_tile = 12 : i64} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @pit_columns_dense(%x: tensor<1x16xf32>, %w: tensor<16x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{pit_columns needs a PIT tile (pit_tile 8, 16 or 32)}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, pit_tile = 0 : i64, pit_columns = 256 : i64} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @pit_bad_columns(%x: tensor<1x16xf32>, %w: tensor<16x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{pit_columns must be 128 or 256, got 64}}
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, pit_tile = 32 : i64, pit_columns = 64 : i64} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

// A negative axis is reported as written (not as its unsigned reading).
func.func @softmax_negative_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis -3 out of range for rank 2}}
  %y = sparsec.softmax %a {axis = -3 : i64} : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @cumsum_axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{axis -3 out of range for rank 2}}
  %y = sparsec.cumsum %a {axis = -3 : i64} : tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}

// -----

func.func @flatten_axis(%a: tensor<2x3xf32>) -> tensor<1x6xf32> {
  // expected-error @+1 {{axis 3 out of range for rank 2}}
  %y = sparsec.flatten %a {axis = 3 : i64} : tensor<2x3xf32> -> tensor<1x6xf32>
  return %y : tensor<1x6xf32>
}

// -----

func.func @embedding_sum_width(%t: tensor<32x8xf32>, %p: tensor<16x4xf32>, %ids: tensor<2xi64>) -> tensor<2x8xf32> {
  // expected-error @+1 {{second table must be 2-D [vocab, 8]}}
  %e = sparsec.embedding %t, %ids plus %p, %ids : tensor<32x8xf32>, tensor<2xi64>, tensor<16x4xf32>, tensor<2xi64> -> tensor<2x8xf32>
  return %e : tensor<2x8xf32>
}

// -----

func.func @embedding_sum_ids(%t: tensor<32x8xf32>, %ids: tensor<2xi64>, %ids2: tensor<3xi64>) -> tensor<2x8xf32> {
  // expected-error @+1 {{second ids must have the ids' shape}}
  %e = sparsec.embedding %t, %ids plus %t, %ids2 : tensor<32x8xf32>, tensor<2xi64>, tensor<32x8xf32>, tensor<3xi64> -> tensor<2x8xf32>
  return %e : tensor<2x8xf32>
}

// -----

func.func @embedding_sum_type(%t: tensor<32x8xf32>, %h: tensor<32x8xf16>, %ids: tensor<2xi64>) -> tensor<2x8xf32> {
  // expected-error @+1 {{tables must have one element type}}
  %e = sparsec.embedding %t, %ids plus %h, %ids : tensor<32x8xf32>, tensor<2xi64>, tensor<32x8xf16>, tensor<2xi64> -> tensor<2x8xf32>
  return %e : tensor<2x8xf32>
}

// -----

func.func @embedding_sum_half(%t: tensor<32x8xf32>, %ids: tensor<2xi64>) -> tensor<2x8xf32> {
  // expected-error @+1 {{a second lookup needs both its table and its ids}}
  %e = "sparsec.embedding"(%t, %ids, %t) {operandSegmentSizes = array<i32: 1, 1, 1, 0>} : (tensor<32x8xf32>, tensor<2xi64>, tensor<32x8xf32>) -> tensor<2x8xf32>
  return %e : tensor<2x8xf32>
}

// -----

func.func @split_sizes(%a: tensor<2x?xf32>) -> (tensor<2x1xf32>, tensor<2x2xf32>) {
  // expected-error @+1 {{size -1 is negative or makes the sizes add up past 2^48}}
  %y:2 = sparsec.split %a {axis = 1 : i64, sizes = array<i64: -1, 2>} : tensor<2x?xf32> -> tensor<2x1xf32>, tensor<2x2xf32>
  return %y#0, %y#1 : tensor<2x1xf32>, tensor<2x2xf32>
}

// -----

func.func @rotary_odd(%x: tensor<2x7xf32>, %c: tensor<2x7xf32>) -> tensor<2x7xf32> {
  // expected-error @+1 {{the last dimension (7) must be even}}
  %y = sparsec.rotary %x, %c, %c : tensor<2x7xf32>, tensor<2x7xf32> -> tensor<2x7xf32>
  return %y : tensor<2x7xf32>
}

// -----

func.func @rotary_widens(%x: tensor<1x8xf32>, %c: tensor<3x8xf32>) -> tensor<1x8xf32> {
  // expected-error @+1 {{cos and sin 'tensor<3x8xf32>' must broadcast to the input 'tensor<1x8xf32>'}}
  %y = sparsec.rotary %x, %c, %c : tensor<1x8xf32>, tensor<3x8xf32> -> tensor<1x8xf32>
  return %y : tensor<1x8xf32>
}

// -----

func.func @rotary_rank(%x: tensor<8xf32>, %c: tensor<1x8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{cos and sin 'tensor<1x8xf32>' must broadcast to the input 'tensor<8xf32>'}}
  %y = sparsec.rotary %x, %c, %c : tensor<8xf32>, tensor<1x8xf32> -> tensor<8xf32>
  return %y : tensor<8xf32>
}

// -----

func.func @rotary_dtype(%x: tensor<2x8xf32>, %c: tensor<2x8xf16>) -> tensor<2x8xf32> {
  // expected-error @+1 {{cos and sin must have the input's element type}}
  %y = sparsec.rotary %x, %c, %c : tensor<2x8xf32>, tensor<2x8xf16> -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

func.func @rotary_sin_type(%x: tensor<2x8xf32>, %c: tensor<2x8xf32>, %s: tensor<1x8xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{'sparsec.rotary' op failed to verify that all of {cos, sin} have same type}}
  %y = "sparsec.rotary"(%x, %c, %s) : (tensor<2x8xf32>, tensor<2x8xf32>, tensor<1x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
