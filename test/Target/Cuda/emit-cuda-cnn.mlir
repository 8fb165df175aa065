// RUN: sparsec-translate --sparsec-to-cuda %s | FileCheck %s

// A convolutional network on the device: the input is uploaded once, the
// convolutions (bias, groups, activation), batch norms, pooling (windowed
// and global), reductions and a PRelu's compare + where run as cuda:: ops
// with their attributes as static arrays; nothing comes back to the host
// before the output. A batch norm that is a convolution's only user (no
// activation between them) runs in the convolution's epilogue, writing the
// norm's slot; one after a pool is a kernel of its own.
sparsec.global @w : tensor<4x3x3x3xf32> {source = "w"}
sparsec.global @b : tensor<4xf32> {source = "b"}
sparsec.global @wd : tensor<8x1x3x3xf32> {source = "wd"}
sparsec.global @s : tensor<8xf32> {source = "s"}
sparsec.global @m : tensor<8xf32> {source = "m"}
sparsec.global @v : tensor<8xf32> {source = "v"}
sparsec.global @slope : tensor<8x1x1xf32> {source = "slope"}
func.func @main(%x: tensor<2x3x8x8xf32>) -> (tensor<2x8xf32>, tensor<2x1x4x4xf32>) {
  %w = sparsec.weight @w : tensor<4x3x3x3xf32>
  %b = sparsec.weight @b : tensor<4xf32>
  %wd = sparsec.weight @wd : tensor<8x1x3x3xf32>
  %s = sparsec.weight @s : tensor<8xf32>
  %m = sparsec.weight @m : tensor<8xf32>
  %v = sparsec.weight @v : tensor<8xf32>
  %slope = sparsec.weight @slope : tensor<8x1x1xf32>
  %c = sparsec.conv %x, %w, %b {activation = #sparsec<activation relu6>, dilations = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, sparsec.slots = array<i64: 0>} : tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32> -> tensor<2x4x8x8xf32>
  %d = sparsec.conv %c, %wd {dilations = array<i64: 2, 2>, group = 4 : i64, pads = array<i64: 2, 2, 2, 2>, strides = array<i64: 2, 2>, sparsec.slots = array<i64: 1>} : tensor<2x4x8x8xf32>, tensor<8x1x3x3xf32> -> tensor<2x8x4x4xf32>
  %n = sparsec.batch_norm %d, %s, %s, %m, %v {activation = #sparsec<activation relu>, epsilon = 1.0e-3 : f32, sparsec.slots = array<i64: 4>} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  %mul = sparsec.mul %n, %slope {sparsec.slots = array<i64: 1>} : tensor<2x8x4x4xf32>, tensor<8x1x1xf32> -> tensor<2x8x4x4xf32>
  %zero = sparsec.constant dense<0.0> : tensor<f32>
  %lt = sparsec.compare lt, %n, %zero {sparsec.slots = array<i64: 2>} : tensor<2x8x4x4xf32>, tensor<f32> -> tensor<2x8x4x4xi1>
  %p = sparsec.where %lt, %mul, %n {sparsec.slots = array<i64: 3>} : tensor<2x8x4x4xi1>, tensor<2x8x4x4xf32>, tensor<2x8x4x4xf32> -> tensor<2x8x4x4xf32>
  %mp = sparsec.pool max, %p {kernel = array<i64: 3, 3>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, sparsec.slots = array<i64: 0>} : tensor<2x8x4x4xf32> -> tensor<2x8x4x4xf32>
  %n2 = sparsec.batch_norm %mp, %s, %s, %m, %v {epsilon = 1.0e-5 : f32, sparsec.slots = array<i64: 2>} : (tensor<2x8x4x4xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x4x4xf32>
  %g = sparsec.pool avg, %n2 {count_include_pad, kernel = array<i64>, pads = array<i64>, strides = array<i64>, sparsec.slots = array<i64: 1>} : tensor<2x8x4x4xf32> -> tensor<2x8x1x1xf32>
  %mean = sparsec.reduce mean, %g {axes = array<i64: 2, 3>, keepdims = false, sparsec.slots = array<i64: 2>} : tensor<2x8x1x1xf32> -> tensor<2x8xf32>
  %cmax = sparsec.reduce max, %mp {axes = array<i64: 1>, keepdims = true, sparsec.slots = array<i64: 3>} : tensor<2x8x4x4xf32> -> tensor<2x1x4x4xf32>
  return %mean, %cmax : tensor<2x8xf32>, tensor<2x1x4x4xf32>
}

// CHECK: cuda::upload(ctx, in[0], 0, [[X:u[0-9]+]])
// CHECK: static const int64_t [[S1:a[0-9]+]][] = {1, 1};
// CHECK: static const int64_t [[P1:a[0-9]+]][] = {1, 1, 1, 1};
// CHECK: static const int64_t [[D1:a[0-9]+]][] = {1, 1};
// CHECK: cuda::conv(ctx, [[X]], {{v[0-9]+}}, &{{v[0-9]+}}, [[S1]], [[P1]], [[D1]], 1, nullptr, ops::Activation::relu6, 0, [[C:v[0-9]+]])
// CHECK: // (computed with the batch norm below)
// CHECK: static const int64_t [[S2:a[0-9]+]][] = {2, 2};
// CHECK: static const int64_t [[P2:a[0-9]+]][] = {2, 2, 2, 2};
// CHECK: static const int64_t [[D2:a[0-9]+]][] = {2, 2};
// CHECK: const ops::ConvNorm [[CN:cn[0-9]+]]{&[[SC:v[0-9]+]], &[[SC]], &[[MEAN:v[0-9]+]], &[[VAR:v[0-9]+]], 0.00100000005f};
// CHECK: cuda::conv(ctx, [[C]], {{v[0-9]+}}, nullptr, [[S2]], [[P2]], [[D2]], 4, &[[CN]], ops::Activation::relu, 4, [[N:v[0-9]+]])
// CHECK: cuda::binary(ctx, ops::Binary::mul, [[N]], {{v[0-9]+}}, 1, [[MUL:v[0-9]+]])
// CHECK: cuda::upload(ctx, {{v[0-9]+}}, 1, [[ZERO:u[0-9]+]])
// CHECK: cuda::compare(ctx, ops::Compare::lt, [[N]], [[ZERO]], 2, [[LT:v[0-9]+]])
// CHECK: cuda::where(ctx, [[LT]], [[MUL]], [[N]], 3, [[P:v[0-9]+]])
// CHECK: static const int64_t [[K3:a[0-9]+]][] = {3, 3};
// CHECK: static const int64_t [[PS:a[0-9]+]][] = {1, 1};
// CHECK: static const int64_t [[PP:a[0-9]+]][] = {1, 1, 1, 1};
// CHECK: cuda::pool(ctx, ops::Pool::max, [[P]], [[K3]], [[PS]], [[PP]], false, 0, [[MP:v[0-9]+]])
// CHECK: cuda::batchNorm(ctx, [[MP]], [[SC]], [[SC]], [[MEAN]], [[VAR]], 9.99999975e-06f, ops::Activation::none, 2, [[N2:v[0-9]+]])
// CHECK: cuda::pool(ctx, ops::Pool::avg, [[N2]], nullptr, nullptr, nullptr, true, 1, [[G:v[0-9]+]])
// CHECK: static const int64_t [[AX:a[0-9]+]][] = {2, 3};
// CHECK: cuda::reduce(ctx, ops::Reduce::mean, [[G]], 2, [[AX]], false, 2, [[MEAN:v[0-9]+]])
// CHECK: cuda::reduce(ctx, ops::Reduce::max, [[MP]], 1, {{a[0-9]+}}, true, 3, [[CMAX:v[0-9]+]])
// CHECK-NOT: cuda::download
// CHECK: cuda::download(ctx, [[MEAN]], 0, out[0])
// CHECK: cuda::download(ctx, [[CMAX]], 1, out[1])

