// Two FFNs of 8 neurons in groups of 2 (GPU bytes per group: f1 72, float32
// rows of 4 + 4 elements and a bias element per neuron; f2, without an up
// bias, 64). The only weight
// outside the placed parts is f1's down bias (16 bytes); no attention, no
// workspace. Group masses, hot-first: f1 1.6 0.8 0.3 0.05 (neurons 1 4 |
// 3 5 | 6 0 | 7 2), f2 1.6 1.2 0.8 0.02 (neurons in order).
// RUN: %pyexe %S/Inputs/make_sprof.py %t.sprof 0x00000000000000ab "f1:100:10,90,0,50,70,30,20,5" "f2:100:80,80,60,60,40,40,1,1"
//
// Budget 16 + 216, any split allowed: 1.6 of f1 and 1.6 and 1.2 of f2
// (200 bytes; the LP bound adds a quarter of f2's third group).
// RUN: sparsec-opt %s "--sparsec-partition-hot-cold=profile=%t.sprof gpu-budget=232 group-size=2 weight-bytes=4 workspace-bytes=0 sync-us=0" 2>&1 | FileCheck %s --check-prefix=SPLIT
// SPLIT: remark: hot/cold placement: the GPU serves 4.400 of 6.370 active neurons per token (69.1 %), LP bound 4.600 (gap 0.200); 2 FFNs split, 0 on the GPU, 0 on the CPU; FFN bytes on the GPU 200 of 216 available (16 always there); solved exactly in
// SPLIT-DAG: sparsec.global @w1.hot : tensor<4x8xf32> {permutation = array<i64: 1, 4, 3, 5, 6, 0, 7, 2>, source = "w1", transforms = ["permute_cols"]}
// SPLIT-DAG: sparsec.global @b1.hot : tensor<8xf32> {permutation = array<i64: 1, 4, 3, 5, 6, 0, 7, 2>, source = "b1", transforms = ["permute_rows"]}
// SPLIT-DAG: sparsec.global @w2.hot : tensor<8x4xf32> {permutation = array<i64: 1, 4, 3, 5, 6, 0, 7, 2>, source = "w2", transforms = ["permute_rows"]}
// SPLIT-DAG: sparsec.global @b2 : tensor<4xf32> {source = "b2"}
// SPLIT-DAG: sparsec.global @w3.hot : tensor<4x8xf32> {permutation = array<i64: 0, 1, 2, 3, 4, 5, 6, 7>, source = "w3", transforms = ["permute_cols"]}
// SPLIT-NOT: sparsec.global @w1 :
// SPLIT: sparsec.relu {{.*}}placement = #sparsec.placement<gpu_neurons = 2, total_neurons = 8, group = 2>
// SPLIT: sparsec.relu {{.*}}placement = #sparsec.placement<gpu_neurons = 4, total_neurons = 8, group = 2>
//
// A split layer must serve 2.5 active neurons per token (sync-us 0.08 at
// 1 GB/s over 32-byte rows): f1 can only take 0, 3 or 4 groups, f2 0, 2, 3
// or 4; three groups of f2 (3.6) win. The LP bound ignores the constraint.
// RUN: sparsec-opt %s "--sparsec-partition-hot-cold=profile=%t.sprof gpu-budget=232 group-size=2 weight-bytes=4 workspace-bytes=0 sync-us=0.08 cpu-bandwidth=1" 2>&1 | FileCheck %s --check-prefix=SYNC
// SYNC: remark: hot/cold placement: the GPU serves 3.600 of 6.370 active neurons per token (56.5 %), LP bound 4.600 (gap 1.000); 1 FFNs split, 0 on the GPU, 1 on the CPU; FFN bytes on the GPU 192 of 216
// SYNC: placement = #sparsec.placement<gpu_neurons = 0, total_neurons = 8, group = 2>
// SYNC: placement = #sparsec.placement<gpu_neurons = 6, total_neurons = 8, group = 2>
//
// Budget edges: exactly the always-GPU bytes (every FFN on the CPU), and
// enough for everything (every FFN on the GPU).
// RUN: sparsec-opt %s "--sparsec-partition-hot-cold=profile=%t.sprof gpu-budget=16 group-size=2 weight-bytes=4 workspace-bytes=0" 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: the GPU serves 0.000 of 6.370 {{.*}} 0 FFNs split, 0 on the GPU, 2 on the CPU; FFN bytes on the GPU 0 of 0 available
// RUN: sparsec-opt %s "--sparsec-partition-hot-cold=profile=%t.sprof gpu-budget=1000000 group-size=2 weight-bytes=4 workspace-bytes=0" 2>&1 | FileCheck %s --check-prefix=ALL
// ALL: the GPU serves 6.370 of 6.370 {{.*}} 0 FFNs split, 2 on the GPU, 0 on the CPU; FFN bytes on the GPU 544 of
// ALL: sparsec.hot_cold = {always_gpu_bytes = 16 : i64, bound = 6.{{[0-9]+}} : f64, ffn_bytes = 544 : i64, ffn_gpu_bytes = 544 : i64, gpu_budget = 1000000 : i64, objective = 6.{{[0-9]+}} : f64, solve_ms = {{.*}} : f64, total_mass = 6.{{[0-9]+}} : f64}
//
// Errors: a budget below the always-GPU part names the minimum; the budget
// and the profile are required.
// RUN: not sparsec-opt %s "--sparsec-partition-hot-cold=profile=%t.sprof gpu-budget=10 group-size=2 weight-bytes=4 workspace-bytes=0" 2>&1 | FileCheck %s --check-prefix=SMALL
// SMALL: error: GPU budget of 10 bytes is below the 16 bytes that must live on the GPU: weights outside the FFNs 16, predictors 0, KV cache 0 (2048 tokens), workspace 0; give at least gpu-budget=16
// RUN: not sparsec-opt %s "--sparsec-partition-hot-cold=profile=%t.sprof" 2>&1 | FileCheck %s --check-prefix=NOBUDGET
// NOBUDGET: error: sparsec-partition-hot-cold needs gpu-budget=<bytes> > 0
// RUN: not sparsec-opt %s "--sparsec-partition-hot-cold=gpu-budget=100" 2>&1 | FileCheck %s --check-prefix=NOPROF
// NOPROF: error: sparsec-partition-hot-cold needs profile=<file.sprof>

