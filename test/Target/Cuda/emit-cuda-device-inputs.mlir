// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cuda | FileCheck %s
// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cpp | FileCheck %s --check-prefix=X86

// An input whose values only device embeddings read (Shape reads its dims
// only) is marked in the description (IODesc::deviceValues): a caller may
// pass device memory there, such as the ids the last decode step picked on
// the device. An input a host op reads is not marked, nor are inputs of an
// x86 model. The mark carries the rows of the table the values index
// (IODesc::valueLimit: `generate` passes no device picks wider than it).
sparsec.global @table : tensor<32x8xf32> {source = "table"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "ids", sparsec.dims = ["batch", "seq"]},
                %pos: tensor<?x?xi64> {sparsec.name = "pos", sparsec.dims = ["batch", "seq"]})
    -> (tensor<?x?x8xf32> {sparsec.name = "y"}, tensor<2xi64> {sparsec.name = "shape"}) {
  %t = sparsec.weight @table : tensor<32x8xf32>
  %s = sparsec.shape %ids : tensor<?x?xi64> -> tensor<2xi64>
  %e = sparsec.embedding %t, %ids : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %p = sparsec.add %pos, %pos : tensor<?x?xi64>, tensor<?x?xi64> -> tensor<?x?xi64>
  %f = sparsec.embedding %t, %p : tensor<32x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %y = sparsec.add %e, %f : tensor<?x?x8xf32>, tensor<?x?x8xf32> -> tensor<?x?x8xf32>
  return %y, %s : tensor<?x?x8xf32>, tensor<2xi64>
}

// (The two lookups and their add are one lookup of both:
// sparsec-fuse-embedding-sum.)
// CHECK: if (!ops::shape(ctx, in[0],
// CHECK: if (!ops::binary(ctx, ops::Binary::add, in[1], in[1],
// CHECK: if (!cuda::embedding(ctx, {{v[0-9]+}}, in[0], 0, {{v[0-9]+}}, {{v[0-9]+}}, 1,
// CHECK-LABEL: const IODesc kInputs[] = {
// CHECK-NEXT: {"ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}, true, 32},
// CHECK-NEXT: {"pos", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}},
// CHECK-NEXT: };
// CHECK-LABEL: const IODesc kOutputs[] = {
// CHECK-NOT: true
// CHECK: };

// X86-LABEL: const IODesc kInputs[] = {
// X86-NEXT: {"ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}},
// X86-NEXT: {"pos", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}},
