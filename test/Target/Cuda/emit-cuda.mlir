// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cuda | FileCheck %s

// Placement: the integer shape arithmetic stays on the host (x86 ops), the
// weights and everything computed from them run on the device, a host
// float value a device op reads is uploaded once, and outputs are
// downloaded; the step runs through cuda::runStep (CUDA graphs).
sparsec.global @w : tensor<8x16xf32> {source = "w"}
sparsec.global @b : tensor<16xf32> {source = "b"}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]},
                %s: tensor<?x16xf32> {sparsec.name = "s", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x16xf32> {sparsec.name = "y"}, tensor<2xi64> {sparsec.name = "shape"}) {
  %w = sparsec.weight @w : tensor<8x16xf32>
  %b = sparsec.weight @b : tensor<16xf32>
  %h = sparsec.linear %x, %w, %b : tensor<?x8xf32>, tensor<8x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %h : tensor<?x16xf32>
  %y = sparsec.add %r, %s : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y2 = sparsec.mul %y, %s : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %shape = sparsec.shape %y2 : tensor<?x16xf32> -> tensor<2xi64>
  return %y2, %shape : tensor<?x16xf32>, tensor<2xi64>
}

// CHECK: #include "sparsec/rt/cuda/Ops.h"
// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: const Tensor [[W:v[0-9]+]] = cuda::weight(ctx, 0, DType::f32, 2,
// CHECK: const Tensor [[B:v[0-9]+]] = cuda::weight(ctx, 1, DType::f32, 1,
// CHECK: if (!cuda::upload(ctx, in[0], 0, [[X:u[0-9]+]])) return false;
// The ReLU is fused into the linear's epilogue.
// CHECK: if (!cuda::linear(ctx, [[X]], [[W]], &[[B]], ops::Activation::relu, {{[0-9]+}}, [[H:v[0-9]+]])) return false;
// The second input is uploaded once for both of its users.
// CHECK: if (!cuda::upload(ctx, in[1], 1, [[S:u[0-9]+]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::add, [[H]], [[S]], {{[0-9]+}}, [[Y:v[0-9]+]])) return false;
// CHECK-NOT: cuda::upload
// CHECK: if (!cuda::binary(ctx, ops::Binary::mul, [[Y]], [[S]], {{[0-9]+}}, [[Y2:v[0-9]+]])) return false;
// Shape only reads dims: a host op even on a device tensor.
// CHECK: if (!ops::shape(ctx, [[Y2]], 0, INT64_MAX, {{[0-9]+}}, [[SH:v[0-9]+]])) return false;
// CHECK: if (!cuda::download(ctx, [[Y2]], 0, out[0])) return false;
// CHECK: out[1] = [[SH]];
// CHECK-LABEL: bool run(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK-NEXT: return cuda::runStep(ctx, in, out, step);
// CHECK: int main(int argc, char **argv) { return modelMain(argc, argv, kModel); }

// A neuron-major weight (what the CUDA target packs, dense-layout=nk) is
// read by the row GEMV.
// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk" | sparsec-translate --sparsec-to-cuda | FileCheck %s --check-prefix=NK
// NK: const Tensor [[W:v[0-9]+]] = cuda::weight(ctx, 0, DType::f32, 2, {{a[0-9]+}});
// NK: if (!cuda::linearNK(ctx, {{u[0-9]+}}, [[W]], &{{v[0-9]+}}, ops::Activation::relu, nullptr, {{[0-9]+}}, {{v[0-9]+}})) return false;
