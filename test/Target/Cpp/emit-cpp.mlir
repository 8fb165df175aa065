// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cpp | FileCheck %s

sparsec.global @w : tensor<16x8xf32> {source = "w"}
sparsec.global @b : tensor<16xf32> {source = "b"}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["batch", ""]})
    -> (tensor<?x16xf32> {sparsec.name = "y"}) {
  %w = sparsec.weight @w : tensor<16x8xf32>
  %b = sparsec.weight @b : tensor<16xf32>
  %y = sparsec.linear %x, %w, %b {transpose_weight} : tensor<?x8xf32>, tensor<16x8xf32>, tensor<16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %y : tensor<?x16xf32>
  %u = sparsec.unsqueeze %r {axes = array<i64: 1>} : tensor<?x16xf32> -> tensor<?x1x16xf32>
  %c = sparsec.constant dense<[2.5, -1.0, 0.0, 1.0e+30, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0]> : tensor<16xf32>
  %s = sparsec.squeeze %u {axes = array<i64: 1>} : tensor<?x1x16xf32> -> tensor<?x16xf32>
  %a = sparsec.add %s, %c : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
  return %a : tensor<?x16xf32>
}

// CHECK: #include "sparsec/rt/Ops.h"
// Constants become static arrays.
// CHECK: alignas(64) const float [[$C:c[0-9]+]][] = {2.5f, -1.0f, 0.0f, 1.00000002e+30f, 3.0f,
// CHECK-LABEL: bool run(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: Tensor [[CV:v[0-9]+]]{const_cast<float *>([[$C]]), DType::f32, 1, {16}};
// The [K, N] weight (transposed at pack time) is segment 0, the bias 1.
// CHECK: const Tensor [[B:v[0-9]+]] = ctx.weight(1, DType::f32, 1,
// CHECK: const Tensor [[W:v[0-9]+]] = ctx.weight(0, DType::f32, 2,
// The relu is fused into the linear's epilogue.
// CHECK: if (!ops::linear(ctx, in[0], [[W]], &[[B]], ops::Activation::relu, 0, [[Y:v[0-9]+]])) return false;
// Dynamic dims are read from the tensors at run time.
// CHECK: const int64_t [[S:a[0-9]+]][] = {[[Y]].shape[0], 1, 16};
// Reshapes are views: they share their input's slot (0).
// CHECK: ops::reshapeTo(ctx, [[Y]], 3, [[S]], 0, [[U:v[0-9]+]])
// CHECK: const int64_t [[S2:a[0-9]+]][] = {[[U]].shape[0], 16};
// CHECK: ops::reshapeTo(ctx, [[U]], 2, [[S2]], 0, [[Q:v[0-9]+]])
// CHECK: ops::binary(ctx, ops::Binary::add, [[Q]], [[CV]], 1, [[O:v[0-9]+]])
// CHECK: out[0] = [[O]];
// CHECK: const IODesc kInputs[] = {
// CHECK-NEXT: {"x", DType::f32, 2, {-1, 8}, {"batch", ""}, {-1, 8}},
// CHECK: const IODesc kOutputs[] = {
// CHECK-NEXT: {"y", DType::f32, 2, {-1, 16}
// CHECK: const int64_t kSlotBytes[] = {-1, -1};
// CHECK: "model.weights", 2, 0x0000000000000000ULL,
// CHECK: int main(int argc, char **argv) { return modelMain(argc, argv, kModel); }
