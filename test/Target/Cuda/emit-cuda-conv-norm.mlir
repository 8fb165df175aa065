// RUN: sparsec-translate --sparsec-to-cuda %s | FileCheck %s

// Not in the epilogue where the norm's slot is the convolution's input's
// (the convolution would overwrite what it reads), nor after an activation.
sparsec.global @w : tensor<4x4x3x3xf32> {source = "w"}
sparsec.global @s : tensor<4xf32> {source = "s"}
func.func @main(%x: tensor<1x4x8x8xf32>) -> (tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>) {
  %w = sparsec.weight @w : tensor<4x4x3x3xf32>
  %s = sparsec.weight @s : tensor<4xf32>
  %a = sparsec.conv %x, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, sparsec.slots = array<i64: 0>} : tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x8x8xf32>
  %c = sparsec.conv %a, %w {dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, sparsec.slots = array<i64: 1>} : tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x8x8xf32>
  %n = sparsec.batch_norm %c, %s, %s, %s, %s {sparsec.slots = array<i64: 0>} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  %r = sparsec.conv %x, %w {activation = #sparsec<activation relu>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, sparsec.slots = array<i64: 1>} : tensor<1x4x8x8xf32>, tensor<4x4x3x3xf32> -> tensor<1x4x8x8xf32>
  %n2 = sparsec.batch_norm %r, %s, %s, %s, %s {sparsec.slots = array<i64: 2>} : (tensor<1x4x8x8xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<1x4x8x8xf32>
  return %n, %n2 : tensor<1x4x8x8xf32>, tensor<1x4x8x8xf32>
}

// CHECK-NOT: ConvNorm
// CHECK: cuda::conv(ctx, {{.*}}, nullptr, ops::Activation::none, 0, [[A:v[0-9]+]])
// CHECK: cuda::conv(ctx, [[A]], {{.*}}, nullptr, ops::Activation::none, 1, [[C:v[0-9]+]])
// CHECK: cuda::batchNorm(ctx, [[C]], {{.*}}, 0, {{v[0-9]+}})
// CHECK: cuda::conv(ctx, {{.*}}, nullptr, ops::Activation::relu, 1, [[R:v[0-9]+]])
// CHECK: cuda::batchNorm(ctx, [[R]], {{.*}}, 2, {{v[0-9]+}})
