// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16 dense-weights=f16" | sparsec-translate --sparsec-to-cuda | FileCheck %s

// A pre-norm FFN with a predictor: the layer norm's result is read only by
// the predictor and the up projection, so the norm is emitted with them as
// one cuda::predictFfnNorm at the down projection's place (a decode step
// normalises x inside the predictor's kernel). The second FFN's norm is
// also read by a linear: it stays a cuda::layerNorm before a predictFfn.
// The third's RMS norm feeds its predictor and up projection only. Each
// FFN's residual add is folded in: the planner keeps the FFN's input and
// its up projection's result live through the add, so the add's result
// takes neither's memory (it may take the norm input's, which the kernel
// that writes the result's base reads no more).
sparsec.global @g : tensor<8xf32> {source = "g"}
sparsec.global @b : tensor<8xf32> {source = "b"}
sparsec.global @up : tensor<8x16xf32> {source = "up"}
sparsec.global @down : tensor<16x8xf32> {source = "down"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
sparsec.global @pb : tensor<16xf32> {source = "", value = dense<0.0> : tensor<16xf32>}
sparsec.global @w : tensor<8x8xf32> {source = "w"}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}, tensor<?x8xf32> {sparsec.name = "l"}) {
  %g = sparsec.weight @g : tensor<8xf32>
  %b = sparsec.weight @b : tensor<8xf32>
  %wl = sparsec.weight @w : tensor<8x8xf32>
  %x0 = sparsec.linear %x, %wl : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %n = sparsec.layer_norm %x0, %g, %b {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %p2 = sparsec.weight @p2 : tensor<2x16xf32>
  %pb = sparsec.weight @pb : tensor<16xf32>
  %m = sparsec.predict %n, %p1, %p2, %pb {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<?x16xi1>
  %w = sparsec.weight @up : tensor<8x16xf32>
  %h = sparsec.sparse_linear %n, %w active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %r = sparsec.relu %h : tensor<?x16xf32>
  %w2 = sparsec.weight @down : tensor<16x8xf32>
  %y = sparsec.sparse_linear %r, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %z = sparsec.add %y, %x0 : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  // The second FFN: its norm is also read by a linear.
  %n2 = sparsec.layer_norm %z, %g, %b {epsilon = 1.0e-5 : f32} : tensor<?x8xf32>, tensor<8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %m2 = sparsec.predict %n2, %p1, %p2, %pb {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<?x16xi1>
  %h2 = sparsec.sparse_linear %n2, %w active %m2 {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %r2 = sparsec.relu %h2 : tensor<?x16xf32>
  %y2 = sparsec.sparse_linear %r2, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %z2 = sparsec.add %y2, %z : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  %l = sparsec.linear %n2, %wl : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  // The third: an RMS norm of a value that dies there, the residual another.
  %a = sparsec.linear %z2, %wl : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %n3 = sparsec.rms_norm %a, %g {epsilon = 1.0e-6 : f32} : tensor<?x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %m3 = sparsec.predict %n3, %p1, %p2, %pb {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>, tensor<16xf32>) -> tensor<?x16xi1>
  %h3 = sparsec.sparse_linear %n3, %w active %m3 {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %r3 = sparsec.relu %h3 : tensor<?x16xf32>
  %y3 = sparsec.sparse_linear %r3, %w2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %z3 = sparsec.add %y3, %z2 : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %z3, %l : tensor<?x8xf32>, tensor<?x8xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: const Tensor [[G:v[0-9]+]] = cuda::weight(ctx, 0, DType::f32, 1,
// CHECK: const Tensor [[B:v[0-9]+]] = cuda::weight(ctx, 1, DType::f32, 1,
// CHECK: if (!cuda::linear(ctx, {{u[0-9]+}}, {{v[0-9]+}}, nullptr, ops::Activation::none, {{[0-9]+}}, [[X0:v[0-9]+]])) return false;
// CHECK-NOT: cuda::layerNorm(ctx, [[X0]]
// CHECK: Tensor [[N:v[0-9]+]];
// CHECK-NEXT: // (normalised with the FFN below)
// CHECK: // (predicted with the FFN below)
// CHECK: if (!cuda::predictFfnNorm(ctx, [[X0]], [[G]], &[[B]], -1, 9.99999975e-06f, false, {{[0-9]+}}, [[N]], {{v[0-9]+}}, {{v[0-9]+}}, &{{v[0-9]+}}, 5.000000e-01f, 0, {{[0-9]+}}, {{v[0-9]+}}, {{ix[0-9]+}}, {{v[0-9]+}}, nullptr, ops::Activation::relu, {{[0-9]+}}, {{v[0-9]+}}, nullptr, cuda::PitPlan{0, 0}, &[[X0]], {{[0-9]+}}, [[Z:v[0-9]+]], {{v[0-9]+}})) return false;
// CHECK: if (!cuda::layerNorm(ctx, [[Z]], [[G]], &[[B]], -1, 9.99999975e-06f, {{[0-9]+}}, [[N2:v[0-9]+]])) return false;
// CHECK: if (!cuda::predictFfn(ctx, [[N2]],
// CHECK: if (!cuda::linear(ctx, {{v[0-9]+}}, {{v[0-9]+}}, nullptr, ops::Activation::none, {{[0-9]+}}, {{v[0-9]+}})) return false;
// CHECK: if (!cuda::linear(ctx, {{v[0-9]+}}, {{v[0-9]+}}, nullptr, ops::Activation::none, [[A:[0-9]+]], [[AV:v[0-9]+]])) return false;
// CHECK-NOT: rmsNorm
// CHECK: Tensor [[N3:v[0-9]+]];
// CHECK-NEXT: // (normalised with the FFN below)
// CHECK: if (!cuda::predictFfnNorm(ctx, [[AV]], [[G]], nullptr, -1, 9.99999997e-07f, true, {{[0-9]+}}, [[N3]], {{.*}}, cuda::PitPlan{0, 0}, &{{v[0-9]+}}, {{[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}})) return false;
// CHECK-NOT: rmsNorm
