// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16 dense-weights=f16" | sparsec-translate --sparsec-to-cuda | FileCheck %s
// RUN: sparsec-opt %s "--sparsec-schedule-pipeline=sparse-weights=f16 dense-weights=f16" | FileCheck %s --check-prefix=SLOTS

// Gated MLPs after sparsec-sparsify-ffn on the CUDA target. The up
// projection's mask (`gate > 0` after a ReLU, `not (gate == 0)` after
// another activation) is one cuda::gateMask, which also builds the index set
// of the gate's neurons; the up projection, the product and the down
// projection over that set are one cuda::gatedFfn. A squared ReLU's down
// projection reads the set of the predicted ReLU projection (a product
// inherits an output-side factor's set) instead of scanning the square.
sparsec.global @wg : tensor<8x16xf32> {source = "wg"}
sparsec.global @wu : tensor<8x16xf32> {source = "wu"}
sparsec.global @wd : tensor<16x8xf32> {source = "wd"}
sparsec.global @wr : tensor<8x8xf32> {source = "wr"}
sparsec.global @p1 : tensor<8x2xf32> {source = "", value = dense<1.0> : tensor<8x2xf32>}
sparsec.global @p2 : tensor<2x16xf32> {source = "", value = dense<1.0> : tensor<2x16xf32>}
func.func @main(%x: tensor<?x8xf32> {sparsec.name = "x", sparsec.dims = ["tokens", ""]})
    -> (tensor<?x8xf32> {sparsec.name = "y"}, tensor<?x8xf32> {sparsec.name = "y2"}, tensor<?x8xf32> {sparsec.name = "y3"}) {
  %wg = sparsec.weight @wg : tensor<8x16xf32>
  %wu = sparsec.weight @wu : tensor<8x16xf32>
  %wd = sparsec.weight @wd : tensor<16x8xf32>
  %wr = sparsec.weight @wr : tensor<8x8xf32>
  %zero = sparsec.constant dense<0.0> : tensor<f32>
  // A ReLU gate, with a residual add after it.
  %h = sparsec.linear %x, %wr : tensor<?x8xf32>, tensor<8x8xf32> -> tensor<?x8xf32>
  %g = sparsec.linear %h, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %g : tensor<?x16xf32>
  %m = sparsec.compare gt, %r, %zero : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xi1>
  %u = sparsec.sparse_linear %h, %wu active %m {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %p = sparsec.mul %r, %u : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %yd = sparsec.sparse_linear %p, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  %y = sparsec.add %yd, %h : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  // A SiLU gate.
  %g2 = sparsec.linear %y, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %s = sparsec.silu %g2 : tensor<?x16xf32>
  %e = sparsec.compare eq, %s, %zero : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xi1>
  %n = sparsec.not %e : tensor<?x16xi1>
  %u2 = sparsec.sparse_linear %y, %wu active %n {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %p2 = sparsec.mul %u2, %s : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y2 = sparsec.sparse_linear %p2, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  // A predicted squared ReLU.
  %p1 = sparsec.weight @p1 : tensor<8x2xf32>
  %pw2 = sparsec.weight @p2 : tensor<2x16xf32>
  %pm = sparsec.predict %y2, %p1, %pw2 {threshold = 0.5 : f32} : (tensor<?x8xf32>, tensor<8x2xf32>, tensor<2x16xf32>) -> tensor<?x16xi1>
  %hs = sparsec.sparse_linear %y2, %wu active %pm {sparse_dim = #sparsec<sparse_dim output>, mode = #sparsec<sparse_mode predicted>, activation = #sparsec<activation relu>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  %sq = sparsec.mul %hs, %hs : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y3 = sparsec.sparse_linear %sq, %wd {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x16xf32>, tensor<16x8xf32>) -> tensor<?x8xf32>
  return %y, %y2, %y3 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
}

// CHECK-LABEL: bool step(Context &ctx, const Tensor *in, Tensor *out) {
// CHECK: cuda::IndexSet [[IX:ix[0-9]+]];
// CHECK-NEXT: Tensor [[M:v[0-9]+]];
// CHECK-NEXT: if (!cuda::gateMask(ctx, [[R:v[0-9]+]], true, {{[0-9]+}}, [[MS:[0-9]+]], [[M]], [[IX]])) return false;
// The up projection, the product and the down projection: one gatedFfn
// at the down projection's place. The plan keeps the gate, the mask, the
// input and the up projection live until then, so that the result's slot
// is none of theirs (the up kernel writes its base while the product still
// needs the gate).
// CHECK: Tensor [[U:v[0-9]+]];
// CHECK-NEXT: // (computed with the gated MLP's down projection below)
// CHECK-NEXT: Tensor [[P:v[0-9]+]];
// CHECK-NEXT: // (computed with the gated MLP's down projection below)
// CHECK-NOT: nonzeroIndex
// The residual add is folded in (&x, the add's slot).
// CHECK: if (!cuda::gatedFfn(ctx, [[X:v[0-9]+]], [[R]], [[M]], [[IX]], {{v[0-9]+}}, nullptr, [[US:[0-9]+]], [[U]], [[PS:[0-9]+]], [[P]], {{v[0-9]+}}, nullptr, cuda::PitPlan{0, 0}, &[[X]], [[YS:[0-9]+]], [[Y:v[0-9]+]])) return false;
// CHECK-NOT: Binary::add
// The SiLU gate: the compare is folded into the not's gateMask (x != 0).
// CHECK: // (the gate mask below)
// CHECK-NEXT: cuda::IndexSet [[IX2:ix[0-9]+]];
// CHECK-NEXT: Tensor [[M2:v[0-9]+]];
// CHECK-NEXT: if (!cuda::gateMask(ctx, [[S:v[0-9]+]], false, {{[0-9]+}}, {{[0-9]+}}, [[M2]], [[IX2]])) return false;
// CHECK: if (!cuda::gatedFfn(ctx, [[Y]], [[S]], [[M2]], [[IX2]], {{v[0-9]+}}, nullptr, {{[0-9]+}}, {{v[0-9]+}}, {{[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, nullptr, cuda::PitPlan{0, 0}, nullptr, {{[0-9]+}}, [[Y2:v[0-9]+]])) return false;
// The squared ReLU: the down projection reads the predicted set.
// CHECK: if (!cuda::predict(ctx, [[Y2]],
// CHECK: if (!cuda::sparseLinearOutput(ctx, [[Y2]], {{v[0-9]+}}, nullptr, {{v[0-9]+}}, {{ix[0-9]+}}, ops::Activation::relu, {{[0-9]+}}, [[H:v[0-9]+]], [[HIX:ix[0-9]+]])) return false;
// CHECK: if (!cuda::binary(ctx, ops::Binary::mul, [[H]], [[H]], {{[0-9]+}}, [[SQ:v[0-9]+]])) return false;
// CHECK-NOT: nonzeroIndex
// CHECK: if (!cuda::sparseLinearInput(ctx, [[SQ]], {{v[0-9]+}}, nullptr, [[HIX]], cuda::PitPlan{0, 0}, nullptr,

// The slots of the first gated MLP: the input (also the residual), the
// gate, the mask, the up projection, the product, the down projection and
// the residual add all apart (without the longer live ranges the down
// projection would take the gate's slot 1 and the add the product's).
// SLOTS: sparsec.linear {{.*}}sparsec.slots = array<i64: 0>
// SLOTS: sparsec.linear {{.*}}sparsec.slots = array<i64: 1>
// SLOTS-NEXT: sparsec.compare {{.*}}sparsec.slots = array<i64: 2>
// SLOTS: sparsec.sparse_linear {{.*}}sparsec.slots = array<i64: 3>
// SLOTS-NEXT: sparsec.mul {{.*}}sparsec.slots = array<i64: 4>
// SLOTS: sparsec.sparse_linear {{.*}}sparse_dim input>, sparsec.slots = array<i64: 5>}
// SLOTS-NEXT: sparsec.add {{.*}}sparsec.slots = array<i64: 6>
