//===- TuneMain.cu - the program `sparsec tune --target cuda` builds ------===//
//
// Part of the sparsec project.
//
//   tune OUT.json M K N
//
// Measures the PIT latency table on this machine's GPU (pitTune in
// sparsec/rt/cuda/Pit.h). `sparsec tune` builds it with nvcc against the
// CUDA runtime library and runs it; a machine with a GPU but without the
// compiler can build and run it the same way.
//
//===----------------------------------------------------------------------===//

#include "sparsec/rt/cuda/Pit.h"

#include <cstdio>
#include <cstdlib>
#include <string>

int main(int argc, char **argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s OUT.json M K N\n", argv[0]);
    return 2;
  }
  std::string error;
  if (!sparsec::rt::cuda::pitTune(argv[1], std::atoll(argv[2]),
                                  std::atoll(argv[3]), std::atoll(argv[4]),
                                  error)) {
    std::fprintf(stderr, "error: %s\n", error.c_str());
    return 1;
  }
  return 0;
}
