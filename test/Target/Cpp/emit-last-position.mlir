// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cpp | FileCheck %s
// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cuda | FileCheck %s --check-prefix=CUDA

// A linear whose only use is a function result reads its input through
// lastPosition (generate's logits: Context::lastPositionOutput), so that a
// prompt computes one position. Not where the result has other uses, nor
// over inputs that are not [B, n, D].

sparsec.global @w1 : tensor<16x8xf32> {source = "w1"}
sparsec.global @w2 : tensor<4x16xf32> {source = "w2"}
sparsec.global @w3 : tensor<4x8xf32> {source = "w3"}
func.func @main(%x: tensor<1x?x8xf32> {sparsec.name = "x", sparsec.dims = ["", "seq", ""]},
                %z: tensor<?x8xf32> {sparsec.name = "z", sparsec.dims = ["rows", ""]})
    -> (tensor<1x?x16xf32> {sparsec.name = "hidden"},
        tensor<1x?x4xf32> {sparsec.name = "logits"},
        tensor<?x4xf32> {sparsec.name = "flat"}) {
  %w1 = sparsec.weight @w1 : tensor<16x8xf32>
  %w2 = sparsec.weight @w2 : tensor<4x16xf32>
  %w3 = sparsec.weight @w3 : tensor<4x8xf32>
  %h = sparsec.linear %x, %w1 {transpose_weight} : tensor<1x?x8xf32>, tensor<16x8xf32> -> tensor<1x?x16xf32>
  %l = sparsec.linear %h, %w2 {transpose_weight} : tensor<1x?x16xf32>, tensor<4x16xf32> -> tensor<1x?x4xf32>
  %f = sparsec.linear %z, %w3 {transpose_weight} : tensor<?x8xf32>, tensor<4x8xf32> -> tensor<?x4xf32>
  return %h, %l, %f : tensor<1x?x16xf32>, tensor<1x?x4xf32>, tensor<?x4xf32>
}

// %h is also read by the second linear: its linear reads all of x.
// CHECK: if (!ops::linear(ctx, in[0], {{v[0-9]+}}, nullptr, ops::Activation::none, {{[0-9]+}}, [[H:v[0-9]+]])) return false;
// CHECK: const Tensor [[L:v[0-9]+]] = lastPosition(ctx, [[H]], 1);
// CHECK: if (!ops::linear(ctx, [[L]], {{v[0-9]+}}, nullptr, ops::Activation::none, {{[0-9]+}}, {{v[0-9]+}})) return false;
// CHECK-NOT: lastPosition
// CHECK: if (!ops::linear(ctx, in[1],
// CHECK-NOT: lastPosition
// CHECK: out[0] =

// CUDA: if (!cuda::linear(ctx, {{u[0-9]+}}, {{v[0-9]+}}, nullptr, ops::Activation::none, {{[0-9]+}}, [[H:v[0-9]+]])) return false;
// CUDA: const Tensor [[L:v[0-9]+]] = lastPosition(ctx, [[H]], 1);
// CUDA: if (!cuda::linear(ctx, [[L]],
// CUDA-NOT: lastPosition
// CUDA: cuda::download(ctx, [[H]], 0, out[0])
