// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16 dense-weights=f16" | sparsec-translate --sparsec-to-cuda | FileCheck %s

// A predicted FFN then an exact one on the CUDA target: the predictor's
// index set feeds the up projection and the down projection, emitted with
// the predictor as one cuda::predictFfn (its up kernel writes the down
// projection's base); the
// exact FFN's down projection builds its index set from the ReLU output.
// The residual add after it stays an add: the plan puts the sum in the
// down projection's input slot, which its kernels still read while they
// write the sum's base. Every linear, sparse and predictor weight is stored
// as float16.
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
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>, pit_tile = 32 : i64, pit_columns = 256 : i64} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %h2 = sparsec.linear %y, %w : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r2 = sparsec.relu %h2 : tensor<?x16xf32>
  %y2 = sparsec.sparse_linear %r2, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %z = sparsec.add %y2, %y : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %z : tensor<?x8xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: const Tensor [[PB:v[0-9]+]] = cuda::weight(ctx, {{[0-9]+}}, DType::f32, 1,
// CHECK: const Tensor [[W1:v[0-9]+]] = cuda::weight(ctx, {{[0-9]+}}, DType::f16, 2,
// CHECK: const Tensor [[W2:v[0-9]+]] = cuda::weight(ctx, {{[0-9]+}}, DType::f16, 2,
// CHECK: if (!cuda::upload(ctx, in[0], 0, [[X:u[0-9]+]])) return false;
// CHECK: cuda::IndexSet [[PIX:ix[0-9]+]];
// The predictor reads the up projection's input and feeds only it: it is
// emitted with the FFN (cuda::predictFfn; a decode step launches the
// selection and the up projection as one kernel).
// CHECK: Tensor [[M:v[0-9]+]];
// CHECK-NEXT: // (predicted with the FFN below)
// CHECK: const Tensor [[UT:v[0-9]+]] = cuda::weight(ctx, {{[0-9]+}}, DType::f16, 2,
// CHECK: Tensor [[H:v[0-9]+]];
// CHECK-NEXT: // (computed with the down projection below)
// CHECK: const Tensor [[D:v[0-9]+]] = cuda::weight(ctx, {{[0-9]+}}, DType::f16, 2,
// CHECK-NOT: nonzeroIndex
// Batched calls of the first down projection use 32 x 1 PIT tiles, the
// second (no pit_tile) the dense kernel.
// CHECK: if (!cuda::predictFfn(ctx, [[X]], [[W1]], [[W2]], &[[PB]], 5.000000e-01f, 0, {{[0-9]+}}, [[M]], [[PIX]], [[UT]], nullptr, ops::Activation::relu, {{[0-9]+}}, [[D]], nullptr, cuda::PitPlan{32, 256}, nullptr, {{[0-9]+}}, [[Y:v[0-9]+]], [[H]])) return false;
// The dense linear's weight is float16 too (dense-weights=f16).
// CHECK: const Tensor [[WD:v[0-9]+]] = cuda::weight(ctx, {{[0-9]+}}, DType::f16, 2,
// CHECK: if (!cuda::linear(ctx, [[Y]], [[WD]], nullptr, ops::Activation::relu, {{[0-9]+}}, [[H2:v[0-9]+]])) return false;
// CHECK: cuda::IndexSet [[EIX:ix[0-9]+]];
// CHECK: if (!cuda::nonzeroIndex(ctx, [[H2]], 1, [[EIX]])) return false;
// CHECK: if (!cuda::sparseLinearInput(ctx, [[H2]], {{v[0-9]+}}, nullptr, [[EIX]], cuda::PitPlan{0, 0}, nullptr, [[S:[0-9]+]], [[Y2:v[0-9]+]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::add, [[Y2]], [[Y]], {{[0-9]+}}, {{v[0-9]+}})) return false;
