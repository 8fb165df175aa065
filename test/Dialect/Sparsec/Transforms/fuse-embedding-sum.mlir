// RUN: sparsec-opt %s -split-input-file --sparsec-fuse-embedding-sum | FileCheck %s

// A decoder's token and position embeddings: one lookup of both tables,
// where the add stood, and the two lookups gone.
sparsec.global @tok : tensor<50x8xf32> {source = "tok"}
sparsec.global @pos : tensor<20x8xf32> {source = "pos"}
// CHECK-LABEL: func.func @decoder_input
func.func @decoder_input(%ids: tensor<?x?xi64>, %positions: tensor<?x?xi64>) -> tensor<?x?x8xf32> {
  // CHECK-DAG: %[[T:.*]] = sparsec.weight @tok
  // CHECK-DAG: %[[P:.*]] = sparsec.weight @pos
  %t = sparsec.weight @tok : tensor<50x8xf32>
  %p = sparsec.weight @pos : tensor<20x8xf32>
  %a = sparsec.embedding %t, %ids : tensor<50x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  %b = sparsec.embedding %p, %positions : tensor<20x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  // CHECK-NOT: sparsec.add
  // CHECK: %[[E:.*]] = sparsec.embedding %[[T]], %arg0 plus %[[P]], %arg1 {sparsec.device = "gpu"} : tensor<50x8xf32>, tensor<?x?xi64>, tensor<20x8xf32>, tensor<?x?xi64> -> tensor<?x?x8xf32>
  // CHECK-NEXT: return %[[E]]
  %x = sparsec.add %a, %b {sparsec.device = "gpu"} : tensor<?x?x8xf32>, tensor<?x?x8xf32> -> tensor<?x?x8xf32>
  return %x : tensor<?x?x8xf32>
}

// -----

// A lookup with another user stays, and so does the add.
sparsec.global @tok : tensor<50x8xf32> {source = "tok"}
sparsec.global @pos : tensor<20x8xf32> {source = "pos"}
// CHECK-LABEL: func.func @shared_lookup
func.func @shared_lookup(%ids: tensor<?xi64>, %positions: tensor<?xi64>) -> (tensor<?x8xf32>, tensor<?x8xf32>) {
  %t = sparsec.weight @tok : tensor<50x8xf32>
  %p = sparsec.weight @pos : tensor<20x8xf32>
  // CHECK: %[[A:.*]] = sparsec.embedding %{{.*}}, %arg0 :
  // CHECK: sparsec.embedding %{{.*}}, %arg1 :
  // CHECK: sparsec.add
  // CHECK: return %{{.*}}, %[[A]]
  %a = sparsec.embedding %t, %ids : tensor<50x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
  %b = sparsec.embedding %p, %positions : tensor<20x8xf32>, tensor<?xi64> -> tensor<?x8xf32>
  %x = sparsec.add %a, %b : tensor<?x8xf32>, tensor<?x8xf32> -> tensor<?x8xf32>
  return %x, %a : tensor<?x8xf32>, tensor<?x8xf32>
}

// -----

// Lookups on different devices (a hybrid split), an add that broadcasts,
// and fp16 lookups stay apart.
sparsec.global @tok : tensor<50x8xf32> {source = "tok"}
sparsec.global @pos : tensor<20x8xf32> {source = "pos"}
sparsec.global @h : tensor<20x8xf16> {source = "h"}
// CHECK-LABEL: func.func @not_fused
func.func @not_fused(%ids: tensor<4xi64>, %one: tensor<1xi64>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>) {
  %t = sparsec.weight @tok : tensor<50x8xf32>
  %p = sparsec.weight @pos : tensor<20x8xf32>
  %h = sparsec.weight @h : tensor<20x8xf16>
  %a = sparsec.embedding %t, %ids {sparsec.device = "cpu"} : tensor<50x8xf32>, tensor<4xi64> -> tensor<4x8xf32>
  %b = sparsec.embedding %p, %ids : tensor<20x8xf32>, tensor<4xi64> -> tensor<4x8xf32>
  %x = sparsec.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32> -> tensor<4x8xf32>
  %c = sparsec.embedding %t, %ids : tensor<50x8xf32>, tensor<4xi64> -> tensor<4x8xf32>
  %d = sparsec.embedding %p, %one : tensor<20x8xf32>, tensor<1xi64> -> tensor<1x8xf32>
  %y = sparsec.add %c, %d : tensor<4x8xf32>, tensor<1x8xf32> -> tensor<4x8xf32>
  %e = sparsec.embedding %h, %ids : tensor<20x8xf16>, tensor<4xi64> -> tensor<4x8xf16>
  %f = sparsec.embedding %h, %ids : tensor<20x8xf16>, tensor<4xi64> -> tensor<4x8xf16>
  %z = sparsec.add %e, %f : tensor<4x8xf16>, tensor<4x8xf16> -> tensor<4x8xf16>
  // CHECK-NOT: plus
  // CHECK-COUNT-3: sparsec.add
  return %x, %y, %z : tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf16>
}
