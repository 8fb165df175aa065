// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk group-linears=1" | sparsec-translate --sparsec-to-cuda | FileCheck %s
// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=dense-layout=nk" | sparsec-translate --sparsec-to-cuda | FileCheck %s --check-prefix=NOGROUP

// Three projections of one input (with biases, fp32 weights) become one
// linearGroupNK call: the weights, biases, result slots and results are
// arrays in the order of the group; the results (go[i]) are used like any
// other.
// A fourth linear over a different input stays a linearNK.
sparsec.global @wq : tensor<8x8xf32> {source = "wq"}
sparsec.global @wk : tensor<8x8xf32> {source = "wk"}
sparsec.global @wv : tensor<8x4xf32> {source = "wv"}
sparsec.global @bq : tensor<8xf32> {source = "bq"}
sparsec.global @bk : tensor<8xf32> {source = "bk"}
sparsec.global @bv : tensor<4xf32> {source = "bv"}
sparsec.global @wo : tensor<4x8xf32> {source = "wo"}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}, tensor<?x8xf32> {sparsec.name = "z"}) {
  %wq = sparsec.weight @wq : tensor<8x8xf32>
  %bq = sparsec.weight @bq : tensor<8xf32>
  %q = sparsec.linear %x, %wq, %bq : tensor<?x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %wk = sparsec.weight @wk : tensor<8x8xf32>
  %bk = sparsec.weight @bk : tensor<8xf32>
  %k = sparsec.linear %x, %wk, %bk : tensor<?x8xf32>, tensor<8x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  %wv = sparsec.weight @wv : tensor<8x4xf32>
  %bv = sparsec.weight @bv : tensor<4xf32>
  %v = sparsec.linear %x, %wv, %bv : tensor<?x8xf32>, tensor<8x4xf32>, tensor<4xf32> -> tensor<?x4xf32>
  %qk = sparsec.mul %q, %k : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  %wo = sparsec.weight @wo : tensor<4x8xf32>
  %o = sparsec.linear %v, %wo : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
  return %qk, %o : tensor<?x8xf32>, tensor<?x8xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: Tensor go[[G:[0-9]+]][3];
// CHECK-NEXT: const Tensor *gw[[G]][] = {&{{v[0-9]+}}, &{{v[0-9]+}}, &{{v[0-9]+}}};
// CHECK-NEXT: const Tensor *gb[[G]][] = {&{{v[0-9]+}}, &{{v[0-9]+}}, &{{v[0-9]+}}};
// CHECK-NEXT: static const int gs[[G]][] = {{{[0-9]+}}, {{[0-9]+}}, {{[0-9]+}}};
// CHECK-NEXT: if (!cuda::linearGroupNK(ctx, {{[a-z]+[0-9]+}}, nullptr, nullptr, 0.0f, false, 3, gw[[G]], gb[[G]], ops::Activation::none, gs[[G]], go[[G]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::mul, go[[G]][0], go[[G]][1], {{[0-9]+}}, {{v[0-9]+}})) return false;
// CHECK: if (!cuda::linearNK(ctx, go[[G]][2], {{v[0-9]+}}, nullptr, ops::Activation::none, nullptr, {{[0-9]+}}, {{v[0-9]+}})) return false;

// NOGROUP-NOT: linearGroupNK
// NOGROUP-COUNT-4: cuda::linearNK(

