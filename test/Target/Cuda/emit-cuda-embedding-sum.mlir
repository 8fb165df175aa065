// RUN: sparsec-opt %s --sparsec-schedule-pipeline | FileCheck %s --check-prefix=IR
// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cuda | FileCheck %s
// RUN: sparsec-opt %s --sparsec-schedule-pipeline | sparsec-translate --sparsec-to-cpp | FileCheck %s --check-prefix=X86

// Token and position embeddings summed (the add's operands in the order
// that puts the input's lookup second): one lookup of both tables, each
// ids upload at its own site. The input is read only as the second
// lookup's ids, so it is still marked as one a caller may pass device
// values for (IODesc::deviceValues), limited by the second table's rows.
sparsec.global @tok : tensor<50x8xf32> {source = "tok"}
sparsec.global @pos : tensor<20x8xf32> {source = "pos"}
func.func @main(%ids: tensor<?x?xi64> {sparsec.name = "ids", sparsec.dims = ["batch", "seq"]},
                %pos: tensor<?x?xi64> {sparsec.name = "pos", sparsec.dims = ["batch", "seq"]})
    -> (tensor<?x?x8xf32> {sparsec.name = "y"}) {
  %t = sparsec.weight @tok : tensor<50x8xf32>
  %p = sparsec.weight @pos : tensor<20x8xf32>
  %q = sparsec.add %pos, %pos : tensor<?x?xi64>, tensor<?x?xi64> -> tensor<?x?xi64>
  %a = sparsec.embedding %t, %q : tensor<50x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %b = sparsec.embedding %p, %ids : tensor<20x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %y = sparsec.add %a, %b : tensor<?x?x8xf32>, tensor<?x?x8xf32> -> tensor<?x?x8xf32>
  return %y : tensor<?x?x8xf32>
}

// IR: sparsec.embedding %{{.*}}, %{{.*}} plus %{{.*}}, %arg0
// IR-NOT: sparsec.add %{{.*}} : tensor<?x?x8xf32>

// CHECK: if (!ops::binary(ctx, ops::Binary::add, in[1], in[1], {{[0-9]+}}, [[Q:v[0-9]+]]))
// CHECK: if (!cuda::embedding(ctx, {{v[0-9]+}}, [[Q]], 0, {{v[0-9]+}}, in[0], 1, {{[0-9]+}}, [[Y:v[0-9]+]]))
// CHECK-NEXT: if (!cuda::download(ctx, [[Y]], 0, out[0]))
// CHECK-LABEL: const IODesc kInputs[] = {
// CHECK-NEXT: {"ids", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}, true, 20},
// CHECK-NEXT: {"pos", DType::i64, 2, {-1, -1}, {"batch", "seq"}, {-1, -1}},

// X86: if (!ops::embedding(ctx, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, in[0], {{[0-9]+}}, {{v[0-9]+}}))
