// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16 dense-weights=f16" | sparsec-translate --sparsec-to-cuda | FileCheck %s

// A predicted up projection whose output is also a result of the graph:
// the down projection cannot own it, so the two stay separate calls (the up
// projection zero-fills the neurons outside its set), and the down
// projection reads the up projection's set.
sparsec.global @up : tensor<8x16xf32> {source = "up"}
sparsec.global @down : tensor<16x8xf32> {source = "down"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}, tensor<?x16xf32> {sparsec.name = "h"}) {
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x16xf32>
  %m = sparsec.predict %x, %p1, %p2 {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<?x16xi1>
  %w = sparsec.weight @up : tensor<8x16xf32>
  %h = sparsec.sparse_linear %x, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %r = sparsec.relu %h : tensor<?x16xf32>
  %w2 = sparsec.weight @down : tensor<16x8xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %y, %r : tensor<?x8xf32>, tensor<?x16xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: if (!cuda::predict(ctx, [[X:u[0-9]+]], {{v[0-9]+}}, {{v[0-9]+}}, nullptr, 5.000000e-01f, 0, {{[0-9]+}}, [[M:v[0-9]+]], [[PIX:ix[0-9]+]])) return false;
// CHECK-NOT: sparseFfn
// CHECK: cuda::IndexSet [[UIX:ix[0-9]+]];
// CHECK: if (!cuda::sparseLinearOutput(ctx, [[X]], {{v[0-9]+}}, nullptr, [[M]], [[PIX]], ops::Activation::relu, {{[0-9]+}}, [[H:v[0-9]+]], [[UIX]])) return false;
// CHECK-NOT: nonzeroIndex
// CHECK: if (!cuda::sparseLinearInput(ctx, [[H]], {{v[0-9]+}}, nullptr, [[UIX]], cuda::PitPlan{0, 0}, nullptr, {{[0-9]+}}, {{v[0-9]+}})) return false;
// CHECK-NOT: sparseFfn
