// RUN: sparsec-opt %s --sparsec-weight-layout=dense-layout=nk "--sparsec-group-linears=fold-norms=1" --sparsec-plan-memory | sparsec-translate --sparsec-to-cuda | FileCheck %s
// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk group-linears=1" | sparsec-translate --sparsec-to-cuda | FileCheck %s --check-prefix=DRIVER

// With fold-norms, a layer norm feeding the group is folded into it: its
// scale, bias and epsilon go to linearGroupNK, and no layerNorm call is
// left. The driver's schedule pipeline does not fold (DRIVER).
sparsec.global @g : tensor<8xf32> {source = "g"}
sparsec.global @b : tensor<8xf32> {source = "b"}
sparsec.global @w1 : tensor<8x8xf16> {source = "w1"}
sparsec.global @w2 : tensor<8x8xf16> {source = "w2"}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}) {
  %g = sparsec.weight @g : tensor<8xf32>
  %b = sparsec.weight @b : tensor<8xf32>
  %h = sparsec.layer_norm %x, %g, %b {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %w1 = sparsec.weight @w1 : tensor<8x8xf16>
  %y1 = sparsec.linear %h, %w1 : tensor<?x8xf32>, tensor<8x8xf16> -> tensor<?x8xf32>
  %w2 = sparsec.weight @w2 : tensor<8x8xf16>
  %y2 = sparsec.linear %h, %w2 : tensor<?x8xf32>, tensor<8x8xf16> -> tensor<?x8xf32>
  %y = sparsec.mul %y1, %y2 : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// CHECK-NOT: layerNorm
// CHECK: if (!cuda::linearGroupNK(ctx, {{[a-z]+[0-9]+}}, &{{v[0-9]+}}, &{{v[0-9]+}}, 9.99999975e-06f, false, 2, gw{{[0-9]+}}, nullptr, ops::Activation::none, gs{{[0-9]+}}, go{{[0-9]+}})) return false;
// CHECK-NOT: layerNorm

// DRIVER: if (!cuda::layerNorm(
// DRIVER: if (!cuda::linearGroupNK(ctx, {{v[0-9]+}}, nullptr, nullptr, 0.0f, false, 2,
