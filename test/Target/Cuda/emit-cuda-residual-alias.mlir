// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk" | FileCheck %s --check-prefix=SLOTS
// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk" | sparsec-translate --sparsec-to-cuda | FileCheck %s --check-prefix=ALIAS

// The linear's input is a transpose, which is a view of %a's slot at run
// time; the planner gives the add that slot (free after the linear), so
// the add must stay separate: the GEMV would write memory it still reads.
sparsec.global @v0 : tensor<8x8xf32> {source = "v0"}
sparsec.global @v1 : tensor<8x8xf32> {source = "v1"}
func.func @main(%x: tensor<1x1x8xf32> {sparsec.name = "x"}) -> (tensor<1x8xf32> {sparsec.name = "y"}) {
  %w0 = sparsec.weight @v0 : tensor<8x8xf32>
  %w1 = sparsec.weight @v1 : tensor<8x8xf32>
  %h = sparsec.linear %x, %w0 : tensor<1x1x8xf32>, tensor<8x8xf32> -> tensor<1x1x8xf32>
  %r = sparsec.exp %h : tensor<1x1x8xf32>
  %a = sparsec.neg %h : tensor<1x1x8xf32>
  %t = sparsec.transpose %a {permutation = array<i64: 1, 0, 2>} : tensor<1x1x8xf32> -> tensor<1x1x8xf32>
  %y = sparsec.linear %t, %w1 : tensor<1x1x8xf32>, tensor<8x8xf32> -> tensor<1x1x8xf32>
  %s = sparsec.add %y, %r : tensor<1x1x8xf32>, tensor<1x1x8xf32> -> tensor<1x1x8xf32>
  %c = sparsec.constant dense<[1, 8]> : tensor<2xi64>
  %o = sparsec.reshape %s, %c : tensor<1x1x8xf32>, tensor<2xi64> -> tensor<1x8xf32>
  return %o : tensor<1x8xf32>
}
// SLOTS: sparsec.neg %{{.*}} {sparsec.slots = array<i64: [[A:[0-9]+]]>}
// SLOTS: sparsec.add %{{.*}}, %{{.*}} {sparsec.slots = array<i64: [[A]]>}
// ALIAS: if (!cuda::linearNK(ctx, {{v[0-9]+}}, {{v[0-9]+}}, nullptr, ops::Activation::none, nullptr, {{[0-9]+}}, [[Y:v[0-9]+]])) return false;
// ALIAS-NEXT: Tensor {{v[0-9]+}};
// ALIAS-NEXT: if (!cuda::binary(ctx, ops::Binary::add, [[Y]], {{v[0-9]+}}, {{[0-9]+}}, {{v[0-9]+}})) return false;
// ALIAS-NOT: computed by the linear