module attributes {sparsec.model_hash = "0x00000000000000ab"} {
  sparsec.global @w1 : tensor<4x8xf32> {source = "w1"}
  sparsec.global @b1 : tensor<8xf32> {source = "b1"}
  sparsec.global @w2 : tensor<8x4xf32> {source = "w2"}
  sparsec.global @b2 : tensor<4xf32> {source = "b2"}
  sparsec.global @w3 : tensor<4x8xf32> {source = "w3"}
  sparsec.global @w4 : tensor<8x4xf32> {source = "w4"}
  func.func @main(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
    %w1 = sparsec.weight @w1 : tensor<4x8xf32>
    %b1 = sparsec.weight @b1 : tensor<8xf32>
    %w2 = sparsec.weight @w2 : tensor<8x4xf32>
    %b2 = sparsec.weight @b2 : tensor<4xf32>
    %h = sparsec.linear %x, %w1, %b1 : tensor<?x4xf32>, tensor<4x8xf32>, tensor<8xf32> -> tensor<?x8xf32>
    %r = sparsec.relu %h : tensor<?x8xf32> loc("f1")
    %y = sparsec.sparse_linear %r, %w2, %b2 {sparse_dim = #sparsec<sparse_dim input>, mode = #sparsec<sparse_mode exact>} : (tensor<?x8xf32>, tensor<8x4xf32>, tensor<4xf32>) -> tensor<?x4xf32>
    %w3 = sparsec.weight @w3 : tensor<4x8xf32>
    %w4 = sparsec.weight @w4 : tensor<8x4xf32>
    %h2 = sparsec.linear %y, %w3 : tensor<?x4xf32>, tensor<4x8xf32> -> tensor<?x8xf32>
    %r2 = sparsec.relu %h2 : tensor<?x8xf32> loc("f2")
    %y2 = sparsec.linear %r2, %w4 : tensor<?x8xf32>, tensor<8x4xf32> -> tensor<?x4xf32>
    return %y2 : tensor<?x4xf32>
  }
}
