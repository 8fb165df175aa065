// RUN: sparsec-opt %s --sparsec-raise-embedding | FileCheck %s

sparsec.global @emb : tensor<256x64xf32> {source = "emb"}
// CHECK-LABEL: func.func @lookup
func.func @lookup(%ids: tensor<?x?xi64>, %data: tensor<256x64xf32>) -> (tensor<?x?x64xf32>, tensor<?x?x64xf32>) {
  %t = sparsec.weight @emb : tensor<256x64xf32>
  // CHECK: sparsec.embedding %{{.*}}, %{{.*}} : tensor<256x64xf32>, tensor<?x?xi64> -> tensor<?x?x64xf32>
  %e = sparsec.gather %t, %ids {axis = 0 : i64} : tensor<256x64xf32>, tensor<?x?xi64> -> tensor<?x?x64xf32>
  // A gather from an activation stays a gather.
  // CHECK: sparsec.gather %{{.*}}, %{{.*}} : tensor<256x64xf32>
  %g = sparsec.gather %data, %ids {axis = 0 : i64} : tensor<256x64xf32>, tensor<?x?xi64> -> tensor<?x?x64xf32>
  return %e, %g : tensor<?x?x64xf32>, tensor<?x?x64xf32>
}
