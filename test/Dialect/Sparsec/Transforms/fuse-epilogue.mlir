// RUN: sparsec-opt %s --sparsec-fuse-epilogue | FileCheck %s

// CHECK-LABEL: func.func @relu
// CHECK: %[[Y:.*]] = sparsec.linear %arg0, %arg1 {activation = #sparsec<activation relu>}
// CHECK-NOT: sparsec.relu
// CHECK: return %[[Y]]
func.func @relu(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.relu %y : tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}

// CHECK-LABEL: func.func @gelu_tanh
// CHECK: sparsec.linear %arg0, %arg1 {activation = #sparsec<activation gelu_tanh>}
func.func @gelu_tanh(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.gelu %y {tanh_approx} : tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}

// The linear's plain result is used elsewhere: no fusion.
// CHECK-LABEL: func.func @two_uses
// CHECK: sparsec.linear %arg0, %arg1 :
// CHECK: sparsec.relu
func.func @two_uses(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> (tensor<2x16xf32>, tensor<2x16xf32>) {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.relu %y : tensor<2x16xf32>
  return %y, %r : tensor<2x16xf32>, tensor<2x16xf32>
}

// An annotated sparse activation joins the linear's epilogue too: the
// sparsify phase is done with it, and the down projection skips the same
// zeros of the fused result (one kernel fewer).
// CHECK-LABEL: func.func @annotated
// CHECK: %[[Y:.*]] = sparsec.linear %arg0, %arg1 {activation = #sparsec<activation relu>}
// CHECK-NOT: sparsec.relu
// CHECK: return %[[Y]]
func.func @annotated(%x: tensor<2x8xf32>, %w: tensor<8x16xf32>) -> tensor<2x16xf32> {
  %y = sparsec.linear %x, %w : tensor<2x8xf32>, tensor<8x16xf32> -> tensor<2x16xf32>
  %r = sparsec.relu %y {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile>} : tensor<2x16xf32>
  return %r : tensor<2x16xf32>
}

// After a predicted (output-side) sparse_linear the ReLU joins its epilogue,
// annotated or not: skipped neurons are 0 either way.
// CHECK-LABEL: func.func @sparse_output
// CHECK: %[[H:.*]] = sparsec.sparse_linear %arg0, %arg1 active %arg2 {activation = #sparsec<activation relu>, mode = #sparsec<sparse_mode predicted>, sparse_dim = #sparsec<sparse_dim output>, transpose_weight}
// CHECK-NOT: sparsec.relu
// CHECK: return %[[H]]
func.func @sparse_output(%x: tensor<1x8xf32>, %w: tensor<16x8xf32>, %m: tensor<1x16xi1>) -> tensor<1x16xf32> {
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, transpose_weight} : (tensor<1x8xf32>, tensor<16x8xf32>, tensor<1x16xi1>) -> tensor<1x16xf32>
  %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile>} : tensor<1x16xf32>
  return %r : tensor<1x16xf32>
}

// The input side takes no epilogue.
// CHECK-LABEL: func.func @sparse_input
// CHECK: sparsec.sparse_linear
// CHECK: sparsec.relu
func.func @sparse_input(%x: tensor<1x16xf32>, %w: tensor<16x8xf32>) -> tensor<1x8xf32> {
  %y = sparsec.sparse_linear %x, %w {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<1x16xf32>, tensor<16x8xf32>) -> tensor<1x8xf32>
  %r = sparsec.relu %y : tensor<1x8xf32>
  return %r : tensor<1x8xf32>
}

