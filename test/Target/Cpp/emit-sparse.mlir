// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16" | sparsec-translate --sparsec-to-cpp | FileCheck %s

// A predicted FFN: predictor, output-side up projection, exact input-side
// down projection; fp16-stored sparse weights.
sparsec.global @up : tensor<8x16xf32> {source = "up"}
sparsec.global @down : tensor<16x8xf32> {source = "down"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
sparsec.global @pb : tensor<16xf32> {source = "", value = dense<0.0> : tensor<16xf32>}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}) {
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x16xf32>
  %pb = sparsec.weight @pb : tensor<16xf32>
  %m = sparsec.predict %x, %p1, %p2, %pb {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<?x16xi1>
  %w = sparsec.weight @up : tensor<8x16xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %r = sparsec.relu %h : tensor<?x16xf32>
  %w2 = sparsec.weight @down : tensor<16x8xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// CHECK-LABEL: bool run(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: const Tensor [[PB:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f32, 1,
// CHECK: const Tensor [[W1:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f16, 2,
// CHECK: const Tensor [[W2:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f16, 2,
// CHECK: if (!ops::predict(ctx, in[0], [[W1]], [[W2]], &[[PB]], 5.000000e-01f, {{[0-9]+}}, [[M:v[0-9]+]])) return false;
// CHECK: const Tensor [[UT:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f16, 2,
// The ReLU is fused into the output-side kernel's epilogue.
// CHECK: if (!ops::sparseLinearOutput(ctx, in[0], [[UT]], nullptr, [[M]], ops::Activation::relu, {{[0-9]+}}, [[H:v[0-9]+]])) return false;
// CHECK-NOT: ops::unary
// CHECK: const Tensor [[D:v[0-9]+]] = ctx.weight({{[0-9]+}}, DType::f16, 2,
// CHECK: if (!ops::sparseLinearInput(ctx, [[H]], [[D]], nullptr, {{[0-9]+}}, {{v[0-9]+}})) return false;
