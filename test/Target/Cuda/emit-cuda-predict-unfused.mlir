// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16 dense-weights=f16" | sparsec-translate --sparsec-to-cuda | FileCheck %s

// A predictor that reads another input than the up projection it feeds:
// the up and down projections still make one cuda::sparseFfn, but the
// predictor stays its own cuda::predict (predictFfn's fused kernel stages
// one x for both). Here the plan also gives the FFN's result the mask's
// slot (free after the up projection), the case where sparseFfn writes
// the result's base after the up kernel in a decode batch.
sparsec.global @up : tensor<8x16xf32> {source = "up"}
sparsec.global @down : tensor<16x8xf32> {source = "down"}
sparsec.global @lin : tensor<8x8xf32> {source = "lin"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}) {
  %wl = sparsec.weight @lin : tensor<8x8xf32>
  %x2 = sparsec.linear %x, %wl : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x16xf32>
  %m = sparsec.predict %x2, %p1, %p2 {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<?x16xi1>
  %w = sparsec.weight @up : tensor<8x16xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %r = sparsec.relu %h : tensor<?x16xf32>
  %w2 = sparsec.weight @down : tensor<16x8xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK-NOT: predictFfn
// CHECK: if (!cuda::upload(ctx, in[0], 0, [[X:u[0-9]+]])) return false;
// CHECK: if (!cuda::linear(ctx, [[X]], {{v[0-9]+}}, nullptr, ops::Activation::none, {{[0-9]+}}, [[X2:v[0-9]+]])) return false;
// CHECK: if (!cuda::predict(ctx, [[X2]], {{v[0-9]+}}, {{v[0-9]+}}, nullptr, 5.000000e-01f, 0, {{[0-9]+}}, [[M:v[0-9]+]], [[PIX:ix[0-9]+]])) return false;
// CHECK: if (!cuda::sparseFfn(ctx, [[X]], {{v[0-9]+}}, nullptr, [[M]], [[PIX]], ops::Activation::relu,
// CHECK-NOT: predictFfn
