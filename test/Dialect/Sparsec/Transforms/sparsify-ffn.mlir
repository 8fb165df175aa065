// RUN: sparsec-opt %s --sparsec-sparsify-ffn | FileCheck %s
// RUN: sparsec-opt %s --sparsec-sparsify-ffn=min-zero-fraction=0.95 | FileCheck %s --check-prefix=STRICT
// RUN: sparsec-opt %s --sparsec-sparsify-ffn=compound-sites=false 2>/dev/null | FileCheck %s --check-prefix=NOGATE
// RUN: sparsec-opt %s --sparsec-sparsify-ffn=compound-sites=false 2>&1 >/dev/null | FileCheck %s --check-prefix=REMARK

// CHECK-LABEL: func.func @ffn
func.func @ffn(%x: tensor<?x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>, %b2: tensor<8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  // CHECK: %[[R:.*]] = sparsec.relu
  // CHECK: sparsec.sparse_linear %[[R]], %arg2, %arg3 {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>} : (tensor<?x16xf32>, tensor<16x8xf32>, tensor<8xf32>) -> tensor<?x8xf32>
  // Too dense for the threshold: the dense linear stays.
  // STRICT-NOT: sparsec.sparse_linear
  %y = sparsec.linear %r, %w2, %b2 : tensor<?x16xf32>, tensor<16x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// No measurement: dense.
// CHECK-LABEL: func.func @unmeasured
// CHECK-NOT: sparsec.sparse_linear
func.func @unmeasured(%x: tensor<?x16xf32>, %w2: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %r = sparsec.relu %x : tensor<?x16xf32>
  %y = sparsec.linear %r, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// A gated MLP (ReLU-fied LLaMA, ProSparse): the down projection skips the
// zeros of the product, the up projection computes only the neurons whose
// gate is above 0; the gate projection stays dense.
// CHECK-LABEL: func.func @gated
// NOGATE-LABEL: func.func @gated
func.func @gated(%x: tensor<?x8xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>, %wd: tensor<16x8xf32>) -> tensor<?x8xf32> {
  // CHECK: %[[G:.*]] = sparsec.relu
  // CHECK: %[[Z:.*]] = sparsec.constant dense<0.000000e+00> : tensor<f32>
  // CHECK: %[[M:.*]] = sparsec.compare gt, %[[G]], %[[Z]] : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xi1>
  // CHECK: %[[U:.*]] = sparsec.sparse_linear %arg0, %arg2 active %[[M]] {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim output>} : (tensor<?x8xf32>, tensor<8x16xf32>, tensor<?x16xi1>) -> tensor<?x16xf32>
  // CHECK: %[[P:.*]] = sparsec.mul %[[G]], %[[U]]
  // CHECK: sparsec.sparse_linear %[[P]], %arg3 {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>}
  // STRICT-LABEL: func.func @gated
  // STRICT-NOT: sparsec.sparse_linear
  // STRICT: return
  // REMARK: remark: {{.*}}gated MLP at 'gate' stays dense: the target does not take gated MLPs yet
  // REMARK: sparsify-ffn.mlir:[[@LINE+16]]:8: remark: gated MLP stays dense
  // NOGATE-NOT: sparsec.sparse_linear
  // NOGATE: return
  %h = sparsec.linear %x, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32> loc("gate")
  %u = sparsec.linear %x, %wu : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %p = sparsec.mul %g, %u : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %p, %wd : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// A SiLU gate can be negative: the mask is "not zero". The up projection
// is also read elsewhere, so only the down projection becomes sparse.
// CHECK-LABEL: func.func @gated_silu
func.func @gated_silu(%x: tensor<?x8xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>, %wd: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x16xf32>) {
  %h = sparsec.linear %x, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = sparsec.silu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  // CHECK: %[[U:.*]] = sparsec.linear %arg0, %arg2
  // CHECK-NOT: sparsec.compare
  // CHECK: %[[P:.*]] = sparsec.mul %{{.*}}, %[[U]]
  // CHECK: sparsec.sparse_linear %[[P]], %arg3 {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>}
  %u = sparsec.linear %x, %wu : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %p = sparsec.mul %g, %u : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %p, %wd : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y, %u : tensor<?x8xf32>, tensor<?x16xf32>
}

// CHECK-LABEL: func.func @gated_silu_mask
func.func @gated_silu_mask(%x: tensor<?x8xf32>, %wg: tensor<8x16xf32>, %wu: tensor<8x16xf32>, %wd: tensor<16x8xf32>) -> tensor<?x8xf32> {
  %h = sparsec.linear %x, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = sparsec.silu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  // CHECK: %[[E:.*]] = sparsec.compare eq, %{{.*}}, %{{.*}} : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xi1>
  // CHECK: %[[M:.*]] = sparsec.not %[[E]]
  // CHECK: sparsec.sparse_linear %arg0, %arg2 active %[[M]] {{.*}}sparse_dim = #sparsec<sparse_dim output>
  %u = sparsec.linear %x, %wu : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %p = sparsec.mul %u, %g : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %p, %wd : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y : tensor<?x8xf32>
}

// Not gated MLPs: a product with a broadcast [16] vector (a scale, not an
// up projection), and a gate with a second user.
// CHECK-LABEL: func.func @not_gated
// CHECK-NOT: sparsec.sparse_linear
// CHECK: return
func.func @not_gated(%x: tensor<?x8xf32>, %wg: tensor<8x16xf32>, %s: tensor<16xf32>, %wd: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x16xf32>) {
  %h = sparsec.linear %x, %wg : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %g = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  %p = sparsec.mul %g, %s : tensor<?x16xf32>, tensor<16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %p, %wd : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  %g2 = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  %p2 = sparsec.mul %g2, %h : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y2 = sparsec.linear %p2, %wd : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y, %y2, %g2 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x16xf32>
}

// A squared ReLU (ReLU^2) before the down projection, as mul(r, r) and as
// pow(r, 2): 0 stays 0, so the down projection skips the same neurons.
// CHECK-LABEL: func.func @squared
func.func @squared(%x: tensor<?x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>) {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32> loc("sq")
  // CHECK: %[[S:.*]] = sparsec.mul %[[R:.*]], %[[R]]
  // CHECK: sparsec.sparse_linear %[[S]], %arg2 {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>}
  // REMARK: remark: {{.*}}squared activation at 'sq' stays dense: the target does not take squared activations yet
  %s = sparsec.mul %r, %r : tensor<?x16xf32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %s, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  %r2 = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  %two = sparsec.constant dense<2.0> : tensor<f32>
  // CHECK: %[[P:.*]] = sparsec.pow
  // CHECK: sparsec.sparse_linear %[[P]], %arg2 {{.*}}sparse_dim = #sparsec<sparse_dim input>
  %p = sparsec.pow %r2, %two : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xf32>
  %y2 = sparsec.linear %p, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  // A negative power of a ReLU is not 0 where the ReLU is: dense.
  // CHECK: %[[N:.*]] = sparsec.pow
  // CHECK: sparsec.linear %[[N]], %arg2
  %r3 = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  %neg = sparsec.constant dense<-1.0> : tensor<f32>
  %n = sparsec.pow %r3, %neg : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xf32>
  %y3 = sparsec.linear %n, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y, %y2, %y3 : tensor<?x8xf32>, tensor<?x8xf32>, tensor<?x8xf32>
}

// A capped ReLU (ReLU6 as Clip(0, 6) imports: min(relu, 6)) before the down
// projection: 0 stays 0, so the down projection skips the same neurons. A
// negative cap makes every neuron -1: dense.
// CHECK-LABEL: func.func @capped
func.func @capped(%x: tensor<?x8xf32>, %w1: tensor<8x16xf32>, %w2: tensor<16x8xf32>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %h = sparsec.linear %x, %w1 : tensor<?x8xf32>, tensor<8x16xf32> -> tensor<?x16xf32>
  %r = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32> loc("cap")
  %six = sparsec.constant dense<6.0> : tensor<f32>
  // CHECK: %[[C:.*]] = sparsec.min
  // CHECK: sparsec.sparse_linear %[[C]], %arg2 {mode = #sparsec<sparse_mode exact>, sparse_dim = #sparsec<sparse_dim input>}
  // REMARK: remark: {{.*}}capped activation at 'cap' stays dense: the target does not take capped activations yet
  %c = sparsec.min %six, %r : tensor<f32>, tensor<?x16xf32> -> tensor<?x16xf32>
  %y = sparsec.linear %c, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  // CHECK: %[[N:.*]] = sparsec.min
  // CHECK: sparsec.linear %[[N]], %arg2
  %r2 = sparsec.relu %h {sparsity = #sparsec.act_sparsity<zero_fraction = 0.9, granularity = neuron, source = profile, tokens = 100, top20_share = 0.3>} : tensor<?x16xf32>
  %neg = sparsec.constant dense<-1.0> : tensor<f32>
  %n = sparsec.min %r2, %neg : tensor<?x16xf32>, tensor<f32> -> tensor<?x16xf32>
  %y2 = sparsec.linear %n, %w2 : tensor<?x16xf32>, tensor<16x8xf32> -> tensor<?x8xf32>
  return %y, %y2 : tensor<?x8xf32>, tensor<?x8xf32>
}