// A convolution takes the activation into its epilogue too.
// CHECK-LABEL: func.func @conv_relu
// CHECK: %[[C:.*]] = sparsec.conv %arg0, %arg1 {activation = #sparsec<activation relu>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>}
// CHECK-NOT: sparsec.relu
// CHECK: return %[[C]]
func.func @conv_relu(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %r = sparsec.relu %c : tensor<1x4x8x8xf32>
  return %r : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @conv_gelu_tanh
// CHECK: sparsec.conv %arg0, %arg1 {activation = #sparsec<activation gelu_tanh>
func.func @conv_gelu_tanh(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %r = sparsec.gelu %c {tanh_approx} : tensor<1x4x8x8xf32>
  return %r : tensor<1x4x8x8xf32>
}

// A batch norm after a convolution takes the ReLU (Conv + BatchNormalization
// + Relu: two passes instead of three).
// CHECK-LABEL: func.func @conv_bn_relu
// CHECK: %[[C:.*]] = sparsec.conv %arg0, %arg1 {dilations
// CHECK: %[[B:.*]] = sparsec.batch_norm %[[C]], %arg2, %arg2, %arg2, %arg2 {activation = #sparsec<activation relu>}
// CHECK-NOT: sparsec.relu
// CHECK: return %[[B]]
func.func @conv_bn_relu(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %p: tensor<4xf32>) -> tensor<1x4x8x8xf32> {
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %b = sparsec.batch_norm %c, %p, %p, %p, %p : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %r = sparsec.relu %b : tensor<1x4x8x8xf32>
  return %r : tensor<1x4x8x8xf32>
}

// ReLU6 (Clip(x, 0, 6) imports as a ReLU and a min): the cap joins the
// convolution's and the batch norm's ReLU epilogue, whichever side of the
// min the constant is on.
// CHECK-LABEL: func.func @conv_relu6
// CHECK: %[[C:.*]] = sparsec.conv %arg0, %arg1 {activation = #sparsec<activation relu6>
// CHECK-NOT: sparsec.min
// CHECK: return %[[C]]
func.func @conv_relu6(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %six = sparsec.constant dense<6.0> : tensor<f32>
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %r = sparsec.relu %c : tensor<1x4x8x8xf32>
  %m = sparsec.min %six, %r : tensor<f32>, tensor<1x4x8x8xf32> -> tensor<1x4x8x8xf32>
  return %m : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @bn_relu6
// CHECK: %[[B:.*]] = sparsec.batch_norm %arg0, %arg1, %arg1, %arg1, %arg1 {activation = #sparsec<activation relu6>}
// CHECK-NOT: sparsec.min
// CHECK: return %[[B]]
func.func @bn_relu6(%x: tensor<1x4x8x8xf32>, %p: tensor<4xf32>) -> tensor<1x4x8x8xf32> {
  %six = sparsec.constant dense<6.0> : tensor<1xf32>
  %b = sparsec.batch_norm %x, %p, %p, %p, %p : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %r = sparsec.relu %b : tensor<1x4x8x8xf32>
  %m = sparsec.min %r, %six : tensor<1x4x8x8xf32>, tensor<1xf32> -> tensor<1x4x8x8xf32>
  return %m : tensor<1x4x8x8xf32>
}

// Not fused: a cap other than 6 (the epilogue keeps its ReLU, the min stays),
// a ReLU with another use, and a linear's capped ReLU (the sparsity passes
// and the CUDA emitter read its zeros through the min).
// CHECK-LABEL: func.func @cap_not_six
// CHECK: sparsec.conv %arg0, %arg1 {activation = #sparsec<activation relu>
// CHECK: sparsec.min
func.func @cap_not_six(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> tensor<1x4x8x8xf32> {
  %five = sparsec.constant dense<5.0> : tensor<f32>
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %r = sparsec.relu %c : tensor<1x4x8x8xf32>
  %m = sparsec.min %r, %five : tensor<1x4x8x8xf32>, tensor<f32> -> tensor<1x4x8x8xf32>
  return %m : tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @relu_two_uses
// CHECK: sparsec.conv %arg0, %arg1 {activation = #sparsec<activation relu>
// CHECK: sparsec.min
func.func @relu_two_uses(%x: tensor<1x3x8x8xf32>, %w: tensor<4x3x3x3xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %six = sparsec.constant dense<6.0> : tensor<f32>
  %c = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : tensor<1x3x8x8xf32>, tensor<4x3x3x3xf32> -> tensor<1x4x8x8xf32>
  %r = sparsec.relu %c : tensor<1x4x8x8xf32>
  %m = sparsec.min %r, %six : tensor<1x4x8x8xf32>, tensor<f32> -> tensor<1x4x8x8xf32>
  return %m, %r : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

// CHECK-LABEL: func.func @linear_relu6
// CHECK: sparsec.linear %arg0, %arg1 {activation = #sparsec<activation relu>}
// CHECK: sparsec.min
func.func @linear_relu6(%x: tensor<2x16xf32>, %w: tensor<16x8xf32>) -> tensor<2x8xf32> {
  %six = sparsec.constant dense<6.0> : tensor<f32>
  %y = sparsec.linear %x, %w : tensor<2x16xf32>, tensor<16x8xf32> -> tensor<2x8xf32>
  %r = sparsec.relu %y : tensor<2x8xf32>
  %m = sparsec.min %r, %six : tensor<2x8xf32>, tensor<f32> -> tensor<2x8xf32>
  return %m : tensor<2x8xf32>
}
