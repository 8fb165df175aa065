// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk" | sparsec-translate --sparsec-to-cuda | FileCheck %s

// A residual add after a device linear over a neuron-major weight is the
// linear's epilogue: linearNK gets the residual and writes the add's result
// (into the add's slot); the add itself emits nothing.
sparsec.global @w0 : tensor<8x8xf32> {source = "w0"}
sparsec.global @w1 : tensor<8x8xf32> {source = "w1"}
sparsec.global @w2 : tensor<8x8xf32> {source = "w2"}
sparsec.global @w3 : tensor<8x8xf32> {source = "w3"}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}) {
  %w0 = sparsec.weight @w0 : tensor<8x8xf32>
  %w1 = sparsec.weight @w1 : tensor<8x8xf32>
  %w2 = sparsec.weight @w2 : tensor<8x8xf32>
  %w3 = sparsec.weight @w3 : tensor<8x8xf32>
  %h0 = sparsec.linear %x, %w0 : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %h = sparsec.exp %h0 : tensor<?x8xf32>
  %a = sparsec.linear %h, %w1 : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %s = sparsec.add %a, %h : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  // An activation in between: no fusion.
  %b = sparsec.linear %s, %w2 : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %r = sparsec.relu %b : tensor<?x8xf32>
  %t = sparsec.add %s, %r : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  // The other operand is computed after the linear: no fusion.
  %c = sparsec.linear %t, %w3 : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %e = sparsec.exp %t : tensor<?x8xf32>
  %y = sparsec.add %c, %e : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: if (!cuda::unary(ctx, ops::Unary::exp, {{v[0-9]+}}, {{[0-9]+}}, [[H:v[0-9]+]])) return false;
// CHECK: if (!cuda::linearNK(ctx, [[H]], {{v[0-9]+}}, nullptr, ops::Activation::none, &[[H]], {{[0-9]+}}, [[S:v[0-9]+]])) return false;
// CHECK-NEXT: // (computed by the linear above)
// CHECK: if (!cuda::linearNK(ctx, [[S]], {{v[0-9]+}}, nullptr, ops::Activation::relu, nullptr, {{[0-9]+}}, [[R:v[0-9]+]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::add, [[S]], [[R]], {{[0-9]+}}, [[T:v[0-9]+]])) return false;
// CHECK: if (!cuda::linearNK(ctx, [[T]], {{v[0-9]+}}, nullptr, ops::Activation::none, nullptr, {{[0-9]+}}, [[C:v[0-9]+]])) return false;
// CHECK: if (!cuda::unary(ctx, ops::Unary::exp, [[T]], {{[0-9]+}}, [[E:v[0-9]+]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::add, [[C]], [[E]], {{[0-9]+}}, {{v[0-9]+}})) return false;
